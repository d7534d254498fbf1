//! How many listen streams each owner holds open on this replica.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mcp_tasks_store::Owner;

/// Open streams per owner on this replica.
#[derive(Default)]
pub(crate) struct StreamCounts {
    counts: Mutex<HashMap<Owner, usize>>,
}

/// One open stream; released when the stream ends.
pub(crate) struct StreamPermit {
    counts: Arc<StreamCounts>,
    owner: Owner,
}

impl StreamCounts {
    pub(crate) fn try_open(self: &Arc<Self>, owner: &Owner, limit: usize) -> Option<StreamPermit> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let open = counts.entry(owner.clone()).or_insert(0);
        if *open >= limit {
            return None;
        }
        *open += 1;
        Some(StreamPermit {
            counts: self.clone(),
            owner: owner.clone(),
        })
    }

    /// Streams open on this replica.
    pub(crate) fn total(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut counts = self.counts.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(open) = counts.get_mut(&self.owner) {
            *open -= 1;
            if *open == 0 {
                counts.remove(&self.owner);
            }
        }
    }
}
