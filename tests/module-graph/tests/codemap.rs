//! ARCHITECTURE.md's *Code map* names every module file of every crate
//! (`crates/<crate>/src/**/*.rs`) under that crate's heading, so the map cannot quietly
//! fall behind the code: a new module fails here until it has its line.
//!
//! How a file is named, within its crate's part of the map (from its `**crate**` heading
//! to the next one), in one bullet (a `- ` line and its continuation; a part without
//! bullets is one):
//! - by its path under `src/` in backticks: `` `push/hub.rs` ``;
//! - a directory's `mod.rs` also by the directory: `` `auth/` ``;
//! - by a shorter ending of its path (`` `prompt.rs` ``, `` `client/prompt.rs` ``) when no
//!   other file of the crate ends the same way, or when the bullet also names its
//!   directory (`` `console/` ``, or a path that starts with it): the group form
//!   "`` `console/` ``: `` `list.rs` ``, `` `health.rs` ``".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

/// Every `.rs` file below `dir`, as paths relative to `base` with `/` separators.
fn rust_files(base: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(base, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(base).expect("below its base");
            let parts: Vec<_> = rel.iter().map(|p| p.to_string_lossy()).collect();
            out.push(parts.join("/"));
        }
    }
}

/// The crates' module files: crate directory name → paths under its `src/`.
fn crate_modules(root: &Path) -> BTreeMap<String, Vec<String>> {
    let mut crates = BTreeMap::new();
    for entry in std::fs::read_dir(root.join("crates")).expect("reading crates/") {
        let dir = entry.expect("a directory entry").path();
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&src, &src, &mut files);
        let name = dir
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        crates.insert(name, files);
    }
    crates
}

/// The *Code map* section split by crate heading (`**name**` at the start of a line),
/// each part split into bullets.
fn code_map(architecture: &str) -> BTreeMap<String, Vec<String>> {
    let section = architecture
        .split("\n## ")
        .find(|s| s.starts_with("Code map"))
        .expect("ARCHITECTURE.md has a `## Code map` section");
    let mut parts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("**")
            && let Some(end) = rest.find("**")
        {
            let name = rest[..end].to_owned();
            // A heading may run on into its first (only) bullet: `**observe**: …`.
            let after = rest[end + 2..].to_owned();
            parts.entry(name.clone()).or_default().push(after);
            current = Some(name);
            continue;
        }
        let Some(name) = &current else { continue };
        let bullets = parts.get_mut(name).expect("its part");
        if line.starts_with("- ") || bullets.is_empty() {
            bullets.push(line.to_owned());
        } else if let Some(last) = bullets.last_mut() {
            last.push('\n');
            last.push_str(line);
        }
    }
    parts
}

/// What a bullet puts in backticks.
fn names(bullet: &str) -> Vec<&str> {
    bullet.split('`').skip(1).step_by(2).collect()
}

/// Whether `file` (a path under `src/`) is named in `bullet`; `others` are all of the
/// crate's files, for telling whether a shorter ending is unambiguous.
fn named_in(file: &str, bullet: &str, others: &[String]) -> bool {
    let names = names(bullet);
    let dir = file.rsplit_once('/').map(|(d, _)| d);
    if let Some(dir) = dir
        && file.ends_with("/mod.rs")
        && names.contains(&format!("{dir}/").as_str())
    {
        return true;
    }
    let dir_named = dir.is_some_and(|dir| {
        let last = dir.rsplit('/').next().unwrap_or(dir);
        names.iter().any(|n| {
            n.starts_with(&format!("{dir}/"))
                || *n == format!("{last}/")
                || n.starts_with(&format!("{last}/"))
        })
    });
    names.iter().any(|n| {
        if !(n.ends_with(".rs")) {
            return false;
        }
        if *n == file {
            return true;
        }
        let ending = format!("/{n}");
        if !file.ends_with(&ending) {
            return false;
        }
        let alike = others
            .iter()
            .filter(|o| o.as_str() == *n || o.ends_with(&ending))
            .count();
        alike == 1 || dir_named
    })
}

#[test]
fn every_module_file_is_in_the_code_map() {
    let root = workspace_root();
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("reading ARCHITECTURE.md");
    let map = code_map(&architecture);
    let mut missing = Vec::new();
    for (krate, files) in crate_modules(&root) {
        let Some(bullets) = map.get(&krate) else {
            missing.push(format!(
                "crate `{krate}`: no `**{krate}**` part in the code map"
            ));
            continue;
        };
        for file in &files {
            if !bullets.iter().any(|b| named_in(file, b, &files)) {
                missing.push(format!("crates/{krate}/src/{file}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map does not name these modules (one line each, under the \
         crate's `**name**` heading; see tests/module-graph/tests/codemap.rs for the forms):\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn the_forms_of_naming_a_module() {
    let files: Vec<String> = [
        "lib.rs",
        "auth/mod.rs",
        "auth/jwt.rs",
        "console/session.rs",
        "session/mod.rs",
    ]
    .map(String::from)
    .to_vec();
    assert!(named_in("auth/jwt.rs", "- `auth/jwt.rs`: JWT", &files));
    assert!(named_in("auth/mod.rs", "- `auth/`: the trait", &files));
    assert!(named_in("auth/jwt.rs", "- `jwt.rs`: unique ending", &files));
    // `session.rs` ends one file only, but `mod.rs` more than one.
    assert!(named_in("console/session.rs", "- `session.rs`", &files));
    assert!(!named_in("auth/mod.rs", "- `mod.rs`", &files));
    assert!(named_in(
        "auth/mod.rs",
        "- `auth/jwt.rs` and its `mod.rs`",
        &files
    ));
    assert!(!named_in("auth/jwt.rs", "- `auth/`: the trait", &files));
    assert!(!named_in("lib.rs", "- lib.rs without backticks", &files));
}
