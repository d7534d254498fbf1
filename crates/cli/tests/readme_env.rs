//! The README's variable tables and the binary's `--help` name the same environment
//! variables: every variable any subcommand's help shows is in a README table, and every
//! `MCP_TASKS_*`, `DATABASE_URL` or `OTEL_*` variable in a README table is read by some
//! subcommand. Subcommands are found by walking `--help` itself, so a new one (or a new
//! nested `bench` one) is covered without touching this test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// `mcp-tasks <path> --help`, with an empty environment: clap prints the current value
/// of a variable that is set, and nothing from the caller's should show.
fn help(path: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
        .args(path)
        .arg("--help")
        .env_clear()
        .output()
        .expect("running mcp-tasks --help");
    assert!(
        out.status.success(),
        "mcp-tasks {} --help failed: {}",
        path.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The subcommands a help text lists under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_commands = false;
    for line in help.lines() {
        if line.trim_end() == "Commands:" {
            in_commands = true;
            continue;
        }
        if !in_commands {
            continue;
        }
        if line.trim().is_empty() || !line.starts_with(' ') {
            break;
        }
        // A command's line starts with two spaces and its name; wrapped description
        // lines are indented further.
        if let Some(rest) = line.strip_prefix("  ")
            && !rest.starts_with(' ')
            && let Some(name) = rest.split_whitespace().next()
            && name != "help"
        {
            found.push(name.to_owned());
        }
    }
    found
}

/// Every variable a help text shows as `[env: NAME=...]` (clap may wrap the line anywhere).
fn env_vars(help: &str) -> BTreeSet<String> {
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.match_indices("[env: ")
        .map(|(at, tag)| {
            flat[at + tag.len()..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// Variable → the subcommands whose help shows it, over the whole command tree.
fn variables_in_help() -> BTreeMap<String, BTreeSet<String>> {
    let mut vars: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    let mut visited = Vec::new();
    while let Some(path) = queue.pop() {
        let text = help(&path);
        let name = if path.is_empty() {
            "mcp-tasks".to_owned()
        } else {
            path.join(" ")
        };
        for var in env_vars(&text) {
            vars.entry(var).or_default().insert(name.clone());
        }
        for sub in subcommands(&text) {
            let mut next = path.clone();
            next.push(sub);
            queue.push(next);
        }
        visited.push(name);
    }
    // The walk must have seen the whole tree, nested commands included (the harnesses'
    // only in a build that has them).
    let harnesses: &[&str] = if cfg!(feature = "harness") {
        &["chaos", "bench push"]
    } else {
        &[]
    };
    let commands = [
        "serve",
        "worker",
        "dev",
        "migrate",
        "demo",
        "call",
        "tasks resume",
    ];
    for expected in commands.iter().chain(harnesses) {
        assert!(
            visited.iter().any(|v| v == expected),
            "the --help walk never reached `{expected}` (visited: {visited:?})"
        );
    }
    vars
}

/// Every `MCP_TASKS_*`, `DATABASE_URL` and `OTEL_*` name in the README's tables.
fn variables_in_readme_tables() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut vars = BTreeSet::new();
    for line in readme.lines().filter(|l| l.trim_start().starts_with('|')) {
        for prefix in ["MCP_TASKS_", "DATABASE_URL", "OTEL_"] {
            for (at, _) in line.match_indices(prefix) {
                let name: String = line[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                // `MCP_TASKS_` on its own would be a prefix in prose, not a variable.
                if name.len() > prefix.len() || name == "DATABASE_URL" {
                    vars.insert(name);
                }
            }
        }
    }
    vars
}

#[test]
fn readme_tables_and_help_name_the_same_environment_variables() {
    let in_help = variables_in_help();
    let in_readme = variables_in_readme_tables();
    assert!(
        in_help.len() > 20,
        "too few variables in --help: {in_help:?}"
    );
    assert!(
        in_readme.len() > 20,
        "too few variables in README tables: {in_readme:?}"
    );

    let undocumented: Vec<String> = in_help
        .iter()
        .filter(|(var, _)| !in_readme.contains(*var))
        .map(|(var, commands)| {
            let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
            format!("{var} (in the help of: {})", commands.join(", "))
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "variables the binary reads but no README table lists (add a row):\n  {}",
        undocumented.join("\n  ")
    );

    let unknown: Vec<&String> = in_readme
        .iter()
        .filter(|var| !in_help.contains_key(*var))
        .collect();
    assert!(
        unknown.is_empty(),
        "variables a README table lists but no subcommand's --help shows (a typo, or a flag without `env`): {unknown:?}"
    );
}

#[test]
fn the_parsers_find_what_they_look_for() {
    let text = "Commands:\n  serve  Run one\n         wrapped\n  bench  Benchmarks\n  help   Print\n\nOptions:\n      --log <LOG>  Filter [env:\n                   MCP_TASKS_LOG=] [default: info]\n      --x  [env: DATABASE_URL=postgres://x]\n";
    assert_eq!(subcommands(text), ["serve", "bench"]);
    assert_eq!(
        env_vars(text),
        BTreeSet::from(["MCP_TASKS_LOG".to_owned(), "DATABASE_URL".to_owned()])
    );
}
