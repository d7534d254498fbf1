//! The Grafana dashboard and the Prometheus alert rules in `deploy/observability` query
//! only metrics the service exports, with labels those metrics have: a renamed metric or
//! label fails here, not on an operator's empty panel.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use mcp_tasks_observe::names::{ALL, Kind, series_names};

fn deploy_file(path: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/observability")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every expression of the dashboard's panels.
fn dashboard_exprs() -> Vec<String> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&deploy_file("grafana/dashboards/mcp-tasks.json"))
            .expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "mcp-tasks");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    exprs
}

/// Every rule of the alert file: (alert name, expression). The expression is the value
/// after `expr:`, or the indented block under `expr: |`.
fn alert_rules() -> Vec<(String, String)> {
    let text = deploy_file("alerts.yml");
    let mut rules = Vec::new();
    let mut lines = text.lines().peekable();
    let mut name = None;
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(alert) = trimmed.strip_prefix("- alert:") {
            name = Some(alert.trim().to_owned());
        } else if let Some(expr) = trimmed.strip_prefix("expr:") {
            let indent = line.len() - trimmed.len();
            let mut expr = expr.trim().to_owned();
            if expr == "|" {
                expr.clear();
                while let Some(next) = lines.peek() {
                    let next_indent = next.len() - next.trim_start().len();
                    if next.trim().is_empty() || next_indent <= indent {
                        break;
                    }
                    expr.push_str(next.trim());
                    expr.push(' ');
                    lines.next();
                }
            }
            let alert = name.take().expect("every expr belongs to an alert");
            rules.push((alert, expr));
        }
    }
    rules
}

/// The identifiers in a PromQL expression (metric names, labels, functions, keywords),
/// with what follows each: `{` for a selector, `(` for a call or a `by` list.
fn identifiers(expr: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i] as char;
        if c == '"' {
            in_string = !in_string;
            i += 1;
            continue;
        }
        if !in_string && (c.is_ascii_alphabetic() || c == '_' || c == '$') {
            let start = i;
            i += 1;
            while i < bytes.len()
                && ((bytes[i] as char).is_ascii_alphanumeric() || bytes[i] == b'_')
            {
                i += 1;
            }
            found.push((expr[start..i].to_owned(), start));
            continue;
        }
        i += 1;
    }
    found
}

/// The label names an expression uses: in selectors (`{a="x"}`) and in `by (…)`,
/// `without (…)`, `ignoring (…)` and `on (…)` lists.
fn labels_used(expr: &str) -> BTreeSet<String> {
    let mut labels = BTreeSet::new();
    // Where the current `by (…)`-style list's text starts, while in one.
    let mut list_from: Option<usize> = None;
    for (ident, at) in identifiers(expr) {
        let before = &expr[..at];
        let in_selector = match (before.rfind('{'), before.rfind('}')) {
            (Some(o), Some(c)) => o > c,
            (Some(_), None) => true,
            _ => false,
        };
        if let Some(from) = list_from
            && expr[from..at].contains(')')
        {
            list_from = None;
        }
        let end = at + ident.len();
        if [
            "by",
            "without",
            "ignoring",
            "on",
            "group_left",
            "group_right",
        ]
        .contains(&ident.as_str())
        {
            // A list only when a parenthesis follows (`group_left` may stand alone).
            if expr[end..].trim_start().starts_with('(') {
                list_from = Some(end);
            }
            continue;
        }
        if in_selector || list_from.is_some() {
            labels.insert(ident);
        }
    }
    labels
}

#[test]
fn dashboard_and_alerts_use_only_exported_metrics_and_their_labels() {
    let exported: BTreeSet<String> = series_names().into_iter().collect();
    let labels_of: HashMap<&str, &[&str]> = ALL.iter().map(|(n, _, l, _)| (*n, *l)).collect();
    let mut exprs: Vec<(String, String)> = dashboard_exprs()
        .into_iter()
        .map(|e| ("dashboard".to_owned(), e))
        .collect();
    let rules = alert_rules();
    exprs.extend(rules.iter().cloned());
    assert!(exprs.len() > 10, "too few expressions found: {exprs:?}");

    let mut used = BTreeSet::new();
    for (whose, expr) in &exprs {
        let metrics: Vec<String> = identifiers(expr)
            .into_iter()
            .map(|(i, _)| i)
            .filter(|i| i.starts_with("mcp_tasks_"))
            .collect();
        let is_up = expr.contains("up{");
        assert!(
            !metrics.is_empty() || is_up,
            "{whose}: `{expr}` queries none of the service's metrics"
        );
        let mut allowed: BTreeSet<String> = ["le", "instance", "job"].map(String::from).into();
        for metric in &metrics {
            assert!(
                exported.contains(metric),
                "{whose}: `{expr}` uses {metric}, which the service does not export"
            );
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| metric.strip_suffix(s))
                .filter(|b| labels_of.contains_key(b))
                .unwrap_or(metric);
            used.insert(base.to_owned());
            allowed.extend(labels_of[base].iter().map(|l| (*l).to_owned()));
        }
        for label in labels_used(expr) {
            assert!(
                allowed.contains(&label),
                "{whose}: `{expr}` uses the label {label:?}, which none of its metrics has (allowed: {allowed:?})"
            );
        }
    }

    // The alerts cover what the issue names: queue age, crash recovery, lease lapses,
    // readiness.
    let alerted: String = rules.iter().map(|(_, e)| e.as_str()).collect();
    for metric in [
        "mcp_tasks_queue_oldest_age_seconds",
        "mcp_tasks_crash_recovery_total",
        "mcp_tasks_lease_lapses_total",
        "outcome=\"unavailable\"",
    ] {
        assert!(alerted.contains(metric), "no alert on {metric}");
    }
    // Every metric of the contract has a place on the dashboard.
    let on_dashboard: String = dashboard_exprs().concat();
    for (name, kind, _, _) in ALL {
        let shown = match kind {
            Kind::Histogram => on_dashboard.contains(&format!("{name}_")),
            _ => on_dashboard.contains(name),
        };
        assert!(shown, "{name} is on no panel");
    }
    assert!(!used.is_empty());
}

#[test]
fn the_checks_parse_what_they_look_for() {
    let expr = r#"sum by (method, outcome) (rate(mcp_tasks_http_requests_total{outcome!="ok", method="x"}[5m])) / ignoring(outcome) group_left sum(rate(mcp_tasks_tasks[5m]))"#;
    assert_eq!(
        labels_used(expr),
        ["method", "outcome"].map(String::from).into()
    );
    let names: Vec<String> = identifiers(expr).into_iter().map(|(i, _)| i).collect();
    assert!(names.contains(&"mcp_tasks_http_requests_total".to_owned()));
    assert!(
        !names.contains(&"ok".to_owned()),
        "strings are not identifiers"
    );
    assert!(labels_used(r#"sum by (nope) (mcp_tasks_tasks)"#).contains("nope"));
    assert!(labels_used(r#"mcp_tasks_tasks{state="x"}"#).contains("state"));
}
