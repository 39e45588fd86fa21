//! The architecture invariants of docs/ARCHITECTURE.md that imports can show, checked against
//! the code. For a top-level module of `crates/fleetmcp/src`:
//!
//! * [`Rule::Up`]: it imports only from its own layer or the layers below;
//! * [`Rule::Http`]: below transport, it names no HTTP crate (`axum`, `http`, `hyper` and their
//!   body/util crates);
//! * [`Rule::SameLayer`]: in a layer whose modules the document keeps apart (layer 1), it
//!   imports none of the others;
//! * [`Rule::Apart`]: it names nothing of what the document says it knows nothing of (Redis for
//!   `protocol`, `telemetry` and `dispatch`; JSON-RPC for `limits`);
//! * [`Rule::Private`]: it names no item the document reserves to another module
//!   (`session`'s `LiveSessions`);
//! * [`Rule::Peer`]: inside transport, the request core and every transport but HTTP
//!   ([`NOT_HTTP`]) name no HTTP crate and nothing of `transport::http`, so the transports are
//!   peers around the core, and a new one needs nothing of HTTP;
//!
//! and every top-level module has a layer, here and in the document's code map (its
//! `### Layer N:` headings). Across the whole tree, no files or folders import each other in a
//! circle ([`cycles`]: among the children of one module, the top-level modules included).
//!
//! Why a parser: the rules are about what a path *reaches*, and only the Rust grammar says that.
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
//! module binds (a child `mod`, or a name it imported: `use crate::server; server::f()`) is
//! that name, not another crate, and an import is caught at its `use`. Not followed, as the
//! crate uses none of them: `#[path]`, `extern crate x as y`, a glob of the crate root itself
//! (`use crate::*`), a name lib.rs brings in by a glob, and names bound in a function's body
//! (a local `use` or `mod` there is checked, but does not hide a crate's name).

#[path = "source_tree/mod.rs"]
mod source_tree;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proc_macro2::{Spacing, Span, TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// Every top-level module and its layer, lowest first (the order docs/ARCHITECTURE.md draws).
const LAYERS: &[(&str, u8)] = &[
    // 0. foundation: the wire format, configuration, clocks, the Redis connection
    ("clock", 0),
    ("config", 0),
    ("process_liveness", 0),
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
    ("upstream", 3),
    // 4. method dispatch
    ("dispatch", 4),
    // 5. HTTP
    ("transport", 5),
    // 6. other instances
    ("fleet", 6),
    // 7. wiring, and the hidden door to what tests and the example binaries need
    ("internals", 7),
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

/// The layers whose modules docs/ARCHITECTURE.md keeps apart. Layer 1's invariant: "none of
/// the five (`auth`, `events`, `stateless`, `tasks`, `limits`) imports another". Layer 3 lets
/// its four modules use each other one way, and the other layers say nothing, so within them
/// any import is allowed that makes no circle ([`cycles`]).
const APART_LAYERS: &[u8] = &[1];

/// Redis, as a module may name it: the crate's configuration and connection, and the crate.
const REDIS: &[&str] = &["redis_config", "redis_conn", "redis"];

/// The parts of transport that know nothing of HTTP (docs/ARCHITECTURE.md, layer 5): the core
/// every transport runs, and the transports other than HTTP. Each names no HTTP crate and
/// nothing under [`HTTP_TRANSPORT`].
const NOT_HTTP: &[&[&str]] = &[&["transport", "core"], &["transport", "stdio"]];

/// The HTTP transport, from the crate root.
const HTTP_TRANSPORT: &[&str] = &["transport", "http"];

/// Whether `path` (from the crate root) is `under` or inside it.
fn is_under(path: &[String], under: &[&str]) -> bool {
    under.len() <= path.len() && under.iter().zip(path).all(|(a, b)| a == b)
}

/// What a module knows nothing of, by the invariants of docs/ARCHITECTURE.md, beyond its layer:
/// (module, the top-level modules of this crate and the other crates it never names, what they
/// are). A name here that is not a module of this crate is another crate's.
///
/// * layer 0: "`protocol` and `telemetry` import nothing of Redis";
/// * layer 1: "`limits` imports nothing of JSON-RPC (`protocol`)";
/// * layer 4: dispatch "imports nothing of Redis".
const KNOWS_NOTHING_OF: &[(&str, &[&str], &str)] = &[
    ("protocol", REDIS, "Redis"),
    ("telemetry", REDIS, "Redis"),
    ("limits", &["protocol"], "JSON-RPC"),
    ("dispatch", REDIS, "Redis"),
];

/// Items only their own top-level module names, by docs/ARCHITECTURE.md (layer 2: "nothing
/// outside `session` names `LiveSessions` (`session::live`)"): paths from the crate root, a path
/// under one counting as it. A name the crate root re-exports is followed to what it names
/// (`crate::Registry` to `session::live::LiveSessions`); a name another module re-exports is
/// not, so such a re-export is listed here too.
const PRIVATE: &[&[&str]] = &[&["session", "live"], &["session", "LiveSessions"]];

/// What `module` knows nothing of, by [`KNOWS_NOTHING_OF`], if `name` is one of those things.
fn knows_nothing_of(module: &str, name: &str) -> Option<&'static str> {
    KNOWS_NOTHING_OF
        .iter()
        .find(|(m, names, _)| *m == module && names.contains(&name))
        .map(|(_, _, what)| *what)
}

/// Which rule a path breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Into a higher layer.
    Up,
    /// Into a module of the same layer that the document keeps apart.
    SameLayer,
    /// Into something the module knows nothing of ([`KNOWS_NOTHING_OF`]).
    Apart(&'static str),
    /// Into an item another module keeps to itself ([`PRIVATE`]).
    Private,
    /// An HTTP crate below [`HTTP_FROM`].
    Http,
    /// HTTP (a crate, or the HTTP transport) from a part of transport that knows nothing of it
    /// ([`NOT_HTTP`]).
    Peer,
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
    /// The module reached and its layer; for [`Rule::Http`], the crate and [`HTTP_FROM`]; for
    /// another crate [`Rule::Apart`] names, the crate and no layer.
    to: (String, Option<u8>),
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (from, fl) = &self.from;
        let to = match &self.to {
            (to, Some(tl)) => format!("{to} (layer {tl})"),
            (to, None) => format!("the crate `{to}`"),
        };
        let what = match self.rule {
            Rule::Up => format!("{from} (layer {fl}) imports from {to}, a layer above"),
            Rule::SameLayer => {
                format!("{from} (layer {fl}) imports from {to}, which the same layer keeps apart")
            }
            Rule::Apart(what) => {
                format!("{from} (layer {fl}) imports from {to}, but knows nothing of {what}")
            }
            Rule::Private => format!("{from} (layer {fl}) names an item {to} keeps to itself"),
            Rule::Http => format!(
                "{from} (layer {fl}) names the HTTP crate `{}`, known only from layer {HTTP_FROM} (transport) up",
                self.to.0
            ),
            Rule::Peer => format!(
                "{from} (layer {fl}) names {}, which its core and its transports but HTTP know nothing of",
                self.to.0
            ),
        };
        write!(f, "{}:{}: `{}`: {what}", self.file, self.line, self.path)
    }
}

/// What a checked crate is made of: its layers, the modules lib.rs declares, and the other
/// names lib.rs brings into the crate root with the path each stands for (from the root).
struct Crate {
    layers: BTreeMap<String, u8>,
    modules: BTreeSet<String>,
    root_names: BTreeMap<String, Vec<String>>,
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

/// Resolves `segments`, written in module `here`, where the module binds the names `bound`
/// (its child modules and its imports). Rust 2018 paths: `crate::`, `self::`, `super::`
/// (repeated), `::name` (another crate); at the crate root a bare first segment may be one of
/// its modules; elsewhere a bare first segment the module binds is that name, and any other is
/// another crate's name.
fn resolve(
    segments: &[String],
    here: &[String],
    bound: &BTreeSet<String>,
    krate: &Crate,
) -> Target {
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
        name if bound.contains(name) => Target::Local,
        name => Target::Extern(name.to_string()),
    }
}

/// A crate path from the root with a name lib.rs imports replaced by the path it stands for
/// (`Server::builder` is `server::Server::builder`), so that its first segment is the top-level
/// module it reaches. None for the root itself or a name lib.rs does not know.
fn expand(path: &[String], krate: &Crate) -> Option<Vec<String>> {
    let first = path.first()?;
    if krate.modules.contains(first) {
        return Some(path.to_vec());
    }
    let named = krate.root_names.get(first)?;
    Some([named, &path[1..]].concat())
}

/// Whether another crate named `name` is one some rule is about.
fn watched_crate(name: &str) -> bool {
    HTTP_CRATES.contains(&name)
        || KNOWS_NOTHING_OF
            .iter()
            .any(|(_, names, _)| names.contains(&name))
}

/// Whether a path outside a `use` can leave its module. `self` alone is a receiver and a bare
/// name (`http`, `x`) a variable or an item in scope; such paths reach nothing new.
fn may_leave(segments: &[String], here: &[String]) -> bool {
    match segments.first().map(String::as_str) {
        Some("" | "crate" | "super") => true,
        Some(_) if segments.len() < 2 => false,
        Some("self") => true,
        Some(first) => watched_crate(first) || here.is_empty(),
        None => false,
    }
}

/// A module's own names: its child modules and what its `use` items bind (a glob binds nothing
/// known), for [`resolve`].
fn bound_names(items: &[syn::Item]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for item in items {
        match item {
            syn::Item::Mod(m) => {
                names.insert(m.ident.to_string());
            }
            syn::Item::Use(u) => names.extend(use_leaves(u).into_iter().filter_map(|l| l.binds)),
            _ => {}
        }
    }
    names
}

/// The rule a path into another crate, `name`, breaks when module `from` of layer `own` names
/// it.
fn extern_rule(
    from: &str,
    own: u8,
    name: &str,
    krate: &Crate,
) -> Option<(Rule, (String, Option<u8>))> {
    // A bare name of one of our modules outside the root is no crate (the compiler rejects it).
    if krate.modules.contains(name) {
        return None;
    }
    if own < HTTP_FROM && HTTP_CRATES.contains(&name) {
        return Some((Rule::Http, (name.to_string(), Some(HTTP_FROM))));
    }
    let what = knows_nothing_of(from, name)?;
    Some((Rule::Apart(what), (name.to_string(), None)))
}

/// The rule a path into this crate, `path` from the root, breaks when module `from` of layer
/// `own` names it. The first rule broken is the one reported, in the order of [`Rule`].
fn crate_rule(
    from: &str,
    own: u8,
    path: &[String],
    krate: &Crate,
) -> Option<(Rule, (String, Option<u8>))> {
    let path = expand(path, krate)?;
    let to = path[0].as_str();
    // A module not in LAYERS is reported once, as unplaced, by the caller.
    let &layer = krate.layers.get(to)?;
    let reached = (to.to_string(), Some(layer));
    if to == from {
        return None;
    }
    if layer > own {
        return Some((Rule::Up, reached));
    }
    if layer == own && APART_LAYERS.contains(&own) {
        return Some((Rule::SameLayer, reached));
    }
    if let Some(what) = knows_nothing_of(from, to) {
        return Some((Rule::Apart(what), reached));
    }
    let private = |p: &&[&str]| p.len() <= path.len() && p.iter().zip(&path).all(|(a, b)| a == b);
    if PRIVATE.iter().any(private) {
        return Some((Rule::Private, reached));
    }
    None
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

/// Walks one file, knowing the module it is in at each point and the names that module binds.
struct Walker<'k> {
    krate: &'k Crate,
    file: &'k str,
    here: Vec<String>,
    /// The names each module of `here` binds from the file's top (innermost last).
    bound: Vec<BTreeSet<String>>,
    found: Vec<Violation>,
    /// Every path into this crate outside test code, for [`cycles`].
    reached: Vec<cycles::Reach>,
    /// Inside a `#[cfg(test)]` module of the file.
    in_test: bool,
}

impl Walker<'_> {
    /// Checks one path written in the current module against every rule. `own_binding` is the
    /// name a `use` leaf binds itself, which does not hide a crate of that name from the leaf
    /// (`use redis;`).
    fn check(&mut self, segments: &[String], glob: bool, span: Span, own_binding: Option<&str>) {
        // The root (lib.rs) belongs to no layer: it declares and re-exports every one.
        let Some(from) = self.here.first() else {
            return;
        };
        let Some(&own) = self.krate.layers.get(from) else {
            return;
        };
        let mut bound = self.bound.last().cloned().unwrap_or_default();
        if let Some(name) = own_binding {
            bound.remove(name);
        }
        let mut written = segments.join("::");
        if glob {
            written.push_str("::*");
        }
        let target = resolve(segments, &self.here, &bound, self.krate);
        let peer = self.names_http_from_a_peer(&target);
        let found = match target {
            Target::Extern(name) => extern_rule(from, own, &name, self.krate),
            Target::Crate(path) => {
                if let Some(expanded) = expand(&path, self.krate).filter(|_| !self.in_test) {
                    self.reached.push(cycles::Reach {
                        path: expanded,
                        line: span.start().line,
                        written: written.clone(),
                    });
                }
                crate_rule(from, own, &path, self.krate)
            }
            Target::Local => None,
        };
        let found = peer.map(|to| (Rule::Peer, (to, None))).or(found);
        let Some((rule, to)) = found else {
            return;
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

impl Walker<'_> {
    /// What HTTP `target` is, when the current module is a part of transport that knows
    /// nothing of it ([`NOT_HTTP`]) and `target` is an HTTP crate or the HTTP transport.
    fn names_http_from_a_peer(&self, target: &Target) -> Option<String> {
        if !NOT_HTTP.iter().any(|part| is_under(&self.here, part)) {
            return None;
        }
        match target {
            Target::Extern(name) if HTTP_CRATES.contains(&name.as_str()) => {
                Some(format!("the HTTP crate `{name}`"))
            }
            Target::Crate(path)
                if expand(path, self.krate).is_some_and(|p| is_under(&p, HTTP_TRANSPORT)) =>
            {
                Some("`transport::http`".to_string())
            }
            _ => None,
        }
    }
}

impl<'ast> Visit<'ast> for Walker<'_> {
    // An inline `mod x { }` is a module of its own: `super::` inside it starts there.
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if let Some((_, items)) = &item.content {
            let was_test = self.in_test;
            self.in_test |= cycles::is_cfg_test(&item.attrs);
            self.here.push(item.ident.to_string());
            self.bound.push(bound_names(items));
            for item in items {
                self.visit_item(item);
            }
            self.bound.pop();
            self.here.pop();
            self.in_test = was_test;
        }
    }

    // Every leaf of the tree, whatever its visibility (`pub`, `pub(crate)`, private).
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        for leaf in use_leaves(item) {
            let own_binding = leaf
                .binds
                .as_deref()
                .filter(|b| leaf.segments.first().is_some_and(|f| f == b));
            self.check(&leaf.segments, leaf.glob, leaf.span, own_binding);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments = path_segments(path);
        if may_leave(&segments, &self.here) {
            let span = path
                .segments
                .first()
                .map_or_else(Span::call_site, |s| s.ident.span());
            self.check(&segments, false, span, None);
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
                self.check(&segments, false, span, None);
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
    /// Circles between files or folders ([`cycles`]).
    cycles: Vec<cycles::Cycle>,
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
                let (Some(name), Target::Crate(path)) = (
                    leaf.binds,
                    resolve(&leaf.segments, &[], &BTreeSet::new(), &krate),
                ) else {
                    continue;
                };
                if path.first().is_some_and(|m| krate.modules.contains(m)) {
                    root_names.insert(name, path);
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
    let test_files = cycles::test_modules(&parsed);
    let mut reached = Vec::new();
    for (name, file) in &parsed {
        let here = source_tree::module_of(name);
        if let Some(top) = here.first().filter(|m| !krate.layers.contains_key(*m)) {
            unplaced.insert(top.clone());
            continue;
        }
        let mut walker = Walker {
            krate: &krate,
            file: name,
            here,
            bound: vec![bound_names(&file.items)],
            found: Vec::new(),
            reached: Vec::new(),
            in_test: cycles::is_test_module(&test_files, &source_tree::module_of(name)),
        };
        walker.visit_file(file);
        report.violations.extend(walker.found);
        reached.push((name.to_string(), walker.reached));
    }
    report.unplaced = unplaced.into_iter().collect();
    report.cycles = cycles::find(&reached);
    report
}

#[test]
fn modules_import_only_from_their_layer_or_below() {
    let report = check_crate(&source_tree::real_files());
    assert!(
        report.unplaced.is_empty(),
        "top-level modules with no layer (add them to LAYERS here and to docs/ARCHITECTURE.md): {:?}",
        report.unplaced
    );
    assert!(
        report.violations.is_empty(),
        "paths that break an invariant of docs/ARCHITECTURE.md:\n{}",
        listed(&report.violations)
    );
}

/// Each of `items` on a line of its own, indented.
fn listed<T: std::fmt::Display>(items: &[T]) -> String {
    items.iter().map(|i| format!("  {i}\n")).collect()
}

#[test]
fn no_files_or_folders_import_each_other_in_a_circle() {
    let cycles = check_crate(&source_tree::real_files()).cycles;
    let found = listed(&cycles);
    assert!(
        cycles.is_empty(),
        "circles of imports (tests/layers/cycles.rs says what counts):\n{found}"
    );
}

/// The layers docs/ARCHITECTURE.md gives the top-level modules: its code map's `### Layer N:`
/// headings, each naming its modules in backticks.
fn layers_in_doc(doc: &str) -> BTreeMap<String, u8> {
    let mut layers = BTreeMap::new();
    for line in doc.lines() {
        let Some((n, names)) = line
            .strip_prefix("### Layer ")
            .and_then(|rest| rest.split_once(':'))
        else {
            continue;
        };
        let Ok(n) = n.trim().parse::<u8>() else {
            continue;
        };
        for name in names.split('`').skip(1).step_by(2) {
            layers.insert(name.to_string(), n);
        }
    }
    layers
}

/// Where the document's layers and [`LAYERS`] disagree. `testing` (helpers compiled for the
/// unit tests only) needs no heading.
fn doc_disagreements(doc: &BTreeMap<String, u8>) -> Vec<String> {
    let here: BTreeMap<String, u8> = LAYERS
        .iter()
        .filter(|(m, _)| *m != "testing")
        .map(|&(m, l)| (m.to_string(), l))
        .collect();
    let names: BTreeSet<&String> = here.keys().chain(doc.keys()).collect();
    names
        .into_iter()
        .filter_map(|m| match (here.get(m), doc.get(m)) {
            (Some(a), Some(b)) if a == b => None,
            (a, b) => Some(format!("{m}: layer {a:?} here, {b:?} in the document")),
        })
        .collect()
}

#[test]
fn the_document_gives_every_module_the_layer_checked_here() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ARCHITECTURE.md");
    let doc = std::fs::read_to_string(&path).expect("docs/ARCHITECTURE.md");
    let disagree = doc_disagreements(&layers_in_doc(&doc));
    assert!(
        disagree.is_empty(),
        "docs/ARCHITECTURE.md's `### Layer N:` headings and LAYERS disagree:\n{}",
        disagree.join("\n")
    );
}

/// A module missing from the document, one in another layer there, and one it has that the
/// crate has not, are each reported.
#[test]
fn a_document_that_disagrees_with_the_layers_is_reported() {
    let doc = "\
### Layer 0: `protocol`, `config`, `redis_config`, `redis_conn`, `clock`, `process_liveness`, `machine_id`, `telemetry`
### Layer 1: `auth`, `events`, `stateless`, `tasks`
### Layer 2: `session`, `limits`
### Layer 3: `app`, `catalog`, `context`, `upstream`
### Layer 4: `dispatch`
### Layer 5: `transport`, `gateway`
### Layer 6: `fleet`
### Layer 7: `internals`, `server`
";
    assert_eq!(
        doc_disagreements(&layers_in_doc(doc)),
        [
            "gateway: layer None here, Some(5) in the document",
            "limits: layer Some(1) here, Some(2) in the document",
            "ops: layer Some(7) here, None in the document",
        ]
    );
}

/// The real tree is read as the fixtures are: a violation of each rule added to one of its
/// files (at the end, so the line is known) is found, and nothing else is.
#[test]
fn a_violation_injected_into_the_real_tree_is_found() {
    let injected = [
        (
            "dispatch/task_methods/session_era.rs",
            "fn _injected() -> super::super::super::Server { todo!() }",
            "`super::super::super::Server`: dispatch (layer 4) imports from server (layer 7), a layer above",
        ),
        (
            "tasks/redis/mod.rs",
            "fn _injected(_: &crate::events::StoredEvent) {}",
            "`crate::events::StoredEvent`: tasks (layer 1) imports from events (layer 1), which the same layer keeps apart",
        ),
        (
            "dispatch/tools.rs",
            "fn _injected() { let _ = redis::cmd(\"GET\"); }",
            "`redis::cmd`: dispatch (layer 4) imports from the crate `redis`, but knows nothing of Redis",
        ),
        (
            "transport/http/locate.rs",
            "use crate::session::live::LiveSessions;",
            "`crate::session::live::LiveSessions`: transport (layer 5) names an item session (layer 2) keeps to itself",
        ),
        (
            "transport/core/driver.rs",
            "fn _injected(_: http::StatusCode) {}",
            "`http::StatusCode`: transport (layer 5) names the HTTP crate `http`, which its core and its transports but HTTP know nothing of",
        ),
        (
            "transport/stdio/out.rs",
            "use crate::transport::http::respond;",
            "`crate::transport::http::respond`: transport (layer 5) names `transport::http`, which its core and its transports but HTTP know nothing of",
        ),
        (
            "session/id.rs",
            "fn _injected(_: axum::body::Body) {}",
            "`axum::body::Body`: session (layer 2) names the HTTP crate `axum`, known only from layer 5 (transport) up",
        ),
    ];
    let mut files = source_tree::real_files();
    let mut expected = Vec::new();
    for (file, code, what) in injected {
        let (_, source) = files
            .iter_mut()
            .find(|(name, _)| name == file)
            .unwrap_or_else(|| panic!("{file}"));
        source.push('\n');
        source.push_str(code);
        source.push('\n');
        expected.push(format!("{file}:{}: {what}", source.lines().count()));
    }
    let mut found: Vec<String> = check_crate(&files)
        .violations
        .iter()
        .map(ToString::to_string)
        .collect();
    found.sort();
    expected.sort();
    assert_eq!(found, expected);
}

/// The rule against circles of imports between files and folders.
#[path = "layers/cycles.rs"]
mod cycles;

/// The checker run on small crates written here, each breaking one rule in one way.
#[path = "layers/fixtures.rs"]
mod fixtures;
