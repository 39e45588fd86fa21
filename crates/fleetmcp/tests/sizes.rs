//! The size bounds of issue 21's clarity pass, checked against the code: no source file of
//! `crates/fleetmcp/src` over [`FILE_MAX`] lines and no function over [`FN_MAX`], tests
//! excepted. What is over today is named in [`ALLOWED_FILES`] and [`ALLOWED_FNS`] with its size,
//! the list of what is still to be done; an entry may only go, never grow.
//!
//! What is counted, on the tree `syn` parses (as tests/layers.rs reads it):
//!
//! * test code is not counted anywhere: an item (module, function, impl, anything) marked
//!   `#[cfg(test)]`, a function marked `#[test]` or `#[<runner>::test]`, a method marked either
//!   way, and the whole file of a module declared `#[cfg(test)] mod x;`;
//! * a file's size is its lines less the lines of its test items (attributes and doc comments
//!   included);
//! * a function's size runs from the first line of its signature (visibility included) to the
//!   line of its closing brace: its doc comment and attributes are not its size. Free functions,
//!   methods of impls, trait methods with a body and functions nested in any of them each count
//!   (a nested function counts in its own right and in the function around it). Closures are
//!   part of their function. Functions a `macro_rules!` writes are not seen.
//!
//! A function is named by the path a reader would search for: `f`, `Type::f`,
//! `<Type as Trait>::f`, `Trait::f` (a default body), `outer::inner` (nested), with inline
//! modules in front.

#[path = "source_tree/mod.rs"]
mod source_tree;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use syn::spanned::Spanned;
use syn::visit::{self, Visit};

/// The most lines a source file may have, tests excepted.
const FILE_MAX: usize = 800;

/// The most lines a function may have.
const FN_MAX: usize = 80;

/// Files still over [`FILE_MAX`], with their size (non-test lines) when they were listed: what
/// is left of the pass. The test fails when one grows past its size or comes within the bound
/// (then take it off), so the list only shrinks.
const ALLOWED_FILES: &[(&str, usize)] = &[];

/// Functions still over [`FN_MAX`]: file under `src/`, name as described at the top, size.
/// Same rules as [`ALLOWED_FILES`].
const ALLOWED_FNS: &[(&str, &str, usize)] = &[];

/// One function and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FnSize {
    name: String,
    /// The line its signature starts on.
    line: usize,
    lines: usize,
}

/// What one file measures.
#[derive(Debug, Default)]
struct FileSize {
    /// Lines not in test items.
    lines: usize,
    fns: Vec<FnSize>,
    /// Modules declared `#[cfg(test)] mod x;` here, as paths from this file's module (inline
    /// modules included): their files are test code.
    test_mod_files: Vec<Vec<String>>,
}

/// Whether attributes mark test code: `#[cfg(test)]`, `#[test]`, `#[tokio::test]` and the like.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        if path.is_ident("cfg") {
            return attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test");
        }
        path.segments.last().is_some_and(|s| s.ident == "test")
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

fn impl_item_attrs(item: &syn::ImplItem) -> &[syn::Attribute] {
    match item {
        syn::ImplItem::Const(i) => &i.attrs,
        syn::ImplItem::Fn(i) => &i.attrs,
        syn::ImplItem::Type(i) => &i.attrs,
        syn::ImplItem::Macro(i) => &i.attrs,
        _ => &[],
    }
}

/// A type as a reader names it: the last segment of a path without its generics, else as
/// written.
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map_or_else(String::new, |s| s.ident.to_string()),
        syn::Type::Reference(r) => type_name(&r.elem),
        other => other
            .span()
            .source_text()
            .unwrap_or_else(|| "_".to_string()),
    }
}

/// Walks one file: the scope names functions, test items are left out.
struct Counter {
    /// Inline modules, impls, traits and functions around the current point.
    scope: Vec<String>,
    /// Inline modules only, for out-of-line modules declared inside them.
    modules: Vec<String>,
    /// Lines (first, last) of test items.
    test_lines: Vec<(usize, usize)>,
    fns: Vec<FnSize>,
    test_mod_files: Vec<Vec<String>>,
}

impl Counter {
    fn name(&self, ident: &syn::Ident) -> String {
        let mut parts = self.scope.clone();
        parts.push(ident.to_string());
        parts.join("::")
    }

    fn test_item(&mut self, span: proc_macro2::Span) {
        self.test_lines.push((span.start().line, span.end().line));
    }

    /// One function: `start` is where its signature starts, `body` its block.
    fn function(&mut self, ident: &syn::Ident, start: proc_macro2::Span, body: &syn::Block) {
        let line = start.start().line;
        let end = body.brace_token.span.close().end().line;
        self.fns.push(FnSize {
            name: self.name(ident),
            line,
            lines: end - line + 1,
        });
    }
}

/// Where a function's signature starts: its visibility if written, else its `sig`.
fn signature_start(vis: &syn::Visibility, sig: &syn::Signature) -> proc_macro2::Span {
    match vis {
        syn::Visibility::Inherited => sig.span(),
        vis => vis.span(),
    }
}

impl<'ast> Visit<'ast> for Counter {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test(item_attrs(item)) {
            return visit::visit_item(self, item);
        }
        self.test_item(item.span());
        if let syn::Item::Mod(m) = item
            && m.content.is_none()
        {
            let mut path = self.modules.clone();
            path.push(m.ident.to_string());
            self.test_mod_files.push(path);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        if is_test(impl_item_attrs(item)) {
            return self.test_item(item.span());
        }
        visit::visit_impl_item(self, item);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        self.scope.push(item.ident.to_string());
        self.modules.push(item.ident.to_string());
        visit::visit_item_mod(self, item);
        self.modules.pop();
        self.scope.pop();
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        let ty = type_name(&item.self_ty);
        let name = match &item.trait_ {
            Some((_, path, _)) => {
                let tr = path
                    .segments
                    .last()
                    .map_or_else(String::new, |s| s.ident.to_string());
                format!("<{ty} as {tr}>")
            }
            None => ty,
        };
        self.scope.push(name);
        visit::visit_item_impl(self, item);
        self.scope.pop();
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        self.scope.push(item.ident.to_string());
        visit::visit_item_trait(self, item);
        self.scope.pop();
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.function(
            &item.sig.ident,
            signature_start(&item.vis, &item.sig),
            &item.block,
        );
        self.scope.push(item.sig.ident.to_string());
        visit::visit_item_fn(self, item);
        self.scope.pop();
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        self.function(
            &item.sig.ident,
            signature_start(&item.vis, &item.sig),
            &item.block,
        );
        self.scope.push(item.sig.ident.to_string());
        visit::visit_impl_item_fn(self, item);
        self.scope.pop();
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if is_test(&item.attrs) {
            return self.test_item(item.span());
        }
        if let Some(body) = &item.default {
            self.function(&item.sig.ident, item.sig.span(), body);
        }
        self.scope.push(item.sig.ident.to_string());
        visit::visit_trait_item_fn(self, item);
        self.scope.pop();
    }
}

/// Measures one source file.
fn measure(source: &str) -> FileSize {
    let file = syn::parse_file(source).expect("parse source");
    let mut counter = Counter {
        scope: Vec::new(),
        modules: Vec::new(),
        test_lines: Vec::new(),
        fns: Vec::new(),
        test_mod_files: Vec::new(),
    };
    counter.visit_file(&file);
    let total = source.lines().count();
    let mut test = vec![false; total + 1];
    for &(first, last) in &counter.test_lines {
        if let Some(lines) = test.get_mut(first..=last.min(total)) {
            lines.fill(true);
        }
    }
    let test_count = test.iter().filter(|&&t| t).count();
    // A function inside a test item is test code too.
    let fns = counter
        .fns
        .into_iter()
        .filter(|f| !test.get(f.line).copied().unwrap_or(false))
        .collect();
    FileSize {
        lines: total - test_count,
        fns,
        test_mod_files: counter.test_mod_files,
    }
}

/// The files an out-of-line module declared in `file` (under `src/`) may live in.
fn module_files(file: &str, path: &[String]) -> [String; 2] {
    let dir = match file.rsplit_once('/') {
        _ if file == "lib.rs" => String::new(),
        Some((dir, "mod.rs")) => format!("{dir}/"),
        Some(_) | None => format!("{}/", file.trim_end_matches(".rs")),
    };
    let rel = path.join("/");
    [format!("{dir}{rel}.rs"), format!("{dir}{rel}/mod.rs")]
}

/// Measures a crate's files (name under `src/`, source), leaving out the files and folders of
/// test modules.
fn measure_crate(files: &[(String, String)]) -> BTreeMap<String, FileSize> {
    let mut sizes: BTreeMap<String, FileSize> = files
        .iter()
        .map(|(name, source)| (name.clone(), measure(source)))
        .collect();
    let mut test_files = Vec::new();
    for (name, size) in &sizes {
        for path in &size.test_mod_files {
            let [file, dir_mod] = module_files(name, path);
            test_files.push(file);
            test_files.push(dir_mod.trim_end_matches("mod.rs").to_string());
        }
    }
    sizes.retain(|name, _| {
        !test_files
            .iter()
            .any(|t| name == t || (t.ends_with('/') && name.starts_with(t.as_str())))
    });
    sizes
}

/// One thing over its bound, or one entry of the allow-list, and what the check makes of it.
struct Row {
    what: String,
    lines: usize,
    bound: usize,
    /// The allow-list's size for it, if listed.
    allowed: Option<usize>,
    /// Why it fails, if it does.
    problem: Option<String>,
}

/// Checks measured sizes against the bounds and the allow-lists: every row over a bound or
/// listed, failing ones with their problem.
fn check(
    sizes: &BTreeMap<String, FileSize>,
    allowed_files: &[(&str, usize)],
    allowed_fns: &[(&str, &str, usize)],
) -> Vec<Row> {
    let mut measured: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (file, size) in sizes {
        measured.insert(file.clone(), (size.lines, FILE_MAX));
        for f in &size.fns {
            // Two functions with one name in a file (rare): the bigger one speaks for both.
            let key = format!("{file}: {}", f.name);
            let entry = measured.entry(key).or_insert((0, FN_MAX));
            entry.0 = entry.0.max(f.lines);
        }
    }
    let allowed: BTreeMap<String, usize> = allowed_files
        .iter()
        .map(|&(file, lines)| (file.to_string(), lines))
        .chain(
            allowed_fns
                .iter()
                .map(|&(file, name, lines)| (format!("{file}: {name}"), lines)),
        )
        .collect();
    let mut rows = Vec::new();
    for (what, &(lines, bound)) in &measured {
        let listed = allowed.get(what).copied();
        if lines <= bound && listed.is_none() {
            continue;
        }
        let problem = match listed {
            None => Some(format!("over {bound} and not in the allow-list")),
            Some(_) if lines <= bound => {
                Some(format!("now within {bound}: take it off the allow-list"))
            }
            Some(was) if lines > was => {
                Some(format!("grew from the {was} lines the allow-list gives it"))
            }
            Some(_) => None,
        };
        rows.push(Row {
            what: what.clone(),
            lines,
            bound,
            allowed: listed,
            problem,
        });
    }
    for (what, &was) in &allowed {
        if !measured.contains_key(what) {
            rows.push(Row {
                what: what.clone(),
                lines: 0,
                bound: if what.contains(": ") {
                    FN_MAX
                } else {
                    FILE_MAX
                },
                allowed: Some(was),
                problem: Some("no longer exists: take it off the allow-list".to_string()),
            });
        }
    }
    rows.sort_by(|a, b| {
        (b.lines * 1000 / b.bound)
            .cmp(&(a.lines * 1000 / a.bound))
            .then(a.what.cmp(&b.what))
    });
    rows
}

/// The rows as a table, worst first (by how far over its bound).
fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "  {:>6} {:>6} {:>7}  {:<60} {}\n",
        "lines", "bound", "listed", "file / function", "problem"
    );
    for row in rows {
        let listed = row
            .allowed
            .map_or_else(|| "-".to_string(), |n| n.to_string());
        let _ = writeln!(
            out,
            "  {:>6} {:>6} {:>7}  {:<60} {}",
            row.lines,
            row.bound,
            listed,
            row.what,
            row.problem.as_deref().unwrap_or("")
        );
    }
    out
}

#[test]
fn no_file_or_function_is_over_its_bound_unless_listed() {
    let sizes = measure_crate(&source_tree::real_files());
    let rows = check(&sizes, ALLOWED_FILES, ALLOWED_FNS);
    let failing: Vec<&Row> = rows.iter().filter(|r| r.problem.is_some()).collect();
    for row in rows.iter().filter(|r| r.problem.is_none()) {
        if row.allowed.is_some_and(|was| row.lines < was) {
            eprintln!(
                "note: {} is down to {} lines from the {} listed; the entry can say so",
                row.what,
                row.lines,
                row.allowed.unwrap_or(0)
            );
        }
    }
    assert!(
        failing.is_empty(),
        "sizes over the bounds of issue 21 (files {FILE_MAX}, functions {FN_MAX}; tests/sizes.rs):\n\
         {}\nevery file and function over its bound, worst first:\n{}",
        failing
            .iter()
            .map(|r| format!(
                "  {} ({} lines): {}\n",
                r.what,
                r.lines,
                r.problem.as_deref().unwrap_or("")
            ))
            .collect::<String>(),
        table(&rows)
    );
}

mod counter {
    use super::*;

    /// A synthetic file: a function of a known size, a method, a nested function, a trait's
    /// default body, and test code that is not counted.
    const SOURCE: &str = "\
//! A file.

/// Doc lines are not the function's.
#[inline]
pub fn six() -> u32 {
    let a = 1;
    let b = 2;
    fn inner() {}
    a + b
}

struct S;

impl S {
    pub(crate) async fn method(&self) {
        // one
    }
}

impl std::fmt::Display for S {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { Ok(()) }
}

trait T {
    fn required(&self);
    fn provided(&self) {
    }
}

#[tokio::test]
async fn top_level_test() {
}

#[cfg(test)]
fn helper() {
}

#[cfg(test)]
mod tests {
    #[test]
    fn long() {
        let _ = 1;
    }
}
";

    #[test]
    fn functions_are_measured_from_signature_to_brace_and_named_by_path() {
        let size = measure(SOURCE);
        let fns: Vec<(&str, usize, usize)> = size
            .fns
            .iter()
            .map(|f| (f.name.as_str(), f.line, f.lines))
            .collect();
        assert_eq!(
            fns,
            [
                ("six", 5, 6),
                ("six::inner", 8, 1),
                ("S::method", 15, 3),
                ("<S as Display>::fmt", 21, 1),
                ("T::provided", 26, 2),
            ]
        );
    }

    #[test]
    fn test_items_are_not_counted() {
        let size = measure(SOURCE);
        let total = SOURCE.lines().count();
        // `top_level_test` and `helper` (3 lines each with their attribute) and `mod tests`
        // (7 lines) are tests.
        assert_eq!(total, 44);
        assert_eq!(size.lines, total - 3 - 3 - 7);
    }

    #[test]
    fn a_test_module_in_its_own_file_is_left_out() {
        let files = vec![
            (
                "lib.rs".to_string(),
                "mod a;\n#[cfg(test)]\nmod testing;\n".to_string(),
            ),
            (
                "a/mod.rs".to_string(),
                "#[cfg(test)]\nmod t;\nfn f() {}\n".to_string(),
            ),
            ("a/t.rs".to_string(), "fn long() {}\n".to_string()),
            ("testing.rs".to_string(), "fn long() {}\n".to_string()),
            ("testing/more.rs".to_string(), "fn long() {}\n".to_string()),
        ];
        let sizes = measure_crate(&files);
        assert_eq!(
            sizes.keys().map(String::as_str).collect::<Vec<_>>(),
            ["a/mod.rs", "lib.rs"]
        );
        assert_eq!(sizes["lib.rs"].lines, 1);
        assert_eq!(sizes["a/mod.rs"].lines, 1);
    }

    #[test]
    fn the_allow_list_only_shrinks() {
        let long_fn = format!("fn long() {{\n{}}}\n", "    let _ = 1;\n".repeat(FN_MAX));
        let sizes = measure_crate(&[("x.rs".to_string(), long_fn)]);
        let problems = |fns: &[(&str, &str, usize)]| -> Vec<(String, bool)> {
            check(&sizes, &[], fns)
                .into_iter()
                .map(|r| (r.what, r.problem.is_some()))
                .collect()
        };
        let key = "x.rs: long".to_string();
        // FN_MAX + 2 lines: not listed, listed at its size, listed bigger (it shrank: fine),
        // listed smaller (it grew), and a listed function that is gone.
        assert_eq!(problems(&[]), [(key.clone(), true)]);
        assert_eq!(
            problems(&[("x.rs", "long", FN_MAX + 2)]),
            [(key.clone(), false)]
        );
        assert_eq!(
            problems(&[("x.rs", "long", FN_MAX + 5)]),
            [(key.clone(), false)]
        );
        assert_eq!(
            problems(&[("x.rs", "long", FN_MAX + 1)]),
            [(key.clone(), true)]
        );
        assert_eq!(
            problems(&[("x.rs", "long", FN_MAX + 2), ("x.rs", "gone", 90)]),
            [(key.clone(), false), ("x.rs: gone".to_string(), true)]
        );
        // Within the bound but still listed.
        let short = measure_crate(&[("x.rs".to_string(), "fn long() {}\n".to_string())]);
        let rows = check(&short, &[], &[("x.rs", "long", 90)]);
        assert_eq!(rows.len(), 1);
        assert!(rows[0].problem.as_deref().unwrap().contains("within"));
        // A file over its bound.
        let big = measure_crate(&[("big.rs".to_string(), "\n".repeat(FILE_MAX + 1))]);
        let rows = check(&big, &[], &[]);
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].what.as_str(), rows[0].lines),
            ("big.rs", FILE_MAX + 1)
        );
        assert!(
            check(&big, &[("big.rs", FILE_MAX + 1)], &[])[0]
                .problem
                .is_none()
        );
    }
}
