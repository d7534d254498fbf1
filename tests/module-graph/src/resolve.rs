//! What each path in a crate's code names: the `use` names and child modules of every
//! module, and the edges from the module a path is written in to the file module that
//! defines what it names (re-exports followed).

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

use crate::{Graph, ModPath, name};

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
pub(crate) struct Scope {
    children: BTreeSet<String>,
    /// Name → the path its `use` wrote.
    uses: BTreeMap<String, Vec<String>>,
}

pub(crate) struct Crate {
    /// Modules backed by a file, by path from the crate root (the root is `[]`).
    pub(crate) files: BTreeSet<ModPath>,
    pub(crate) scopes: BTreeMap<ModPath, Scope>,
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

/// Collects each logical module's children and `use` names.
pub(crate) struct Collect<'c> {
    pub(crate) scopes: &'c mut BTreeMap<ModPath, Scope>,
    pub(crate) at: ModPath,
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
pub(crate) struct Edges<'c> {
    pub(crate) krate: &'c Crate,
    pub(crate) file: ModPath,
    pub(crate) at: ModPath,
    pub(crate) source: String,
    pub(crate) graph: &'c mut Graph,
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
