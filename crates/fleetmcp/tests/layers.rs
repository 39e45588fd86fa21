//! The layer rule of docs/ARCHITECTURE.md, checked against the code: a top-level module of
//! `crates/fleetmcp/src` imports only from its own layer or the layers below, the modules of a
//! layer the document keeps apart do not import each other, and nothing below transport names
//! HTTP (`axum`, `http`, `hyper` and their body/util crates).
//!
//! Why a parser: the rule is about what a path *reaches*, and only the Rust grammar says that.
//! Text matching missed `use crate::{` groups spread over lines, `super::super::` paths,
//! `pub(crate) use` groups and names the crate root re-exports (`crate::Server` is
//! `server::Server`). So every file is parsed with `syn`, and every path that can leave its
//! module is resolved to the top-level module it reaches:
//!
//! * `use` trees: nested groups, `self`, renames, globs, any visibility;
//! * paths anywhere else (expressions, types, patterns, impls, generic arguments), and the
//!   `a::b::c` runs inside macro calls (`tracing::info!(.., crate::x::f())`), which `syn` keeps
//!   as tokens;
//! * `crate::`, `self::` and `super::` (any depth, counted from the module the path is written
//!   in, inline `mod x { }` blocks included), and at the crate root a module's bare name;
//! * a first segment after `crate::` that is not a module is looked up in what lib.rs imports
//!   (`pub use server::Server` makes `crate::Server` a path into `server`).
//!
//! Comments, doc links and strings are not paths, so they never count. A path through a name a
//! module imported (`use crate::server; server::f()`) is caught at its `use`. Not followed, as
//! the crate uses none of them: `#[path]`, `extern crate x as y`, a glob of the crate root itself
//! (`use crate::*`), and a name lib.rs brings in by a glob.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proc_macro2::{Spacing, Span, TokenStream, TokenTree};
use syn::visit::{self, Visit};

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

/// The crates that are HTTP. `axum`, `http` and `hyper` are the ones the document names; the
/// other three carry the same requests, responses and bodies, so naming them is naming HTTP
/// too. (`reqwest` is not here: the document lets `auth` fetch its JWKS with an HTTP client.)
const HTTP_CRATES: &[&str] = &[
    "axum",
    "http",
    "hyper",
    "hyper_util",
    "http_body",
    "http_body_util",
];

/// The same-layer rules docs/ARCHITECTURE.md states. Its "Layers" section states none beyond
/// "its own layer or the layers below"; the invariants of the code map add these:
///
/// * layer 1: "none of them knows sessions' lifecycle, HTTP, or each other", so `auth`,
///   `events`, `stateless`, `tasks` and `limits` never import one another;
/// * layer 0: "protocol knows nothing of HTTP, sessions or Redis", so `protocol` never imports
///   `redis_config` or `redis_conn`.
///
/// Layer 3 says the opposite ("the three modules form one layer and may use each other"), and
/// the other layers say nothing, so within them any import is allowed.
const APART_LAYERS: &[u8] = &[1];
const APART_PAIRS: &[(&str, &str)] = &[("protocol", "redis_config"), ("protocol", "redis_conn")];

/// Which rule a path breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Into a higher layer.
    Up,
    /// Into a module of the same layer that the document keeps apart.
    SameLayer,
    /// An HTTP crate below [`HTTP_FROM`].
    Http,
}

/// One path that breaks a rule.
#[derive(Debug)]
struct Violation {
    /// Under `src/`, with `/`.
    file: String,
    line: usize,
    /// The path as written (one leaf of a `use` group, with its prefix).
    path: String,
    rule: Rule,
    from: (String, u8),
    /// The module reached and its layer; for [`Rule::Http`], the crate and [`HTTP_FROM`].
    to: (String, u8),
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (from, fl) = &self.from;
        let (to, tl) = &self.to;
        let what = match self.rule {
            Rule::Up => {
                format!("{from} (layer {fl}) imports from {to} (layer {tl}), a layer above")
            }
            Rule::SameLayer => format!(
                "{from} (layer {fl}) imports from {to} (layer {tl}), which the same layer keeps apart"
            ),
            Rule::Http => format!(
                "{from} (layer {fl}) names the HTTP crate `{to}`, known only from layer {tl} (transport) up"
            ),
        };
        write!(f, "{}:{}: `{}`: {what}", self.file, self.line, self.path)
    }
}

/// What a checked crate is made of: its layers, the modules lib.rs declares, and the other
/// names lib.rs brings into the crate root with the top-level module each comes from.
struct Crate {
    layers: BTreeMap<String, u8>,
    modules: BTreeSet<String>,
    root_names: BTreeMap<String, String>,
}

/// The module a file under `src/` is: `a/b.rs` and `a/b/mod.rs` are `crate::a::b`, `lib.rs`
/// the root. (No `#[path]` attribute is used in this crate, so the file tree is the module
/// tree.)
fn module_of(file: &str) -> Vec<String> {
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

/// One leaf of a `use` tree.
struct UseLeaf {
    /// As written, prefix included; a glob stops at its prefix, `a::{self}` is `a`; a leading
    /// `::` is an empty first segment.
    segments: Vec<String>,
    glob: bool,
    /// The name the leaf binds (the rename if any); none for a glob.
    binds: Option<String>,
    /// Where the leaf starts within its innermost group, so a group spread over lines reports
    /// the line of the leaf, not of the `use`.
    span: Span,
}

fn flatten_use(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    start: Option<Span>,
    out: &mut Vec<UseLeaf>,
) {
    let leaf = |prefix: &Vec<String>, name: &syn::Ident, binds: &syn::Ident, span: Span| {
        let mut segments = prefix.clone();
        // `a::{self}` and `a::{self as b}` name `a` itself.
        if name != "self" {
            segments.push(name.to_string());
        }
        UseLeaf {
            segments,
            glob: false,
            binds: Some(binds.to_string()),
            span,
        }
    };
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, Some(start.unwrap_or(p.ident.span())), out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => out.push(leaf(
            prefix,
            &n.ident,
            &n.ident,
            start.unwrap_or(n.ident.span()),
        )),
        syn::UseTree::Rename(r) => out.push(leaf(
            prefix,
            &r.ident,
            &r.rename,
            start.unwrap_or(r.ident.span()),
        )),
        syn::UseTree::Glob(g) => out.push(UseLeaf {
            segments: prefix.clone(),
            glob: true,
            binds: None,
            span: start.unwrap_or(g.star_token.spans[0]),
        }),
        // Each item of a group starts afresh: its own first segment is its line.
        syn::UseTree::Group(g) => {
            for item in &g.items {
                flatten_use(item, prefix, None, out);
            }
        }
    }
}

fn use_leaves(item: &syn::ItemUse) -> Vec<UseLeaf> {
    let mut prefix = Vec::new();
    if item.leading_colon.is_some() {
        prefix.push(String::new());
    }
    let mut out = Vec::new();
    flatten_use(
        &item.tree,
        &mut prefix,
        item.leading_colon.as_ref().map(|c| c.spans[0]),
        &mut out,
    );
    out
}

/// Where a path goes.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// A path in this crate, from its root.
    Crate(Vec<String>),
    /// Another crate, by name.
    Extern(String),
    /// A name in scope here (a local item, variable, or an import already checked) or a path
    /// that climbs above the root (which the compiler rejects anyway).
    Local,
}

/// Resolves `segments`, written in module `here`. Rust 2018 paths: `crate::`, `self::`,
/// `super::` (repeated), `::name` (another crate); at the crate root a bare first segment may
/// be one of its modules; anything else is a name in scope or another crate's name.
fn resolve(segments: &[String], here: &[String], krate: &Crate) -> Target {
    let Some(first) = segments.first() else {
        return Target::Local;
    };
    match first.as_str() {
        "" => segments
            .get(1)
            .map_or(Target::Local, |c| Target::Extern(c.clone())),
        "crate" => Target::Crate(segments[1..].to_vec()),
        "self" => Target::Crate([here, &segments[1..]].concat()),
        "super" => {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            match here.len().checked_sub(ups) {
                Some(keep) => Target::Crate([&here[..keep], &segments[ups..]].concat()),
                None => Target::Local,
            }
        }
        name if here.is_empty()
            && (krate.modules.contains(name) || krate.root_names.contains_key(name)) =>
        {
            Target::Crate(segments.to_vec())
        }
        name => Target::Extern(name.to_string()),
    }
}

/// The top-level module a crate path reaches: its first segment, or the module a root import
/// brought that name from. None for the root itself or a name lib.rs does not know.
fn top_module<'k>(path: &[String], krate: &'k Crate) -> Option<&'k str> {
    let first = path.first()?;
    if let Some(m) = krate.modules.get(first) {
        return Some(m);
    }
    krate.root_names.get(first).map(String::as_str)
}

/// Whether a path outside a `use` can leave its module. `self` alone is a receiver and a bare
/// name (`http`, `x`) a variable or an item in scope; such paths reach nothing new.
fn may_leave(segments: &[String], here: &[String]) -> bool {
    match segments.first().map(String::as_str) {
        Some("" | "crate" | "super") => true,
        Some(_) if segments.len() < 2 => false,
        Some("self") => true,
        Some(first) => HTTP_CRATES.contains(&first) || here.is_empty(),
        None => false,
    }
}

/// The `a::b::c` runs in a macro's tokens (which `syn` does not parse), with the span of their
/// first segment. `$crate::` (a macro's own crate) and a run continuing another (`x::` before
/// it) or following `.` are not paths of their own.
fn macro_paths(tokens: TokenStream, out: &mut Vec<(Vec<String>, Span)>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let punct =
        |i: usize, c: char| matches!(trees.get(i), Some(TokenTree::Punct(p)) if p.as_char() == c);
    let path_sep = |i: usize| {
        matches!(trees.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Joint)
            && punct(i + 1, ':')
    };
    let mut i = 0;
    while i < trees.len() {
        match &trees[i] {
            TokenTree::Group(g) => {
                macro_paths(g.stream(), out);
                i += 1;
            }
            TokenTree::Ident(id) => {
                let continued = (i >= 1 && (punct(i - 1, '$') || punct(i - 1, '.')))
                    || (i >= 2 && path_sep(i - 2));
                let mut segments = vec![id.to_string()];
                let mut j = i + 1;
                while path_sep(j) {
                    let Some(TokenTree::Ident(next)) = trees.get(j + 2) else {
                        break;
                    };
                    segments.push(next.to_string());
                    j += 3;
                }
                if !continued && segments.len() >= 2 {
                    out.push((segments, id.span()));
                }
                i = j;
            }
            _ => i += 1,
        }
    }
}

/// Walks one file, knowing the module it is in at each point.
struct Walker<'k> {
    krate: &'k Crate,
    file: &'k str,
    here: Vec<String>,
    found: Vec<Violation>,
}

impl Walker<'_> {
    /// Checks one path written in the current module against the three rules.
    fn check(&mut self, segments: &[String], glob: bool, span: Span) {
        // The root (lib.rs) belongs to no layer: it declares and re-exports every one.
        let Some(from) = self.here.first() else {
            return;
        };
        let Some(&own) = self.krate.layers.get(from) else {
            return;
        };
        let mut written = segments.join("::");
        if glob {
            written.push_str("::*");
        }
        let (rule, to) = match resolve(segments, &self.here, self.krate) {
            Target::Extern(name) if own < HTTP_FROM && HTTP_CRATES.contains(&name.as_str()) => {
                (Rule::Http, (name, HTTP_FROM))
            }
            Target::Crate(path) => {
                let Some(to) = top_module(&path, self.krate) else {
                    return;
                };
                // A module not in LAYERS is reported once, as unplaced, by the caller.
                let Some(&layer) = self.krate.layers.get(to) else {
                    return;
                };
                let apart = layer == own
                    && to != from
                    && (APART_LAYERS.contains(&own)
                        || APART_PAIRS
                            .iter()
                            .any(|&(a, b)| (a, b) == (from.as_str(), to)));
                if layer > own {
                    (Rule::Up, (to.to_string(), layer))
                } else if apart {
                    (Rule::SameLayer, (to.to_string(), layer))
                } else {
                    return;
                }
            }
            _ => return,
        };
        self.found.push(Violation {
            file: self.file.to_string(),
            line: span.start().line,
            path: written,
            rule,
            from: (from.clone(), own),
            to,
        });
    }
}

fn path_segments(path: &syn::Path) -> Vec<String> {
    let lead = path.leading_colon.as_ref().map(|_| String::new());
    lead.into_iter()
        .chain(path.segments.iter().map(|s| s.ident.to_string()))
        .collect()
}

impl<'ast> Visit<'ast> for Walker<'_> {
    // An inline `mod x { }` is a module of its own: `super::` inside it starts there.
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if let Some((_, items)) = &item.content {
            self.here.push(item.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.here.pop();
        }
    }

    // Every leaf of the tree, whatever its visibility (`pub`, `pub(crate)`, private).
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        for leaf in use_leaves(item) {
            self.check(&leaf.segments, leaf.glob, leaf.span);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments = path_segments(path);
        if may_leave(&segments, &self.here) {
            let span = path
                .segments
                .first()
                .map_or_else(Span::call_site, |s| s.ident.span());
            self.check(&segments, false, span);
        }
        // Generic arguments hold paths of their own.
        visit::visit_path(self, path);
    }

    // `pub(in crate::a)` says who may see an item; it imports nothing.
    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        let mut paths = Vec::new();
        macro_paths(mac.tokens.clone(), &mut paths);
        for (segments, span) in paths {
            if may_leave(&segments, &self.here) {
                self.check(&segments, false, span);
            }
        }
    }
}

/// What a check found.
#[derive(Debug, Default)]
struct Report {
    violations: Vec<Violation>,
    /// Top-level modules with no entry in [`LAYERS`].
    unplaced: Vec<String>,
}

/// Checks a crate given as (file under `src/` with `/`, source) pairs; `lib.rs` among them.
fn check_crate(files: &[(String, String)]) -> Report {
    let parsed: Vec<(&str, syn::File)> = files
        .iter()
        .map(|(name, source)| {
            let file = syn::parse_file(source).unwrap_or_else(|e| {
                let at = e.span().start();
                panic!("{name}:{}:{}: does not parse: {e}", at.line, at.column)
            });
            (name.as_str(), file)
        })
        .collect();
    let mut krate = Crate {
        layers: LAYERS.iter().map(|&(m, l)| (m.to_string(), l)).collect(),
        modules: BTreeSet::new(),
        root_names: BTreeMap::new(),
    };
    // The root first: the modules it declares, then what its `use` items bring in (resolved
    // once every module name is known, since `pub use server::Server` names one).
    let root = parsed
        .iter()
        .find(|(name, _)| *name == "lib.rs")
        .map(|(_, f)| f)
        .expect("lib.rs among the files");
    for item in &root.items {
        if let syn::Item::Mod(m) = item {
            krate.modules.insert(m.ident.to_string());
        }
    }
    let mut root_names = BTreeMap::new();
    for item in &root.items {
        if let syn::Item::Use(u) = item {
            for leaf in use_leaves(u) {
                // A glob at the root would make every name ambiguous; this crate has none, and
                // a name it brought would just go unresolved (not reported) here.
                let (Some(name), Target::Crate(path)) =
                    (leaf.binds, resolve(&leaf.segments, &[], &krate))
                else {
                    continue;
                };
                if let Some(m) = path.first().filter(|m| krate.modules.contains(*m)) {
                    root_names.insert(name, m.clone());
                }
            }
        }
    }
    krate.root_names = root_names;

    let mut report = Report::default();
    let mut unplaced: BTreeSet<String> = krate
        .modules
        .iter()
        .filter(|m| !krate.layers.contains_key(*m))
        .cloned()
        .collect();
    for (name, file) in &parsed {
        let here = module_of(name);
        if let Some(top) = here.first().filter(|m| !krate.layers.contains_key(*m)) {
            unplaced.insert(top.clone());
            continue;
        }
        let mut walker = Walker {
            krate: &krate,
            file: name,
            here,
            found: Vec::new(),
        };
        walker.visit_file(file);
        report.violations.extend(walker.found);
    }
    report.unplaced = unplaced.into_iter().collect();
    report
}

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

/// Every source file of the crate, named from `src/` with `/`.
fn real_files() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    files.sort();
    files
}

#[test]
fn modules_import_only_from_their_layer_or_below() {
    let report = check_crate(&real_files());
    assert!(
        report.unplaced.is_empty(),
        "top-level modules with no layer (add them to LAYERS here and to docs/ARCHITECTURE.md): {:?}",
        report.unplaced
    );
    assert!(
        report.violations.is_empty(),
        "paths that break the layer rule of docs/ARCHITECTURE.md:\n{}",
        report
            .violations
            .iter()
            .map(|v| format!("  {v}\n"))
            .collect::<String>()
    );
}

/// The real tree is read as the fixtures are: a violation added to one of its files (at the
/// end, so the line is known) is found, and nothing else is.
#[test]
fn a_violation_injected_into_the_real_tree_is_found() {
    let mut files = real_files();
    let (name, source) = files
        .iter_mut()
        .find(|(name, _)| name == "dispatch/tasks/session.rs")
        .expect("dispatch/tasks/session.rs");
    source.push_str("\nfn _injected() -> super::super::super::Server { todo!() }\n");
    let line = source.lines().count();
    let name = name.clone();
    let found: Vec<String> = check_crate(&files)
        .violations
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        [format!(
            "{name}:{line}: `super::super::super::Server`: dispatch (layer 4) imports from server (layer 7), a layer above"
        )]
    );
}

/// The checker run on small crates written here, each breaking one rule in one way.
mod fixtures {
    use super::*;

    /// A crate root for the fixtures: real module names, so they sit in the real layers.
    const LIB: &str = "\
mod protocol;
mod redis_conn;
mod auth;
mod tasks;
mod session;
mod app;
mod catalog;
mod dispatch;
mod transport;
mod cluster;
mod server;
pub use server::Server;
pub use catalog::{tool as make_tool, Catalog};
";

    /// Checks `lib.rs` plus `files`, and gives each finding as `file:line path rule`.
    fn check(files: &[(&str, &str)]) -> Vec<String> {
        let mut all = vec![("lib.rs".to_string(), LIB.to_string())];
        all.extend(files.iter().map(|(n, s)| (n.to_string(), s.to_string())));
        let report = check_crate(&all);
        assert!(report.unplaced.is_empty(), "{:?}", report.unplaced);
        report
            .violations
            .iter()
            .map(|v| {
                // Every message names the file and line, the path and both layers.
                let text = v.to_string();
                assert!(text.contains(&format!("(layer {})", v.from.1)), "{text}");
                assert!(text.contains(&format!("layer {}", v.to.1)), "{text}");
                format!("{}:{} {} {:?}", v.file, v.line, v.path, v.rule)
            })
            .collect()
    }

    #[test]
    fn a_multi_line_group_reaching_up_is_reported_at_its_leaf() {
        let got = check(&[(
            "session/store.rs",
            "use crate::{\n    protocol::Id,\n    server::Builder,\n    app::{self, App as A},\n};\n",
        )]);
        assert_eq!(
            got,
            [
                "session/store.rs:3 crate::server::Builder Up",
                "session/store.rs:4 crate::app Up",
                "session/store.rs:4 crate::app::App Up",
            ]
        );
    }

    #[test]
    fn a_restricted_or_public_reexport_reaching_up_is_reported() {
        let got = check(&[(
            "session/mod.rs",
            "pub(crate) use crate::transport::reply;\npub use crate::dispatch::*;\npub(super) use self::store::Store;\n",
        )]);
        assert_eq!(
            got,
            [
                "session/mod.rs:1 crate::transport::reply Up",
                "session/mod.rs:2 crate::dispatch::* Up"
            ]
        );
    }

    #[test]
    fn super_super_climbing_into_a_higher_module_is_reported() {
        // session/store/mod.rs is `crate::session::store`: two `super`s reach the root. An
        // inline `mod tests` is a module too: three `super`s from there.
        let got = check(&[(
            "session/store/mod.rs",
            "use super::super::transport::Relay;\n\
             use super::super::protocol::Id;\n\
             use super::lifecycle::Sessions;\n\
             mod tests {\n    use super::super::super::cluster::Heartbeat;\n    use super::super::Store;\n}\n",
        )]);
        assert_eq!(
            got,
            [
                "session/store/mod.rs:1 super::super::transport::Relay Up",
                "session/store/mod.rs:5 super::super::super::cluster::Heartbeat Up",
            ]
        );
    }

    #[test]
    fn a_name_the_root_reexports_counts_as_its_module() {
        let got = check(&[(
            "protocol/wire.rs",
            "use crate::Server;\nfn f(_: &crate::Catalog) -> crate::Server { todo!() }\nfn g() { crate::make_tool(); }\n",
        )]);
        assert_eq!(
            got,
            [
                "protocol/wire.rs:1 crate::Server Up",
                "protocol/wire.rs:2 crate::Catalog Up",
                "protocol/wire.rs:2 crate::Server Up",
                "protocol/wire.rs:3 crate::make_tool Up",
            ]
        );
    }

    #[test]
    fn a_path_in_code_reaching_up_is_reported() {
        let got = check(&[(
            "session/lifecycle.rs",
            "fn f() {\n    let _ = crate::cluster::f();\n}\n\
             impl crate::dispatch::Handler for S {}\n\
             fn g() -> Vec<crate::app::App> { tracing::info!(x = ?crate::server::name()); vec![] }\n\
             fn h() { use crate::transport::reply; }\n",
        )]);
        assert_eq!(
            got,
            [
                "session/lifecycle.rs:2 crate::cluster::f Up",
                "session/lifecycle.rs:4 crate::dispatch::Handler Up",
                "session/lifecycle.rs:5 crate::app::App Up",
                "session/lifecycle.rs:5 crate::server::name Up",
                "session/lifecycle.rs:6 crate::transport::reply Up",
            ]
        );
    }

    #[test]
    fn http_below_transport_is_reported_and_allowed_from_transport() {
        let code = "use axum::Json;\nuse ::hyper::body::Incoming;\n\
                    fn f(h: &http::HeaderMap) -> http::StatusCode {\n    assert!(matches!(x, http::Method::GET));\n    http::StatusCode::OK\n}\n";
        let got = check(&[("dispatch/tools.rs", code), ("transport/post.rs", code)]);
        assert_eq!(
            got,
            [
                "dispatch/tools.rs:1 axum::Json Http",
                "dispatch/tools.rs:2 ::hyper::body::Incoming Http",
                "dispatch/tools.rs:3 http::HeaderMap Http",
                "dispatch/tools.rs:3 http::StatusCode Http",
                "dispatch/tools.rs:4 http::Method::GET Http",
                "dispatch/tools.rs:5 http::StatusCode::OK Http",
            ]
        );
    }

    #[test]
    fn modules_a_layer_keeps_apart_are_reported_and_others_are_not() {
        let got = check(&[
            (
                "auth/mod.rs",
                "use crate::tasks::TaskRecord;\nuse crate::protocol::Id;\n",
            ),
            ("protocol/mod.rs", "use crate::redis_conn::RedisConn;\n"),
            (
                "app/mod.rs",
                "use crate::catalog::Catalog;\nuse crate::Catalog as C;\n",
            ),
        ]);
        assert_eq!(
            got,
            [
                "auth/mod.rs:1 crate::tasks::TaskRecord SameLayer",
                "protocol/mod.rs:1 crate::redis_conn::RedisConn SameLayer"
            ]
        );
    }

    #[test]
    fn comments_strings_and_other_names_are_not_paths() {
        let got = check(&[(
            "session/mod.rs",
            "//! See [`crate::server::Server`].\n\
             // crate::cluster for why\n\
             /// Not [`http::StatusCode`] here.\n\
             fn f(http: u8, x: &X) -> &str {\n    mycrate::server::x();\n    let _ = self.http;\n    let _ = x.http;\n    \"crate::transport::reply http::StatusCode\"\n}\n\
             use crate::protocol::Id;\nuse super::protocol::Id as I;\n",
        )]);
        assert_eq!(got, Vec::<String>::new());
    }

    #[test]
    fn a_module_with_no_layer_is_reported() {
        let all = [
            (
                "lib.rs".to_string(),
                "mod protocol;\nmod gateway;\n".to_string(),
            ),
            (
                "gateway/mod.rs".to_string(),
                "use crate::protocol::Id;\n".to_string(),
            ),
        ];
        assert_eq!(check_crate(&all).unplaced, ["gateway"]);
    }
}
