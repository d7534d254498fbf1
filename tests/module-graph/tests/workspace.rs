//! Every crate of the workspace (each library, binary, test, example and build script of
//! every package, found through `cargo metadata`) has modules that depend on each other
//! one way only, a module's use of what its ancestors define aside
//! ([`Graph::ignoring_ancestors`]); the server's, even counting those (its root names
//! only leaf modules), and they point the way ARCHITECTURE.md draws them.

use std::path::{Path, PathBuf};

use mcp_tasks_module_graph::{Graph, graph, read_crate};
use serde_json::Value;

/// Cycles that exist today and are being removed elsewhere, each with the crate it is in
/// and exactly the modules that reach each other. Nothing else may be added here: a new
/// cycle is fixed, not allowed. The test fails when an allowed cycle is gone, so that its
/// entry goes too.
const KNOWN: &[(&str, &[&str])] = &[];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

/// (name shown, root file) of every target of every workspace package.
fn targets(root: &Path) -> Vec<(String, PathBuf)> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let mut found = Vec::new();
    for package in metadata["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("a package name");
        for target in package["targets"].as_array().expect("targets") {
            let kind = target["kind"][0].as_str().expect("a target kind");
            let target_name = target["name"].as_str().expect("a target name");
            let shown = match kind {
                "lib" => format!("{name} (lib)"),
                _ => format!("{name} ({kind} {target_name})"),
            };
            let src = PathBuf::from(target["src_path"].as_str().expect("a src_path"));
            found.push((shown, src));
        }
    }
    found.sort();
    found
}

fn crate_graph(root: &Path, file: &Path) -> Graph {
    let sources = read_crate(file, root).unwrap_or_else(|e| panic!("{e}"));
    graph(&sources)
}

#[test]
fn no_crate_has_modules_importing_each_other_in_a_cycle() {
    let root = workspace_root();
    let targets = targets(&root);
    assert!(targets.len() > 20, "too few targets found: {targets:?}");
    let mut found = Vec::new();
    let mut allowed_seen = Vec::new();
    for (shown, file) in &targets {
        let graph = crate_graph(&root, file).ignoring_ancestors();
        for cycle in graph.cycles() {
            let known = KNOWN.iter().any(|(krate, members)| {
                krate == shown && cycle.members.iter().eq(members.iter().copied())
            });
            if known {
                eprintln!(
                    "known cycle, allowed until it is fixed (KNOWN in {}):\n{shown}: {}",
                    file!(),
                    graph.describe(&cycle)
                );
                allowed_seen.push(shown.clone());
            } else {
                found.push(format!("{shown}: {}", graph.describe(&cycle)));
            }
        }
    }
    assert!(
        found.is_empty(),
        "modules import each other in cycles:\n\n{}",
        found.join("\n\n")
    );
    for (krate, members) in KNOWN {
        assert!(
            allowed_seen.iter().any(|s| s == krate),
            "the known cycle {members:?} of {krate} is gone: remove its entry from KNOWN"
        );
    }
}

#[test]
fn server_modules_have_no_import_cycle_even_through_the_root() {
    let root = workspace_root();
    let graph = crate_graph(&root, &root.join("crates/server/src/lib.rs"));
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
    let root = workspace_root();
    let graph = crate_graph(&root, &root.join("crates/server/src/lib.rs"));
    for (from, to) in [
        // The MCP endpoint's handlers, under `http`.
        ("http::mcp", "dispatch"),
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
            graph.edges().collect::<Vec<_>>()
        );
    }
}
