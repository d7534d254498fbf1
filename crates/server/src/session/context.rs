//! The session a request belongs to: read from its `Mcp-Session-Id`, checked, and turned
//! into what the 2026-07-28 methods read from `_meta`.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, StatusCode};
use mcp_tasks_store::Owner;
use mcp_tasks_wire::headers::{PROTOCOL_VERSION, SESSION_ID};
use mcp_tasks_wire::{ClientCapabilities, ErrorObject, RequestMeta, codes};
use serde_json::{Map, Value};
use time::OffsetDateTime;

use super::revision::Revision;
use super::token::SessionToken;
use crate::AppState;
use crate::error::RpcError;
use crate::request_state::owner_digest;

/// A session every check has passed.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) revision: Revision,
    pub(crate) token: SessionToken,
}

impl Session {
    /// What the client declared, as far as this revision defines it: no elicitation
    /// before 2025-06-18, no URL mode before 2025-11-25, and never the 2026-07-28
    /// extensions (they are declared per request, which sessions do not do).
    pub(crate) fn capabilities(&self) -> ClientCapabilities {
        let mut caps = self.token.capabilities.clone();
        caps.remove("extensions");
        if !self.revision.has_elicitation() {
            caps.remove("elicitation");
        } else if !self.revision.has_url_elicitation()
            && let Some(Value::Object(elicitation)) = caps.get_mut("elicitation")
        {
            elicitation.remove("url");
        }
        ClientCapabilities(caps)
    }

    /// The request's `_meta` as a 2026-07-28 method reads it: the session's version and
    /// capabilities, and the request's own progress token.
    pub(crate) fn meta(&self, params: &Map<String, Value>) -> RequestMeta {
        RequestMeta {
            protocol_version: self.revision.as_str().to_owned(),
            client_capabilities: self.capabilities(),
            client_info: None,
            progress_token: progress_token(params),
        }
    }

    /// Whether the client can answer this input request (`{"method", "params"}`) in this
    /// revision.
    pub(crate) fn can_answer(&self, request: &Value) -> bool {
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        self.capabilities()
            .can_answer(method, request.get("params"))
    }
}

/// `params._meta.progressToken`, when it is one (a string or an integer).
pub(crate) fn progress_token(params: &Map<String, Value>) -> Option<Value> {
    let token = params.get("_meta")?.get("progressToken")?;
    (token.is_string() || token.is_i64() || token.is_u64()).then(|| token.clone())
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub fn time_of(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// An error the transport answers with an HTTP status of its own.
pub(crate) fn transport_error(status: StatusCode, detail: impl std::fmt::Display) -> RpcError {
    RpcError {
        error: ErrorObject::new(codes::INVALID_REQUEST, format!("Invalid request: {detail}")),
        status,
        retry_after: None,
    }
}

/// The session named by the request's `Mcp-Session-Id`, checked: issued by this service,
/// to this caller, not expired, not ended; and the request's `MCP-Protocol-Version`, when
/// it sends one, is the session's. Anything else is refused as the 2025 transport says:
/// 400 without a session id, 404 for one that is not (or no longer) a session.
pub(crate) async fn resolve(
    state: &AppState,
    owner: &Owner,
    headers: &HeaderMap,
) -> Result<Session, RpcError> {
    let mut values = headers.get_all(SESSION_ID).iter();
    let (Some(raw), None) = (values.next(), values.next()) else {
        return Err(transport_error(
            StatusCode::BAD_REQUEST,
            "this request needs exactly one Mcp-Session-Id header; send initialize first to get one",
        ));
    };
    let gone = |why: &str| {
        tracing::info!(reason = why, "session refused");
        transport_error(
            StatusCode::NOT_FOUND,
            "session not found (it expired, was ended, or was not issued to this client); initialize a new session",
        )
    };
    let id = raw.to_str().map_err(|_| gone("not ASCII"))?;
    let token =
        SessionToken::verify(state.state_keys(), id).ok_or_else(|| gone("not issued here"))?;
    if token.owner != owner_digest(owner) {
        return Err(gone("issued to another caller"));
    }
    if token.expires_ms <= now_ms() {
        return Err(gone("expired"));
    }
    let revision = Revision::parse(&token.version).ok_or_else(|| gone("unknown revision"))?;
    if let Some(sent) = headers.get(PROTOCOL_VERSION) {
        let sent = sent.to_str().unwrap_or("");
        if sent != revision.as_str() {
            return Err(transport_error(
                StatusCode::BAD_REQUEST,
                format!("MCP-Protocol-Version {sent:?} is not this session's version ({revision})"),
            ));
        }
    }
    if state
        .sessions()
        .session_revoked(owner, &token.nonce, time_of(token.issued_ms))
        .await?
    {
        return Err(gone("ended"));
    }
    Ok(Session { revision, token })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn session(revision: Revision, caps: Value) -> Session {
        Session {
            revision,
            token: SessionToken {
                version: revision.as_str().into(),
                capabilities: caps.as_object().cloned().unwrap_or_default(),
                owner: String::new(),
                nonce: String::new(),
                issued_ms: 0,
                expires_ms: 0,
            },
        }
    }

    #[test]
    fn capabilities_are_read_as_the_revision_defines_them() {
        let caps = json!({
            "elicitation": { "form": {}, "url": {} },
            "sampling": {},
            "extensions": { "io.modelcontextprotocol/tasks": {} }
        });
        let form = json!({ "method": "elicitation/create", "params": { "mode": "form" } });
        let url = json!({ "method": "elicitation/create", "params": { "mode": "url" } });
        let old = session(Revision::V2025_03_26, caps.clone());
        assert!(!old.can_answer(&form));
        assert!(old.can_answer(&json!({ "method": "sampling/createMessage" })));
        let mid = session(Revision::V2025_06_18, caps.clone());
        assert!(mid.can_answer(&form) && !mid.can_answer(&url));
        let new = session(Revision::V2025_11_25, caps);
        assert!(new.can_answer(&form) && new.can_answer(&url));
        assert!(!new.capabilities().declares_tasks());
        let bare = session(Revision::V2025_06_18, json!({ "elicitation": {} }));
        assert!(bare.can_answer(&form));
    }

    #[test]
    fn meta_carries_the_session_and_the_progress_token() {
        let s = session(Revision::V2025_06_18, json!({}));
        let params = json!({ "_meta": { "progressToken": 7 } });
        let meta = s.meta(params.as_object().unwrap_or(&Map::new()));
        assert_eq!(meta.protocol_version, "2025-06-18");
        assert_eq!(meta.progress_token, Some(json!(7)));
        let params = json!({ "_meta": { "progressToken": 1.5 } });
        assert_eq!(
            progress_token(params.as_object().unwrap_or(&Map::new())),
            None
        );
        assert_eq!(time_of(1_500).unix_timestamp(), 1);
    }
}
