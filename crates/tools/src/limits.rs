//! The scheduling policy's limits as the store's claim takes them: by tool name, with
//! each tool's upstream (a group's limits hold for its tools together) read from the
//! registry. Workers claim within them; the metrics and the console count what they hold
//! back.

use mcp_tasks_store::{ClaimLimits, Rate};

use crate::Registry;
use crate::scheduling::{Limits, Scheduling};

/// What `scheduling` limits, for the tools of `registry`.
pub fn claim_limits(scheduling: &Scheduling, registry: &Registry) -> ClaimLimits {
    let mut out = ClaimLimits {
        tenants: scheduling
            .tenants
            .iter()
            .filter_map(|(name, t)| t.max_concurrency.map(|m| (name.clone(), m)))
            .collect(),
        tenant_default: scheduling.tenant_max_concurrency,
        principal_default: scheduling.principal_max_concurrency,
        ..ClaimLimits::default()
    };
    for (name, limits) in &scheduling.tools {
        add(name, limits, &mut out.tools, &mut out.tool_rates);
    }
    for (name, limits) in &scheduling.groups {
        add(name, limits, &mut out.groups, &mut out.group_rates);
    }
    for name in registry.names() {
        if let Some(group) = registry.get(name).and_then(|t| t.group.as_ref())
            && scheduling.groups.get(group).is_some_and(Limits::is_limited)
        {
            out.tool_groups.insert(name.to_owned(), group.clone());
        }
    }
    out
}

fn add(
    name: &str,
    limits: &Limits,
    concurrency: &mut std::collections::BTreeMap<String, u32>,
    rates: &mut std::collections::BTreeMap<String, Rate>,
) {
    if let Some(max) = limits.max_concurrency {
        concurrency.insert(name.to_owned(), max);
    }
    if let Some(per_second) = limits.max_per_second {
        // Without `burst`, one second's worth (at least one start): a worker that looks
        // once a second then still starts the full rate.
        let burst = limits.burst.map_or(per_second.max(1.0), f64::from);
        rates.insert(name.to_owned(), Rate { per_second, burst });
    }
}

#[cfg(test)]
mod tests {
    use crate::scheduling::TenantPolicy;
    use crate::{Outcome, Tool};

    use super::*;

    #[test]
    fn every_limit_of_the_policy_reaches_the_claim() {
        let tool = |name: &str, group: Option<&str>| {
            let b = Tool::builder(name).handler(|_| async { Ok(Outcome::text("")) });
            match group {
                Some(g) => b.group(g),
                None => b,
            }
            .build()
            .expect("tool")
        };
        let registry = Registry::new(vec![
            tool("a", None),
            tool("up_x", Some("up")),
            tool("other_y", Some("other")),
        ])
        .expect("registry");
        let mut s = Scheduling {
            tenant_max_concurrency: Some(10),
            principal_max_concurrency: Some(3),
            ..Scheduling::default()
        };
        s.tools.insert(
            "a".into(),
            Limits {
                max_concurrency: Some(4),
                max_per_second: Some(0.5),
                ..Limits::default()
            },
        );
        s.groups.insert(
            "up".into(),
            Limits {
                max_per_second: Some(20.0),
                burst: Some(5),
                ..Limits::default()
            },
        );
        s.groups.insert(
            "other".into(),
            Limits {
                priority: 3,
                ..Limits::default()
            },
        );
        s.tenants.insert(
            "big".into(),
            TenantPolicy {
                max_concurrency: Some(50),
                ..TenantPolicy::default()
            },
        );
        let l = claim_limits(&s, &registry);
        assert_eq!(l.tools.get("a"), Some(&4));
        assert_eq!(
            l.tool_rates.get("a"),
            Some(&Rate {
                per_second: 0.5,
                burst: 1.0
            })
        );
        assert_eq!(
            l.group_rates.get("up"),
            Some(&Rate {
                per_second: 20.0,
                burst: 5.0
            })
        );
        // A group that only has a priority limits nothing.
        assert_eq!(l.tool_groups.len(), 1);
        assert_eq!(l.tool_groups.get("up_x").map(String::as_str), Some("up"));
        assert_eq!(l.tenants.get("big"), Some(&50));
        assert_eq!((l.tenant_default, l.principal_default), (Some(10), Some(3)));
    }
}
