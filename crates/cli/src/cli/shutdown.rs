//! Signals: the first SIGTERM or SIGINT drains, a second one exits.

use tokio_util::sync::CancellationToken;

/// The first SIGTERM or SIGINT starts a graceful shutdown; a second one exits at once.
#[expect(
    clippy::disallowed_methods,
    reason = "the signal watcher lives as long as the process: it is what ends it"
)]
pub(super) fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::info!(
            "shutdown requested; finishing in-flight work (signal again to exit at once)"
        );
        t.cancel();
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
    token
}
