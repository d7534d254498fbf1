//! What a console stream rests on ([`Signed`]): the viewer it was opened for, verified
//! again by the shell (`sse`) every few seconds and before its events, exactly as each
//! request is (the token by the API's authenticator, the session not signed out on any
//! replica), so a stream ends within seconds of a sign-out in another tab, of its token's
//! expiry, or of its viewer losing the admin claim. The browser then reconnects, and
//! what it reconnects with decides what it sees next (a renewed session, the sign-in
//! page).

use axum::http::{HeaderMap, header};

use super::session::{NoViewer, Viewer};
use mcp_tasks_server::AppState;
use mcp_tasks_server::core::{Checked, End, Standing};

pub(crate) struct Signed {
    /// The request's headers, without its cookies (the session stands for them).
    headers: HeaderMap,
    viewer: Viewer,
}

impl Signed {
    pub(crate) fn new(headers: &HeaderMap, viewer: &Viewer) -> Self {
        let mut headers = headers.clone();
        headers.remove(header::COOKIE);
        Self {
            headers,
            viewer: viewer.clone(),
        }
    }
}

impl Standing for Signed {
    async fn check(&mut self, state: &AppState) -> Checked {
        let session = self.viewer.session.clone();
        match Viewer::again(state, &self.headers, session).await {
            Ok(now) if now.owner != self.viewer.owner => Checked::Ended(End::Expired),
            // What the stream shows may be the tenant's: an admin's stream ends with the
            // claim (one that gains it sees more after a reload).
            Ok(now) if self.viewer.is_admin && !now.is_admin => Checked::Ended(End::Demoted),
            Ok(now) => Checked::Good {
                expires: now.expires,
            },
            Err(NoViewer::SignedOut) => Checked::Ended(End::Revoked),
            Err(NoViewer::Store(_)) => Checked::Unknown,
            Err(NoViewer::Refused(_) | NoViewer::NoSession | NoViewer::RateLimited) => {
                Checked::Ended(End::Expired)
            }
        }
    }
}
