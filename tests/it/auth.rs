//! Identity and limits over real HTTP: bearer JWTs (HS256, and RS256/ES256 from a JWK set
//! file or URL with key rotation), the 401 challenge and RFC 9728 metadata, ownership
//! between principals and tenants with real tokens, the refusal to serve unauthenticated
//! beyond loopback, the per-principal rate and in-flight limits, size and depth limits,
//! and `requestState` key rotation across replicas.
//!
//! Keys are generated per run (nothing secret is checked in); the JWT replicas are built
//! here, like the harness builds its own, but with a real `JwtAuth`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD as B64};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcp_tasks_client::{Client, Subscription};
use mcp_tasks_server::{
    AppState, JwtAuth, JwtConfig, KeySource, ProtectedResource, RateLimit, ServerConfig, StateKeys,
};
use mcp_tasks_store::{Store, TaskId};
use mcp_tasks_wire::secret::Secret;
use mcp_tasks_wire::{PROTOCOL_VERSION, meta_keys};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::harness::{Replica, TestDb, procs, registry, server_config, status, task_id};

const WAIT: Duration = Duration::from_secs(15);
const ISSUER: &str = "https://issuer.mcp-tasks.test";
const SECRET: &str = "an-hs256-test-secret-of-more-than-32-bytes";
const OTHER_SECRET: &str = "another-hs256-secret-of-more-than-32-bytes";

// ---------------------------------------------------------------------------------------
// Keys and tokens
// ---------------------------------------------------------------------------------------

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// What a well-formed token for `audience` carries.
fn claims(audience: &str, sub: &str, tenant: &str) -> Value {
    json!({
        "iss": ISSUER,
        "aud": audience,
        "sub": sub,
        "tenant": tenant,
        "iat": now(),
        "exp": now() + 600,
    })
}

/// `claims` with one change: `Some(v)` sets the claim, `None` removes it.
fn with(mut claims: Value, claim: &str, value: Option<Value>) -> Value {
    let object = claims.as_object_mut().expect("object");
    match value {
        Some(v) => object.insert(claim.into(), v),
        None => object.remove(claim),
    };
    claims
}

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, key).expect("signing a token")
}

fn hmac_key(secret: &[u8]) -> EncodingKey {
    EncodingKey::from_secret(secret).expect("HMAC key")
}

fn hs256(secret: &[u8], claims: &Value) -> String {
    sign(Algorithm::HS256, None, &hmac_key(secret), claims)
}

/// A token with `"alg": "none"` and no signature, made by hand (no library signs those).
fn unsigned(claims: &Value) -> String {
    let header = B64.encode(json!({ "alg": "none", "typ": "JWT" }).to_string());
    let payload = B64.encode(claims.to_string());
    format!("{header}.{payload}.")
}

struct RsaKey {
    /// PKCS#1 DER, what `EncodingKey::from_rsa_der` takes.
    private_der: Vec<u8>,
    n: String,
    e: String,
    /// The public key as PEM: the "secret" of the classic algorithm-confusion attack.
    public_pem: String,
}

impl RsaKey {
    fn generate() -> Self {
        use rsa::pkcs1::{EncodeRsaPrivateKey, EncodeRsaPublicKey, LineEnding};
        use rsa::traits::PublicKeyParts;
        let key = rsa::PrivateKey::new(&mut getrandom::SysRng, 2048).expect("RSA key");
        let public = key.to_public_key();
        Self {
            private_der: key.to_pkcs1_der().expect("PKCS#1").as_bytes().to_vec(),
            n: B64.encode(public.n_bytes()),
            e: B64.encode(public.e_bytes()),
            public_pem: public.to_pkcs1_pem(LineEnding::LF).expect("PEM"),
        }
    }

    fn jwk(&self, kid: &str) -> Value {
        json!({ "kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": self.n, "e": self.e })
    }

    fn sign(&self, kid: Option<&str>, claims: &Value) -> String {
        sign(
            Algorithm::RS256,
            kid,
            &EncodingKey::from_rsa_der(&self.private_der),
            claims,
        )
    }
}

struct EcKey {
    /// PKCS#8 DER, what `EncodingKey::from_ec_der` takes.
    private_der: Vec<u8>,
    x: String,
    y: String,
}

impl EcKey {
    fn generate() -> Self {
        use p256::elliptic_curve::Generate;
        use p256::pkcs8::EncodePrivateKey;
        let key = p256::SecretKey::generate();
        let point = key.public_key().to_sec1_bytes();
        assert_eq!((point.len(), point[0]), (65, 4), "an uncompressed point");
        Self {
            private_der: key.to_pkcs8_der().expect("PKCS#8").as_bytes().to_vec(),
            x: B64.encode(&point[1..33]),
            y: B64.encode(&point[33..]),
        }
    }

    fn jwk(&self, kid: &str) -> Value {
        json!({
            "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
            "x": self.x, "y": self.y,
        })
    }

    fn sign(&self, kid: Option<&str>, claims: &Value) -> String {
        sign(
            Algorithm::ES256,
            kid,
            &EncodingKey::from_ec_der(&self.private_der),
            claims,
        )
    }
}

/// A directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let path =
            std::env::temp_dir().join(format!("mcp-tasks-auth-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path).expect("temp dir");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------------------
// A replica that requires bearer JWTs
// ---------------------------------------------------------------------------------------

struct JwtReplica {
    /// The MCP endpoint, which is also the resource identifier and the token audience.
    url: String,
    /// `http://127.0.0.1:port`
    origin: String,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl JwtReplica {
    /// HS256 with `SECRET`, issuer and audience (the resource URL) required.
    async fn hs256(store: &Store) -> Self {
        Self::start(
            store,
            server_config(),
            KeySource::Hs256(Secret::new(SECRET)),
            |_| {},
            Vec::new(),
        )
        .await
    }

    async fn start(
        store: &Store,
        mut config: ServerConfig,
        keys: KeySource,
        tweak: impl FnOnce(&mut JwtConfig),
        authorization_servers: Vec<String>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let origin = format!("http://{addr}");
        let url = format!("{origin}/mcp");
        let mut jwt = JwtConfig::new(keys);
        jwt.issuer = Some(ISSUER.into());
        jwt.audience = Some(url.clone());
        tweak(&mut jwt);
        let auth = JwtAuth::new(jwt).await.expect("JWT configuration");
        config.protected_resource = Some(ProtectedResource {
            resource: url.clone(),
            authorization_servers,
        });
        let shutdown = CancellationToken::new();
        let state = AppState::new(
            store.clone(),
            registry("conformance"),
            config,
            Arc::new(auth),
            StateKeys::random(),
            shutdown.clone(),
        );
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            mcp_tasks_server::serve(listener, state, async move { stop.cancelled().await })
                .await
                .expect("serve");
        });
        Self {
            url,
            origin,
            shutdown,
            task,
        }
    }

    fn client(&self, token: impl Into<String>) -> Client {
        Client::with_tasks(&self.url).bearer(token)
    }

    fn metadata_url(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource", self.origin)
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }
}

// ---------------------------------------------------------------------------------------
// Raw HTTP
// ---------------------------------------------------------------------------------------

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("http client")
}

struct Raw {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl std::fmt::Debug for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Raw")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &self.text())
            .finish()
    }
}

impl Raw {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "HTTP {} body is not JSON ({e}): {}",
                self.status,
                self.text()
            )
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

fn bearer(token: &str) -> (&'static str, String) {
    ("authorization", format!("Bearer {token}"))
}

/// A request declaring tasks and elicitation, with the routing headers, sent with exactly
/// `headers` besides.
async fn post(
    url: &str,
    headers: &[(&str, String)],
    id: Value,
    method: &str,
    params: Value,
) -> Raw {
    let mut params = match params {
        Value::Object(m) => m,
        other => panic!("params must be an object: {other}"),
    };
    params.entry("_meta").or_insert_with(|| {
        json!({
            meta_keys::PROTOCOL_VERSION: PROTOCOL_VERSION,
            meta_keys::CLIENT_CAPABILITIES: mcp_tasks_client::tasks_capabilities(),
        })
    });
    let name = ["name", "taskId"]
        .iter()
        .find_map(|k| params.get(*k).and_then(Value::as_str))
        .map(mcp_tasks_wire::headers::encode_value);
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    let mut all: Vec<(&str, String)> = headers.to_vec();
    if let Some(name) = name {
        all.push(("mcp-name", name));
    }
    post_body(url, &all, method, body.to_string()).await
}

async fn post_body(url: &str, headers: &[(&str, String)], method: &str, body: String) -> Raw {
    let mut request = http()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .header("mcp-method", method)
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let response = request.send().await.expect("HTTP request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("body").to_vec();
    Raw {
        status,
        headers,
        body,
    }
}

async fn discover_with(url: &str, headers: &[(&str, String)]) -> Raw {
    post(url, headers, json!(1), "server/discover", json!({})).await
}

/// What a 401 must say about the token.
#[derive(Debug, Clone, Copy)]
enum Challenge {
    /// No credentials at all: a bare challenge, no error code (RFC 6750 §3.1).
    NoToken,
    /// A bearer token was presented and refused; its `error_description` names `why`.
    InvalidToken(&'static str),
    /// Credentials of another scheme: only the challenge itself is checked.
    OtherScheme,
}

fn assert_challenge(raw: &Raw, origin: &str, expect: Challenge, what: &str) {
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

fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

async fn count_tasks(db: &TestDb) -> i64 {
    let mut conn = db.sql().await;
    sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&mut conn)
        .await
        .expect("count")
}

// ---------------------------------------------------------------------------------------
// 1. HS256
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hs256_tokens_are_validated_and_every_refusal_is_a_401_challenge() {
    let db = TestDb::new().await;
    let replica = JwtReplica::hs256(&db.store).await;
    let aud = replica.url.clone();
    let good = claims(&aud, "alice", "t1");
    let token = hs256(SECRET.as_bytes(), &good);

    // A valid token works for discovery and for a tool call.
    let client = replica.client(&token);
    let discovered = client.discover().await.expect("server/discover");
    assert!(discovered["capabilities"].is_object(), "{discovered}");
    let greeted = client
        .call_tool("greet", json!({ "name": "Alice" }))
        .await
        .expect("tools/call");
    assert_eq!(text_of(&greeted), "Hello, Alice!", "{greeted}");
    // The auth scheme is case-insensitive (RFC 7235 §2.1).
    let lower = discover_with(
        &replica.url,
        &[("authorization", format!("bearer {token}"))],
    )
    .await;
    assert_eq!(lower.status, 200, "{}", lower.text());
    // An audience list that names this resource is fine.
    let listed = hs256(
        SECRET.as_bytes(),
        &with(
            good.clone(),
            "aud",
            Some(json!(["https://other.example/api", aud])),
        ),
    );
    let raw = discover_with(&replica.url, &[bearer(&listed)]).await;
    assert_eq!(raw.status, 200, "aud as a list: {}", raw.text());
    // Clock skew within the 30 s leeway is tolerated on exp and nbf.
    for (what, claim, value) in [
        ("exp 5 s ago", "exp", now() - 5),
        ("nbf in 5 s", "nbf", now() + 5),
    ] {
        let t = hs256(
            SECRET.as_bytes(),
            &with(good.clone(), claim, Some(json!(value))),
        );
        let raw = discover_with(&replica.url, &[bearer(&t)]).await;
        assert_eq!(raw.status, 200, "{what}: {}", raw.text());
    }

    let h = |c: Value| hs256(SECRET.as_bytes(), &c);
    let cases: Vec<(&str, Option<String>, Challenge)> = vec![
        ("no Authorization header", None, Challenge::NoToken),
        (
            "a Basic credential",
            Some(format!("Basic {}", STANDARD.encode("alice:password"))),
            Challenge::OtherScheme,
        ),
        (
            "a valid token under another scheme",
            Some(format!("Token {token}")),
            Challenge::OtherScheme,
        ),
        (
            "a garbage token",
            Some("Bearer not-a-jwt".into()),
            Challenge::InvalidToken("malformed"),
        ),
        (
            "three garbage segments",
            Some("Bearer eyJhbGciOiJIUzI1NiJ9.e30.AAAA".into()),
            Challenge::InvalidToken(""),
        ),
        (
            "a token signed with another secret",
            Some(format!("Bearer {}", hs256(OTHER_SECRET.as_bytes(), &good))),
            Challenge::InvalidToken("signature"),
        ),
        (
            "an HS384 token under the right secret",
            Some(format!(
                "Bearer {}",
                sign(Algorithm::HS384, None, &hmac_key(SECRET.as_bytes()), &good)
            )),
            Challenge::InvalidToken("not accepted"),
        ),
        (
            "an expired token",
            Some(format!(
                "Bearer {}",
                h(with(good.clone(), "exp", Some(json!(now() - 120))))
            )),
            Challenge::InvalidToken("expired"),
        ),
        (
            "a token without exp",
            Some(format!("Bearer {}", h(with(good.clone(), "exp", None)))),
            Challenge::InvalidToken("exp"),
        ),
        (
            "a token not valid for two more minutes",
            Some(format!(
                "Bearer {}",
                h(with(good.clone(), "nbf", Some(json!(now() + 120))))
            )),
            Challenge::InvalidToken("nbf"),
        ),
        (
            "a token for another audience",
            Some(format!(
                "Bearer {}",
                h(with(
                    good.clone(),
                    "aud",
                    Some(json!("https://elsewhere.example/mcp"))
                ))
            )),
            Challenge::InvalidToken("audience"),
        ),
        (
            "a token without an audience",
            Some(format!("Bearer {}", h(with(good.clone(), "aud", None)))),
            Challenge::InvalidToken("aud"),
        ),
        (
            "a token from another issuer",
            Some(format!(
                "Bearer {}",
                h(with(
                    good.clone(),
                    "iss",
                    Some(json!("https://evil.example"))
                ))
            )),
            Challenge::InvalidToken("issuer"),
        ),
        (
            "a token without a tenant",
            Some(format!("Bearer {}", h(with(good.clone(), "tenant", None)))),
            Challenge::InvalidToken("tenant"),
        ),
        (
            "a token whose tenant is not a string",
            Some(format!(
                "Bearer {}",
                h(with(good.clone(), "tenant", Some(json!(7))))
            )),
            Challenge::InvalidToken("tenant"),
        ),
        (
            "a token whose tenant has a control character",
            Some(format!(
                "Bearer {}",
                h(with(good.clone(), "tenant", Some(json!("t1\nadmin"))))
            )),
            Challenge::InvalidToken("tenant"),
        ),
        (
            "a token without sub",
            Some(format!("Bearer {}", h(with(good.clone(), "sub", None)))),
            Challenge::InvalidToken("sub"),
        ),
        (
            "a token with an empty sub",
            Some(format!(
                "Bearer {}",
                h(with(good.clone(), "sub", Some(json!(""))))
            )),
            Challenge::InvalidToken("sub"),
        ),
        (
            "an unsigned token (alg none)",
            Some(format!("Bearer {}", unsigned(&good))),
            Challenge::InvalidToken(""),
        ),
    ];
    for (what, authorization, expect) in &cases {
        let headers: Vec<(&str, String)> = authorization
            .iter()
            .map(|a| ("authorization", a.clone()))
            .collect();
        let raw = discover_with(&replica.url, &headers).await;
        assert_challenge(&raw, &replica.origin, *expect, what);
        // A refused caller never reaches a method: no task is created either.
        let raw = post(
            &replica.url,
            &headers,
            json!(2),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 1 } }),
        )
        .await;
        assert_challenge(&raw, &replica.origin, *expect, what);
    }
    assert_eq!(count_tasks(&db).await, 0, "no refused call created a task");

    replica.stop().await;
}

// ---------------------------------------------------------------------------------------
// 2. RS256 and ES256 from a JWK set file; algorithm confusion
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rs256_and_es256_keys_from_a_jwk_set_file_and_no_algorithm_confusion() {
    let db = TestDb::new().await;
    let rsa = tokio::task::spawn_blocking(RsaKey::generate)
        .await
        .expect("RSA key");
    let ec = EcKey::generate();
    let outsider = EcKey::generate();
    let dir = TempDir::new();
    let path = dir.0.join("jwks.json");
    std::fs::write(
        &path,
        json!({ "keys": [rsa.jwk("rsa-1"), ec.jwk("ec-1")] }).to_string(),
    )
    .expect("write the JWK set");
    let replica = JwtReplica::start(
        &db.store,
        server_config(),
        KeySource::JwksFile(path),
        |_| {},
        Vec::new(),
    )
    .await;
    let good = claims(&replica.url, "alice", "t1");

    for (what, token) in [
        ("RS256 with its kid", rsa.sign(Some("rsa-1"), &good)),
        ("ES256 with its kid", ec.sign(Some("ec-1"), &good)),
    ] {
        let client = replica.client(&token);
        client
            .discover()
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let greeted = client
            .call_tool("greet", json!({ "name": "Alice" }))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(text_of(&greeted), "Hello, Alice!", "{what}: {greeted}");
    }

    let confusion = sign(
        Algorithm::HS256,
        Some("rsa-1"),
        &hmac_key(rsa.public_pem.as_bytes()),
        &good,
    );
    let refused = [
        (
            "an unknown kid (signed by a key of the set)",
            rsa.sign(Some("rsa-2"), &good),
            "unknown",
        ),
        (
            "an unknown ES256 kid",
            ec.sign(Some("ec-2"), &good),
            "unknown",
        ),
        (
            "the kid of a key of another algorithm",
            rsa.sign(Some("ec-1"), &good),
            "unknown",
        ),
        (
            "a key outside the set claiming a known kid",
            outsider.sign(Some("ec-1"), &good),
            "signature",
        ),
        (
            "a key outside the set, no kid",
            outsider.sign(None, &good),
            "signature",
        ),
        (
            "HS256 keyed with the RSA public key (algorithm confusion)",
            confusion,
            "not accepted",
        ),
        (
            "HS256 with any secret",
            hs256(SECRET.as_bytes(), &good),
            "not accepted",
        ),
        ("alg none", unsigned(&good), ""),
    ];
    for (what, token, why) in &refused {
        let raw = discover_with(&replica.url, &[bearer(token)]).await;
        assert_challenge(&raw, &replica.origin, Challenge::InvalidToken(why), what);
    }

    replica.stop().await;
}

// ---------------------------------------------------------------------------------------
// 3. A JWK set URL, and key rotation
// ---------------------------------------------------------------------------------------

/// Serves a JWK set that the test can change, and counts the fetches.
struct JwksServer {
    url: String,
    body: Arc<Mutex<String>>,
    fetches: Arc<AtomicUsize>,
    shutdown: CancellationToken,
}

impl JwksServer {
    async fn start(set: &Value) -> Self {
        let body = Arc::new(Mutex::new(set.to_string()));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (b, f) = (body.clone(), fetches.clone());
        let app = axum::Router::new().route(
            "/jwks.json",
            axum::routing::get(move || {
                let (b, f) = (b.clone(), f.clone());
                async move {
                    f.fetch_add(1, Ordering::SeqCst);
                    let set = b.lock().expect("lock").clone();
                    ([("content-type", "application/json")], set)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
                .expect("JWK set server");
        });
        Self {
            url: format!("http://{addr}/jwks.json"),
            body,
            fetches,
            shutdown,
        }
    }

    fn serve(&self, set: &Value) {
        *self.body.lock().expect("lock") = set.to_string();
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Sends `n` discovery requests with `token` at once; returns their statuses.
async fn burst(url: &str, token: &str, n: usize) -> Vec<u16> {
    let requests = (0..n).map(|_| async move { discover_with(url, &[bearer(token)]).await.status });
    futures::future::join_all(requests).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwk_set_url_is_fetched_again_for_an_unknown_kid_at_most_once_per_interval() {
    const INTERVAL: Duration = Duration::from_millis(400);
    let db = TestDb::new().await;
    let (a, b) = (EcKey::generate(), EcKey::generate());
    let jwks = JwksServer::start(&json!({ "keys": [a.jwk("key-a")] })).await;
    let replica = JwtReplica::start(
        &db.store,
        server_config(),
        KeySource::jwks(&jwks.url),
        |c| c.refresh_min_interval = INTERVAL,
        Vec::new(),
    )
    .await;
    assert_eq!(jwks.fetches(), 1, "the set is fetched at start-up");
    let good = claims(&replica.url, "alice", "t1");
    let token_a = a.sign(Some("key-a"), &good);
    let token_b = b.sign(Some("key-b"), &good);

    // Known keys never cause a fetch, however many requests come.
    let statuses = burst(&replica.url, &token_a, 20).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(
        jwks.fetches(),
        1,
        "a burst of known-kid tokens fetched the set"
    );

    // An unknown kid makes the replica look again; the set does not have it yet.
    tokio::time::sleep(INTERVAL + Duration::from_millis(100)).await;
    let raw = discover_with(&replica.url, &[bearer(&token_b)]).await;
    assert_challenge(
        &raw,
        &replica.origin,
        Challenge::InvalidToken("unknown"),
        "key B before it is published",
    );
    assert_eq!(jwks.fetches(), 2, "an unknown kid triggers one fetch");

    // A burst of unknown kids fetches at most once per interval.
    tokio::time::sleep(INTERVAL + Duration::from_millis(100)).await;
    let before = jwks.fetches();
    let started = Instant::now();
    let statuses = burst(&replica.url, &token_b, 20).await;
    let elapsed = started.elapsed();
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
    let fetched = jwks.fetches() - before;
    let allowed = 1 + (elapsed.as_millis() / INTERVAL.as_millis()) as usize;
    assert!(
        (1..=allowed).contains(&fetched),
        "{fetched} fetches for 20 unknown-kid requests in {elapsed:?} (interval {INTERVAL:?})"
    );

    // The issuer rotates: B is published. After the interval, B's next token is accepted.
    jwks.serve(&json!({ "keys": [a.jwk("key-a"), b.jwk("key-b")] }));
    tokio::time::sleep(INTERVAL + Duration::from_millis(100)).await;
    let before = jwks.fetches();
    let raw = discover_with(&replica.url, &[bearer(&token_b)]).await;
    assert_eq!(raw.status, 200, "key B after rotation: {}", raw.text());
    assert_eq!(
        jwks.fetches(),
        before + 1,
        "the unknown kid was fetched once"
    );
    // Now both keys are known: no more fetches.
    let statuses = burst(&replica.url, &token_b, 10).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let statuses = burst(&replica.url, &token_a, 10).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(jwks.fetches(), before + 1, "known keys caused a fetch");

    replica.stop().await;
}

// ---------------------------------------------------------------------------------------
// 4. Ownership with real tokens
// ---------------------------------------------------------------------------------------

/// The params of a task method, for a task id.
type ParamsFor = fn(&str) -> Value;

async fn next_frame(sub: &mut Subscription) -> Option<Value> {
    tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("no frame within the wait")
        .expect("stream error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principal_or_tenant_cannot_see_or_touch_a_task() {
    let db = TestDb::new().await;
    let replica = JwtReplica::hs256(&db.store).await;
    let token =
        |sub: &str, tenant: &str| hs256(SECRET.as_bytes(), &claims(&replica.url, sub, tenant));
    let alice = replica.client(token("alice", "t1"));
    let created = alice
        .call_tool("slow_compute", json!({ "seconds": 30 }))
        .await
        .expect("tools/call");
    assert_eq!(created["resultType"], "task", "{created}");
    let id = task_id(&created);
    let unknown = TaskId::random().to_string();
    assert_eq!(status(&alice.get_task(&id).await.expect("get")), "working");

    let requests: [(&str, ParamsFor); 3] = [
        ("tasks/get", |id| json!({ "taskId": id })),
        (
            "tasks/update",
            |id| json!({ "taskId": id, "inputResponses": {} }),
        ),
        ("tasks/cancel", |id| json!({ "taskId": id })),
    ];
    for (who, sub, tenant) in [("bob@t1", "bob", "t1"), ("alice@t2", "alice", "t2")] {
        let auth = [bearer(&token(sub, tenant))];
        for (method, params) in &requests {
            let theirs = post(&replica.url, &auth, json!("probe"), method, params(&id)).await;
            let nobodys = post(
                &replica.url,
                &auth,
                json!("probe"),
                method,
                params(&unknown),
            )
            .await;
            let e = nobodys.json();
            assert_eq!(e["error"]["code"], -32602, "{who} {method}: {e}");
            assert!(
                e["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("not found"),
                "{who} {method}: {e}"
            );
            assert_eq!(
                (theirs.status, theirs.text()),
                (nobodys.status, nobodys.text()),
                "{who} {method}: another owner's task must answer exactly like an unknown id"
            );
        }

        let client = replica.client(token(sub, tenant));
        let mut listen = client
            .listen(json!("listen"), json!({ "taskIds": [id] }))
            .await
            .expect("listen");
        let ack = next_frame(&mut listen).await.expect("acknowledgement");
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{who}: {ack}"
        );
        assert_eq!(
            ack["params"]["notifications"],
            json!({ "taskIds": [] }),
            "{who}: another owner's task must not be accepted: {ack}"
        );
        let end = next_frame(&mut listen).await.expect("listen result");
        assert_eq!(end["id"], "listen", "{who}: nothing to follow: {end}");
        assert!(next_frame(&mut listen).await.is_none(), "{who}");
    }

    // The owner still sees it, untouched.
    let mut own = alice
        .listen(json!("own"), json!({ "taskIds": [id] }))
        .await
        .expect("listen");
    let ack = next_frame(&mut own).await.expect("acknowledgement");
    assert_eq!(
        ack["params"]["notifications"],
        json!({ "taskIds": [id] }),
        "{ack}"
    );
    drop(own);
    let task = alice.get_task(&id).await.expect("get");
    assert_eq!(status(&task), "working", "{task}");
    let mut conn = db.sql().await;
    let (status_in_db, cancel_requested, responses): (String, bool, Value) = sqlx::query_as(
        "SELECT status, cancel_requested_at IS NOT NULL, input_responses FROM tasks WHERE id = $1",
    )
    .bind(uuid::Uuid::parse_str(&id).expect("uuid"))
    .fetch_one(&mut conn)
    .await
    .expect("row");
    assert_eq!(status_in_db, "working");
    assert!(!cancel_requested, "another owner's cancel reached the task");
    assert_eq!(responses, json!({}));
    assert_eq!(count_tasks(&db).await, 1);

    alice.cancel_task(&id).await.expect("the owner cancels");
    replica.stop().await;
}

// ---------------------------------------------------------------------------------------
// 5. Protected-resource metadata
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_resource_metadata_is_published_only_when_tokens_are_required() {
    let db = TestDb::new().await;
    let servers = vec![
        "https://auth.example.com".to_owned(),
        "https://login.example.org/tenant-1".to_owned(),
    ];
    let replica = JwtReplica::start(
        &db.store,
        server_config(),
        KeySource::Hs256(Secret::new(SECRET)),
        |_| {},
        servers.clone(),
    )
    .await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let response = http()
            .get(format!("{}{path}", replica.origin))
            .send()
            .await
            .expect("GET");
        assert_eq!(response.status(), 200, "{path}");
        let content_type = response.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .to_owned();
        assert!(
            content_type.starts_with("application/json"),
            "{content_type}"
        );
        let doc: Value = response.json().await.expect("JSON");
        assert_eq!(doc["resource"], replica.url, "{path}: {doc}");
        assert_eq!(
            doc["authorization_servers"],
            json!(servers),
            "{path}: {doc}"
        );
    }
    // The challenge names exactly where the document is.
    let raw = discover_with(&replica.url, &[]).await;
    assert_challenge(&raw, &replica.origin, Challenge::NoToken, "no token");
    let response = http()
        .get(replica.metadata_url())
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), 200);

    // Without JWT authentication there is no such document.
    let plain = Replica::start(&db.store, registry("conformance")).await;
    let origin = format!("http://{}", plain.addr);
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let response = http()
            .get(format!("{origin}{path}"))
            .send()
            .await
            .expect("GET");
        assert_eq!(response.status(), 404, "{path}");
    }
    plain.stop().await;
    replica.stop().await;
}

// ---------------------------------------------------------------------------------------
// 6. Start-up refusals of the binary
// ---------------------------------------------------------------------------------------

fn binary(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(procs::BIN);
    // Nothing from the test's own environment decides what the binary does.
    cmd.env_clear()
        .args(args)
        .env("DATABASE_URL", database_url)
        .env("MCP_TASKS_LOG", "info,sqlx=warn")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs the binary to its exit; returns whether it succeeded and its stderr.
async fn run_to_exit(cmd: &mut tokio::process::Command) -> (bool, String) {
    let output = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("the process did not exit within 30 s")
        .expect("running the binary");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_refuses_to_serve_unauthenticated_beyond_loopback_unless_told() {
    let db = TestDb::new().await;
    let serve_all = ["serve", "--listen", "0.0.0.0:0", "--tools", "demo"];

    let (ok, stderr) = run_to_exit(&mut binary(&db.url, &serve_all, &[])).await;
    assert!(!ok, "--auth none on 0.0.0.0 must not start: {stderr}");
    assert!(stderr.contains("without authentication"), "{stderr}");
    assert!(stderr.contains("--allow-unauthenticated"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");

    let (ok, stderr) = run_to_exit(&mut binary(
        &db.url,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tools",
            "demo",
            "--auth",
            "jwt",
        ],
        &[("MCP_TASKS_JWT_HS256_SECRET", SECRET)],
    ))
    .await;
    assert!(
        !ok,
        "--auth jwt without a resource must not start: {stderr}"
    );
    assert!(stderr.contains("MCP_TASKS_RESOURCE"), "{stderr}");
    assert!(
        !stderr.contains(SECRET),
        "the secret must not be logged: {stderr}"
    );

    // With the explicit opt-out it serves.
    let mut args = serve_all.to_vec();
    args.push("--allow-unauthenticated");
    let mut child = binary(&db.url, &args, &[]).spawn().expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut log = Vec::new();
    let port: u16 = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            log.push(line.clone());
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let authority = rest.split("/mcp").next().expect("address");
                return authority
                    .rsplit_once(':')
                    .and_then(|(_, p)| p.parse().ok())
                    .expect("a port");
            }
        }
        panic!("the replica exited before listening: {log:#?}");
    })
    .await
    .expect("the replica did not start listening within 30 s");
    let health = http()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
    let pid = child.id().expect("pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let exit = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("no exit within 15 s of SIGTERM")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
}

// ---------------------------------------------------------------------------------------
// 7. Limits
// ---------------------------------------------------------------------------------------

fn principal(who: &str) -> [(&'static str, String); 1] {
    [("x-test-principal", who.to_owned())]
}

fn retry_after(raw: &Raw) -> u64 {
    raw.header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After: {raw:?}"))
        .parse()
        .expect("Retry-After in seconds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_is_per_principal_and_says_when_to_come_back() {
    let db = TestDb::new().await;
    let mut config = server_config();
    // A burst of 5, refilled at 2 per second: the 6th immediate request is over.
    config.rate_limit = Some(RateLimit {
        per_second: 2.0,
        burst: 5.0,
    });
    let replica = Replica::start_with(
        &db.store,
        registry("conformance"),
        config,
        StateKeys::random(),
    )
    .await;

    for i in 0..5 {
        let raw = discover_with(&replica.url, &principal("alice")).await;
        assert_eq!(raw.status, 200, "request {}: {}", i + 1, raw.text());
    }
    let refused = discover_with(&replica.url, &principal("alice")).await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    let wait = retry_after(&refused);
    assert!(wait >= 1, "Retry-After {wait}");
    let e = refused.json();
    assert_eq!(e["jsonrpc"], "2.0", "{e}");
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert_eq!(e["error"]["data"]["limit"], "requests_per_second", "{e}");
    let message = e["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("too many requests") && message.contains("limit 2 per second"),
        "{e}"
    );

    // Someone else is not affected.
    let bob = discover_with(&replica.url, &principal("bob")).await;
    assert_eq!(bob.status, 200, "{}", bob.text());

    // After the advertised wait, alice is served again.
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let again = discover_with(&replica.url, &principal("alice")).await;
    assert_eq!(again.status, 200, "{}", again.text());
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_polling_with_backoff_is_never_throttled_by_the_default_limit() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.rate_limit = Some(RateLimit::default());
    let replica = Replica::start_with(
        &db.store,
        registry("conformance"),
        config,
        StateKeys::random(),
    )
    .await;
    let alice = replica.client("alice");
    // Four tasks, polled together, as a client with several tasks in flight would.
    let mut ids = Vec::new();
    for _ in 0..4 {
        let created = alice
            .call_tool("slow_compute", json!({ "seconds": 30 }))
            .await
            .expect("tools/call");
        ids.push(task_id(&created));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut every = Duration::from_millis(20);
    let mut polls = 0;
    while Instant::now() < deadline {
        for id in &ids {
            let ex = alice
                .send(json!(polls), "tasks/get", json!({ "taskId": id }))
                .await
                .expect("tasks/get");
            assert_eq!(ex.status, 200, "poll {polls} throttled: {:?}", ex.body);
            polls += 1;
        }
        tokio::time::sleep(every).await;
        every = (every * 3 / 2).min(Duration::from_secs(1));
    }
    assert!(polls >= 40, "only {polls} polls in 5 s");
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_in_flight_are_limited_per_principal() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.max_tasks_in_flight = 2;
    let replica = Replica::start_with(
        &db.store,
        registry("conformance"),
        config,
        StateKeys::random(),
    )
    .await;
    let alice = replica.client("alice");
    let create = || {
        alice.send(
            json!("create"),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 30 } }),
        )
    };
    let mut ids = Vec::new();
    for _ in 0..2 {
        let ex = create().await.expect("tools/call");
        assert_eq!(ex.status, 200, "{:?}", ex.body);
        ids.push(task_id(&ex.into_result().expect("task")));
    }

    let third = create().await.expect("tools/call");
    assert_eq!(third.status, 429, "{:?}", third.body);
    assert!(
        third.headers.contains_key("retry-after"),
        "{:?}",
        third.headers
    );
    let body = third.body.clone().expect("body");
    assert_eq!(body["id"], "create", "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["error"]["data"]["limit"], "tasks_in_flight", "{body}");
    assert_eq!(body["error"]["data"]["max"], 2, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("too many unfinished tasks") && message.contains("limit 2"),
        "{body}"
    );
    assert_eq!(
        count_tasks(&db).await,
        2,
        "the refused call created nothing"
    );

    // Per principal: bob is not affected.
    let bob = replica.client("bob");
    let created = bob
        .call_tool("slow_compute", json!({ "seconds": 30 }))
        .await
        .expect("bob's task");
    assert_eq!(created["resultType"], "task", "{created}");

    // Once one of alice's tasks is cancelled, she may start another, and only one.
    alice.cancel_task(&ids[0]).await.expect("cancel");
    assert_eq!(
        status(&alice.get_task(&ids[0]).await.expect("get")),
        "cancelled"
    );
    let ex = create().await.expect("tools/call");
    assert_eq!(ex.status, 200, "{:?}", ex.body);
    assert_eq!(ex.into_result().expect("task")["resultType"], "task");
    let ex = create().await.expect("tools/call");
    assert_eq!(ex.status, 429, "{:?}", ex.body);
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creations_never_exceed_the_tasks_in_flight_limit() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.max_tasks_in_flight = 2;
    let replica = Replica::start_with(
        &db.store,
        registry("conformance"),
        config,
        StateKeys::random(),
    )
    .await;
    let alice = replica.client("alice");
    // Several rounds of 16 simultaneous creations, each on a clean slate.
    for round in 0..5 {
        let calls = (0..16).map(|i| {
            alice.send(
                json!(i),
                "tools/call",
                json!({ "name": "slow_compute", "arguments": { "seconds": 30 } }),
            )
        });
        let statuses: Vec<u16> = futures::future::join_all(calls)
            .await
            .into_iter()
            .map(|ex| ex.expect("tools/call").status)
            .collect();
        let accepted = statuses.iter().filter(|s| **s == 200).count();
        let mut conn = db.sql().await;
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM tasks WHERE principal = 'alice' AND finished_at IS NULL",
        )
        .fetch_one(&mut conn)
        .await
        .expect("count");
        assert!(
            accepted <= 2 && live <= 2,
            "round {round}: {accepted} of 16 simultaneous creations accepted, {live} unfinished \
             tasks, with a limit of 2: {statuses:?}"
        );
        assert_eq!(accepted, 2, "round {round}: {statuses:?}");
        let unfinished: Vec<uuid::Uuid> =
            sqlx::query_scalar("SELECT id FROM tasks WHERE finished_at IS NULL")
                .fetch_all(&mut conn)
                .await
                .expect("ids");
        for id in unfinished {
            alice
                .cancel_task(&id.to_string())
                .await
                .expect("clean slate");
        }
    }
    replica.stop().await;
}

fn assert_too_large(ex: &mcp_tasks_client::Exchange, what: &str, param: &str, size: usize) {
    assert_eq!(ex.status, 200, "{what}: {:?}", ex.body);
    let body = ex.body.clone().expect("body");
    assert_eq!(body["error"]["code"], -32602, "{what}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("params.{param} is {size} bytes"))
            && message.contains("the limit is 1024"),
        "{what}: the message must state the size ({size}) and the limit: {body}"
    );
    assert_eq!(body["error"]["data"]["limit"], param, "{what}: {body}");
    assert_eq!(body["error"]["data"]["max"], 1024, "{what}: {body}");
}

fn user_name(name: &str) -> Value {
    json!({ "user_name": { "action": "accept", "content": { "name": name } } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_and_input_responses_are_size_limited() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.max_argument_bytes = 1024;
    config.max_input_response_bytes = 1024;
    let replica = Replica::start_with(
        &db.store,
        registry("conformance"),
        config,
        StateKeys::random(),
    )
    .await;
    let alice = replica.client("alice");

    // Arguments: under the limit is fine, 2 KiB is not.
    let small = json!({ "seconds": 30, "label": "x".repeat(900) });
    let created = alice
        .call_tool("slow_compute", small)
        .await
        .expect("a 0.9 KiB argument");
    let id = task_id(&created);
    let large = json!({ "seconds": 30, "label": "x".repeat(2048) });
    let size = large.to_string().len();
    let ex = alice
        .send(
            json!(1),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": large }),
        )
        .await
        .expect("tools/call");
    assert_too_large(&ex, "2 KiB of arguments", "arguments", size);
    assert_eq!(count_tasks(&db).await, 1);

    // inputResponses on tasks/update.
    let responses = user_name(&"y".repeat(2048));
    let size = responses.to_string().len();
    let ex = alice
        .send(
            json!(2),
            "tasks/update",
            json!({ "taskId": id, "inputResponses": responses }),
        )
        .await
        .expect("tasks/update");
    assert_too_large(
        &ex,
        "2 KiB of inputResponses on tasks/update",
        "inputResponses",
        size,
    );

    // inputResponses on an MRTR round 2.
    let round_one = alice
        .call_tool("test_tool_with_task", json!({}))
        .await
        .expect("round 1");
    assert_eq!(round_one["resultType"], "input_required", "{round_one}");
    let state = round_one["requestState"].as_str().expect("requestState");
    let round_two = |responses: Value| {
        json!({
            "name": "test_tool_with_task",
            "arguments": {},
            "inputResponses": responses,
            "requestState": state,
        })
    };
    let ex = alice
        .send(json!(3), "tools/call", round_two(responses.clone()))
        .await
        .expect("round 2");
    assert_too_large(
        &ex,
        "2 KiB of inputResponses on round 2",
        "inputResponses",
        size,
    );
    assert_eq!(
        count_tasks(&db).await,
        1,
        "the refused round 2 created nothing"
    );
    let created = alice
        .request("tools/call", round_two(user_name("Alice")))
        .await
        .expect("a small round 2");
    assert_eq!(created["resultType"], "task", "{created}");
    replica.stop().await;
}

/// Deepest nesting of arrays and objects in `json` (outside strings).
fn nesting(json: &str) -> usize {
    let value: Value = serde_json::from_str(json).expect("JSON");
    fn depth(v: &Value) -> usize {
        match v {
            Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
            Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }
    depth(&value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_nesting_is_limited() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.json_limits.max_depth = 8;
    let replica = Replica::start_with(
        &db.store,
        registry("conformance"),
        config,
        StateKeys::random(),
    )
    .await;
    // The envelope is level 1 and params level 2; `pad` brings the rest.
    let body = |levels: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"server/discover","params":{{"_meta":{{"{}":"{}","{}":{{}}}},"pad":{}1{}}}}}"#,
            meta_keys::PROTOCOL_VERSION,
            PROTOCOL_VERSION,
            meta_keys::CLIENT_CAPABILITIES,
            "[".repeat(levels - 2),
            "]".repeat(levels - 2),
        )
    };
    let headers = principal("alice");

    let eight = body(8);
    assert_eq!(nesting(&eight), 8);
    let raw = post_body(&replica.url, &headers, "server/discover", eight).await;
    assert_eq!(raw.status, 200, "depth 8: {}", raw.text());
    assert!(raw.json()["result"].is_object(), "{}", raw.text());

    let nine = body(9);
    assert_eq!(nesting(&nine), 9);
    let raw = post_body(&replica.url, &headers, "server/discover", nine).await;
    assert_eq!(raw.status, 400, "depth 9: {}", raw.text());
    let e = raw.json();
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("deeper than 8"),
        "{e}"
    );
    replica.stop().await;
}

// ---------------------------------------------------------------------------------------
// 8. requestState key rotation across replicas
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_state_keys_rotate_across_replicas() {
    let db = TestDb::new().await;
    let (k1, k2) = ("11".repeat(32), "22".repeat(32));
    let start = |keys: String| {
        let store = db.store.clone();
        async move {
            Replica::start_with(
                &store,
                registry("conformance"),
                server_config(),
                StateKeys::parse(&keys).expect("keys"),
            )
            .await
        }
    };
    let old = start(k1.clone()).await;
    let rotated = start(format!("{k2},{k1}")).await;
    let new_only = start(k2.clone()).await;

    let round_one = |replica: &Replica| {
        let client = replica.client("alice");
        async move {
            let r1 = client
                .call_tool("test_tool_with_task", json!({}))
                .await
                .expect("round 1");
            assert_eq!(r1["resultType"], "input_required", "{r1}");
            r1["requestState"]
                .as_str()
                .expect("requestState")
                .to_owned()
        }
    };
    let round_two = |replica: &Replica, state: String, id: &'static str| {
        let client = replica.client("alice");
        async move {
            client
                .send(
                    json!(id),
                    "tools/call",
                    json!({
                        "name": "test_tool_with_task",
                        "arguments": {},
                        "inputResponses": user_name("Alice"),
                        "requestState": state,
                    }),
                )
                .await
                .expect("round 2")
        }
    };
    let refused = |ex: &mcp_tasks_client::Exchange, what: &str| {
        assert_eq!(ex.status, 200, "{what}: {:?}", ex.body);
        let body = ex.body.clone().expect("body");
        assert_eq!(body["error"]["code"], -32602, "{what}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("requestState"),
            "{what}: {body}"
        );
    };

    // Round 1 signed with K1, round 2 on a replica that signs with K2 and still knows K1.
    let state = round_one(&old).await;
    let ex = round_two(&rotated, state.clone(), "r2").await;
    assert_eq!(ex.status, 200, "{:?}", ex.body);
    let created = ex.into_result().expect("round 2 on the rotated replica");
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(count_tasks(&db).await, 1);

    // A replica that knows only K2 refuses a K1 state.
    let state = round_one(&old).await;
    let ex = round_two(&new_only, state, "r3").await;
    refused(&ex, "a K1 state on a K2-only replica");

    // The rotated replica signs with K2: its states verify where only K2 is known, and
    // not where only K1 is.
    let state = round_one(&rotated).await;
    let ex = round_two(&old, state.clone(), "r4").await;
    refused(&ex, "a K2 state on a K1-only replica");
    let ex = round_two(&new_only, state, "r5").await;
    assert_eq!(ex.status, 200, "{:?}", ex.body);
    assert_eq!(ex.into_result().expect("task")["resultType"], "task");
    assert_eq!(
        count_tasks(&db).await,
        2,
        "only the accepted rounds created tasks"
    );

    for r in [old, rotated, new_only] {
        r.stop().await;
    }
}
