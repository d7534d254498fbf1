//! Identity and limits over real HTTP: bearer JWTs (HS256, and RS256/ES256 from a JWK set
//! file or URL with key rotation), the 401 challenge and RFC 9728 metadata, ownership
//! between principals and tenants with real tokens, the refusal to serve unauthenticated
//! beyond loopback, the per-principal rate and in-flight limits, size and depth limits,
//! and `requestState` key rotation across replicas.
//!
//! Keys are generated per run (nothing secret is checked in); the JWT replicas are the
//! harness's own, with a real `JwtAuth` (`harness::jwt`).

mod jwks;
mod limits;
mod metadata;
mod ownership;
mod startup;
mod state_keys;
mod tokens;

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::http::{self, Answer, Request};

pub(super) const WAIT: Duration = Duration::from_secs(15);

pub(super) fn bearer(token: &str) -> (&'static str, String) {
    ("authorization", format!("Bearer {token}"))
}

/// A request declaring tasks and elicitation, with the routing headers, sent with exactly
/// `headers` besides.
pub(super) async fn post(
    url: &str,
    headers: &[(&str, String)],
    id: Value,
    method: &str,
    params: Value,
) -> Answer {
    assert!(params.is_object(), "params must be an object: {params}");
    let req = Request::rpc_as(id, method, params, mcp_tasks_client::tasks_capabilities());
    with_headers(req, headers).send(&http::client(), url).await
}

/// `body` as it is, with the transport headers, `Mcp-Method` and `headers`.
pub(super) async fn post_body(
    url: &str,
    headers: &[(&str, String)],
    method: &str,
    body: String,
) -> Answer {
    let req = Request::raw(body).set("mcp-method", method);
    with_headers(req, headers).send(&http::client(), url).await
}

fn with_headers(req: Request, headers: &[(&str, String)]) -> Request {
    headers
        .iter()
        .fold(req, |req, (name, value)| req.add(name, value))
}

pub(super) async fn discover_with(url: &str, headers: &[(&str, String)]) -> Answer {
    post(url, headers, json!(1), "server/discover", json!({})).await
}

/// What a 401 must say about the token.
#[derive(Debug, Clone, Copy)]
pub(super) enum Challenge {
    /// No credentials at all: a bare challenge, no error code (RFC 6750 §3.1).
    NoToken,
    /// A bearer token was presented and refused; its `error_description` names `why`.
    InvalidToken(&'static str),
    /// Credentials of another scheme: only the challenge itself is checked.
    OtherScheme,
}

pub(super) fn assert_challenge(raw: &Answer, origin: &str, expect: Challenge, what: &str) {
    assert_eq!(raw.status, 401, "{what}: {raw:?} {}", raw.text());
    let challenge = raw
        .header("www-authenticate")
        .unwrap_or_else(|| panic!("{what}: a 401 must carry WWW-Authenticate: {raw:?}"));
    assert!(
        challenge.starts_with("Bearer"),
        "{what}: the challenge must be for Bearer: {challenge}"
    );
    let metadata = format!("resource_metadata=\"{origin}/.well-known/oauth-protected-resource\"");
    assert!(
        challenge.contains(&metadata),
        "{what}: the challenge must point at the resource metadata ({metadata}): {challenge}"
    );
    match expect {
        Challenge::NoToken => assert!(
            !challenge.contains("error="),
            "{what}: no token, so no error code: {challenge}"
        ),
        Challenge::InvalidToken(why) => {
            assert!(
                challenge.contains("error=\"invalid_token\""),
                "{what}: {challenge}"
            );
            let description = challenge
                .split("error_description=\"")
                .nth(1)
                .unwrap_or_else(|| panic!("{what}: no error_description: {challenge}"));
            assert!(
                description.to_lowercase().contains(why),
                "{what}: the description should say {why:?}: {challenge}"
            );
        }
        Challenge::OtherScheme => {}
    }
    assert_eq!(
        raw.header("content-type"),
        Some("application/json"),
        "{what}"
    );
    let body = raw.json();
    assert_eq!(body["jsonrpc"], "2.0", "{what}: {body}");
    assert_eq!(body["error"]["code"], -32600, "{what}: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{what}: {body}"
    );
    assert!(body.get("result").is_none(), "{what}: {body}");
}

pub(super) fn user_name(name: &str) -> Value {
    json!({ "user_name": { "action": "accept", "content": { "name": name } } })
}
