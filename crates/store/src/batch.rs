//! Group commit: statements of one kind that arrive together (creates on a replica,
//! finishes on a worker) run as one multi-row statement and one commit, and each caller
//! is answered only once that commit is durable.
//!
//! One batch of a kind runs at a time per [`Store`](crate::Store); what arrives meanwhile
//! waits for the next, which is how batches form under load without a timer. Unless the
//! batch before was a single request, a batch lingers up to [`LINGER`] for as many
//! requests as the one before it had, so a steady load keeps its batch size instead of
//! splitting into a big batch and a trail of small ones. A lone caller never waits.
//!
//! A batch also stops before its requests pass a byte budget (one larger request goes
//! alone). When a batch's statement fails for anything but an unreachable database, its
//! requests are run again one by one before anyone is answered, so a request that cannot
//! be written (a row the statement cannot store, a row another transaction holds past
//! the lock timeout) fails alone and its neighbours land. Nothing was written by the
//! failed statement (one statement is one transaction), so running them again is safe.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;

use crate::{Result, StoreError};

/// How long a batch waits for more requests when the previous batch was bigger.
pub(crate) const LINGER: Duration = Duration::from_millis(1);

/// Runs one batch: one answer per request, in order.
pub(crate) type Exec<Req, Resp> = for<'a> fn(&'a PgPool, &'a [Req]) -> Answers<'a, Resp>;

/// What an [`Exec`] returns.
pub(crate) type Answers<'a, Resp> = Pin<Box<dyn Future<Output = Result<Vec<Resp>>> + Send + 'a>>;

/// A statement kind and how its batches are formed.
pub(crate) struct Kind<Req, Resp> {
    pub(crate) exec: Exec<Req, Resp>,
    /// Most requests in one batch.
    pub(crate) max: usize,
    /// Most bytes (as the requests count them) in one batch of several.
    pub(crate) max_bytes: usize,
    /// A request whose caller stopped waiting before its batch ran is dropped unsent
    /// (a create nobody would get the handle of); otherwise it is written anyway.
    pub(crate) skip_abandoned: bool,
    /// How many requests of a failed batch run again at once (1: in arrival order).
    pub(crate) retry_at_once: usize,
    /// Whether a batch smaller than the one before waits up to [`LINGER`] to grow. Worth
    /// it where every batch waits for a commit anyway; a read that takes a tenth of
    /// that would mostly wait (tokio's timers tick by the millisecond), so reads take
    /// what has queued while the batch before ran, which under load is a full batch.
    pub(crate) linger: bool,
}

/// The request handed back with its answer.
type Reply<Req, Resp> = oneshot::Sender<Result<(Req, Resp)>>;

struct Item<Req, Resp> {
    request: Req,
    bytes: usize,
    reply: Reply<Req, Resp>,
}

/// A batcher of one statement kind, shared by every clone of a store.
pub(crate) struct Batcher<Req, Resp> {
    pool: PgPool,
    kind: Arc<Kind<Req, Resp>>,
    running: Mutex<Option<Running<Req, Resp>>>,
}

struct Running<Req, Resp> {
    tx: mpsc::UnboundedSender<Item<Req, Resp>>,
    /// The batcher's task ends with the last clone of the store.
    _task: AbortOnDropHandle<()>,
}

impl<Req: Send + Sync + 'static, Resp: Send + 'static> Batcher<Req, Resp> {
    pub(crate) fn new(pool: PgPool, kind: Kind<Req, Resp>) -> Arc<Self> {
        Arc::new(Self {
            pool,
            kind: Arc::new(kind),
            running: Mutex::new(None),
        })
    }

    /// Runs `request` (about `bytes` big) in the next batch and returns it with its
    /// answer once that batch committed.
    ///
    /// The request is queued before this first waits, so futures polled in some order
    /// queue their requests in that order.
    pub(crate) async fn run(&self, request: Req, bytes: usize) -> Result<(Req, Resp)> {
        let (reply, answer) = oneshot::channel();
        let mut item = Item {
            request,
            bytes,
            reply,
        };
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
        let task = run_batches(self.pool.clone(), self.kind.clone(), rx);
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

/// Requests gathered for one batch, within its count and byte limits.
struct Gather<Req, Resp> {
    items: Vec<Item<Req, Resp>>,
    bytes: usize,
    max: usize,
    max_bytes: usize,
}

impl<Req, Resp> Gather<Req, Resp> {
    fn new(first: Item<Req, Resp>, max: usize, max_bytes: usize) -> Self {
        Self {
            bytes: first.bytes,
            items: vec![first],
            max,
            max_bytes,
        }
    }

    /// Takes `item`, or gives it back when the batch is full (by count or bytes).
    fn push(&mut self, item: Item<Req, Resp>) -> std::result::Result<(), Item<Req, Resp>> {
        if self.items.len() >= self.max || self.bytes.saturating_add(item.bytes) > self.max_bytes {
            return Err(item);
        }
        self.bytes += item.bytes;
        self.items.push(item);
        Ok(())
    }
}

async fn run_batches<Req: Sync, Resp>(
    pool: PgPool,
    kind: Arc<Kind<Req, Resp>>,
    mut rx: mpsc::UnboundedReceiver<Item<Req, Resp>>,
) {
    let mut last = 1;
    // A request that arrived but did not fit the batch before: the next one's first.
    let mut held: Option<Item<Req, Resp>> = None;
    loop {
        let first = match held.take() {
            Some(item) => item,
            None => match rx.recv().await {
                Some(item) => item,
                None => return,
            },
        };
        let mut batch = Gather::new(first, kind.max, kind.max_bytes);
        drain(&mut rx, &mut batch, &mut held);
        if !kind.linger && held.is_none() && last > 1 {
            // Under load, let the requests that are ready to be read run up to here
            // before the batch goes: a yield waits for nothing else (when there is
            // nothing else to run it returns at once).
            tokio::task::yield_now().await;
            drain(&mut rx, &mut batch, &mut held);
        }
        if kind.linger && held.is_none() && batch.items.len() < last.min(kind.max) {
            let deadline = tokio::time::Instant::now() + LINGER;
            while held.is_none() && batch.items.len() < last.min(kind.max) {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(item)) => held = batch.push(item).err(),
                    _ => break,
                }
            }
        }
        last = batch.items.len();
        let mut items = batch.items;
        if kind.skip_abandoned {
            items.retain(|item| !item.reply.is_closed());
        }
        if !items.is_empty() {
            answer(&pool, &kind, items).await;
        }
    }
}

/// Takes what has queued into `batch`, until it is full (the one that did not fit is
/// `held` for the next).
fn drain<Req, Resp>(
    rx: &mut mpsc::UnboundedReceiver<Item<Req, Resp>>,
    batch: &mut Gather<Req, Resp>,
    held: &mut Option<Item<Req, Resp>>,
) {
    while held.is_none() {
        match rx.try_recv() {
            Ok(item) => *held = batch.push(item).err(),
            Err(_) => break,
        }
    }
}

/// Runs one batch and answers each of its callers.
async fn answer<Req: Sync, Resp>(
    pool: &PgPool,
    kind: &Kind<Req, Resp>,
    items: Vec<Item<Req, Resp>>,
) {
    let (requests, replies): (Vec<Req>, Vec<Reply<Req, Resp>>) =
        items.into_iter().map(|i| (i.request, i.reply)).unzip();
    match (kind.exec)(pool, &requests).await {
        Ok(answers) if answers.len() == replies.len() => {
            for ((request, reply), answer) in requests.into_iter().zip(replies).zip(answers) {
                let _ = reply.send(Ok((request, answer)));
            }
        }
        Ok(_) => {
            for reply in replies {
                let _ = reply.send(Err(StoreError::corrupt("a batch lost answers")));
            }
        }
        Err(e) if replies.len() > 1 && !e.is_unavailable() => {
            tracing::warn!(
                error = %e,
                requests = replies.len(),
                "a batch failed; running its requests one by one, so only the one at fault fails"
            );
            one_by_one(pool, kind, requests, replies).await;
        }
        Err(e) => {
            let shared = Arc::new(e);
            for reply in replies {
                let _ = reply.send(Err(StoreError::shared(shared.clone())));
            }
        }
    }
}

/// Runs each request of a failed batch as a batch of its own. Once the database turns
/// out to be unreachable, the rest are answered with that at once rather than each
/// waiting to find out.
async fn one_by_one<Req: Sync, Resp>(
    pool: &PgPool,
    kind: &Kind<Req, Resp>,
    requests: Vec<Req>,
    replies: Vec<Reply<Req, Resp>>,
) {
    let down: Mutex<Option<Arc<StoreError>>> = Mutex::new(None);
    let down = &down;
    let runs = requests
        .into_iter()
        .zip(replies)
        .map(|(request, reply)| async move {
            if kind.skip_abandoned && reply.is_closed() {
                return;
            }
            let unreachable = down.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(e) = unreachable {
                let _ = reply.send(Err(StoreError::shared(e)));
                return;
            }
            let answer = match (kind.exec)(pool, std::slice::from_ref(&request)).await {
                Ok(mut answers) if answers.len() == 1 => match answers.pop() {
                    Some(answer) => Ok((request, answer)),
                    None => Err(StoreError::corrupt("a batch lost answers")),
                },
                Ok(_) => Err(StoreError::corrupt("a batch lost answers")),
                Err(e) if e.is_unavailable() => {
                    let e = Arc::new(e);
                    *down.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.clone());
                    Err(StoreError::shared(e))
                }
                Err(e) => Err(e),
            };
            let _ = reply.send(answer);
        });
    futures::stream::iter(runs)
        .buffer_unordered(kind.retry_at_once.max(1))
        .for_each(|()| async {})
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(bytes: usize) -> Item<(), ()> {
        Item {
            request: (),
            bytes,
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn a_batch_stops_before_its_byte_budget_and_its_count() {
        let mut batch = Gather::new(item(60), 3, 100);
        assert!(batch.push(item(40)).is_ok());
        assert!(batch.push(item(1)).is_err(), "past the byte budget");
        assert_eq!((batch.items.len(), batch.bytes), (2, 100));

        // One request larger than the budget still goes, alone.
        let mut alone = Gather::new(item(500), 3, 100);
        assert!(alone.push(item(0)).is_err());

        let mut small = Gather::new(item(0), 3, 100);
        assert!(small.push(item(0)).is_ok() && small.push(item(0)).is_ok());
        assert!(small.push(item(0)).is_err(), "past the count");
    }
}
