//! MRTR `requestState`: what a replica needs to resume a `tools/call` after the client
//! answered input requests, carried by the client because no replica keeps it.
//!
//! The client must not be able to forge or alter it, so it is signed with HMAC-SHA256
//! under a key all replicas share (`MCP_TASKS_STATE_KEY`). Several keys may be given:
//! the first signs, all verify, so keys rotate without breaking exchanges in flight.
//! The state is bound to the caller, the tool and its arguments, and expires.

mod aead;

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use mcp_tasks_store::Owner;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

const PREFIX: &str = "v1.";
/// Larger tokens are refused before any decoding work.
const MAX_TOKEN_BYTES: usize = 256 * 1024;

/// Signing keys; the first signs, every one verifies.
#[derive(Clone)]
pub struct StateKeys {
    keys: Arc<Vec<Vec<u8>>>,
}

impl std::fmt::Debug for StateKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateKeys({} keys, redacted)", self.keys.len())
    }
}

impl StateKeys {
    /// Parses a comma-separated list of keys, each hex or base64 and at least 32 bytes.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let keys = spec
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .enumerate()
            .map(|(i, k)| {
                let bytes = decode_key(k)
                    .ok_or_else(|| format!("state key #{} is neither hex nor base64", i + 1))?;
                if bytes.len() < 32 {
                    return Err(format!(
                        "state key #{} is {} bytes; at least 32 are required",
                        i + 1,
                        bytes.len()
                    ));
                }
                Ok(bytes)
            })
            .collect::<Result<Vec<_>, String>>()?;
        if keys.is_empty() {
            return Err("no state key given".into());
        }
        Ok(Self {
            keys: Arc::new(keys),
        })
    }

    /// A key of this process only: MRTR exchanges then work only when every round
    /// reaches this same replica.
    pub fn random() -> Self {
        Self {
            keys: Arc::new(vec![rand::random::<[u8; 32]>().to_vec()]),
        }
    }

    fn mac(key: &[u8], payload: &str) -> HmacSha256 {
        // HMAC accepts keys of any length.
        let mut mac = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        mac.update(payload.as_bytes());
        mac
    }

    pub(crate) fn sign(&self, state: &RequestState) -> String {
        self.seal(PREFIX, &serde_json::to_vec(state).unwrap_or_default())
    }

    /// `{prefix}{base64(payload)}.{base64(tag)}`: the prefix names what the token is, and
    /// is covered by the tag, so a token of one kind never verifies as another.
    pub fn seal(&self, prefix: &str, payload: &[u8]) -> String {
        let signed = format!("{prefix}{}", B64.encode(payload));
        let tag = Self::mac(&self.keys[0], &signed).finalize().into_bytes();
        format!("{signed}.{}", B64.encode(tag))
    }

    /// The payload of a token [`Self::seal`]ed with `prefix` under any of the keys, or
    /// `None` when it is malformed, of another kind, longer than `max_bytes`, or forged.
    pub fn open(&self, prefix: &str, token: &str, max_bytes: usize) -> Option<Vec<u8>> {
        if token.len() > max_bytes {
            return None;
        }
        let (signed, tag) = token.rsplit_once('.')?;
        let tag = B64.decode(tag).ok()?;
        if !self
            .keys
            .iter()
            .any(|key| Self::mac(key, signed).verify_slice(&tag).is_ok())
        {
            return None;
        }
        B64.decode(signed.strip_prefix(prefix)?).ok()
    }

    pub(crate) fn verify(&self, token: &str) -> Result<RequestState, &'static str> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err("requestState is too large");
        }
        let (payload, tag) = token.rsplit_once('.').ok_or("requestState is malformed")?;
        let tag = B64.decode(tag).map_err(|_| "requestState is malformed")?;
        let authentic = self
            .keys
            .iter()
            .any(|key| Self::mac(key, payload).verify_slice(&tag).is_ok());
        if !authentic {
            return Err("requestState was not issued by this server or was altered");
        }
        let body = payload
            .strip_prefix(PREFIX)
            .ok_or("requestState has an unknown version")?;
        let json = B64.decode(body).map_err(|_| "requestState is malformed")?;
        serde_json::from_slice(&json).map_err(|_| "requestState is malformed")
    }
}

fn decode_key(k: &str) -> Option<Vec<u8>> {
    if k.len().is_multiple_of(2) && k.bytes().all(|b| b.is_ascii_hexdigit()) {
        return (0..k.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&k[i..i + 2], 16).ok())
            .collect();
    }
    base64::engine::general_purpose::STANDARD
        .decode(k)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(k))
        .ok()
}

/// What an MRTR round carries forward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RequestState {
    /// The tool being called (or the prompt, or the resource URI, per `method`).
    #[serde(rename = "t")]
    pub tool: String,
    /// `None` for `tools/call`; `prompts/get` or `resources/read` for their rounds, so a
    /// state issued for one method never resumes another.
    #[serde(rename = "m", default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Digest of the caller's tenant and principal.
    #[serde(rename = "o")]
    pub owner: String,
    /// Expiry, Unix milliseconds.
    #[serde(rename = "x")]
    pub expires_ms: i64,
    #[serde(rename = "k")]
    pub kind: StateKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum StateKind {
    /// Before any task exists: the arguments (by digest), the answers so far, and the
    /// requests now outstanding.
    Pre {
        args: String,
        answers: Map<String, Value>,
        pending: Map<String, Value>,
    },
    /// A task run for a client that cannot poll tasks, now waiting for input.
    Task { task: String },
}

pub(crate) fn owner_digest(owner: &Owner) -> String {
    digest(format!("{}\u{0}{}", owner.tenant, owner.principal).as_bytes())
}

/// Digest of a JSON value with object keys sorted, so key order never matters.
pub(crate) fn value_digest(value: &Value) -> String {
    fn canonical(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    canonical(&m[k], out);
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    canonical(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut s = String::new();
    canonical(value, &mut s);
    digest(s.as_bytes())
}

fn digest(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state() -> RequestState {
        RequestState {
            method: None,
            tool: "t".into(),
            owner: owner_digest(&Owner::new("a", "b")),
            expires_ms: 1,
            kind: StateKind::Pre {
                args: value_digest(&json!({"b":1,"a":[1,{"y":2,"x":1}]})),
                answers: Map::new(),
                pending: Map::new(),
            },
        }
    }

    #[test]
    fn round_trips_and_rejects_tampering() {
        let keys = StateKeys::random();
        let token = keys.sign(&state());
        assert_eq!(keys.verify(&token).unwrap(), state());

        let (payload, tag) = token.rsplit_once('.').unwrap();
        let mut forged = state();
        forged.tool = "other".into();
        let forged_payload = format!(
            "{PREFIX}{}",
            B64.encode(serde_json::to_vec(&forged).unwrap())
        );
        assert!(keys.verify(&format!("{forged_payload}.{tag}")).is_err());
        assert!(keys.verify(&format!("{payload}x.{tag}")).is_err());
        assert!(keys.verify("garbage").is_err());
        assert!(StateKeys::random().verify(&token).is_err());
    }

    #[test]
    fn sealed_tokens_keep_their_kind() {
        let keys = StateKeys::random();
        let token = keys.seal("s1.", b"{}");
        assert_eq!(keys.open("s1.", &token, 1024).as_deref(), Some(&b"{}"[..]));
        assert_eq!(keys.open("e1.", &token, 1024), None);
        assert_eq!(keys.open("s1.", &token, 8), None);
        assert_eq!(StateKeys::random().open("s1.", &token, 1024), None);
        let forged = token.replacen("s1.", "e1.", 1);
        assert_eq!(keys.open("e1.", &forged, 1024), None);
        // A requestState is not a session, nor the other way round.
        assert!(keys.verify(&token).is_err());
        assert_eq!(keys.open("s1.", &keys.sign(&state()), 1024), None);
    }

    #[test]
    fn previous_keys_still_verify() {
        let old = "11".repeat(32);
        let new = "22".repeat(32);
        let before = StateKeys::parse(&old).unwrap();
        let token = before.sign(&state());
        let rotated = StateKeys::parse(&format!("{new},{old}")).unwrap();
        assert!(rotated.verify(&token).is_ok());
        assert!(StateKeys::parse(&new).unwrap().verify(&token).is_err());
        assert!(StateKeys::parse("abcd").is_err());
    }

    #[test]
    fn digests_ignore_key_order() {
        assert_eq!(
            value_digest(&json!({"a":1,"b":{"c":2,"d":3}})),
            value_digest(&json!({"b":{"d":3,"c":2},"a":1}))
        );
        assert_ne!(value_digest(&json!({"a":1})), value_digest(&json!({"a":2})));
    }
}
