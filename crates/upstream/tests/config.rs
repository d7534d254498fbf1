//! The configuration file's contract: the documented example parses, and every refusal
//! names the key and the line.

use std::time::Duration;

use mcp_tasks_tools::ExecutionPolicy;
use mcp_tasks_upstream::{Config, ConfigError, DEFAULT_MAX_RESULT_BYTES, Transport};

const EXAMPLE: &str = r#"
[[upstream]]
name = "everything"
command = ["npx", "-y", "@modelcontextprotocol/server-everything", "stdio"]
env = { LOG_LEVEL = "warn" }
inherit_env = ["NODE_EXTRA_CA_CERTS"]
prefix = "everything_"
tools = ["get-sum", "trigger-long-running-operation"]
mode = "task-optional"
idempotent = false
max_attempts = 3
ttl_ms = 3600000
timeout_ms = 600000
max_result_bytes = 1048576
[upstream.tool."trigger-long-running-operation"]
mode = "task-required"
idempotent = true

[[upstream]]
name = "remote"
url = "https://tools.internal/mcp"
headers = { Authorization = "Bearer ${MCP_TASKS_TEST_UPSTREAM_TOKEN}" }
"#;

fn refused(text: &str) -> ConfigError {
    Config::parse(text).expect_err("must be refused")
}

#[test]
fn the_documented_example_parses() {
    // A variable every test process has, so the example needs no environment of its own.
    let example = EXAMPLE.replace("MCP_TASKS_TEST_UPSTREAM_TOKEN", "PATH");
    let config = Config::parse(&example).expect("parses");
    assert_eq!(config.upstreams.len(), 2);
    let e = &config.upstreams[0];
    assert_eq!(e.name, "everything");
    assert_eq!(e.prefix, "everything_");
    assert!(
        matches!(&e.transport, Transport::Stdio { command, env, inherit_env }
        if command[0] == "npx" && env["LOG_LEVEL"] == "warn" && inherit_env == &["NODE_EXTRA_CA_CERTS"])
    );
    assert_eq!(e.max_result_bytes, 1024 * 1024);
    assert_eq!(e.defaults.mode, ExecutionPolicy::TaskOptional);
    assert!(!e.defaults.idempotent);
    assert_eq!(e.defaults.timeout, Duration::from_secs(600));
    let long = e.settings("trigger-long-running-operation");
    assert_eq!(long.mode, ExecutionPolicy::TaskRequired);
    assert!(long.idempotent);
    // Keys an override leaves out come from the upstream's own defaults.
    assert_eq!(long.ttl, Duration::from_secs(3600));
    assert_eq!(e.settings("get-sum").mode, ExecutionPolicy::TaskOptional);
    let r = &config.upstreams[1];
    assert_eq!(r.max_result_bytes, DEFAULT_MAX_RESULT_BYTES);
    assert!(matches!(&r.transport, Transport::Http { url, headers }
        if url == "https://tools.internal/mcp" && headers.contains_key("Authorization")));
    // Header values are credentials: Debug never shows them.
    assert!(!format!("{config:?}").contains("Bearer"));
}

#[test]
fn an_empty_file_has_no_upstreams() {
    assert_eq!(Config::parse("").expect("parses").upstreams.len(), 0);
}

#[test]
fn unknown_keys_are_refused_with_key_and_line() {
    let e = refused("[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\nretries = 2\n");
    assert_eq!(e.key.as_deref(), Some("retries"), "{e}");
    assert_eq!(e.line, Some(4), "{e}");
    let e = refused(
        "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\n[upstream.tool.t]\nmodes = \"sync-only\"\n",
    );
    assert_eq!(e.key.as_deref(), Some("modes"), "{e}");
    assert_eq!(e.line, Some(5), "{e}");
    let e = refused("[server]\nport = 1\n");
    assert_eq!(e.key.as_deref(), Some("server"), "{e}");
    assert_eq!(e.line, Some(1), "{e}");
}

#[test]
fn a_missing_name_is_refused() {
    let e = refused("[[upstream]]\ncommand = [\"x\"]\n");
    assert_eq!(e.key.as_deref(), Some("upstream.name"), "{e}");
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn exactly_one_of_command_and_url() {
    let e = refused("[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\nurl = \"http://h/mcp\"\n");
    assert_eq!(e.key.as_deref(), Some("upstream.url"), "{e}");
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.to_string().contains("both"), "{e}");
    let e = refused("\n[[upstream]]\nname = \"a\"\n");
    assert_eq!(e.key.as_deref(), Some("upstream.command"), "{e}");
    assert!(e.to_string().contains("neither"), "{e}");
}

#[test]
fn bad_values_are_refused() {
    let cases = [
        ("name = \"Bad Name\"\ncommand = [\"x\"]", "upstream.name", 2),
        (
            "name = \"a\"\ncommand = [\"x\"]\nmode = \"sometimes\"",
            "mode",
            4,
        ),
        (
            "name = \"a\"\ncommand = [\"x\"]\nmax_attempts = 0",
            "upstream.max_attempts",
            4,
        ),
        (
            "name = \"a\"\ncommand = [\"x\"]\ntimeout_ms = -5",
            "upstream.timeout_ms",
            4,
        ),
        ("name = \"a\"\ncommand = []", "upstream.command", 3),
        ("name = \"a\"\nurl = \"ftp://h\"", "upstream.url", 3),
        (
            "name = \"a\"\nurl = \"http://h\"\nenv = { A = \"b\" }",
            "upstream.env",
            4,
        ),
        (
            "name = \"a\"\ncommand = [\"x\"]\nheaders = { A = \"b\" }",
            "upstream.headers",
            4,
        ),
        (
            "name = \"a\"\ncommand = [\"x\"]\nidempotent = \"yes\"",
            "idempotent",
            4,
        ),
        (
            "name = \"a\"\ncommand = [\"x\"]\nmax_result_bytes = 10",
            "upstream.max_result_bytes",
            4,
        ),
        (
            "name = \"a\"\nurl = \"http://h\"\ninherit_env = [\"A\"]",
            "upstream.inherit_env",
            4,
        ),
    ];
    for (body, key, line) in cases {
        let e = refused(&format!("[[upstream]]\n{body}\n"));
        assert!(
            e.key.as_deref().is_some_and(|k| k.ends_with(key)),
            "{body}: {e}"
        );
        assert_eq!(e.line, Some(line), "{body}: {e}");
        assert!(e.to_string().contains(&format!("line {line}")), "{e}");
    }
}

#[test]
fn an_unset_header_variable_is_refused() {
    let e = refused(
        "[[upstream]]\nname = \"a\"\nurl = \"http://h/mcp\"\nheaders = { X = \"${MCP_TASKS_SURELY_UNSET_VAR}\" }\n",
    );
    assert!(e.to_string().contains("MCP_TASKS_SURELY_UNSET_VAR"), "{e}");
}

#[test]
fn names_are_unique() {
    let e = refused(
        "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\n[[upstream]]\nname = \"a\"\ncommand = [\"y\"]\n",
    );
    assert!(e.to_string().contains("twice"), "{e}");
}

#[test]
fn inherit_env_names_variables_and_never_our_own() {
    for (entry, says) in [
        ("\"NOT-A-NAME\"", "not a variable name"),
        ("\"\"", "not a variable name"),
        ("\"9LIVES\"", "not a variable name"),
        ("\"DATABASE_URL\"", "configures mcp-tasks itself"),
        ("\"MCP_TASKS_STATE_KEY\"", "configures mcp-tasks itself"),
        ("\"A\", \"A\"", "twice"),
    ] {
        let e = refused(&format!(
            "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\ninherit_env = [\n  \"OK_ONE\",\n  {entry}]\n"
        ));
        assert_eq!(
            e.key.as_deref(),
            Some("upstream.inherit_env"),
            "{entry}: {e}"
        );
        // The line of the bad entry itself, not of the key.
        assert_eq!(e.line, Some(6), "{entry}: {e}");
        assert!(e.to_string().contains(says), "{entry}: {e}");
    }
    let ok = Config::parse(
        "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\ninherit_env = [\"HTTPS_PROXY\", \"_X1\"]\n",
    )
    .expect("parses");
    assert!(
        matches!(&ok.upstreams[0].transport, Transport::Stdio { inherit_env, .. }
        if inherit_env == &["HTTPS_PROXY", "_X1"])
    );
}
