//! How the one queue is shared, as the configuration file says: `[scheduling]`,
//! `[tenant."…"]`, `[tool."…"]`, and the limits and priorities of `[[upstream]]` and
//! `[upstream.tool."…"]`. Replicas read the weights and priorities (a task's place in the
//! queue is set when it is created); workers read the limits (checked when they claim).
//! Both must run with the same file.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Source};

/// The whole policy, checked. The default is fair, unweighted, unlimited.
#[derive(Debug, Clone, PartialEq)]
pub struct Scheduling {
    pub order: Order,
    /// The weight of a tenant the file does not name.
    pub tenant_weight: u32,
    /// How many rounds of the fair order one priority level moves a task ahead.
    pub priority_rounds: u32,
    /// Running tasks at once, per tenant / per principal, where nothing more specific says.
    pub tenant_max_concurrency: Option<u32>,
    pub principal_max_concurrency: Option<u32>,
    pub tenants: BTreeMap<String, TenantPolicy>,
    /// By the name a tool is served under (an upstream's tools with their prefix).
    pub tools: BTreeMap<String, Limits>,
    /// By upstream name: limits its tools share.
    pub groups: BTreeMap<String, Limits>,
}

impl Default for Scheduling {
    fn default() -> Self {
        Self {
            order: Order::Fair,
            tenant_weight: 1,
            priority_rounds: DEFAULT_PRIORITY_ROUNDS,
            tenant_max_concurrency: None,
            principal_max_concurrency: None,
            tenants: BTreeMap::new(),
            tools: BTreeMap::new(),
            groups: BTreeMap::new(),
        }
    }
}

/// `priority_rounds` when the file does not say.
pub const DEFAULT_PRIORITY_ROUNDS: u32 = 64;

/// Priorities range over this (a tool's and its tenant's added, then clamped).
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -100..=100;

/// The order of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    /// Round-robin across tenants (by weight), then across a tenant's principals; oldest
    /// first within a principal.
    Fair,
    /// Oldest first across everyone (what the service did before fair scheduling; kept
    /// for comparison).
    Fifo,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TenantPolicy {
    pub weight: Option<u32>,
    pub priority: i32,
    pub max_concurrency: Option<u32>,
}

/// The limits and priority of a tool or of an upstream's tools together.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Limits {
    pub max_concurrency: Option<u32>,
    pub max_per_second: Option<f64>,
    /// Starts a rate limit lets through at once after a quiet spell.
    pub burst: Option<u32>,
    pub priority: i32,
}

impl Limits {
    pub fn is_limited(&self) -> bool {
        self.max_concurrency.is_some() || self.max_per_second.is_some()
    }
}

impl Scheduling {
    /// A tenant's weight.
    pub fn weight(&self, tenant: &str) -> u32 {
        self.tenants
            .get(tenant)
            .and_then(|t| t.weight)
            .unwrap_or(self.tenant_weight)
    }

    /// The priority a task of `tool` (served name; `group`, its upstream) for `tenant` is
    /// queued with, before a caller lowers it.
    pub fn priority(&self, tenant: &str, tool: &str, group: Option<&str>) -> i32 {
        let tool_priority = match self.tools.get(tool) {
            Some(l) if l.priority != 0 => l.priority,
            _ => group
                .and_then(|g| self.groups.get(g))
                .map_or(0, |l| l.priority),
        };
        let tenant_priority = self.tenants.get(tenant).map_or(0, |t| t.priority);
        (tool_priority + tenant_priority).clamp(*PRIORITY_RANGE.start(), *PRIORITY_RANGE.end())
    }

    /// Whether any claim needs to look at limits at all.
    pub fn has_limits(&self) -> bool {
        self.tenant_max_concurrency.is_some()
            || self.principal_max_concurrency.is_some()
            || self.tenants.values().any(|t| t.max_concurrency.is_some())
            || self.tools.values().any(Limits::is_limited)
            || self.groups.values().any(Limits::is_limited)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScheduling {
    order: Option<Order>,
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
        order: raw.order.unwrap_or(Order::Fair),
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
