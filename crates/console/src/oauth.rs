//! Signing in with OAuth 2.1: the authorization code grant with PKCE S256 against the
//! authorization server the API names in its RFC 9728 metadata (the first of
//! `--authorization-servers`), asking for a token for the API's own resource (RFC 8707),
//! which the API's authenticator then verifies like any other.
//!
//! The console's client id is `ConsoleConfig::oauth_client_id`, or one it registers for
//! itself (RFC 7591, a public client) the first time, kept per replica. What the
//! callback needs (state, PKCE verifier, client id) travels in a short-lived encrypted
//! cookie, so the callback may reach any replica; it is `SameSite=Lax`, because the
//! authorization server's redirect back is a cross-site navigation.

use std::sync::Arc;

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

use super::layout;
use super::provider::Provider;
use super::session::{
    MAX_CLIENT_ID_BYTES, MAX_TOKEN_BYTES, Session, cookie, cookie_header, now_ms, settings, sign_in,
};
use mcp_tasks_server::AppState;

use crate::Console;

const COOKIE: &str = "mcp_tasks_console_oauth";
const PREFIX: &str = "mcpo2.";
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

/// What the callback needs, encrypted in its cookie (the PKCE verifier is a secret).
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

/// The authorization server's endpoints and the console's client id there.
pub(crate) async fn provider(state: &Console) -> Result<Arc<Provider>, String> {
    let issuer = issuer(state).ok_or("no authorization server is configured")?;
    let redirect = redirect_uri(state).ok_or("the API's resource URL is not a URL")?;
    let client_id = settings(state).and_then(|c| c.oauth_client_id.clone());
    state.oauth.get(issuer, &redirect, client_id).await
}

pub(crate) type Client = BasicClient<
    oauth2::EndpointSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointSet,
>;

/// The OAuth client for a provider, and the API resource (RFC 8707) its tokens are for.
pub(crate) fn client(state: &AppState, provider: &Provider) -> Result<(Client, String), String> {
    client_as(state, provider, &provider.client_id)
}

/// [`client`] as `client_id` (the one a session's tokens were issued to).
pub(crate) fn client_as(
    state: &AppState,
    provider: &Provider,
    client_id: &str,
) -> Result<(Client, String), String> {
    let (Some(redirect), Some(resource)) = (
        redirect_uri(state),
        state
            .config()
            .protected_resource
            .as_ref()
            .map(|r| r.resource.clone()),
    ) else {
        return Err("the API has no resource URL".into());
    };
    let client = BasicClient::new(ClientId::new(client_id.to_owned()))
        .set_auth_uri(AuthUrl::new(provider.authorize.clone()).map_err(|e| e.to_string())?)
        .set_token_uri(TokenUrl::new(provider.token.clone()).map_err(|e| e.to_string())?)
        .set_redirect_uri(RedirectUrl::new(redirect).map_err(|e| e.to_string())?);
    Ok((client, resource))
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
pub(crate) async fn start(State(state): State<Console>) -> Response {
    let provider = match provider(&state).await {
        Ok(p) => p,
        Err(why) => return failed(&why),
    };
    let (client, resource) = match client(&state, &provider) {
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
        .encrypt(PREFIX, &serde_json::to_vec(&flow).unwrap_or_default());
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
    State(state): State<Console>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let query = Callback::parse(&uri);
    let flow: Option<Flow> = cookie(&state, &headers, COOKIE)
        .and_then(|c| state.state_keys().decrypt(PREFIX, c, 4096))
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
    let (client, resource) = match client(&state, &provider) {
        Ok(c) => c,
        Err(why) => return failed(&why),
    };
    let exchanged = client
        .exchange_code(AuthorizationCode::new(code.clone()))
        .set_pkce_verifier(PkceCodeVerifier::new(flow.verifier))
        .add_extra_param("resource", resource)
        .request_async(&provider.http)
        .await;
    let response = match exchanged {
        Ok(response) => response,
        Err(e) => return failed(&format!("the code exchange failed: {e}")),
    };
    let token = response.access_token().secret().clone();
    if token.len() > MAX_TOKEN_BYTES {
        return failed("the access token is too large for a session cookie");
    }
    let mut session = Session::new(&state, Some(token));
    session.client_id = Some(provider.client_id.clone());
    keep(&mut session, &response);
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
    match sign_in(&state, &headers, session, done).await {
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

/// Renewal comes this long before the access token expires (a quarter of its lifetime
/// when that is shorter), so a page's next requests do not meet it expired.
const AHEAD_MS: i64 = 30_000;

/// Takes what a token response gives a session beyond its access token: the refresh
/// token (a new one when the server rotates it, else the one it has) and when to renew.
pub(crate) fn keep(session: &mut Session, response: &impl TokenResponse) {
    if let Some(refresh) = response.refresh_token() {
        session.refresh = Some(refresh.secret().clone());
    }
    let carried = [&session.token, &session.refresh, &session.client_id]
        .iter()
        .map(|t| t.as_ref().map_or(0, String::len))
        .sum::<usize>();
    if carried > MAX_TOKEN_BYTES + MAX_CLIENT_ID_BYTES {
        tracing::info!(
            "console: the refresh token does not fit in the session cookie; the session ends with its access token"
        );
        session.refresh = None;
        session.client_id = None;
    }
    session.renew_ms = response.expires_in().map(|lifetime| {
        let ms = i64::try_from(lifetime.as_millis()).unwrap_or(i64::MAX);
        now_ms().saturating_add(ms - AHEAD_MS.min(ms / 4))
    });
}

/// Sign-out: the refresh token is revoked at the authorization server (RFC 7009), when
/// it offers revocation, so no copy of the cookie renews again. Best effort: the session
/// is ended for every replica by its revocation in the store either way.
pub(crate) async fn revoke_at_server(state: &Console, session: &Session) {
    let Some(refresh) = &session.refresh else {
        return;
    };
    let Ok(provider) = provider(state).await else {
        return;
    };
    let Some(endpoint) = &provider.revocation else {
        return;
    };
    let sent = provider
        .http
        .post(endpoint)
        .form(&[
            ("token", refresh.as_str()),
            ("token_type_hint", "refresh_token"),
            (
                "client_id",
                session.client_id.as_deref().unwrap_or(&provider.client_id),
            ),
        ])
        .send()
        .await;
    match sent {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => tracing::info!(status = %r.status(), "console: the refresh token was not revoked"),
        Err(e) => tracing::info!(error = %e, "console: the refresh token was not revoked"),
    }
}
