//! The crate's source files as the structure tests read them (`layers.rs`, `sizes.rs`,
//! `public_api.rs`): every `.rs` under `src/`, named from `src/` with `/`, with its text, and
//! the module each file is.

#![allow(dead_code)] // each structure test uses a different part of this file

use std::path::Path;

fn rust_files(src: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src).expect("under src");
            let name = rel
                .components()
                .map(|c| c.as_os_str().to_str().expect("utf-8 name"))
                .collect::<Vec<_>>()
                .join("/");
            out.push((name, std::fs::read_to_string(&path).expect("read source")));
        }
    }
}

/// Every source file of the crate, sorted by name.
pub fn real_files() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    files.sort();
    files
}

/// The module a file under `src/` is: `a/b.rs` and `a/b/mod.rs` are `crate::a::b`, `lib.rs`
/// the root. (No `#[path]` attribute is used in this crate, so the file tree is the module
/// tree.)
pub fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if (parts.len() == 1 && parts[0] == "lib") || parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}
