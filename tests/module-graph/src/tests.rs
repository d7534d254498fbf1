use std::collections::BTreeSet;

use crate::{ModPath, Source, graph, read_crate};

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

fn sources(files: &[(&str, &str)]) -> Vec<Source> {
    files
        .iter()
        .map(|(p, s)| Source::parse(module_of(p), format!("src/{p}"), s).expect("parses"))
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

/// A directory of files for one test, removed when dropped.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new(files: &[(&str, &str)]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "module-graph-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, text).expect("write");
        }
        Self(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn reads_a_crate_from_its_root_as_rustc_does() {
    let dir = Dir::new(&[
        // A library and a binary in one directory are two crates.
        (
            "src/lib.rs",
            "mod a; mod b { mod deep; } #[path = \"../shared/x.rs\"] mod x;",
        ),
        ("src/main.rs", "mod only_the_binary;"),
        ("src/only_the_binary.rs", ""),
        ("src/a.rs", "mod inner;"),
        ("src/a/inner.rs", ""),
        ("src/b/deep.rs", ""),
        ("shared/x.rs", "mod y;"),
        ("shared/x/y.rs", ""),
    ]);
    let modules = |root: &str| -> BTreeSet<String> {
        read_crate(&dir.0.join(root), &dir.0)
            .expect("reads")
            .into_iter()
            .map(|s| format!("{} {}", crate::name(&s.module), s.shown))
            .collect()
    };
    assert_eq!(
        modules("src/lib.rs"),
        BTreeSet::from(
            [
                "crate src/lib.rs",
                "a src/a.rs",
                "a::inner src/a/inner.rs",
                "b::deep src/b/deep.rs",
                "x src/../shared/x.rs",
                "x::y src/../shared/x/y.rs",
            ]
            .map(String::from)
        )
    );
    assert_eq!(
        modules("src/main.rs"),
        BTreeSet::from(
            [
                "crate src/main.rs",
                "only_the_binary src/only_the_binary.rs"
            ]
            .map(String::from)
        )
    );
}

#[test]
fn a_module_using_its_ancestors_is_no_cycle_but_one_through_a_cousin_is() {
    let graph = graph(&sources(&[
        ("lib.rs", "mod app; mod cli; pub struct Shared;"),
        ("app.rs", "pub struct App; fn run() { crate::cli::main() }"),
        (
            "cli/mod.rs",
            "mod args; pub fn main() { args::parse(); let _ = crate::Shared; }",
        ),
        (
            "cli/args.rs",
            "use super::main; pub fn parse(_: crate::app::App) { let _ = crate::Shared; }",
        ),
    ]));
    // Strictly, `cli` and its parent reach each other through `crate::Shared`.
    assert!(graph.has("cli", "crate"), "{graph:?}");
    let loose = graph.ignoring_ancestors();
    assert!(!loose.has("cli", "crate"), "{loose:?}");
    assert!(!loose.has("cli::args", "cli"), "{loose:?}");
    assert!(loose.has("cli", "cli::args"), "{loose:?}");
    // app → cli → cli::args → app is a cycle whatever holds what.
    let cycles = loose.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    let members: Vec<&str> = cycles[0].members.iter().map(String::as_str).collect();
    assert_eq!(members, ["app", "cli", "cli::args"]);
}
