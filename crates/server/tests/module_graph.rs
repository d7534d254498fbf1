//! The server's modules depend on each other one way only (http → dispatch → method
//! modules → params/answers/error): a cycle makes every module in it a change to all the
//! others. This test reads `src/**/*.rs`, collects which module each path and `use`
//! refers to, and fails with the cycle it finds.
//!
//! How references count:
//! - a `use` of an item, and a path in code (also inside macro calls) that starts with
//!   `crate`, `self`, `super`, a child module or a name brought in by a `use`, are an edge
//!   to the module that defines the item; re-exports are followed to it;
//! - a `use` that only names a module, a `mod` declaration and a re-export (`pub use`)
//!   are not edges by themselves: they add a name, and what uses the name is counted;
//! - an inline module (`mod tests { .. }`) counts as part of its file's module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

type ModPath = Vec<String>;

/// What each module of a crate refers to.
#[derive(Debug, Default)]
struct Graph {
    /// (from, to) → one reference that makes the edge, for the failure message.
    edges: BTreeMap<(String, String), String>,
}

impl Graph {
    fn has(&self, from: &str, to: &str) -> bool {
        self.edges.contains_key(&(from.to_owned(), to.to_owned()))
    }

    /// Each group of modules that reach each other, with one cycle through it.
    fn cycles(&self) -> Vec<Cycle> {
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

    fn describe(&self, cycle: &Cycle) -> String {
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
struct Cycle {
    members: BTreeSet<String>,
    path: Vec<String>,
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

/// One `use` leaf: the name it brings into scope (none for a glob or `_`) and its path.
#[derive(Debug, Clone)]
struct UseLeaf {
    name: Option<String>,
    path: Vec<String>,
}

fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<UseLeaf>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let ident = n.ident.to_string();
            let (path, name) = if ident == "self" {
                (prefix.clone(), prefix.last().cloned())
            } else {
                let mut path = prefix.clone();
                path.push(ident.clone());
                (path, Some(ident))
            };
            out.push(UseLeaf { name, path });
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            let ident = r.ident.to_string();
            if ident != "self" {
                path.push(ident);
            }
            let name = r.rename.to_string();
            out.push(UseLeaf {
                name: (name != "_").then_some(name),
                path,
            });
        }
        syn::UseTree::Glob(_) => out.push(UseLeaf {
            name: None,
            path: prefix.clone(),
        }),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_leaves(tree, prefix, out);
            }
        }
    }
}

/// A logical module (a file's, or an inline one inside it).
#[derive(Debug, Default)]
struct Scope {
    children: BTreeSet<String>,
    /// Name → the path its `use` wrote.
    uses: BTreeMap<String, Vec<String>>,
}

struct Crate {
    /// Modules backed by a file, by path from the crate root (the root is `[]`).
    files: BTreeSet<ModPath>,
    scopes: BTreeMap<ModPath, Scope>,
}

impl Crate {
    /// The absolute path a path written in `scope` names, or `None` when it leaves the
    /// crate (std, dependencies) or names a local binding.
    fn resolve(&self, scope: &[String], path: &[String], depth: usize) -> Option<ModPath> {
        let (first, rest) = path.split_first()?;
        if depth > 16 {
            return None;
        }
        let mut base: ModPath = match first.as_str() {
            "crate" => Vec::new(),
            "self" => scope.to_vec(),
            "super" => {
                let mut up = scope.to_vec();
                up.pop()?;
                let mut rest = rest;
                while rest.first().is_some_and(|s| s == "super") {
                    up.pop()?;
                    rest = &rest[1..];
                }
                up.extend(rest.iter().cloned());
                return Some(up);
            }
            name if self
                .scopes
                .get(scope)
                .is_some_and(|s| s.children.contains(name)) =>
            {
                let mut p = scope.to_vec();
                p.push(name.to_owned());
                p
            }
            name => {
                let written = self.scopes.get(scope)?.uses.get(name)?;
                let mut p = self.resolve(scope, written, depth + 1)?;
                p.extend(rest.iter().cloned());
                return Some(p);
            }
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file module that defines what `abs` names, following re-exports; `Err` with
    /// the module when `abs` names a module itself.
    fn definer(&self, abs: &[String], depth: usize) -> Option<Result<ModPath, ModPath>> {
        let file = (0..=abs.len())
            .rev()
            .map(|n| abs[..n].to_vec())
            .find(|p| self.files.contains(p))?;
        let rest = &abs[file.len()..];
        let Some(first) = rest.first() else {
            return Some(Err(file));
        };
        let scope = self.scopes.get(&file)?;
        if scope.children.contains(first) {
            // An inline module: part of the file's module.
            return Some(Ok(file));
        }
        if depth < 16
            && let Some(written) = scope.uses.get(first)
            && let Some(mut target) = self.resolve(&file, written, 0)
        {
            target.extend(rest[1..].iter().cloned());
            return self.definer(&target, depth + 1);
        }
        Some(Ok(file))
    }
}

fn name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_owned()
    } else {
        path.join("::")
    }
}

/// Collects each logical module's children and `use` names.
struct Collect<'c> {
    scopes: &'c mut BTreeMap<ModPath, Scope>,
    at: ModPath,
}

impl<'ast> Visit<'ast> for Collect<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let child = m.ident.to_string();
        self.scopes
            .entry(self.at.clone())
            .or_default()
            .children
            .insert(child.clone());
        if m.content.is_some() {
            self.at.push(child);
            self.scopes.entry(self.at.clone()).or_default();
            syn::visit::visit_item_mod(self, m);
            self.at.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
        let scope = self.scopes.entry(self.at.clone()).or_default();
        for leaf in leaves {
            if let Some(name) = leaf.name {
                scope.uses.insert(name, leaf.path);
            }
        }
    }
}

/// Records the edges of one file.
struct Edges<'c> {
    krate: &'c Crate,
    file: ModPath,
    at: ModPath,
    source: String,
    graph: &'c mut Graph,
}

impl Edges<'_> {
    fn reference(&mut self, path: &[String], count_modules: bool) {
        let Some(abs) = self.krate.resolve(&self.at, path, 0) else {
            return;
        };
        let to = match self.krate.definer(&abs, 0) {
            Some(Ok(module)) => module,
            Some(Err(module)) if count_modules => module,
            _ => return,
        };
        if to != self.file {
            self.graph
                .edges
                .entry((name(&self.file), name(&to)))
                .or_insert_with(|| format!("{} refers to {}", self.source, path.join("::")));
        }
    }

    /// Paths inside macro calls are tokens to syn, so they are read as `a::b::c` runs.
    fn tokens(&mut self, tokens: TokenStream) {
        let mut run: Vec<String> = Vec::new();
        let mut colons = 0;
        for tree in tokens {
            match tree {
                TokenTree::Ident(ident) if run.is_empty() || colons == 2 => {
                    run.push(ident.to_string());
                    colons = 0;
                }
                TokenTree::Punct(p) if p.as_char() == ':' && !run.is_empty() && colons < 2 => {
                    colons += 1;
                }
                other => {
                    self.token_run(&mut run);
                    colons = 0;
                    match other {
                        TokenTree::Group(g) => self.tokens(g.stream()),
                        TokenTree::Ident(ident) => run.push(ident.to_string()),
                        _ => {}
                    }
                }
            }
        }
        self.token_run(&mut run);
    }

    fn token_run(&mut self, run: &mut Vec<String>) {
        if !run.is_empty() {
            let path = std::mem::take(run);
            self.reference(&path, false);
        }
    }
}

impl<'ast> Visit<'ast> for Edges<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.at.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.at.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        // A re-export adds a name; whoever uses the name depends on its definer.
        if !matches!(u.vis, syn::Visibility::Inherited) {
            return;
        }
        let mut leaves = Vec::new();
        use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
        for leaf in leaves {
            // A glob depends on the module it empties into this scope.
            self.reference(&leaf.path, leaf.name.is_none());
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.reference(&segments, false);
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// Module path of a file under `src/`: `lib.rs` → root, `a/mod.rs` and `a.rs` → `a`.
fn module_of(file: &str) -> ModPath {
    let trimmed = file.trim_end_matches(".rs");
    let mut parts: ModPath = trimmed.split('/').map(str::to_owned).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The module graph of a crate given as (path under `src/`, source) pairs.
fn graph(files: &[(String, String)]) -> Graph {
    let parsed: Vec<(String, ModPath, syn::File)> = files
        .iter()
        .map(|(path, source)| {
            let ast = syn::parse_file(source).unwrap_or_else(|e| panic!("{path}: {e}"));
            (path.clone(), module_of(path), ast)
        })
        .collect();
    let mut scopes = BTreeMap::new();
    for (_, module, ast) in &parsed {
        let mut collect = Collect {
            scopes: &mut scopes,
            at: module.clone(),
        };
        collect.scopes.entry(module.clone()).or_default();
        collect.visit_file(ast);
    }
    let krate = Crate {
        files: parsed.iter().map(|(_, m, _)| m.clone()).collect(),
        scopes,
    };
    let mut graph = Graph::default();
    for (path, module, ast) in &parsed {
        let mut edges = Edges {
            krate: &krate,
            file: module.clone(),
            at: module.clone(),
            source: format!("src/{path}"),
            graph: &mut graph,
        };
        edges.visit_file(ast);
    }
    graph
}

fn read_sources(dir: &Path, under: &str, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 file name")
            .to_owned();
        let relative = if under.is_empty() {
            file_name.clone()
        } else {
            format!("{under}/{file_name}")
        };
        if path.is_dir() {
            read_sources(&path, &relative, out);
        } else if file_name.ends_with(".rs") {
            let source = std::fs::read_to_string(&path).expect("a readable source file");
            out.push((relative, source));
        }
    }
}

fn server_graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    read_sources(&src, "", &mut files);
    graph(&files)
}

#[test]
fn server_modules_have_no_import_cycle() {
    let graph = server_graph();
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "the server's modules import each other in cycles:\n{}",
        cycles
            .iter()
            .map(|c| graph.describe(c))
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

#[test]
fn server_dependencies_point_the_documented_way() {
    let graph = server_graph();
    for (from, to) in [
        ("http", "dispatch"),
        ("dispatch", "tools_call"),
        ("dispatch", "tasks_methods"),
        ("dispatch", "push::listen"),
        ("tools_call", "params"),
        ("tools_call", "answers"),
        ("tasks_methods", "answers"),
        ("answers", "params"),
        ("params", "error"),
        // Through the root's re-export of `push::HubConfig`.
        ("config", "push::hub"),
    ] {
        assert!(
            graph.has(from, to),
            "expected {from} → {to}; the graph has {:#?}",
            graph.edges.keys().collect::<Vec<_>>()
        );
    }
}

fn sources(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, s)| ((*p).to_owned(), (*s).to_owned()))
        .collect()
}

#[test]
fn finds_a_cycle_through_a_use() {
    let graph = graph(&sources(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::f; pub fn g() { f() }"),
        ("b.rs", "pub fn f() { crate::c::h() }"),
        ("c.rs", "use super::a; pub fn h() { a::g() }"),
    ]));
    let cycles = graph.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    let cycle = &cycles[0];
    assert_eq!(cycle.path.len(), 4, "{cycle:?}");
    assert_eq!(cycle.path.first(), cycle.path.last());
    let on_cycle: BTreeSet<_> = cycle.path.iter().map(String::as_str).collect();
    assert_eq!(on_cycle, BTreeSet::from(["a", "b", "c"]));
    assert_eq!(cycle.members.len(), 3);
    assert!(graph.describe(cycle).contains("src/c.rs refers to a::g"));
}

#[test]
fn finds_a_cycle_through_a_re_export_and_a_macro() {
    let graph = graph(&sources(&[
        ("lib.rs", "mod a; mod b; pub use b::Thing;"),
        ("a.rs", "pub fn g() -> crate::Thing { crate::Thing }"),
        (
            "b.rs",
            "pub struct Thing; fn f() { println!(\"{}\", crate::a::g()) }",
        ),
    ]));
    assert!(graph.has("a", "b"), "{graph:?}");
    assert!(graph.has("b", "a"), "{graph:?}");
    assert_eq!(graph.cycles().len(), 1, "{graph:?}");
}

#[test]
fn reports_every_cycle() {
    let graph = graph(&sources(&[
        ("lib.rs", "mod a; mod b; mod c; mod d;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        ("b.rs", "use crate::a::A; pub struct B;"),
        ("c.rs", "use crate::d::D; use crate::a::A; pub struct C;"),
        ("d.rs", "pub struct D(crate::c::C);"),
    ]));
    let mut on_cycles: Vec<BTreeSet<String>> = graph
        .cycles()
        .into_iter()
        .map(|c| {
            assert_eq!(c.path.iter().cloned().collect::<BTreeSet<_>>(), c.members);
            c.members
        })
        .collect();
    on_cycles.sort();
    let expected: Vec<BTreeSet<String>> = vec![
        ["a", "b"].map(String::from).into(),
        ["c", "d"].map(String::from).into(),
    ];
    assert_eq!(on_cycles, expected);
}

#[test]
fn modules_nesting_and_re_exports_alone_are_no_cycle() {
    let graph = graph(&sources(&[
        (
            "lib.rs",
            "mod a; mod push; pub use a::A; pub struct State(push::hub::Hub);",
        ),
        ("a.rs", "use crate::State; pub struct A; fn f(_: State) {}"),
        ("push/mod.rs", "pub mod hub; pub use hub::Hub;"),
        (
            "push/hub.rs",
            "pub struct Hub; #[cfg(test)] mod tests { use super::*; }",
        ),
    ]));
    assert!(graph.has("a", "crate"), "{graph:?}");
    assert!(graph.has("crate", "push::hub"), "{graph:?}");
    assert_eq!(graph.cycles(), Vec::new(), "{graph:?}");
}
