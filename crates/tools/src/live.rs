//! The tools of a process whose set can change while it runs (upstream MCP servers that
//! answer after start-up, or that change their lists): a watch over [`Registry`]
//! snapshots, each immutable, so one request sees one consistent set.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

use crate::Registry;

type Sources = dyn Fn() -> Value + Send + Sync;

/// The current [`Registry`], and a report on where its tools come from. Cheap to clone.
#[derive(Clone)]
pub struct LiveRegistry {
    rx: watch::Receiver<Registry>,
    sources: Option<Arc<Sources>>,
}

impl std::fmt::Debug for LiveRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LiveRegistry")
            .field(&*self.rx.borrow())
            .finish()
    }
}

impl LiveRegistry {
    /// `sources` reports the tool sources (for `/readyz`), as a JSON array.
    pub fn new(
        rx: watch::Receiver<Registry>,
        sources: impl Fn() -> Value + Send + Sync + 'static,
    ) -> Self {
        Self {
            rx,
            sources: Some(Arc::new(sources)),
        }
    }

    /// The tools now. Hold the snapshot for the whole of one request.
    pub fn current(&self) -> Registry {
        self.rx.borrow().clone()
    }

    /// The report on the tool sources; `None` when the set is fixed.
    pub fn sources(&self) -> Option<Value> {
        self.sources.as_ref().map(|s| s())
    }

    /// Waits for the next change; `false` once the set can no longer change.
    pub async fn changed(&mut self) -> bool {
        self.rx.changed().await.is_ok()
    }
}

impl From<Registry> for LiveRegistry {
    fn from(registry: Registry) -> Self {
        // The sender is dropped: the value stays readable and never changes.
        let (_, rx) = watch::channel(registry);
        Self { rx, sources: None }
    }
}
