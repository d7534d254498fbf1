//! Group commit: statements of one kind that arrive together (creates on a replica,
//! finishes on a worker) run as one multi-row statement and one commit, and each caller
//! is answered only once that commit is durable.
//!
//! One batch of a kind runs at a time per [`Store`](crate::Store); what arrives meanwhile
//! waits for the next, which is how batches form under load without a timer. Unless the
//! batch before was a single request, a batch lingers up to [`LINGER`] for as many
//! requests as the one before it had, so a steady load keeps its batch size instead of
//! splitting into a big batch and a trail of small ones. A lone caller never waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;

use crate::{Result, StoreError};

/// How long a batch waits for more requests when the previous batch was bigger.
pub(crate) const LINGER: Duration = Duration::from_millis(1);

/// Runs one batch: one answer per request, in order.
pub(crate) type Exec<Req, Resp> =
    fn(PgPool, Vec<Req>) -> Pin<Box<dyn Future<Output = Result<Vec<Resp>>> + Send>>;

type Item<Req, Resp> = (Req, oneshot::Sender<Result<Resp>>);

/// A batcher of one statement kind, shared by every clone of a store.
pub(crate) struct Batcher<Req, Resp> {
    pool: PgPool,
    exec: Exec<Req, Resp>,
    max: usize,
    running: Mutex<Option<Running<Req, Resp>>>,
}

struct Running<Req, Resp> {
    tx: mpsc::UnboundedSender<Item<Req, Resp>>,
    /// The batcher's task ends with the last clone of the store.
    _task: AbortOnDropHandle<()>,
}

impl<Req: Send + 'static, Resp: Send + 'static> Batcher<Req, Resp> {
    pub(crate) fn new(pool: PgPool, max: usize, exec: Exec<Req, Resp>) -> Arc<Self> {
        Arc::new(Self {
            pool,
            exec,
            max,
            running: Mutex::new(None),
        })
    }

    /// Runs `request` in the next batch and returns its answer once that batch committed.
    pub(crate) async fn run(&self, request: Req) -> Result<Resp> {
        let (reply, answer) = oneshot::channel();
        let mut item = (request, reply);
        // Started on first use, in the caller's runtime; started again if that runtime
        // has gone (tests run one per test) and took the task with it.
        for _ in 0..2 {
            let sent = {
                let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
                let r = running.get_or_insert_with(|| self.start());
                match r.tx.send(item) {
                    Ok(()) => None,
                    Err(mpsc::error::SendError(back)) => {
                        *running = None;
                        Some(back)
                    }
                }
            };
            match sent {
                None => {
                    return answer
                        .await
                        .map_err(|_| StoreError::corrupt("the batch was abandoned"))?;
                }
                Some(back) => item = back,
            }
        }
        Err(StoreError::corrupt("the batcher could not be started"))
    }

    fn start(&self) -> Running<Req, Resp> {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = run_batches(self.pool.clone(), self.max, self.exec, rx);
        #[expect(
            clippy::disallowed_methods,
            reason = "owned by the store through AbortOnDropHandle: it stops with the last clone"
        )]
        let handle = tokio::spawn(task);
        Running {
            tx,
            _task: AbortOnDropHandle::new(handle),
        }
    }
}

async fn run_batches<Req, Resp>(
    pool: PgPool,
    max: usize,
    exec: Exec<Req, Resp>,
    mut rx: mpsc::UnboundedReceiver<Item<Req, Resp>>,
) {
    let mut last = 1;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < max {
            match rx.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        if batch.len() < last.min(max) {
            let deadline = tokio::time::Instant::now() + LINGER;
            while batch.len() < last.min(max) {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(item)) => batch.push(item),
                    _ => break,
                }
            }
        }
        last = batch.len();
        let (requests, replies): (Vec<Req>, Vec<_>) = batch.into_iter().unzip();
        match exec(pool.clone(), requests).await {
            Ok(answers) if answers.len() == replies.len() => {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
            }
            Ok(_) => {
                for reply in replies {
                    let _ = reply.send(Err(StoreError::corrupt("a batch lost answers")));
                }
            }
            Err(e) => {
                let shared = Arc::new(e);
                for reply in replies {
                    let _ = reply.send(Err(StoreError::shared(shared.clone())));
                }
            }
        }
    }
}
