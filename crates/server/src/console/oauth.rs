//! Signing in with OAuth 2.1: the authorization code grant with PKCE S256 against the
//! authorization server the API names in its RFC 9728 metadata (the first of
//! `--authorization-servers`), asking for a token for the API's own resource (RFC 8707),
//! which the API's authenticator then verifies like any other.
//!
//! The console's client id is `ConsoleConfig::oauth_client_id`, or one it registers for
//! itself (RFC 7591, a public client) the first time, kept per replica. What the
//! callback needs (state, PKCE verifier, client id) travels in a short-lived sealed
//! cookie, so the callback may reach any replica; it is `SameSite=Lax`, because the
//! authorization server's redirect back is a cross-site navigation.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use oauth2::basic::BasicClient;
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, CsrfToken, PkceCodeChallenge, PkceCodeVerifier,
    RedirectUrl, TokenResponse, TokenUrl,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::layout;
use super::session::{MAX_TOKEN_BYTES, cookie, cookie_header, now_ms};
use crate::AppState;

const COOKIE: &str = "mcp_tasks_console_oauth";
const PREFIX: &str = "mcpo1.";
/// How long an authorization may take, from the click to the callback.
const FLOW_TTL_MS: i64 = 10 * 60 * 1000;

/// Whether the sign-in page offers OAuth: the API names an authorization server.
pub(crate) fn available(state: &AppState) -> bool {
    issuer(state).is_some()
}

fn issuer(state: &AppState) -> Option<&str> {
    state
        .config()
        .protected_resource
        .as_ref()?
        .authorization_servers
        .first()
        .map(String::as_str)
}

/// What a replica learnt of the authorization server (its endpoints, and the client id
/// it registered), kept for the replica's life.
#[derive(Default)]
pub(crate) struct OAuthCache {
    provider: tokio::sync::Mutex<Option<Arc<Provider>>>,
}

struct Provider {
    issuer: String,
    authorize: String,
    token: String,
    client_id: String,
    /// Whether the server promises RFC 9207 `iss` in its redirects.
    iss_parameter: bool,
    http: reqwest::Client,
}

/// What the callback needs, sealed in its cookie.
#[derive(Serialize, Deserialize)]
struct Flow {
    #[serde(rename = "s")]
    state: String,
    #[serde(rename = "v")]
    verifier: String,
    #[serde(rename = "c")]
    client_id: String,
    #[serde(rename = "x")]
    expires_ms: i64,
}

fn public_origin(state: &AppState) -> Option<String> {
    let resource = &state.config().protected_resource.as_ref()?.resource;
    let url = url::Url::parse(resource).ok()?;
    Some(url.origin().ascii_serialization())
}

fn redirect_uri(state: &AppState) -> Option<String> {
    Some(format!("{}/console/oauth/callback", public_origin(state)?))
}

async fn provider(state: &AppState) -> Result<Arc<Provider>, String> {
    let mut cached = state.console_oauth().provider.lock().await;
    if let Some(p) = cached.as_ref() {
        return Ok(p.clone());
    }
    let issuer = issuer(state).ok_or("no authorization server is configured")?;
    let redirect = redirect_uri(state).ok_or("the API's resource URL is not a URL")?;
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
    let client_id = match super::config(state).and_then(|c| c.oauth_client_id.clone()) {
        Some(id) => id,
        None => {
            let endpoint = text("registration_endpoint").ok_or_else(|| {
                format!("{issuer} offers no dynamic registration; set --console-oauth-client-id")
            })?;
            register(&http, &endpoint, &redirect).await?
        }
    };
    let provider = Arc::new(Provider {
        issuer: issuer.to_owned(),
        authorize: text("authorization_endpoint")
            .ok_or_else(|| format!("{issuer} has no authorization_endpoint"))?,
        token: text("token_endpoint").ok_or_else(|| format!("{issuer} has no token_endpoint"))?,
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
        "grant_types": ["authorization_code"],
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

fn client(
    provider: &Provider,
    redirect: String,
) -> Result<
    BasicClient<
        oauth2::EndpointSet,
        oauth2::EndpointNotSet,
        oauth2::EndpointNotSet,
        oauth2::EndpointNotSet,
        oauth2::EndpointSet,
    >,
    String,
> {
    Ok(BasicClient::new(ClientId::new(provider.client_id.clone()))
        .set_auth_uri(AuthUrl::new(provider.authorize.clone()).map_err(|e| e.to_string())?)
        .set_token_uri(TokenUrl::new(provider.token.clone()).map_err(|e| e.to_string())?)
        .set_redirect_uri(RedirectUrl::new(redirect).map_err(|e| e.to_string())?))
}

fn failed(why: &str) -> Response {
    tracing::info!(reason = %why, "console: OAuth sign-in failed");
    layout::respond(
        StatusCode::BAD_REQUEST,
        layout::bare(
            "Sign-in failed",
            html! {
                h1 { "Sign-in failed" }
                p .error #signin-error { (why) }
                p { a href="/console/signin" { "Back to the sign-in page" } }
            },
        ),
    )
}

/// `GET /console/oauth/start`: off to the authorization server.
pub(crate) async fn start(State(state): State<AppState>) -> Response {
    let provider = match provider(&state).await {
        Ok(p) => p,
        Err(why) => return failed(&why),
    };
    let (Some(redirect), Some(resource)) = (
        redirect_uri(&state),
        state
            .config()
            .protected_resource
            .as_ref()
            .map(|r| r.resource.clone()),
    ) else {
        return failed("the API has no resource URL");
    };
    let client = match client(&provider, redirect) {
        Ok(c) => c,
        Err(why) => return failed(&why),
    };
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, csrf) = client
        .authorize_url(CsrfToken::new_random)
        .set_pkce_challenge(challenge)
        .add_extra_param("resource", resource)
        .url();
    let flow = Flow {
        state: csrf.secret().clone(),
        verifier: verifier.secret().clone(),
        client_id: provider.client_id.clone(),
        expires_ms: now_ms() + FLOW_TTL_MS,
    };
    let sealed = state
        .state_keys()
        .seal(PREFIX, &serde_json::to_vec(&flow).unwrap_or_default());
    let mut response = Redirect::to(url.as_str()).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        cookie_header(
            &state,
            COOKIE,
            &sealed,
            "/console/oauth",
            FLOW_TTL_MS / 1000,
            "Lax",
        ),
    );
    response
}

/// The authorization response's parameters.
#[derive(Default)]
struct Callback {
    code: Option<String>,
    state: Option<String>,
    iss: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

impl Callback {
    fn parse(uri: &Uri) -> Self {
        let mut c = Self::default();
        for (k, v) in url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
            let slot = match &*k {
                "code" => &mut c.code,
                "state" => &mut c.state,
                "iss" => &mut c.iss,
                "error" => &mut c.error,
                "error_description" => &mut c.error_description,
                _ => continue,
            };
            slot.get_or_insert_with(|| v.into_owned());
        }
        c
    }
}

/// `GET /console/oauth/callback`: the code for a token, the token for a session.
pub(crate) async fn callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let query = Callback::parse(&uri);
    let flow: Option<Flow> = cookie(&headers, COOKIE)
        .and_then(|c| state.state_keys().open(PREFIX, c, 4096))
        .and_then(|json| serde_json::from_slice(&json).ok())
        .filter(|f: &Flow| f.expires_ms > now_ms());
    let Some(flow) = flow else {
        return failed("the sign-in took too long or was not started here; try again");
    };
    if query.state.as_deref() != Some(flow.state.as_str()) {
        return failed("the authorization response does not match the sign-in that was started");
    }
    let provider = match provider(&state).await {
        Ok(p) => p,
        Err(why) => return failed(&why),
    };
    match (&query.iss, provider.iss_parameter) {
        (Some(iss), _) if iss != &provider.issuer => {
            return failed("the authorization response names another issuer");
        }
        (None, true) => return failed("the authorization response has no iss parameter"),
        _ => {}
    }
    if let Some(error) = &query.error {
        let description = query.error_description.as_deref().unwrap_or_default();
        return failed(&format!(
            "the authorization server refused: {error} {description}"
        ));
    }
    let Some(code) = &query.code else {
        return failed("the authorization response has no code");
    };
    if flow.client_id != provider.client_id {
        return failed("the sign-in was started with another client; try again");
    }
    let (Some(redirect), Some(resource)) = (
        redirect_uri(&state),
        state
            .config()
            .protected_resource
            .as_ref()
            .map(|r| r.resource.clone()),
    ) else {
        return failed("the API has no resource URL");
    };
    let client = match client(&provider, redirect) {
        Ok(c) => c,
        Err(why) => return failed(&why),
    };
    let exchanged = client
        .exchange_code(AuthorizationCode::new(code.clone()))
        .set_pkce_verifier(PkceCodeVerifier::new(flow.verifier))
        .add_extra_param("resource", resource)
        .request_async(&provider.http)
        .await;
    let token = match exchanged {
        Ok(response) => response.access_token().secret().clone(),
        Err(e) => return failed(&format!("the code exchange failed: {e}")),
    };
    if token.len() > MAX_TOKEN_BYTES {
        return failed("the access token is too large for a session cookie");
    }
    // The session cookie is SameSite=Strict, which a browser withholds from the rest of
    // a redirect chain that began on another site: so a page of ours moves on instead
    // of a redirect, and that navigation carries the new cookie.
    let done = || {
        layout::respond(
            StatusCode::OK,
            layout::bare(
                "Signed in",
                html! {
                    meta http-equiv="refresh" content="0; url=/console/tasks";
                    h1 { "Signed in" }
                    p { a #continue href="/console/tasks" { "Continue to the tasks" } }
                },
            ),
        )
    };
    match super::signin::signed_in(&state, &headers, token, done).await {
        Ok(mut response) => {
            response.headers_mut().append(
                header::SET_COOKIE,
                cookie_header(&state, COOKIE, "", "/console/oauth", 0, "Lax"),
            );
            response
        }
        Err(why) => failed(&why),
    }
}
