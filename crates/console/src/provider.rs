//! What the console's OAuth sign-in learns of the authorization server: its endpoints
//! (RFC 8414 metadata, or OpenID discovery) and the console's client id there, given or
//! registered (RFC 7591, a public client), kept for the replica's life.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

/// What a replica learnt of the authorization server (its endpoints, and the client id
/// it registered), kept for the replica's life.
#[derive(Default)]
pub(crate) struct OAuthCache {
    provider: tokio::sync::Mutex<Option<Arc<Provider>>>,
}

pub(crate) struct Provider {
    pub(crate) issuer: String,
    pub(crate) authorize: String,
    pub(crate) token: String,
    /// RFC 7009 revocation, where sign-out revokes the session's refresh token.
    pub(crate) revocation: Option<String>,
    pub(crate) client_id: String,
    /// Whether the server promises RFC 9207 `iss` in its redirects.
    pub(crate) iss_parameter: bool,
    pub(crate) http: reqwest::Client,
}

impl OAuthCache {
    /// The provider `issuer` is, learnt (and the client registered with `redirect`,
    /// unless `client_id` is given) the first time.
    pub(crate) async fn get(
        &self,
        issuer: &str,
        redirect: &str,
        client_id: Option<String>,
    ) -> Result<Arc<Provider>, String> {
        let mut cached = self.provider.lock().await;
        if let Some(p) = cached.as_ref() {
            return Ok(p.clone());
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        let metadata = metadata(&http, issuer).await?;
        let text = |k: &str| metadata.get(k).and_then(Value::as_str).map(str::to_owned);
        let s256 = metadata
            .get("code_challenge_methods_supported")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|x| x == "S256"));
        if !s256 {
            return Err(format!("{issuer} does not advertise PKCE S256"));
        }
        let client_id = match client_id {
            Some(id) => id,
            None => {
                let endpoint = text("registration_endpoint").ok_or_else(|| {
                    format!(
                        "{issuer} offers no dynamic registration; set --console-oauth-client-id"
                    )
                })?;
                register(&http, &endpoint, redirect).await?
            }
        };
        let provider = Arc::new(Provider {
            issuer: issuer.to_owned(),
            authorize: text("authorization_endpoint")
                .ok_or_else(|| format!("{issuer} has no authorization_endpoint"))?,
            token: text("token_endpoint")
                .ok_or_else(|| format!("{issuer} has no token_endpoint"))?,
            revocation: text("revocation_endpoint"),
            client_id,
            iss_parameter: metadata
                .get("authorization_response_iss_parameter_supported")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            http,
        });
        *cached = Some(provider.clone());
        Ok(provider)
    }
}

/// RFC 8414 metadata, then OpenID discovery; a document naming another issuer is not used.
async fn metadata(
    http: &reqwest::Client,
    issuer: &str,
) -> Result<serde_json::Map<String, Value>, String> {
    let base = issuer.trim_end_matches('/');
    for suffix in ["oauth-authorization-server", "openid-configuration"] {
        let url = format!("{base}/.well-known/{suffix}");
        let Ok(response) = http.get(&url).send().await else {
            continue;
        };
        if !response.status().is_success() {
            continue;
        }
        if let Ok(Value::Object(doc)) = response.json::<Value>().await
            && doc.get("issuer").and_then(Value::as_str) == Some(issuer)
        {
            return Ok(doc);
        }
    }
    Err(format!(
        "no usable authorization server metadata at {issuer}"
    ))
}

async fn register(
    http: &reqwest::Client,
    endpoint: &str,
    redirect: &str,
) -> Result<String, String> {
    let body = json!({
        "client_name": "mcp-tasks console",
        "redirect_uris": [redirect],
        // refresh_token: sessions outlive their access tokens (`console::renewal`).
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "web",
    });
    let response = http
        .post(endpoint)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("registering at {endpoint}: {e}"))?;
    let status = response.status();
    let registered: Value = response
        .json()
        .await
        .map_err(|e| format!("registering at {endpoint}: {e}"))?;
    if !status.is_success() {
        return Err(format!(
            "{endpoint} refused the registration (HTTP {status}): {registered}"
        ));
    }
    let id = registered
        .get("client_id")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{endpoint} returned no client_id"))?;
    tracing::info!(%endpoint, "console: registered as an OAuth client");
    Ok(id.to_owned())
}
