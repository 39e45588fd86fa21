//! The public API as a user of the library meets it, checked against the code: every item a
//! user can name from outside the crate, by the path a user writes, is listed in [`SURFACE`]; the
//! test fails when the code has one the list has not (a new public item: add it to the list, on
//! purpose) or the list one the code has not (take it off), when the count passes [`MAX_ITEMS`],
//! and when one item can be named by two paths.
//!
//! What is counted, on the tree `syn` parses (as tests/layers.rs reads it): starting at
//! `src/lib.rs`, every item declared `pub` (plain `pub`: `pub(crate)` and the like are not
//! public) in a module a user can reach, following `pub mod` into modules and `pub use` to what
//! it names (`crate::`, `self::`, `super::`, a child's name, groups, renames and globs; a
//! `pub use` of another crate's item counts as one item, not followed). An item, a `pub mod` or a
//! `pub use` marked `#[doc(hidden)]` is not the documented surface, nor is anything under it:
//! that is the door for what tests and the binaries need (`fleetmcp::internals`). Test code
//! (`#[cfg(test)]`) is not counted. Modules are listed (with a trailing `::`) but not counted;
//! methods, fields and variants come with their type.

#[path = "source_tree/mod.rs"]
mod source_tree;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// The most items the documented surface may have (modules not counted).
// 63: the two queues of an `UpstreamLink` (issue 36: bounded in bytes as well as messages).
// 64: what a typed elicitation gives back (issue 41: `RequestContext::elicit_form`).
// 66: the test client and its builder (issue 41: `Server::test_client`, tests without HTTP).
// 68: handlers as functions, the state's type found from their `State<T>` argument, and the
// trait whose `#[diagnostic::on_unimplemented]` says what a handler takes (issue 41:
// `ToolBuilder::handler_fn` and the others).
// 69: the transport a server serves, an enum in place of the flag `Config::stdio` (issue 39:
// transports as peers, `config::Transport`).
const MAX_ITEMS: usize = 69;

/// The documented surface: every path a user can name, modules ending in `::`. Grouped by what
/// a user does with it; the test keeps it equal to what the code makes public.
const SURFACE: &[&str] = &[
    // Declaring what the server offers (the builders and definitions are in `catalog`).
    "tool",
    "resource",
    "template",
    "prompt",
    "NoArgs",
    "Structured",
    "TaskSupport",
    // A handler function's argument for the server's state (`ToolBuilder::handler_fn`).
    "State",
    // What a handler returns when it fails.
    "ToolError",
    "ResourceError",
    "PromptError",
    // What a handler sees.
    "RequestContext",
    "ClientRequestError",
    "Elicited",
    "LogLevel",
    "Principal",
    "model",
    // Building, running and changing a server.
    "Server",
    "ServerBuilder",
    "BuildError",
    "run",
    "Running",
    "ServerHandle",
    "shutdown_signal",
    "init_tracing",
    "flush_traces",
    "Config",
    "ConfigError",
    // Calling a server's declarations from a test, in process (`Server::test_client`).
    "TestClient",
    "TestClientBuilder",
    // A gateway: sessions served by another MCP server (`ServerBuilder::upstream`).
    "Upstream",
    "UpstreamLink",
    // Its two queues, bounded in messages and in bytes (issue 36).
    "MessageSender",
    "MessageReceiver",
    // What clients see: headers, the idempotency key's `_meta` name and bound, the messages of
    // work whose instance stopped.
    "SESSION_HEADER",
    "PROTOCOL_VERSION_HEADER",
    "MACHINE_ID_HEADER",
    "IDEMPOTENCY_KEY_META",
    "MAX_IDEMPOTENCY_KEY",
    "EXECUTOR_GONE_MESSAGE",
    "WRITER_GONE_MESSAGE",
    "STREAM_LOST_MESSAGE",
    // The builders `tool` and the others start, the definitions they build, and the traits of
    // what a handler may return.
    "catalog::",
    "catalog::ToolBuilder",
    "catalog::ToolDef",
    "catalog::ResourceBuilder",
    "catalog::ResourceDef",
    "catalog::TemplateBuilder",
    "catalog::TemplateDef",
    "catalog::PromptBuilder",
    "catalog::PromptDef",
    "catalog::IntoToolResult",
    "catalog::IntoPromptResult",
    "catalog::HandlerFn",
    // The sections of `Config`.
    "config::",
    "config::DeploymentMode",
    "config::Transport",
    "config::BindAddress",
    "config::HttpConfig",
    "config::SessionConfig",
    "config::TaskConfig",
    "config::StatelessConfig",
    "config::DefaultEra",
    "config::RedisConfig",
    "config::HaConfig",
    "config::AuthConfig",
    "config::LimitsConfig",
    "config::RateLimit",
    "config::OnStoreError",
    // The bounded Redis connection an application may keep its own keys on.
    "redis_conn::",
    "redis_conn::RedisConn",
    "redis_conn::CommandError",
];

/// A module: its items, by its path from the root.
type Modules = BTreeMap<Vec<String>, Vec<syn::Item>>;

/// What a public name stands for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    /// A module of this crate.
    Module(Vec<String>),
    /// An item of this crate, by the module it is declared in and its name.
    Item(Vec<String>, String),
    /// Something of another crate, as written.
    Extern(String),
}

fn has_attr(attrs: &[syn::Attribute], name: &str, arg: &str) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident(name)
            && attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == arg)
    })
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    has_attr(attrs, "cfg", "test")
}

fn is_hidden(attrs: &[syn::Attribute]) -> bool {
    has_attr(attrs, "doc", "hidden")
}

/// Every module of the crate with its items, inline `mod x { }` blocks included; test modules
/// left out.
fn modules(files: &[(String, String)]) -> Modules {
    fn add(path: Vec<String>, items: Vec<syn::Item>, out: &mut Modules) {
        for item in &items {
            if let syn::Item::Mod(m) = item
                && let Some((_, inner)) = &m.content
                && !is_test(&m.attrs)
            {
                let mut child = path.clone();
                child.push(m.ident.to_string());
                add(child, inner.clone(), out);
            }
        }
        out.entry(path).or_default().extend(items);
    }
    let mut out = Modules::new();
    for (name, text) in files {
        let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        add(source_tree::module_of(name), file.items, &mut out);
    }
    out
}

fn public(vis: &syn::Visibility) -> bool {
    matches!(vis, syn::Visibility::Public(_))
}

/// One leaf of a `use` tree: the path as written (a glob stops at its prefix), the name it
/// binds (none for a glob).
fn use_leaves(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            if n.ident != "self" {
                path.push(n.ident.to_string());
            }
            let binds = path.last().cloned();
            out.push((path, binds));
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push((path, Some(r.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
        syn::UseTree::Group(g) => {
            for item in &g.items {
                use_leaves(item, prefix, out);
            }
        }
    }
}

/// The name an item declares, with its attributes and visibility; none for items that declare
/// no name a path can reach (impls, uses, macro calls).
fn declared(item: &syn::Item) -> Option<(String, &[syn::Attribute], &syn::Visibility)> {
    let (ident, attrs, vis) = match item {
        syn::Item::Const(i) => (&i.ident, &i.attrs, &i.vis),
        syn::Item::Enum(i) => (&i.ident, &i.attrs, &i.vis),
        syn::Item::Fn(i) => (&i.sig.ident, &i.attrs, &i.vis),
        syn::Item::Mod(i) => (&i.ident, &i.attrs, &i.vis),
        syn::Item::Static(i) => (&i.ident, &i.attrs, &i.vis),
        syn::Item::Struct(i) => (&i.ident, &i.attrs, &i.vis),
        syn::Item::Trait(i) => (&i.ident, &i.attrs, &i.vis),
        syn::Item::TraitAlias(i) => (&i.ident, &i.attrs, &i.vis),
        syn::Item::Type(i) => (&i.ident, &i.attrs, &i.vis),
        syn::Item::Union(i) => (&i.ident, &i.attrs, &i.vis),
        _ => return None,
    };
    Some((ident.to_string(), attrs.as_slice(), vis))
}

/// A name a module binds, and whether it makes it public and documented.
#[derive(Debug, Clone)]
struct Binding {
    name: String,
    target: Target,
    public: bool,
    hidden: bool,
}

/// Resolves the names of modules, each once.
struct Resolver<'m> {
    mods: &'m Modules,
    done: RefCell<BTreeMap<Vec<String>, Rc<Vec<Binding>>>>,
    /// Modules being resolved: an import cycle through one sees its declarations only.
    busy: RefCell<BTreeSet<Vec<String>>>,
}

impl<'m> Resolver<'m> {
    fn new(mods: &'m Modules) -> Self {
        Self {
            mods,
            done: RefCell::default(),
            busy: RefCell::default(),
        }
    }

    /// Every name module `here` binds (of any visibility), test code left out, its imports
    /// resolved.
    fn bindings(&self, here: &[String]) -> Rc<Vec<Binding>> {
        if let Some(done) = self.done.borrow().get(here) {
            return done.clone();
        }
        let Some(items) = self.mods.get(here) else {
            return Rc::default();
        };
        let declared = Self::declared_bindings(here, items);
        if !self.busy.borrow_mut().insert(here.to_vec()) {
            return Rc::new(declared);
        }
        let mut out = declared;
        for item in items {
            if let syn::Item::Use(u) = item
                && !is_test(&u.attrs)
            {
                self.use_bindings(here, u, &mut out);
            }
        }
        self.busy.borrow_mut().remove(here);
        let out = Rc::new(out);
        self.done.borrow_mut().insert(here.to_vec(), out.clone());
        out
    }

    fn declared_bindings(here: &[String], items: &[syn::Item]) -> Vec<Binding> {
        let mut out = Vec::new();
        for item in items {
            let Some((name, attrs, vis)) = declared(item) else {
                continue;
            };
            if is_test(attrs) {
                continue;
            }
            let target = match item {
                syn::Item::Mod(_) => Target::Module([here, std::slice::from_ref(&name)].concat()),
                _ => Target::Item(here.to_vec(), name.clone()),
            };
            out.push(Binding {
                name,
                target,
                public: public(vis),
                hidden: is_hidden(attrs),
            });
        }
        out
    }

    fn use_bindings(&self, here: &[String], u: &syn::ItemUse, out: &mut Vec<Binding>) {
        let mut leaves = Vec::new();
        let mut prefix = Vec::new();
        if u.leading_colon.is_some() {
            prefix.push(String::new());
        }
        use_leaves(&u.tree, &mut prefix, &mut leaves);
        for (path, binds) in leaves {
            let resolved = self.resolve(&path, here, out);
            match binds {
                // A name is re-exported as public only where what it names is public itself
                // (a `pub use` of a name in two namespaces passes on the public one).
                Some(name) => out.extend(resolved.into_iter().map(|b| Binding {
                    name: name.clone(),
                    target: b.target,
                    public: public(&u.vis) && b.public,
                    hidden: is_hidden(&u.attrs) || b.hidden,
                })),
                // A glob binds what the module it names makes public.
                None => {
                    for b in resolved {
                        let Target::Module(m) = b.target else {
                            continue;
                        };
                        for b in self.bindings(&m).iter().filter(|b| b.public) {
                            out.push(Binding {
                                public: public(&u.vis),
                                hidden: b.hidden || is_hidden(&u.attrs),
                                ..b.clone()
                            });
                        }
                    }
                }
            }
        }
    }

    /// What `path`, written in module `here` (whose names so far are `local`), names: every
    /// namespace's match of its last segment (a `use` imports them all), as the binding that
    /// declares it there. Rust 2018 paths: `crate::`, `self::`, `super::`, `::name` (another
    /// crate), a bare first segment the module binds, or another crate's name.
    fn resolve(&self, path: &[String], here: &[String], local: &[Binding]) -> Vec<Binding> {
        let Some(first) = path.first() else {
            return Vec::new();
        };
        let foreign = |path: String| Binding {
            name: String::new(),
            target: Target::Extern(path),
            public: true,
            hidden: false,
        };
        let bound_here = |name: &str| {
            local.iter().any(|b| b.name == name)
                || self.mods.get(here).is_some_and(|items| {
                    Self::declared_bindings(here, items)
                        .iter()
                        .any(|b| b.name == name)
                })
        };
        let (mut module, rest): (Vec<String>, &[String]) = match first.as_str() {
            "" => return vec![foreign(path[1..].join("::"))],
            "crate" => (Vec::new(), &path[1..]),
            "self" => (here.to_vec(), &path[1..]),
            "super" => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                (
                    here[..here.len().saturating_sub(ups)].to_vec(),
                    &path[ups..],
                )
            }
            name if bound_here(name) => (here.to_vec(), path),
            _ => return vec![foreign(path.join("::"))],
        };
        let Some((last, walk)) = rest.split_last() else {
            return vec![Binding {
                target: Target::Module(module),
                ..foreign(String::new())
            }];
        };
        let names = |module: &[String]| -> Rc<Vec<Binding>> {
            if module == here {
                Rc::new(local.to_vec())
            } else {
                self.bindings(module)
            }
        };
        for (i, segment) in walk.iter().enumerate() {
            let next = names(&module).iter().find_map(|b| match &b.target {
                Target::Module(m) if &b.name == segment => Some(Ok(m.clone())),
                Target::Extern(e) if &b.name == segment => Some(Err(e.clone())),
                _ => None,
            });
            match next {
                Some(Ok(m)) => module = m,
                Some(Err(e)) => {
                    return vec![foreign([&[e][..], &rest[i + 1..]].concat().join("::"))];
                }
                None => return Vec::new(),
            }
        }
        names(&module)
            .iter()
            .filter(|b| &b.name == last)
            .cloned()
            .collect()
    }
}

/// The documented surface: every path a user can name (modules ending in `::`) and what it
/// stands for.
fn surface(files: &[(String, String)]) -> BTreeMap<String, Target> {
    let mods = modules(files);
    let resolver = Resolver::new(&mods);
    let mut out = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut queue = vec![(Vec::<String>::new(), String::new())];
    while let Some((module, prefix)) = queue.pop() {
        if !seen.insert(module.clone()) {
            continue;
        }
        for b in resolver.bindings(&module).iter() {
            if !b.public || b.hidden {
                continue;
            }
            let b = b.clone();
            let path = format!("{prefix}{}", b.name);
            if let Target::Module(m) = &b.target {
                queue.push((m.clone(), format!("{path}::")));
                out.insert(format!("{path}::"), b.target.clone());
            } else {
                out.insert(path, b.target);
            }
        }
    }
    out
}

/// What is wrong with `found` against the listed surface and bound.
fn problems(found: &BTreeMap<String, Target>, listed: &[&str], max: usize) -> Vec<String> {
    let mut out = Vec::new();
    let listed: BTreeSet<&str> = listed.iter().copied().collect();
    for path in found.keys() {
        if !listed.contains(path.as_str()) {
            out.push(format!("public but not listed: {path}"));
        }
    }
    for path in &listed {
        if !found.contains_key(*path) {
            out.push(format!("listed but not public: {path}"));
        }
    }
    let items = found.keys().filter(|p| !p.ends_with("::")).count();
    if items > max {
        out.push(format!("{items} items, more than {max}"));
    }
    let mut paths: BTreeMap<&Target, Vec<&str>> = BTreeMap::new();
    for (path, target) in found {
        paths.entry(target).or_default().push(path);
    }
    for (target, paths) in paths {
        if paths.len() > 1 {
            out.push(format!(
                "{target:?} has {} paths: {}",
                paths.len(),
                paths.join(", ")
            ));
        }
    }
    out
}

/// The surface as a table: each path and what it stands for.
fn listing(found: &BTreeMap<String, Target>) -> String {
    found
        .iter()
        .map(|(path, target)| format!("    {path:<36} {target:?}\n"))
        .collect()
}

#[test]
fn the_documented_surface_is_the_listed_one() {
    let found = surface(&source_tree::real_files());
    let items = found.keys().filter(|p| !p.ends_with("::")).count();
    let problems = problems(&found, SURFACE, MAX_ITEMS);
    assert!(
        problems.is_empty(),
        "{}\n\nThe documented surface now ({items} items, at most {MAX_ITEMS}):\n{}\n\
         A new public name is API: list it in SURFACE on purpose, or make it `pub(crate)`, or \
         put what only tests and the example binaries need behind `fleetmcp::internals`.",
        problems.join("\n"),
        listing(&found),
    );
}

/// Injected into the real tree: a public function at the root, a public constant in a public
/// module, a second path to a listed type, an internal re-exported at the root. Each is
/// reported; a hidden one, a crate-only one and one behind `internals` are not.
#[test]
fn an_item_injected_into_the_real_tree_is_reported() {
    let inject = |file: &str, text: &str| {
        let mut files = source_tree::real_files();
        let (_, source) = files
            .iter_mut()
            .find(|(name, _)| name == file)
            .unwrap_or_else(|| panic!("{file} among the files"));
        source.push_str(text);
        // Room for the one injected item: what is checked here is that it is reported, not
        // the bound (a surface at the bound would also report the count).
        problems(&surface(&files), SURFACE, MAX_ITEMS + 1)
    };
    assert_eq!(
        inject("lib.rs", "\npub fn injected() {}\n"),
        ["public but not listed: injected"]
    );
    assert_eq!(
        inject("config/mod.rs", "\npub const INJECTED: u32 = 1;\n"),
        ["public but not listed: config::INJECTED"]
    );
    assert_eq!(
        inject("lib.rs", "\npub use server::Server as Served;\n"),
        [
            "public but not listed: Served",
            "Item([\"server\"], \"Server\") has 2 paths: Served, Server",
        ]
    );
    let made_public = inject("lib.rs", "\npub use tasks::TaskStore;\n");
    assert_eq!(made_public, ["public but not listed: TaskStore"]);
    assert!(inject("lib.rs", "\n#[doc(hidden)]\npub fn hidden() {}\n").is_empty());
    assert!(inject("lib.rs", "\npub(crate) fn crate_only() {}\n").is_empty());
    assert!(inject("internals.rs", "\npub fn behind_the_door() {}\n").is_empty());
}

/// The counter itself, on a small crate.
mod counter {
    use super::*;

    fn crate_of(files: &[(&str, &str)]) -> BTreeMap<String, Target> {
        let files: Vec<(String, String)> = files
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect();
        surface(&files)
    }

    fn paths(found: &BTreeMap<String, Target>) -> Vec<&str> {
        found.keys().map(String::as_str).collect()
    }

    #[test]
    fn follows_public_modules_and_reexports_but_not_private_ones() {
        let found = crate_of(&[
            (
                "lib.rs",
                "pub mod api;\nmod inner;\npub use inner::{Thing, helper as make};\n\
                 pub use inner::deep::*;\npub(crate) use inner::Hidden;\n\
                 pub struct Root;\nstruct Private;\n#[cfg(test)]\npub fn test_only() {}\n",
            ),
            (
                "api.rs",
                "pub trait Api {}\npub(crate) fn crate_only() {}\n\
                 pub use self::nested::Leaf;\nmod nested { pub struct Leaf; }\n\
                 pub use super::inner::Other;\n",
            ),
            (
                "inner/mod.rs",
                "pub mod deep;\npub struct Thing;\npub struct Other;\npub struct Hidden;\n\
                 pub fn helper() {}\npub fn unexported() {}\n",
            ),
            (
                "inner/deep.rs",
                "pub const A: u8 = 1;\npub enum B {}\nfn c() {}\n",
            ),
        ]);
        assert_eq!(
            paths(&found),
            [
                "A",
                "B",
                "Root",
                "Thing",
                "api::",
                "api::Api",
                "api::Leaf",
                "api::Other",
                "make",
            ]
        );
        assert_eq!(
            found["make"],
            Target::Item(vec!["inner".into()], "helper".into())
        );
    }

    #[test]
    fn hidden_items_and_everything_under_a_hidden_module_are_not_counted() {
        let found = crate_of(&[
            (
                "lib.rs",
                "#[doc(hidden)]\npub mod internals;\npub mod open;\n\
                 #[doc(hidden)]\npub use open::Shown as Secret;\n\
                 #[doc(hidden)]\npub struct Hidden;\n",
            ),
            (
                "internals.rs",
                "pub struct Door;\npub mod more { pub fn f() {} }\n",
            ),
            (
                "open.rs",
                "pub struct Shown;\n#[doc(hidden)]\npub fn not_shown() {}\n",
            ),
        ]);
        assert_eq!(paths(&found), ["open::", "open::Shown"]);
    }

    #[test]
    fn another_crates_name_counts_once_and_is_not_followed() {
        let found = crate_of(&[(
            "lib.rs",
            "pub use rmcp::model;\npub use serde_json::{Value, json};\n",
        )]);
        assert_eq!(paths(&found), ["Value", "json", "model"]);
        assert_eq!(found["model"], Target::Extern("rmcp::model".into()));
    }

    #[test]
    fn a_reexport_of_two_namespaces_passes_on_the_public_one_only() {
        // `tool` is a crate-only module and a public function in `catalog`: the root's
        // `pub use` makes the function public, not the module.
        let found = crate_of(&[
            ("lib.rs", "mod catalog;\npub use catalog::tool;\n"),
            (
                "catalog/mod.rs",
                "pub(crate) mod tool;\npub use tool::tool;\n",
            ),
            ("catalog/tool.rs", "pub fn tool() {}\npub struct Builder;\n"),
        ]);
        assert_eq!(paths(&found), ["tool"]);
    }

    #[test]
    fn two_paths_the_list_and_the_bound_are_each_reported() {
        let found = crate_of(&[
            ("lib.rs", "pub mod a;\npub use a::X;\npub fn y() {}\n"),
            ("a.rs", "pub struct X;\n"),
        ]);
        assert_eq!(paths(&found), ["X", "a::", "a::X", "y"]);
        assert_eq!(
            problems(&found, &["X", "a::", "a::X", "gone"], 1),
            [
                "public but not listed: y",
                "listed but not public: gone",
                "3 items, more than 1",
                "Item([\"a\"], \"X\") has 2 paths: X, a::X",
            ]
        );
    }
}
