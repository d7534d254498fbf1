//! How the one queue is shared: each tenant's weight, the priorities of tenants and
//! tools, and the limits of tools, upstreams, tenants and principals. The configuration
//! file says it (`mcp_tasks_upstream`'s `[scheduling]`, `[tenant."…"]`, `[tool."…"]`);
//! replicas read the weights and priorities (a task's place in the queue is set when it
//! is created: [`Scheduling::placement`]), workers the limits. Both must run with the
//! same file.

use std::collections::BTreeMap;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// The `_meta` key a caller lowers its task's priority with (`tools/call`): a whole number
/// of levels, 0 or less. A caller may never raise it.
pub const PRIORITY_META_KEY: &str = "io.github.mcp-tasks/priority";

impl Scheduling {
    /// How many rounds of the fair order a task of `tool` (served name; `group`, its
    /// upstream) for `tenant` moves ahead of its turn: its priority, lowered by the
    /// caller's `lowered` levels and kept in [`PRIORITY_RANGE`], times `priority_rounds`.
    /// Bounded, so a lower priority waits longer but is never starved: a lane of higher
    /// priority moves ahead by at most that many rounds, whatever keeps arriving.
    pub fn rounds_ahead(&self, tenant: &str, tool: &str, group: Option<&str>, lowered: u32) -> f64 {
        let level = (i64::from(self.priority(tenant, tool, group)) - i64::from(lowered)).clamp(
            i64::from(*PRIORITY_RANGE.start()),
            i64::from(*PRIORITY_RANGE.end()),
        );
        // Both factors are small (|level| <= 100, rounds <= 1e6): exact in an f64.
        level as f64 * f64::from(self.priority_rounds)
    }

    /// Whether every tenant queues in one lane, oldest first.
    pub fn is_fifo(&self) -> bool {
        self.order == Order::Fifo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_moves_a_task_by_whole_rounds_and_a_caller_only_lowers_it() {
        let mut s = Scheduling {
            priority_rounds: 10,
            ..Scheduling::default()
        };
        s.tools.insert(
            "urgent".into(),
            Limits {
                priority: 3,
                ..Limits::default()
            },
        );
        s.tenants.insert(
            "gold".into(),
            TenantPolicy {
                priority: 1,
                ..TenantPolicy::default()
            },
        );
        assert_eq!(s.rounds_ahead("t", "plain", None, 0), 0.0);
        assert_eq!(s.rounds_ahead("t", "urgent", None, 0), 30.0);
        assert_eq!(s.rounds_ahead("gold", "urgent", None, 0), 40.0);
        assert_eq!(s.rounds_ahead("gold", "urgent", None, 5), -10.0);
        // Kept in range however far a caller lowers it.
        assert_eq!(s.rounds_ahead("t", "plain", None, u32::MAX), -1000.0);
    }
}
