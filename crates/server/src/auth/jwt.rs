//! Bearer JWTs, as an OAuth 2.1 resource server validates them: signature (HS256 with a
//! shared secret, or RS256/ES256 with keys from a JWK set), `exp`, `nbf`, and `iss` and
//! `aud` when configured. The tenant comes from a configurable claim, the principal from
//! `sub`.
//!
//! A JWK set from a URL is cached and fetched again when a token names a key id the cache
//! does not know (a key rotation), at most once per `refresh_min_interval`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use futures::future::BoxFuture;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mcp_tasks_store::Owner;
use mcp_tasks_wire::secret::Secret;
use serde_json::{Map, Value};

use super::{AuthError, Authenticator, valid_identity};

/// Where verification keys come from.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// A shared HS256 secret.
    Hs256(Secret),
    /// A JWK set in a local file (read at start-up).
    JwksFile(PathBuf),
    /// A JWK set at an `https://` (or `http://`) URL.
    JwksUrl(String),
}

impl KeySource {
    /// A path or a URL.
    pub fn jwks(location: &str) -> Self {
        if location.starts_with("https://") || location.starts_with("http://") {
            Self::JwksUrl(location.to_owned())
        } else {
            Self::JwksFile(PathBuf::from(location))
        }
    }
}

#[derive(Debug, Clone)]
pub struct JwtConfig {
    pub keys: KeySource,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    /// Claim holding the tenant.
    pub tenant_claim: String,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: Duration,
    /// Shortest time between two fetches of a JWK set URL.
    pub refresh_min_interval: Duration,
}

impl JwtConfig {
    pub fn new(keys: KeySource) -> Self {
        Self {
            keys,
            issuer: None,
            audience: None,
            tenant_claim: "tenant".into(),
            leeway: Duration::from_secs(30),
            refresh_min_interval: Duration::from_secs(10),
        }
    }
}

struct Key {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

pub struct JwtAuth {
    config: JwtConfig,
    keys: RwLock<Vec<Key>>,
    /// When the JWK set URL was last fetched; also serialises fetches.
    fetched: tokio::sync::Mutex<Option<Instant>>,
    http: reqwest::Client,
}

impl std::fmt::Debug for JwtAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuth")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Largest JWK set accepted from a URL.
const MAX_JWKS_BYTES: usize = 1024 * 1024;

impl JwtAuth {
    /// Loads the keys. A JWK set file must load; a JWK set URL that cannot be fetched yet
    /// is retried when the first token arrives.
    pub async fn new(config: JwtConfig) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        let keys = match &config.keys {
            KeySource::Hs256(secret) => {
                if secret.expose().len() < 32 {
                    return Err("the HS256 secret must be at least 32 bytes".into());
                }
                vec![Key {
                    kid: None,
                    algorithm: Algorithm::HS256,
                    key: DecodingKey::from_secret(secret.expose().as_bytes())
                        .map_err(|e| format!("HS256 secret: {e}"))?,
                }]
            }
            KeySource::JwksFile(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("reading the JWK set {}: {e}", path.display()))?;
                keys_from_jwks(&text).map_err(|e| format!("JWK set {}: {e}", path.display()))?
            }
            KeySource::JwksUrl(_) => Vec::new(),
        };
        if keys.is_empty() && !matches!(config.keys, KeySource::JwksUrl(_)) {
            return Err("no usable RS256 or ES256 key in the JWK set".into());
        }
        let auth = Self {
            config,
            keys: RwLock::new(keys),
            fetched: tokio::sync::Mutex::new(None),
            http,
        };
        if let KeySource::JwksUrl(url) = &auth.config.keys
            && let Err(e) = auth.refresh().await
        {
            tracing::warn!(%url, error = %e, "could not fetch the JWK set yet; will retry on the first token");
        }
        Ok(auth)
    }

    /// Fetches the JWK set URL again, unless that happened very recently.
    async fn refresh(&self) -> Result<(), String> {
        let KeySource::JwksUrl(url) = &self.config.keys else {
            return Ok(());
        };
        let mut fetched = self.fetched.lock().await;
        if fetched.is_some_and(|at| at.elapsed() < self.config.refresh_min_interval) {
            return Ok(());
        }
        *fetched = Some(Instant::now());
        let response = self
            .http
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("fetching {url}: {e}"))?;
        let too_large = || format!("the JWK set at {url} is larger than {MAX_JWKS_BYTES} bytes");
        if response
            .content_length()
            .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
        {
            return Err(too_large());
        }
        // Read in pieces, so a server that sends no length cannot make us hold more.
        let mut response = response;
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("reading {url}: {e}"))?
        {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        let text =
            String::from_utf8(body).map_err(|_| format!("the JWK set at {url} is not UTF-8"))?;
        let keys = keys_from_jwks(&text)?;
        tracing::info!(%url, keys = keys.len(), "JWK set loaded");
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
        Ok(())
    }

    /// The keys that may have signed a token with this header: the one with its `kid`, or
    /// (when the token names none) every key of its algorithm.
    fn candidates(&self, kid: Option<&str>, algorithm: Algorithm) -> Vec<DecodingKey> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        keys.iter()
            .filter(|k| k.algorithm == algorithm)
            .filter(|k| match (kid, &k.kid) {
                (Some(want), Some(have)) => want == have,
                (Some(_), None) => matches!(self.config.keys, KeySource::Hs256(_)),
                (None, _) => true,
            })
            .map(|k| k.key.clone())
            .collect()
    }

    async fn verify(&self, token: &str) -> Result<Owner, AuthError> {
        self.verify_claims(token, true)
            .await
            .map(|(owner, _)| owner)
    }

    /// The owner and claims of a good token; with `check_exp` false, also of one that
    /// has expired.
    async fn verify_claims(
        &self,
        token: &str,
        check_exp: bool,
    ) -> Result<(Owner, Map<String, Value>), AuthError> {
        let invalid = |why: &str| AuthError::Invalid(why.to_owned());
        let header = jsonwebtoken::decode_header(token).map_err(|_| invalid("malformed token"))?;
        let allowed = match self.config.keys {
            KeySource::Hs256(_) => [Algorithm::HS256].as_slice(),
            _ => [Algorithm::RS256, Algorithm::ES256].as_slice(),
        };
        if !allowed.contains(&header.alg) {
            return Err(invalid(&format!(
                "tokens signed with {:?} are not accepted here",
                header.alg
            )));
        }
        let mut keys = self.candidates(header.kid.as_deref(), header.alg);
        if keys.is_empty() && matches!(self.config.keys, KeySource::JwksUrl(_)) {
            // Perhaps the issuer rotated its keys: look again.
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "could not refresh the JWK set");
            }
            keys = self.candidates(header.kid.as_deref(), header.alg);
        }
        if keys.is_empty() {
            return Err(invalid("unknown signing key"));
        }

        let mut validation = Validation::new(header.alg);
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_nbf = true;
        validation.validate_exp = check_exp;
        let mut required: HashSet<String> =
            ["exp", "sub"].iter().map(|s| (*s).to_owned()).collect();
        match &self.config.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.insert("aud".into());
            }
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &self.config.issuer {
            validation.set_issuer(&[iss]);
            required.insert("iss".into());
        }
        validation.required_spec_claims = required;

        let mut last = None;
        for key in &keys {
            match jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation) {
                Ok(data) => {
                    let owner = self.owner(&data.claims)?;
                    return Ok((owner, data.claims));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(match last.as_ref().map(jsonwebtoken::errors::Error::kind) {
            Some(ErrorKind::ExpiredSignature) => invalid("token expired"),
            Some(ErrorKind::ImmatureSignature) => invalid("token not valid yet (nbf)"),
            Some(ErrorKind::InvalidAudience) => invalid("token is for another audience"),
            Some(ErrorKind::InvalidIssuer) => invalid("token is from another issuer"),
            Some(ErrorKind::MissingRequiredClaim(claim)) => {
                invalid(&format!("token has no {claim:?} claim"))
            }
            Some(ErrorKind::InvalidSignature) => invalid("invalid signature"),
            _ => invalid("token rejected"),
        })
    }

    fn owner(&self, claims: &Map<String, Value>) -> Result<Owner, AuthError> {
        let claim = &self.config.tenant_claim;
        let tenant = claims
            .get(claim)
            .and_then(Value::as_str)
            .filter(|t| valid_identity(t))
            .ok_or_else(|| AuthError::Invalid(format!("token has no usable {claim:?} claim")))?;
        let principal = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|p| valid_identity(p))
            .ok_or_else(|| AuthError::Invalid("token has no usable \"sub\" claim".into()))?;
        Ok(Owner::new(tenant, principal))
    }
}

/// The bearer token of an `Authorization` header.
fn bearer(headers: &HeaderMap) -> Result<&str, AuthError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or(AuthError::Missing)?
        .to_str()
        .map_err(|_| AuthError::Invalid("malformed Authorization header".into()))?;
    // Credentials of another scheme are no bearer token at all (RFC 6750 §3.1:
    // the challenge then carries no error code).
    let Some((scheme, token)) = value.split_once(' ') else {
        return Err(AuthError::Missing);
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Missing);
    }
    Ok(token.trim())
}

impl Authenticator for JwtAuth {
    fn authenticate<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<Owner, AuthError>> {
        Box::pin(async move { self.verify(bearer(headers)?).await })
    }

    fn identify<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<super::Identity, AuthError>> {
        Box::pin(async move {
            let (owner, claims) = self.verify_claims(bearer(headers)?, true).await?;
            Ok(super::Identity {
                owner,
                claims: Some(claims),
            })
        })
    }

    fn identify_expired<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<super::Identity, AuthError>> {
        Box::pin(async move {
            let (owner, claims) = self.verify_claims(bearer(headers)?, false).await?;
            Ok(super::Identity {
                owner,
                claims: Some(claims),
            })
        })
    }
}

/// The RS256 and ES256 (P-256) signing keys of a JWK set; others are skipped.
fn keys_from_jwks(text: &str) -> Result<Vec<Key>, String> {
    let set: JwkSet = serde_json::from_str(text).map_err(|e| format!("not a JWK set: {e}"))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        if matches!(
            jwk.common.public_key_use,
            Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
        ) {
            continue;
        }
        let algorithm = match (&jwk.algorithm, jwk.common.key_algorithm) {
            (AlgorithmParameters::RSA(_), None | Some(KeyAlgorithm::RS256)) => Algorithm::RS256,
            (AlgorithmParameters::EllipticCurve(ec), None | Some(KeyAlgorithm::ES256))
                if ec.curve == EllipticCurve::P256 =>
            {
                Algorithm::ES256
            }
            _ => continue,
        };
        match DecodingKey::from_jwk(jwk) {
            Ok(key) => keys.push(Key {
                kid: jwk.common.key_id.clone(),
                algorithm,
                key,
            }),
            Err(e) => {
                tracing::warn!(kid = ?jwk.common.key_id, error = %e, "skipping an unusable JWK")
            }
        }
    }
    Ok(keys)
}
