//! The configuration file's scheduling sections: fair and unlimited by default, every key
//! checked with its line, the limits of an upstream's tools under their served names.

use mcp_tasks_upstream::{Config, ConfigError, Limits, Order};

const EXAMPLE: &str = r#"
[scheduling]
order = "fair"
tenant_weight = 1
priority_rounds = 32
tenant_max_concurrency = 100
principal_max_concurrency = 10

[tenant."acme"]
weight = 3
priority = 1
max_concurrency = 40

[tool."generate_report"]
max_concurrency = 2
priority = -1

[[upstream]]
name = "render"
command = ["render-mcp"]
prefix = "render_"
max_concurrency = 8
max_per_second = 50
priority = 2
[upstream.tool."page"]
max_concurrency = 4
max_per_second = 20
burst = 5
"#;

fn refused(text: &str) -> ConfigError {
    Config::parse(text).expect_err("must be refused")
}

#[test]
fn without_a_word_the_queue_is_fair_and_unlimited() {
    let s = Config::parse("").expect("parses").scheduling;
    assert_eq!(s.order, Order::Fair);
    assert_eq!(s.weight("anyone"), 1);
    assert_eq!(s.priority("anyone", "any_tool", None), 0);
    assert!(!s.has_limits());
}

#[test]
fn the_documented_example_parses() {
    let s = Config::parse(EXAMPLE).expect("parses").scheduling;
    assert_eq!(s.priority_rounds, 32);
    assert_eq!(s.tenant_max_concurrency, Some(100));
    assert_eq!(s.principal_max_concurrency, Some(10));
    assert_eq!(s.weight("acme"), 3);
    assert_eq!(s.weight("globex"), 1);
    assert_eq!(s.tenants["acme"].max_concurrency, Some(40));
    assert_eq!(s.tools["generate_report"].max_concurrency, Some(2));
    // An upstream's tool goes by the name it is served under.
    let page = &s.tools["render_page"];
    assert_eq!(page.max_concurrency, Some(4));
    assert_eq!(page.max_per_second, Some(20.0));
    assert_eq!(page.burst, Some(5));
    assert_eq!(
        s.groups["render"],
        Limits {
            max_concurrency: Some(8),
            max_per_second: Some(50.0),
            burst: None,
            priority: 2
        }
    );
    // A tool's own priority, else its upstream's; its tenant's added.
    assert_eq!(s.priority("acme", "generate_report", None), 0);
    assert_eq!(s.priority("globex", "generate_report", None), -1);
    assert_eq!(s.priority("acme", "render_page", Some("render")), 3);
    assert!(s.has_limits());
}

#[test]
fn every_scheduling_key_is_checked_with_its_line() {
    let e = refused("[scheduling]\norder = \"lifo\"\n");
    assert_eq!(e.line, Some(2), "{e}");
    let e = refused("[tenant.\"a\"]\nweight = 0\n");
    assert_eq!(e.key.as_deref(), Some("tenant.\"a\".weight"), "{e}");
    assert_eq!(e.line, Some(2), "{e}");
    let e = refused("[tool.\"t\"]\nmax_concurrency = -1\n");
    assert_eq!(e.key.as_deref(), Some("tool.\"t\".max_concurrency"), "{e}");
    let e = refused("[tool.\"t\"]\nmax_per_second = 0.0\n");
    assert_eq!(e.key.as_deref(), Some("tool.\"t\".max_per_second"), "{e}");
    let e = refused("[tool.\"t\"]\nburst = 3\n");
    assert!(e.message.contains("max_per_second"), "{e}");
    let e = refused("[tool.\"t\"]\npriority = 101\n");
    assert!(e.message.contains("out of range"), "{e}");
    let e = refused("[tenant.\"a\"]\nweigth = 2\n");
    assert_eq!(e.key.as_deref(), Some("weigth"), "{e}");
    let e = refused("[scheduling]\npriority_rounds = 0\n");
    assert_eq!(e.key.as_deref(), Some("scheduling.priority_rounds"), "{e}");
}

#[test]
fn a_tool_gets_its_limits_in_one_place() {
    let e = refused(
        "[tool.\"x_t\"]\nmax_concurrency = 1\n[[upstream]]\nname = \"x\"\ncommand = [\"c\"]\nprefix = \"x_\"\n[upstream.tool.\"t\"]\nmax_concurrency = 2\n",
    );
    assert!(e.message.contains("both"), "{e}");
}
