//! How many streams each owner holds open on this replica: listen streams, 2025-era
//! waits and the console's live parts count alike against one limit, and the console's
//! health streams, whose every re-read is several statements, also against a lower one
//! of their own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use mcp_tasks_store::Owner;
use mcp_tasks_wire::{ErrorObject, codes};

use crate::error::RpcError;

/// Most health streams (`/console/health/events`) one principal may hold open on one
/// replica, within its limit of streams of every kind.
pub(crate) const MAX_HEALTH_STREAMS: usize = 4;

/// What a stream is, for its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// Every stream counts as this.
    Any,
    /// Health streams count as this too.
    Health,
}

/// Open streams per owner on this replica.
#[derive(Default)]
pub struct StreamCounts {
    counts: Mutex<HashMap<(Owner, Kind), usize>>,
}

/// One open stream; released when the stream ends.
pub struct StreamPermit {
    counts: Arc<StreamCounts>,
    owner: Owner,
    kinds: &'static [Kind],
}

impl StreamCounts {
    /// A stream of any kind, within `limit`.
    pub fn try_open(self: &Arc<Self>, owner: &Owner, limit: usize) -> Option<StreamPermit> {
        self.try_open_as(owner, &[(Kind::Any, limit)], &[Kind::Any])
    }

    /// A health stream: within `limit` for every kind and `MAX_HEALTH_STREAMS` (or
    /// `limit`, if lower) for health streams.
    pub fn try_open_health(self: &Arc<Self>, owner: &Owner, limit: usize) -> Option<StreamPermit> {
        self.try_open_as(
            owner,
            &[
                (Kind::Any, limit),
                (Kind::Health, MAX_HEALTH_STREAMS.min(limit)),
            ],
            &[Kind::Any, Kind::Health],
        )
    }

    fn try_open_as(
        self: &Arc<Self>,
        owner: &Owner,
        limits: &[(Kind, usize)],
        kinds: &'static [Kind],
    ) -> Option<StreamPermit> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let full = limits.iter().any(|(kind, limit)| {
            counts
                .get(&(owner.clone(), *kind))
                .is_some_and(|open| open >= limit)
                || *limit == 0
        });
        if full {
            return None;
        }
        for kind in kinds {
            *counts.entry((owner.clone(), *kind)).or_insert(0) += 1;
        }
        Some(StreamPermit {
            counts: self.clone(),
            owner: owner.clone(),
            kinds,
        })
    }

    /// Streams open on this replica.
    pub(crate) fn total(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|((_, kind), _)| *kind == Kind::Any)
            .map(|(_, open)| open)
            .sum()
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut counts = self.counts.counts.lock().unwrap_or_else(|e| e.into_inner());
        for kind in self.kinds {
            let key = (self.owner.clone(), *kind);
            if let Some(open) = counts.get_mut(&key) {
                *open -= 1;
                if *open == 0 {
                    counts.remove(&key);
                }
            }
        }
    }
}

/// A place among `owner`'s open streams (at most `max`) for an MCP request's stream,
/// or the answer to a request that would open one too many.
pub(crate) fn permit(
    counts: &Arc<StreamCounts>,
    owner: &Owner,
    max: usize,
) -> Result<StreamPermit, RpcError> {
    counts.try_open(owner, max).ok_or_else(|| too_many(max))
}

fn too_many(limit: usize) -> RpcError {
    RpcError {
        error: ErrorObject::new(
            codes::INVALID_REQUEST,
            format!("Too many open streams for this principal (limit {limit}); close one first"),
        ),
        status: StatusCode::TOO_MANY_REQUESTS,
        retry_after: Some(1),
    }
}
