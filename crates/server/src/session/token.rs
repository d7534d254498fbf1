//! What a 2025-era client carries for the server, signed with the state keys so that any
//! replica can read it and no client can forge or alter it:
//! - the session id (`Mcp-Session-Id`): the negotiated revision and the client's
//!   capabilities, bound to the caller, expiring;
//! - the id of each request the server sends on a call's stream (`elicitation/create`):
//!   which task and input key the answer belongs to, so whichever replica the answer
//!   reaches can apply it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::request_state::StateKeys;

const SESSION_PREFIX: &str = "mcps1.";
const INPUT_PREFIX: &str = "mcpi1.";
/// Larger session ids are refused before any decoding work (they travel in a header).
pub(crate) const MAX_SESSION_ID_BYTES: usize = 8 * 1024;
const MAX_INPUT_ID_BYTES: usize = 2 * 1024;

/// A session, as its id carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SessionToken {
    /// The negotiated protocol version.
    #[serde(rename = "v")]
    pub version: String,
    /// The client's capabilities from `initialize`.
    #[serde(rename = "c")]
    pub capabilities: Map<String, Value>,
    /// Digest of the caller's tenant and principal.
    #[serde(rename = "o")]
    pub owner: String,
    /// Random; names the session in revocations and in the ids of its requests.
    #[serde(rename = "n")]
    pub nonce: String,
    /// Issue and expiry times, Unix milliseconds.
    #[serde(rename = "i")]
    pub issued_ms: i64,
    #[serde(rename = "x")]
    pub expires_ms: i64,
}

impl SessionToken {
    pub(crate) fn sign(&self, keys: &StateKeys) -> String {
        keys.seal(
            SESSION_PREFIX,
            &serde_json::to_vec(self).unwrap_or_default(),
        )
    }

    /// `None` when the id is not one this service issued (forged, altered, another kind
    /// of token, or signed with a key no longer configured).
    pub(crate) fn verify(keys: &StateKeys, id: &str) -> Option<Self> {
        let json = keys.open(SESSION_PREFIX, id, MAX_SESSION_ID_BYTES)?;
        serde_json::from_slice(&json).ok()
    }
}

/// A request the server sent on a stream, as its JSON-RPC id carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct InputRequestId {
    #[serde(rename = "t")]
    pub task: String,
    /// The input key the answer fills in.
    #[serde(rename = "k")]
    pub key: String,
    /// The session the request was sent in: only that session may answer it.
    #[serde(rename = "s")]
    pub session: String,
    #[serde(rename = "o")]
    pub owner: String,
}

impl InputRequestId {
    pub(crate) fn sign(&self, keys: &StateKeys) -> String {
        keys.seal(INPUT_PREFIX, &serde_json::to_vec(self).unwrap_or_default())
    }

    pub(crate) fn verify(keys: &StateKeys, id: &str) -> Option<Self> {
        let json = keys.open(INPUT_PREFIX, id, MAX_INPUT_ID_BYTES)?;
        serde_json::from_slice(&json).ok()
    }
}

/// A fresh session nonce: 128 random bits, hex.
pub fn nonce() -> String {
    rand::random::<[u8; 16]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn session() -> SessionToken {
        SessionToken {
            version: "2025-06-18".into(),
            capabilities: json!({ "elicitation": {} })
                .as_object()
                .cloned()
                .unwrap_or_default(),
            owner: "o".into(),
            nonce: nonce(),
            issued_ms: 1,
            expires_ms: 2,
        }
    }

    #[test]
    fn ids_verify_only_as_what_they_are() {
        let keys = StateKeys::random();
        let s = session();
        let id = s.sign(&keys);
        assert!(id.bytes().all(|b| (0x21..0x7f).contains(&b)), "{id}");
        assert_eq!(SessionToken::verify(&keys, &id), Some(s.clone()));
        assert_eq!(SessionToken::verify(&StateKeys::random(), &id), None);
        assert_eq!(InputRequestId::verify(&keys, &id), None);

        let input = InputRequestId {
            task: "t".into(),
            key: "k".into(),
            session: s.nonce.clone(),
            owner: "o".into(),
        };
        let input_id = input.sign(&keys);
        assert_eq!(InputRequestId::verify(&keys, &input_id), Some(input));
        assert_eq!(SessionToken::verify(&keys, &input_id), None);

        // Any altered byte of the payload breaks the tag.
        let (payload, tag) = id.rsplit_once('.').unwrap_or_default();
        let last = if payload.ends_with('A') { 'B' } else { 'A' };
        let altered = format!("{}{last}.{tag}", &payload[..payload.len() - 1]);
        assert_ne!(altered, id);
        assert_eq!(SessionToken::verify(&keys, &altered), None);
        assert_eq!(SessionToken::verify(&keys, "mcps1.e30.AAAA"), None);
        assert_ne!(nonce(), nonce());
    }
}
