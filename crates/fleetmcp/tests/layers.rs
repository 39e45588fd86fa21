//! The layer rule of docs/ARCHITECTURE.md, checked against the code: a top-level module of
//! `crates/fleetmcp/src` may use `crate::` paths only into its own layer or the layers below.
//!
//! The check reads every source file, takes each `crate::<module>` path outside comments
//! (in `use` lines and in expressions alike), and fails naming the file, the line and the two
//! layers. A new top-level module fails the check until it is placed in [`LAYERS`]. Below
//! transport, naming HTTP (`axum`, `http`, `hyper`) is a violation too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every top-level module and its layer, lowest first (the order docs/ARCHITECTURE.md draws).
const LAYERS: &[(&str, u8)] = &[
    // 0. foundation: the wire format, configuration, clocks, the Redis connection
    ("clock", 0),
    ("config", 0),
    ("liveness", 0),
    ("machine_id", 0),
    ("protocol", 0),
    ("redis_config", 0),
    ("redis_conn", 0),
    ("telemetry", 0),
    ("testing", 0),
    // 1. state that is not a session's
    ("auth", 1),
    ("events", 1),
    ("stateless", 1),
    ("tasks", 1),
    ("limits", 1),
    // 2. sessions
    ("session", 2),
    // 3. the application: shared state, what a server offers, what a handler sees
    ("app", 3),
    ("catalog", 3),
    ("context", 3),
    // 4. method dispatch
    ("dispatch", 4),
    // 5. HTTP
    ("transport", 5),
    // 6. other instances
    ("cluster", 6),
    // 7. wiring
    ("ops", 7),
    ("server", 7),
];

/// The lowest layer that may know HTTP (transport); below it nothing names `axum`, `http` or
/// `hyper`, so the same dispatch serves a request received directly or relayed.
const HTTP_FROM: u8 = 5;

/// One import that goes up a layer.
#[derive(Debug, PartialEq, Eq)]
struct Violation {
    file: String,
    line: usize,
    from: String,
    to: String,
}

/// The `crate::<name>` paths of one line of code (comments excluded).
fn crate_paths(line: &str) -> Vec<&str> {
    let code = match line.find("//") {
        Some(i) => &line[..i],
        None => line,
    };
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        // `fleetmcp::crate::` cannot occur; a preceding identifier character means another
        // word that ends in `crate` (e.g. `mycrate::`).
        let before = rest[..i].chars().last();
        let after = &rest[i + "crate::".len()..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') && name_len > 0 {
            out.push(&after[..name_len]);
        }
        rest = &after[name_len..];
    }
    out
}

/// Checks one file of top-level module `module`; `crate::{a, b}` groups are read too.
fn check_source(
    module: &str,
    file: &str,
    source: &str,
    layers: &BTreeMap<&str, u8>,
) -> Vec<Violation> {
    let Some(&own) = layers.get(module) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let mut names: Vec<&str> = crate_paths(line);
        // `use crate::{app::App, session::Session};`
        if let Some(group) = line.trim_start().strip_prefix("use crate::{") {
            names.extend(
                group
                    .split([',', '}'])
                    .filter_map(|p| p.trim().split("::").next())
                    .filter(|p| !p.is_empty()),
            );
        }
        let code = line.split("//").next().unwrap_or("");
        if own < HTTP_FROM
            && ["axum::", "http::", "hyper::", "HeaderMap"]
                .iter()
                .any(|t| code.contains(t))
        {
            found.push(Violation {
                file: file.to_string(),
                line: n + 1,
                from: format!("{module} (layer {own})"),
                to: "HTTP".into(),
            });
        }
        for name in names {
            if let Some(&target) = layers.get(name)
                && target > own
            {
                found.push(Violation {
                    file: file.to_string(),
                    line: n + 1,
                    from: format!("{module} (layer {own})"),
                    to: format!("{name} (layer {target})"),
                });
            }
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn modules_import_only_from_their_layer_or_below() {
    let layers: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    let mut unplaced = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).expect("under src");
        let first = rel.components().next().expect("a component");
        let module = first
            .as_os_str()
            .to_str()
            .expect("utf-8 name")
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" {
            continue;
        }
        if !layers.contains_key(module.as_str()) {
            unplaced.push(module.clone());
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("read source");
        violations.extend(check_source(
            &module,
            &rel.display().to_string(),
            &source,
            &layers,
        ));
    }
    unplaced.sort();
    unplaced.dedup();
    assert!(
        unplaced.is_empty(),
        "top-level modules with no layer (add them to LAYERS here and to docs/ARCHITECTURE.md): {unplaced:?}"
    );
    assert!(
        violations.is_empty(),
        "imports from a layer above:\n{}",
        violations
            .iter()
            .map(|v| format!("  {}:{}: {} uses {}", v.file, v.line, v.from, v.to))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The check itself can fail: an upward import, in a `use` line, in a group or in an
/// expression, and HTTP below transport, are reported; a downward one, a comment and a longer
/// word are not.
#[test]
fn an_upward_import_is_reported() {
    let layers: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let source = "\
use crate::protocol::ErrorData;
use crate::transport::reply;
use crate::{events::EventStore, server::Server};
// see crate::cluster for why
fn f() { crate::dispatch::request(); mycrate::server::x(); }
fn g(h: &http::HeaderMap) {}
";
    let v = check_source("session", "session/x.rs", source, &layers);
    let got: Vec<(usize, &str)> = v.iter().map(|v| (v.line, v.to.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (2, "transport (layer 5)"),
            (3, "server (layer 7)"),
            (5, "dispatch (layer 4)"),
            (6, "HTTP"),
        ]
    );
    assert!(
        check_source(
            "transport",
            "transport/x.rs",
            "fn g(h: &http::HeaderMap) {}",
            &layers
        )
        .is_empty(),
        "transport may know HTTP"
    );
}
