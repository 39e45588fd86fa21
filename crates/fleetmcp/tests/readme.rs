//! The getting-started is written twice: the crate's README (its page on crates.io and the
//! crate root on docs.rs, whose examples are doctests) and the repository README's "Use the
//! library". The doctests check the first; this checks that the second shows the same code, so
//! what a reader copies from either is what compiles.

use std::path::Path;

/// The fenced blocks of `text`, each with its info string (`toml`, `rust,no_run`) and body.
fn blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => open = Some((info.to_string(), String::new())),
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// The section of `text` under the heading `## {title}`, up to the next `## `.
fn section<'a>(text: &'a str, title: &str) -> &'a str {
    let heading = format!("\n## {title}\n");
    let start = text
        .find(&heading)
        .unwrap_or_else(|| panic!("no section {title:?}"))
        + heading.len();
    let end = text[start..]
        .find("\n## ")
        .map_or(text.len(), |i| start + i);
    &text[start..end]
}

/// The file at `path`, from the crate's directory.
fn read(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

#[test]
fn the_repository_readme_shows_the_getting_started_of_the_crate_readme() {
    let crate_readme = read("README.md");
    let repo_readme = read("../../README.md");
    let wanted = blocks(section(&crate_readme, "Getting started"));
    assert!(
        wanted.iter().any(|(info, _)| info == "toml")
            && wanted.iter().any(|(info, _)| info.starts_with("rust")),
        "the getting-started has the dependency lines and an example: {wanted:?}"
    );
    let shown = blocks(section(&repo_readme, "Use the library"));
    for (info, body) in &wanted {
        assert!(
            shown.iter().any(|(i, b)| i == info && b == body),
            "README.md, \"Use the library\", lacks this block of crates/fleetmcp/README.md (or shows another version of it):\n```{info}\n{body}```"
        );
    }
}

/// The README's test example is this crate's `tests/getting_started.rs` after its header, so
/// it runs: a doctest compiles a `#[tokio::test]` function away.
#[test]
fn the_readme_test_example_is_a_test_that_runs() {
    let crate_readme = read("README.md");
    let example = blocks(section(&crate_readme, "Getting started"))
        .into_iter()
        .find(|(_, body)| body.contains("#[tokio::test]"))
        .map(|(_, body)| body)
        .expect("the getting-started has a test example");
    let file = read("tests/getting_started.rs");
    let code: String = file
        .lines()
        .skip_while(|l| l.starts_with("//!"))
        .skip_while(|l| l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        code, example,
        "tests/getting_started.rs differs from the README's example"
    );
}

#[test]
fn the_notes_example_is_the_getting_started_server() {
    let crate_readme = read("README.md");
    let example = read("../../examples/notes/src/main.rs");
    let server = blocks(section(&crate_readme, "Getting started"))
        .into_iter()
        .find(|(info, _)| info.starts_with("rust"))
        .map(|(_, body)| body);
    assert_eq!(
        server.as_deref(),
        Some(example.as_str()),
        "examples/notes/src/main.rs (measured in docs/BENCHMARKS.md) is the getting-started's server, verbatim"
    );
}

/// No document or source file keeps a merge's conflict markers: `docs/BENCHMARKS.md` kept one
/// (both sides of a merge, between `<<<<<<<` and `>>>>>>>`) for a day, unseen by any check.
#[test]
fn no_file_keeps_a_merges_conflict_markers() {
    fn walk(dir: &Path, found: &mut Vec<String>, read_files: &mut usize) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                let skipped = name.starts_with('.')
                    || matches!(name.as_str(), "target" | "node_modules" | "venv" | "tools");
                if !skipped {
                    walk(&path, found, read_files);
                }
                continue;
            }
            let checked = ["md", "rs", "toml", "sh", "lua", "yml", "yaml"]
                .iter()
                .any(|ext| name.ends_with(&format!(".{ext}")));
            if !checked {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            *read_files += 1;
            for (i, line) in text.lines().enumerate() {
                let marker = ["<<<<<<< ", ">>>>>>> "].iter().any(|m| line.starts_with(m))
                    || line == "=======";
                if marker {
                    found.push(format!("{}:{}: {line}", path.display(), i + 1));
                }
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let (mut found, mut read_files) = (Vec::new(), 0);
    walk(&root, &mut found, &mut read_files);
    // The walk reads the repository, not an empty directory: its READMEs and sources at least.
    assert!(read_files > 100, "only {read_files} files read");
    assert!(found.is_empty(), "conflict markers:\n{}", found.join("\n"));
}
