//! Wake-up duty: one idle worker per set of tools answers "there is work" notifications
//! (see `mcp_tasks_store::Duty` and ARCHITECTURE.md, "Wake-ups").
//!
//! The claim loop says what it wants: the duty of its tools while it is idle with free
//! slots and the queue has nothing more for it, none while it is busy. This loop follows
//! that: it queues for the duty, and once it has it, wakes the claim loop at once (work
//! may have arrived while the duty was passed on), then hands it over when the claim loop
//! no longer wants it. The listen loop passes notifications on only while on duty.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mcp_tasks_store::DUTY_WAIT_ROUND;
use mcp_tasks_wire::backoff::Backoff;
use tokio_util::sync::CancellationToken;

use crate::Shared;

pub(crate) async fn duty(shared: Arc<Shared>, shutdown: CancellationToken) {
    let mut want = shared.want_duty.subscribe();
    let mut duty = shared.store.duty();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let wanted = *want.borrow_and_update();
        match wanted {
            None => {
                shared.on_duty.store(false, Ordering::SeqCst);
                if let Err(e) = duty.hand_over().await {
                    tracing::debug!(error = %e, "handing over the wake-up duty failed; its connection is closed");
                }
            }
            Some(key) if duty.held() != Some(key) => {
                shared.on_duty.store(false, Ordering::SeqCst);
                let taken = tokio::select! {
                    taken = duty.take(key) => taken,
                    () = shutdown.cancelled() => break,
                };
                match taken {
                    Ok(()) => {
                        backoff.reset();
                        // Busy again, or other tools, by now: pass it on (the loop does).
                        if *want.borrow() == Some(key) {
                            shared.on_duty.store(true, Ordering::SeqCst);
                            shared.wake.notify_one();
                        }
                        continue;
                    }
                    Err(e) => {
                        // Without the duty this worker still polls; and while the duty
                        // cannot be had, it answers notifications itself.
                        let delay = backoff.next_delay();
                        tracing::debug!(error = %e, retry_ms = delay.as_millis() as u64, "could not queue for the wake-up duty");
                        shared.on_duty.store(true, Ordering::SeqCst);
                        tokio::select! {
                            () = tokio::time::sleep(delay) => {}
                            () = shutdown.cancelled() => break,
                        }
                        continue;
                    }
                }
            }
            Some(_) => shared.on_duty.store(true, Ordering::SeqCst),
        }
        tokio::select! {
            changed = want.changed() => if changed.is_err() { break },
            // A server gone silent holds the duty for nobody: find out, and queue anew.
            () = tokio::time::sleep(DUTY_WAIT_ROUND), if duty.held().is_some() => {
                if let Err(e) = duty.check().await {
                    tracing::warn!(error = %e, "lost the wake-up duty's connection; queueing again");
                    shared.on_duty.store(false, Ordering::SeqCst);
                }
            }
            () = shutdown.cancelled() => break,
        }
    }
    shared.on_duty.store(false, Ordering::SeqCst);
    duty.close().await;
}
