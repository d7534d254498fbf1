//! JWT fixtures: replicas that require bearer tokens (the real `JwtAuth`), signing keys
//! generated per run (nothing secret is checked in), tokens, and a JWK set server the
//! test can change under a running replica.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcp_tasks_server::{
    Authenticator, JwtAuth, JwtConfig, KeySource, ProtectedResource, ServerConfig,
};
use mcp_tasks_wire::secret::Secret;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub(crate) const ISSUER: &str = "https://issuer.mcp-tasks.test";
pub(crate) const SECRET: &str = "an-hs256-test-secret-of-more-than-32-bytes";
pub(crate) const OTHER_SECRET: &str = "another-hs256-secret-of-more-than-32-bytes";

/// A change to the JWT configuration, made once issuer and audience are set.
type Tweak = Arc<dyn Fn(&mut JwtConfig) + Send + Sync>;

/// How a replica checks tokens: issuer [`ISSUER`] and its own URL as the audience are
/// required, and the URL is also the resource its RFC 9728 metadata names.
#[derive(Clone)]
pub(crate) struct Jwt {
    keys: KeySource,
    tweak: Option<Tweak>,
    authorization_servers: Vec<String>,
}

impl Jwt {
    pub(crate) fn new(keys: KeySource) -> Self {
        Self {
            keys,
            tweak: None,
            authorization_servers: Vec::new(),
        }
    }

    /// HS256 with [`SECRET`].
    pub(crate) fn hs256() -> Self {
        Self::new(KeySource::Hs256(Secret::new(SECRET)))
    }

    /// Changes the JWT configuration once the issuer and audience are set.
    pub(crate) fn tweak(mut self, f: impl Fn(&mut JwtConfig) + Send + Sync + 'static) -> Self {
        self.tweak = Some(Arc::new(f));
        self
    }

    pub(crate) fn authorization_servers(mut self, servers: Vec<String>) -> Self {
        self.authorization_servers = servers;
        self
    }

    /// The authenticator of a replica at `url`; publishes its metadata in `config`.
    pub(crate) async fn authenticator(
        self,
        url: &str,
        config: &mut ServerConfig,
    ) -> Arc<dyn Authenticator> {
        let mut jwt = JwtConfig::new(self.keys);
        jwt.issuer = Some(ISSUER.into());
        jwt.audience = Some(url.to_owned());
        if let Some(tweak) = &self.tweak {
            tweak(&mut jwt);
        }
        let auth = JwtAuth::new(jwt).await.expect("JWT configuration");
        config.protected_resource = Some(ProtectedResource {
            resource: url.to_owned(),
            authorization_servers: self.authorization_servers,
        });
        Arc::new(auth)
    }
}

pub(crate) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// What a well-formed token for `audience` carries.
pub(crate) fn claims(audience: &str, sub: &str, tenant: &str) -> Value {
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
pub(crate) fn with(mut claims: Value, claim: &str, value: Option<Value>) -> Value {
    let object = claims.as_object_mut().expect("object");
    match value {
        Some(v) => object.insert(claim.into(), v),
        None => object.remove(claim),
    };
    claims
}

pub(crate) fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, key).expect("signing a token")
}

pub(crate) fn hmac_key(secret: &[u8]) -> EncodingKey {
    EncodingKey::from_secret(secret).expect("HMAC key")
}

pub(crate) fn hs256(secret: &[u8], claims: &Value) -> String {
    sign(Algorithm::HS256, None, &hmac_key(secret), claims)
}

/// A token with `"alg": "none"` and no signature, made by hand (no library signs those).
pub(crate) fn unsigned(claims: &Value) -> String {
    let header = B64.encode(json!({ "alg": "none", "typ": "JWT" }).to_string());
    let payload = B64.encode(claims.to_string());
    format!("{header}.{payload}.")
}

pub(crate) struct RsaKey {
    /// PKCS#1 DER, what `EncodingKey::from_rsa_der` takes.
    private_der: Vec<u8>,
    n: String,
    e: String,
    /// The public key as PEM: the "secret" of the classic algorithm-confusion attack.
    pub(crate) public_pem: String,
}

impl RsaKey {
    pub(crate) fn generate() -> Self {
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

    pub(crate) fn jwk(&self, kid: &str) -> Value {
        json!({ "kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": self.n, "e": self.e })
    }

    pub(crate) fn sign(&self, kid: Option<&str>, claims: &Value) -> String {
        sign(
            Algorithm::RS256,
            kid,
            &EncodingKey::from_rsa_der(&self.private_der),
            claims,
        )
    }
}

pub(crate) struct EcKey {
    /// PKCS#8 DER, what `EncodingKey::from_ec_der` takes.
    private_der: Vec<u8>,
    x: String,
    y: String,
}

impl EcKey {
    pub(crate) fn generate() -> Self {
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

    pub(crate) fn jwk(&self, kid: &str) -> Value {
        json!({
            "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
            "x": self.x, "y": self.y,
        })
    }

    pub(crate) fn sign(&self, kid: Option<&str>, claims: &Value) -> String {
        sign(
            Algorithm::ES256,
            kid,
            &EncodingKey::from_ec_der(&self.private_der),
            claims,
        )
    }
}

/// A directory removed when the test ends.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new() -> Self {
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

/// Serves a JWK set that the test can change, and counts the fetches.
pub(crate) struct JwksServer {
    pub(crate) url: String,
    body: Arc<Mutex<String>>,
    fetches: Arc<AtomicUsize>,
    shutdown: CancellationToken,
}

impl JwksServer {
    pub(crate) async fn start(set: &Value) -> Self {
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

    pub(crate) fn serve(&self, set: &Value) {
        *self.body.lock().expect("lock") = set.to_string();
    }

    pub(crate) fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
