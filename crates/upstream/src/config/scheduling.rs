//! The configuration file's scheduling sections, read and checked: `[scheduling]`,
//! `[tenant."…"]`, `[tool."…"]`, and the limits and priorities of `[[upstream]]` and
//! `[upstream.tool."…"]`, into `mcp_tasks_tools::Scheduling` (what they mean is there).

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

pub use mcp_tasks_tools::scheduling::{
    DEFAULT_PRIORITY_ROUNDS, Limits, Order, PRIORITY_RANGE, Scheduling, TenantPolicy,
};

use super::{ConfigError, Source};

/// `order` as the file spells it.
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
enum RawOrder {
    Fair,
    Fifo,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScheduling {
    order: Option<RawOrder>,
    tenant_weight: Option<Spanned<i64>>,
    priority_rounds: Option<Spanned<i64>>,
    tenant_max_concurrency: Option<Spanned<i64>>,
    principal_max_concurrency: Option<Spanned<i64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTenant {
    weight: Option<Spanned<i64>>,
    priority: Option<Spanned<i64>>,
    max_concurrency: Option<Spanned<i64>>,
}

/// The scheduling keys of a tool or an upstream (`[tool."…"]`, and beside the execution
/// keys in `[[upstream]]` and `[upstream.tool."…"]`).
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub(crate) max_concurrency: Option<Spanned<i64>>,
    pub(crate) max_per_second: Option<Spanned<f64>>,
    pub(crate) burst: Option<Spanned<i64>>,
    pub(crate) priority: Option<Spanned<i64>>,
}

fn ranged(
    src: &Source<'_>,
    key: &str,
    v: &Spanned<i64>,
    range: std::ops::RangeInclusive<i64>,
) -> Result<i64, ConfigError> {
    let n = *v.get_ref();
    if range.contains(&n) {
        Ok(n)
    } else {
        src.error(
            key,
            v.span(),
            format!("{n} is out of range ({} to {})", range.start(), range.end()),
        )
    }
}

fn count(
    src: &Source<'_>,
    key: &str,
    v: &Option<Spanned<i64>>,
) -> Result<Option<u32>, ConfigError> {
    v.as_ref()
        .map(|v| ranged(src, key, v, 1..=1_000_000).map(|n| u32::try_from(n).unwrap_or(u32::MAX)))
        .transpose()
}

fn priority(src: &Source<'_>, key: &str, v: &Option<Spanned<i64>>) -> Result<i32, ConfigError> {
    let range = i64::from(*PRIORITY_RANGE.start())..=i64::from(*PRIORITY_RANGE.end());
    v.as_ref().map_or(Ok(0), |v| {
        ranged(src, key, v, range).map(|n| i32::try_from(n).unwrap_or(0))
    })
}

pub(crate) fn limits(src: &Source<'_>, key: &str, raw: &RawLimits) -> Result<Limits, ConfigError> {
    let max_per_second = match &raw.max_per_second {
        None => None,
        Some(v) => {
            let n = *v.get_ref();
            // At most a million a second; at least one a day.
            if !(n.is_finite() && (1.0 / 86_400.0..=1_000_000.0).contains(&n)) {
                return src.error(
                    &format!("{key}max_per_second"),
                    v.span(),
                    format!("{n} is out of range (1/86400 to 1000000)"),
                );
            }
            Some(n)
        }
    };
    let burst = count(src, &format!("{key}burst"), &raw.burst)?;
    if burst.is_some() && max_per_second.is_none() {
        let span = raw.burst.as_ref().map_or(0..0, Spanned::span);
        return src.error(
            &format!("{key}burst"),
            span,
            "`burst` goes with `max_per_second`",
        );
    }
    Ok(Limits {
        max_concurrency: count(src, &format!("{key}max_concurrency"), &raw.max_concurrency)?,
        max_per_second,
        burst,
        priority: priority(src, &format!("{key}priority"), &raw.priority)?,
    })
}

/// The file's scheduling sections, checked; `upstream_tools` are the limits of
/// `[upstream.tool."…"]` by served name, `groups` those of `[[upstream]]` by upstream name.
pub(crate) fn check(
    src: &Source<'_>,
    raw: Option<RawScheduling>,
    tenants: BTreeMap<String, RawTenant>,
    tools: BTreeMap<String, RawLimits>,
    upstream_tools: BTreeMap<String, Limits>,
    groups: BTreeMap<String, Limits>,
) -> Result<Scheduling, ConfigError> {
    let raw = raw.unwrap_or_default();
    let mut s = Scheduling {
        order: match raw.order {
            Some(RawOrder::Fifo) => Order::Fifo,
            Some(RawOrder::Fair) | None => Order::Fair,
        },
        ..Scheduling::default()
    };
    if let Some(w) = &raw.tenant_weight {
        s.tenant_weight = weight(src, "scheduling.tenant_weight", w)?;
    }
    if let Some(r) = &raw.priority_rounds {
        s.priority_rounds =
            u32::try_from(ranged(src, "scheduling.priority_rounds", r, 1..=1_000_000)?)
                .unwrap_or(DEFAULT_PRIORITY_ROUNDS);
    }
    s.tenant_max_concurrency = count(
        src,
        "scheduling.tenant_max_concurrency",
        &raw.tenant_max_concurrency,
    )?;
    s.principal_max_concurrency = count(
        src,
        "scheduling.principal_max_concurrency",
        &raw.principal_max_concurrency,
    )?;
    for (name, t) in tenants {
        let key = format!("tenant.{name:?}.");
        let policy = TenantPolicy {
            weight: t
                .weight
                .as_ref()
                .map(|w| weight(src, &format!("{key}weight"), w))
                .transpose()?,
            priority: priority(src, &format!("{key}priority"), &t.priority)?,
            max_concurrency: count(src, &format!("{key}max_concurrency"), &t.max_concurrency)?,
        };
        s.tenants.insert(name, policy);
    }
    for (name, raw) in tools {
        let l = limits(src, &format!("tool.{name:?}."), &raw)?;
        s.tools.insert(name, l);
    }
    for (name, l) in upstream_tools {
        if s.tools.contains_key(&name) {
            return Err(ConfigError {
                key: Some(format!("tool.{name:?}")),
                line: None,
                message: format!(
                    "tool {name:?} has limits both in [tool.{name:?}] and in its upstream's [upstream.tool.…]; give them once"
                ),
            });
        }
        s.tools.insert(name, l);
    }
    s.groups = groups;
    Ok(s)
}

fn weight(src: &Source<'_>, key: &str, v: &Spanned<i64>) -> Result<u32, ConfigError> {
    ranged(src, key, v, 1..=1000).map(|n| u32::try_from(n).unwrap_or(1))
}
