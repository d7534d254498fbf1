//! A crate's modules depend on each other one way only: a cycle makes every module in it
//! a change to all the others. This crate reads a crate's sources from its root file
//! (following `mod` declarations, `#[path]` included), collects which module each path
//! and `use` refers to, and finds the cycles; `tests/workspace.rs` runs it on every
//! target of the workspace (`tests/checks/no-cycles` runs that test).
//!
//! How references count:
//! - a `use` of an item, and a path in code (also inside macro calls) that starts with
//!   `crate`, `self`, `super`, a child module or a name brought in by a `use`, are an edge
//!   to the module that defines the item; re-exports are followed to it;
//! - a `use` that only names a module, a `mod` declaration and a re-export (`pub use`)
//!   are not edges by themselves: they add a name, and what uses the name is counted;
//! - an inline module (`mod tests { .. }`) counts as part of its file's module.

mod resolve;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

use crate::resolve::{Collect, Crate, Edges};

/// A module's path from the crate root (the root is `[]`).
pub type ModPath = Vec<String>;

/// What each module of a crate refers to.
#[derive(Debug, Default)]
pub struct Graph {
    /// (from, to) → one reference that makes the edge, for the failure message.
    pub(crate) edges: BTreeMap<(String, String), String>,
}

impl Graph {
    pub fn has(&self, from: &str, to: &str) -> bool {
        self.edges.contains_key(&(from.to_owned(), to.to_owned()))
    }

    /// The graph less the edges from a module to one of its ancestors: a module that
    /// uses what its parent or the crate root defines (`super::Error`, `crate::Shared`)
    /// uses what holds it, which is no cycle. A parent's use of its children, and every
    /// reference between modules neither of which holds the other, still count.
    pub fn ignoring_ancestors(&self) -> Graph {
        let edges = self
            .edges
            .iter()
            .filter(|((from, to), _)| {
                let (from, to) = (split(from), split(to));
                !from.starts_with(&to)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Graph { edges }
    }

    /// Every edge, as (from, to).
    pub fn edges(&self) -> impl Iterator<Item = (&str, &str)> {
        self.edges.keys().map(|(a, b)| (a.as_str(), b.as_str()))
    }

    /// Each group of modules that reach each other, with one cycle through it.
    pub fn cycles(&self) -> Vec<Cycle> {
        let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (from, to) in self.edges.keys() {
            next.entry(from).or_default().push(to);
        }
        let reach = |from: &str| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![from];
            while let Some(n) = stack.pop() {
                for to in next.get(n).into_iter().flatten() {
                    if seen.insert(*to) {
                        stack.push(to);
                    }
                }
            }
            seen
        };
        let reached: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|n| (*n, reach(n))).collect();
        let mut grouped = BTreeSet::new();
        let mut cycles = Vec::new();
        for (node, from_node) in &reached {
            if grouped.contains(node) || !from_node.contains(node) {
                continue;
            }
            let group: BTreeSet<&str> = from_node
                .iter()
                .copied()
                .filter(|other| reached.get(other).is_some_and(|r| r.contains(node)))
                .collect();
            grouped.extend(group.iter().copied());
            let within: BTreeMap<&str, Vec<&str>> = group
                .iter()
                .map(|n| {
                    let tos = next[n].iter().copied().filter(|t| group.contains(t));
                    (*n, tos.collect())
                })
                .collect();
            if let Some(path) = dfs(node, &within, &mut Vec::new(), &mut BTreeSet::new()) {
                let members = group.iter().map(|m| (*m).to_owned()).collect();
                cycles.push(Cycle { members, path });
            }
        }
        cycles
    }

    pub fn describe(&self, cycle: &Cycle) -> String {
        let members: Vec<&str> = cycle.members.iter().map(String::as_str).collect();
        let steps = cycle
            .path
            .windows(2)
            .map(|w| {
                let why = &self.edges[&(w[0].clone(), w[1].clone())];
                format!("  {} → {}   ({why})", w[0], w[1])
            })
            .collect::<Vec<_>>()
            .join("\n");
        format!(
            "{} reach each other, for example:\n{steps}",
            members.join(", ")
        )
    }
}

/// Modules that reach each other, and one cycle through them (the modules on it, the
/// first repeated at the end).
#[derive(Debug, PartialEq, Eq)]
pub struct Cycle {
    pub members: BTreeSet<String>,
    pub path: Vec<String>,
}

fn dfs<'a>(
    node: &'a str,
    next: &BTreeMap<&'a str, Vec<&'a str>>,
    path: &mut Vec<&'a str>,
    done: &mut BTreeSet<&'a str>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|n| *n == node) {
        let mut cycle: Vec<String> = path[at..].iter().map(|n| (*n).to_owned()).collect();
        cycle.push(node.to_owned());
        return Some(cycle);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node);
    for to in next.get(node).into_iter().flatten() {
        if let Some(cycle) = dfs(to, next, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(node);
    None
}

/// A module's name split back into its path (the root is `[]`).
fn split(name: &str) -> Vec<&str> {
    if name == "crate" {
        Vec::new()
    } else {
        name.split("::").collect()
    }
}

/// A module's name as the messages write it (`crate` for the root).
pub(crate) fn name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_owned()
    } else {
        path.join("::")
    }
}

/// One file of a crate: the module it is, the path shown in messages, and its syntax.
pub struct Source {
    pub module: ModPath,
    pub shown: String,
    ast: syn::File,
}

impl Source {
    pub fn parse(module: ModPath, shown: String, text: &str) -> Result<Self, String> {
        let ast = syn::parse_file(text).map_err(|e| format!("{shown}: {e}"))?;
        Ok(Self { module, shown, ast })
    }
}

/// Every file of the crate whose root is `root`, found as rustc finds them: `mod x;` in
/// a crate root or a `mod.rs` is `x.rs` or `x/mod.rs` beside it, in `a.rs` it is under
/// `a/`; `#[path = ".."]` is relative to the declaring file's directory. `shown` paths
/// are relative to `base`.
pub fn read_crate(root: &Path, base: &Path) -> Result<Vec<Source>, String> {
    let mut out = Vec::new();
    let dir = root.parent().map(Path::to_path_buf).unwrap_or_default();
    read_file(root, Vec::new(), dir, base, &mut out)?;
    Ok(out)
}

fn read_file(
    file: &Path,
    module: ModPath,
    children_dir: PathBuf,
    base: &Path,
    out: &mut Vec<Source>,
) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let shown = file
        .strip_prefix(base)
        .unwrap_or(file)
        .display()
        .to_string();
    let source = Source::parse(module.clone(), shown, &text)?;
    let file_dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut found = Vec::new();
    declared_files(
        &source.ast.items,
        &module,
        &children_dir,
        &file_dir,
        &mut found,
    );
    out.push(source);
    for (child, path, dir) in found {
        read_file(&path, child, dir, base, out)?;
    }
    Ok(())
}

/// The file modules `items` declare: (module path, file, where its own children are).
fn declared_files(
    items: &[syn::Item],
    module: &ModPath,
    children_dir: &Path,
    file_dir: &Path,
    found: &mut Vec<(ModPath, PathBuf, PathBuf)>,
) {
    for item in items {
        let syn::Item::Mod(m) = item else { continue };
        let ident = m.ident.to_string();
        let mut child = module.clone();
        child.push(ident.clone());
        if let Some((_, items)) = &m.content {
            declared_files(items, &child, &children_dir.join(&ident), file_dir, found);
            continue;
        }
        let explicit = m.attrs.iter().find_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        });
        let (path, dir) = match explicit {
            Some(rel) => {
                let path = file_dir.join(rel);
                let dir = owned_dir(&path);
                (path, dir)
            }
            None => {
                let flat = children_dir.join(format!("{ident}.rs"));
                if flat.is_file() {
                    (flat, children_dir.join(&ident))
                } else {
                    let nested = children_dir.join(&ident).join("mod.rs");
                    (nested, children_dir.join(&ident))
                }
            }
        };
        found.push((child, path, dir));
    }
}

/// Where the children of the module in `file` live: beside a `mod.rs`, else under a
/// directory named as the file.
fn owned_dir(file: &Path) -> PathBuf {
    let parent = file.parent().map(Path::to_path_buf).unwrap_or_default();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod") | None => parent,
        Some(stem) => parent.join(stem),
    }
}

/// The module graph of one crate.
pub fn graph(sources: &[Source]) -> Graph {
    let mut scopes = BTreeMap::new();
    for source in sources {
        let mut collect = Collect {
            scopes: &mut scopes,
            at: source.module.clone(),
        };
        collect.scopes.entry(source.module.clone()).or_default();
        collect.visit_file(&source.ast);
    }
    let krate = Crate {
        files: sources.iter().map(|s| s.module.clone()).collect(),
        scopes,
    };
    let mut graph = Graph::default();
    for source in sources {
        let mut edges = Edges {
            krate: &krate,
            file: source.module.clone(),
            at: source.module.clone(),
            source: source.shown.clone(),
            graph: &mut graph,
        };
        edges.visit_file(&source.ast);
    }
    graph
}
