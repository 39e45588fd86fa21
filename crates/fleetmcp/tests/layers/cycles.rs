//! [`Rule::Up`](super::Rule::Up) keeps imports from running up the layers, but two modules of
//! one layer, or two files of one folder, can still import each other: a circle, where neither
//! can be read, changed or moved without the other. This rule forbids them: **among the
//! children of one module (its files and folders, a folder counting as everything in it), the
//! imports form no circle**. The crate root's children are the top-level modules, so two
//! top-level modules never import each other, whatever their layers.
//!
//! An import from file `a` into file `b` is placed at the module where their paths part: at
//! `crate::fleet`, `fleet/relay/send.rs` naming `crate::fleet::heartbeat::Beat` is the child
//! `relay` importing the child `heartbeat`. A file and the files of its own folder (a `mod.rs`
//! and its children, `context.rs` and `context/`) part nowhere: a child using `super::Type`
//! and its parent using the child is how a module is built, not a circle.
//!
//! A path reaches the deepest module that is a file and that it names (`crate::fleet::relay::X`
//! is `fleet/relay/mod.rs` or `fleet/relay.rs`, whatever `X` is); a re-export is not followed,
//! except a name the crate root imports (`crate::Server`), as for the other rules. Every path
//! the layer rules check counts, except in test code (a `#[cfg(test)] mod`, inline or a file of
//! its own): a unit test may drive its file together with a sibling (`relay/pool.rs`'s tests
//! read an `Answer` of `relay/answer.rs` over a pooled connection), which tests the two
//! together and makes neither depend on the other.

use std::collections::{BTreeMap, BTreeSet};

use super::source_tree;

/// A path, written in some file, that reaches this crate: from the root, with a name the crate
/// root imports replaced by what it names.
#[derive(Debug)]
pub(super) struct Reach {
    pub(super) path: Vec<String>,
    pub(super) line: usize,
    /// As written.
    pub(super) written: String,
}

/// One import that makes a step of a circle.
#[derive(Debug, Clone)]
pub(super) struct Step {
    pub(super) from_file: String,
    pub(super) line: usize,
    pub(super) written: String,
    pub(super) to_file: String,
}

/// A circle among the children of one module.
#[derive(Debug)]
pub(super) struct Cycle {
    /// The module whose children import each other (empty: the crate root).
    pub(super) parent: Vec<String>,
    /// The children in the circle, sorted.
    pub(super) members: Vec<String>,
    /// For each child importing another of the circle, the first such import found: (importer,
    /// imported, the import).
    pub(super) steps: Vec<(String, String, Step)>,
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parent = if self.parent.is_empty() {
            "the crate root".to_string()
        } else {
            format!("crate::{}", self.parent.join("::"))
        };
        write!(
            f,
            "in {parent}, {} import each other in a circle:",
            self.members.join(", ")
        )?;
        for (from, to, s) in &self.steps {
            write!(
                f,
                "\n    {from} -> {to}: {}:{}: `{}` ({})",
                s.from_file, s.line, s.written, s.to_file
            )?;
        }
        Ok(())
    }
}

/// Whether attributes say `#[cfg(test)]`.
pub(super) fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

/// The modules declared `#[cfg(test)] mod x;` (a file of their own), from the crate root.
pub(super) fn test_modules(files: &[(&str, syn::File)]) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    for (name, file) in files {
        let here = source_tree::module_of(name);
        for item in &file.items {
            if let syn::Item::Mod(m) = item
                && m.content.is_none()
                && is_cfg_test(&m.attrs)
            {
                found.insert([here.as_slice(), &[m.ident.to_string()]].concat());
            }
        }
    }
    found
}

/// Whether `module` is one of `tests` or inside one.
pub(super) fn is_test_module(tests: &BTreeSet<Vec<String>>, module: &[String]) -> bool {
    (1..=module.len()).any(|n| tests.contains(&module[..n]))
}

/// The circles in a crate, given each file (under `src/`, with `/`) with the paths into the
/// crate written in it; ordered by parent module, then by members.
pub(super) fn find(files: &[(String, Vec<Reach>)]) -> Vec<Cycle> {
    let modules: BTreeMap<Vec<String>, &str> = files
        .iter()
        .map(|(name, _)| (source_tree::module_of(name), name.as_str()))
        .collect();
    // parent module -> (importing child, imported child) -> the first import found.
    let mut edges: BTreeMap<Vec<String>, BTreeMap<(String, String), Step>> = BTreeMap::new();
    for (file, reaches) in files {
        let from = source_tree::module_of(file);
        for reach in reaches {
            let Some((to, to_file)) = (0..=reach.path.len())
                .rev()
                .find_map(|n| modules.get_key_value(&reach.path[..n]))
            else {
                continue;
            };
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            // One module is the other or holds it: the parent and its own children.
            if common == from.len() || common == to.len() {
                continue;
            }
            edges
                .entry(from[..common].to_vec())
                .or_default()
                .entry((from[common].clone(), to[common].clone()))
                .or_insert_with(|| Step {
                    from_file: file.clone(),
                    line: reach.line,
                    written: reach.written.clone(),
                    to_file: to_file.to_string(),
                });
        }
    }
    let mut cycles = Vec::new();
    for (parent, steps) in edges {
        for members in circles(steps.keys()) {
            let steps = steps
                .iter()
                .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                .map(|((a, b), s)| (a.clone(), b.clone(), s.clone()))
                .collect();
            cycles.push(Cycle {
                parent: parent.clone(),
                members: members.into_iter().collect(),
                steps,
            });
        }
    }
    cycles
}

/// The strongly connected sets of more than one node of a small directed graph given by its
/// edges: two nodes are in one when each reaches the other.
fn circles<'a>(edges: impl Iterator<Item = &'a (String, String)>) -> Vec<BTreeSet<String>> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().insert(b);
    }
    let reach = |start: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start];
        while let Some(n) = todo.pop() {
            for &m in next.get(n).into_iter().flatten() {
                if seen.insert(m) {
                    todo.push(m);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|&n| (n, reach(n))).collect();
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for (&n, from_n) in &reaches {
        if placed.contains(n) || !from_n.contains(n) {
            continue;
        }
        let set: BTreeSet<String> = from_n
            .iter()
            .filter(|m| reaches.get(*m).is_some_and(|r| r.contains(n)))
            .map(|m| m.to_string())
            .collect();
        placed.extend(set.iter().cloned());
        out.push(set);
    }
    out
}
