//! Getting a client identity at an authorization server (pre-registered, a client ID
//! metadata document, or RFC 7591 dynamic registration), then tokens: the authorization
//! code grant with PKCE S256 and RFC 8707 `resource`, and refresh.

use oauth2::basic::BasicClient;
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet,
    EndpointSet, PkceCodeChallenge, RedirectUrl, RefreshToken, RequestTokenError, Scope,
    TokenResponse, TokenUrl,
};
use serde_json::{Value, json};
use url::Url;

use super::discovery::AuthServerMetadata;
use super::store::{RegisteredClient, TokenEndpointAuth, Tokens};
use super::{ClientCredentials, ClientSecretKind, OAuthConfig, OAuthError, UserAgent};

type Oauth2Client =
    BasicClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

/// A client identity at `metadata`'s server, in the spec's order of preference.
pub(super) async fn register(
    http: &reqwest::Client,
    config: &OAuthConfig,
    metadata: &AuthServerMetadata,
    redirect_uri: &str,
) -> Result<RegisteredClient, OAuthError> {
    let supported = metadata.token_endpoint_auth_methods_supported.as_deref();
    let allows = |m: &str| supported.is_none_or(|s| s.iter().any(|x| x == m));
    if let Some(pre) = &config.preregistered {
        let auth_method = match (&pre.client_secret, pre.auth_method) {
            (_, Some(method)) => method,
            (None, None) => TokenEndpointAuth::None,
            (Some(_), None) if allows("client_secret_basic") => {
                TokenEndpointAuth::ClientSecretBasic
            }
            (Some(_), None) if allows("client_secret_post") => TokenEndpointAuth::ClientSecretPost,
            (Some(_), None) => TokenEndpointAuth::ClientSecretBasic,
        };
        return Ok(RegisteredClient {
            client_id: pre.client_id.clone(),
            client_secret: pre.client_secret.clone(),
            auth_method,
            redirect_uri: redirect_uri.to_owned(),
            how: "preregistered".into(),
        });
    }
    if let (Some(url), Some(true)) = (
        &config.client_metadata_url,
        metadata.client_id_metadata_document_supported,
    ) {
        return Ok(RegisteredClient {
            client_id: url.clone(),
            client_secret: None,
            auth_method: TokenEndpointAuth::None,
            redirect_uri: redirect_uri.to_owned(),
            how: "metadata_document".into(),
        });
    }
    let Some(endpoint) = &metadata.registration_endpoint else {
        return Err(OAuthError::Registration(format!(
            "{} offers neither client ID metadata documents nor dynamic registration; \
             configure a pre-registered client ID",
            metadata.issuer
        )));
    };
    // A native app cannot keep a secret, so it asks to be a public client when it may.
    let wanted = ["none", "client_secret_basic", "client_secret_post"]
        .into_iter()
        .find(|m| allows(m))
        .unwrap_or("client_secret_basic");
    let body = json!({
        "client_name": config.client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": wanted,
        "application_type": config.application_type,
    });
    let response = http
        .post(endpoint)
        .json(&body)
        .send()
        .await
        .map_err(|e| OAuthError::Http(format!("POST {endpoint}: {e}")))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| OAuthError::Http(format!("POST {endpoint}: {e}")))?;
    if !status.is_success() {
        return Err(OAuthError::Registration(format!(
            "{endpoint} refused the registration (HTTP {status}): {}",
            clip(&text)
        )));
    }
    let registered: Value = serde_json::from_str(&text).map_err(|e| {
        OAuthError::Registration(format!("{endpoint} answered something not JSON: {e}"))
    })?;
    let client_id = registered
        .get("client_id")
        .and_then(Value::as_str)
        .ok_or_else(|| OAuthError::Registration(format!("{endpoint} returned no client_id")))?;
    let auth_method = registered
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
        .unwrap_or(wanted);
    let auth_method = TokenEndpointAuth::from_name(auth_method).ok_or_else(|| {
        OAuthError::Registration(format!(
            "{endpoint} registered the client for {auth_method}, which this client does not do"
        ))
    })?;
    Ok(RegisteredClient {
        client_id: client_id.to_owned(),
        client_secret: registered
            .get("client_secret")
            .and_then(Value::as_str)
            .map(str::to_owned),
        auth_method,
        redirect_uri: redirect_uri.to_owned(),
        how: "dynamic".into(),
    })
}

fn oauth2_client(
    metadata: &AuthServerMetadata,
    client: &RegisteredClient,
) -> Result<Oauth2Client, OAuthError> {
    let bad = |what: &str, e: url::ParseError| {
        OAuthError::Discovery(format!(
            "the authorization server's {what} is not a URL: {e}"
        ))
    };
    let authorize = metadata.authorization_endpoint.clone().ok_or_else(|| {
        OAuthError::Discovery(format!("{} has no authorization_endpoint", metadata.issuer))
    })?;
    let mut built = BasicClient::new(ClientId::new(client.client_id.clone()))
        .set_auth_uri(AuthUrl::new(authorize).map_err(|e| bad("authorization_endpoint", e))?)
        .set_token_uri(
            TokenUrl::new(metadata.token_endpoint.clone()).map_err(|e| bad("token_endpoint", e))?,
        )
        .set_redirect_uri(
            RedirectUrl::new(client.redirect_uri.clone()).map_err(|e| bad("redirect URI", e))?,
        )
        .set_auth_type(match client.auth_method {
            TokenEndpointAuth::ClientSecretPost => AuthType::RequestBody,
            _ => AuthType::BasicAuth,
        });
    if client.auth_method != TokenEndpointAuth::None
        && let Some(secret) = &client.client_secret
    {
        built = built.set_client_secret(ClientSecret::new(secret.clone()));
    }
    Ok(built)
}

/// Everything one authorization needs.
pub(super) struct Grant<'a> {
    pub(super) metadata: &'a AuthServerMetadata,
    pub(super) client: &'a RegisteredClient,
    pub(super) resource: &'a str,
    pub(super) scope: Option<&'a str>,
}

/// The authorization code grant: PKCE S256, `state`, `resource`, and the RFC 9207 `iss`
/// check before the code goes anywhere.
pub(super) async fn authorize(
    http: &reqwest::Client,
    agent: &dyn UserAgent,
    grant: Grant<'_>,
) -> Result<Tokens, OAuthError> {
    let metadata = grant.metadata;
    let s256 = metadata
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|m| m.iter().any(|x| x == "S256"));
    if !s256 {
        return Err(OAuthError::Discovery(format!(
            "{} does not advertise PKCE S256 (code_challenge_methods_supported), so it is not used",
            metadata.issuer
        )));
    }
    let client = oauth2_client(metadata, grant.client)?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let mut request = client
        .authorize_url(CsrfToken::new_random)
        .set_pkce_challenge(challenge)
        .add_extra_param("resource", grant.resource);
    if let Some(scope) = grant.scope {
        request = request.add_scopes(scope.split_whitespace().map(|s| Scope::new(s.to_owned())));
    }
    let (url, state) = request.url();
    let redirect = agent.authorize(url).await?;
    let code = read_redirect(&redirect, state.secret(), metadata)?;

    let response = client
        .exchange_code(AuthorizationCode::new(code))
        .set_pkce_verifier(verifier)
        .add_extra_param("resource", grant.resource)
        .request_async(http)
        .await
        .map_err(token_error)?;
    Ok(tokens_from(&response, grant.scope, None))
}

/// Checks `state` and `iss` (RFC 9207 §2.4, compared as plain strings) and returns the code.
fn read_redirect(
    redirect: &Url,
    state: &str,
    metadata: &AuthServerMetadata,
) -> Result<String, OAuthError> {
    let param = |name: &str| {
        redirect
            .query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    match (
        param("iss"),
        metadata.authorization_response_iss_parameter_supported,
    ) {
        (Some(iss), _) if iss != metadata.issuer => {
            return Err(OAuthError::Authorization(format!(
                "the authorization response names issuer {iss:?}, not {:?}; it is discarded",
                metadata.issuer
            )));
        }
        (None, Some(true)) => {
            return Err(OAuthError::Authorization(format!(
                "{} promises an iss parameter but the authorization response has none; it is discarded",
                metadata.issuer
            )));
        }
        _ => {}
    }
    if param("state").as_deref() != Some(state) {
        return Err(OAuthError::Authorization(
            "the authorization response's state does not match the request; it is discarded".into(),
        ));
    }
    if let Some(error) = param("error") {
        let description = param("error_description").unwrap_or_default();
        return Err(OAuthError::Authorization(format!(
            "the authorization server refused: {error} {description}"
        )));
    }
    param("code")
        .ok_or_else(|| OAuthError::Authorization("the authorization response has no code".into()))
}

/// The client credentials grant of a machine client (no user, no redirect), with a
/// client secret in HTTP Basic or a `private_key_jwt` assertion (RFC 7523) for `aud` =
/// the issuer.
pub(super) async fn client_credentials(
    http: &reqwest::Client,
    metadata: &AuthServerMetadata,
    credentials: &ClientCredentials,
    resource: &str,
    scope: Option<&str>,
) -> Result<Tokens, OAuthError> {
    let token_url = TokenUrl::new(metadata.token_endpoint.clone()).map_err(|e| {
        OAuthError::Discovery(format!(
            "the authorization server's token_endpoint is not a URL: {e}"
        ))
    })?;
    let mut client =
        BasicClient::new(ClientId::new(credentials.client_id.clone())).set_token_uri(token_url);
    let mut assertion = None;
    match &credentials.secret {
        ClientSecretKind::Secret(secret) => {
            client = client
                .set_client_secret(ClientSecret::new(secret.clone()))
                .set_auth_type(AuthType::BasicAuth);
        }
        ClientSecretKind::PrivateKeyJwt { pem, algorithm } => {
            client = client.set_auth_type(AuthType::RequestBody);
            assertion = Some(client_assertion(
                &credentials.client_id,
                &metadata.issuer,
                pem,
                algorithm,
            )?);
        }
    }
    let mut request = client
        .exchange_client_credentials()
        .add_extra_param("resource", resource);
    if let Some(scope) = scope {
        request = request.add_scopes(scope.split_whitespace().map(|s| Scope::new(s.to_owned())));
    }
    if let Some(jwt) = assertion {
        request = request
            .add_extra_param(
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            )
            .add_extra_param("client_assertion", jwt);
    }
    let response = request.request_async(http).await.map_err(token_error)?;
    Ok(tokens_from(&response, scope, None))
}

fn client_assertion(
    client_id: &str,
    issuer: &str,
    pem: &str,
    algorithm: &str,
) -> Result<String, OAuthError> {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let bad = |e: String| OAuthError::Token(format!("cannot sign the client assertion: {e}"));
    let alg: Algorithm = algorithm
        .parse()
        .map_err(|_| bad(format!("unknown algorithm {algorithm}")))?;
    let key = match alg {
        Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(pem.as_bytes()),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(pem.as_bytes()),
        _ => EncodingKey::from_rsa_pem(pem.as_bytes()),
    }
    .map_err(|e| bad(e.to_string()))?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let claims = json!({
        "iss": client_id,
        "sub": client_id,
        "aud": issuer,
        "iat": now,
        "exp": now + 300,
        "jti": CsrfToken::new_random().secret(),
    });
    jsonwebtoken::encode(&Header::new(alg), &claims, &key).map_err(|e| bad(e.to_string()))
}

/// A refresh-token grant; the new tokens keep the old refresh token when none is issued.
pub(super) async fn refresh(
    http: &reqwest::Client,
    metadata: &AuthServerMetadata,
    client: &RegisteredClient,
    resource: &str,
    old: &Tokens,
) -> Result<Tokens, OAuthError> {
    let refresh_token = old
        .refresh_token
        .clone()
        .ok_or_else(|| OAuthError::Token("there is no refresh token".into()))?;
    let token = RefreshToken::new(refresh_token);
    let response = oauth2_client(metadata, client)?
        .exchange_refresh_token(&token)
        .add_extra_param("resource", resource)
        .request_async(http)
        .await
        .map_err(token_error)?;
    Ok(tokens_from(
        &response,
        old.scope.as_deref(),
        old.refresh_token.as_deref(),
    ))
}

fn tokens_from(
    response: &oauth2::basic::BasicTokenResponse,
    requested_scope: Option<&str>,
    old_refresh: Option<&str>,
) -> Tokens {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    Tokens {
        access_token: response.access_token().secret().clone(),
        refresh_token: response
            .refresh_token()
            .map(|t| t.secret().clone())
            .or_else(|| old_refresh.map(str::to_owned)),
        expires_at: response
            .expires_in()
            .map(|d| now + i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 2)),
        // RFC 6749 §5.1: no scope in the response means the requested one was granted.
        scope: response
            .scopes()
            .map(|s| s.iter().map(|x| x.as_str()).collect::<Vec<_>>().join(" "))
            .or_else(|| requested_scope.map(str::to_owned)),
    }
}

fn token_error<RE: std::error::Error + 'static>(
    e: RequestTokenError<RE, oauth2::basic::BasicErrorResponse>,
) -> OAuthError {
    match e {
        RequestTokenError::ServerResponse(r) => OAuthError::Token(format!(
            "the token endpoint refused: {}{}",
            r.error(),
            r.error_description()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        )),
        RequestTokenError::Request(e) => OAuthError::Http(format!("the token request failed: {e}")),
        RequestTokenError::Parse(e, body) => OAuthError::Token(format!(
            "the token endpoint's answer is not a token response ({e}): {}",
            clip(&String::from_utf8_lossy(&body))
        )),
        RequestTokenError::Other(e) => OAuthError::Token(e),
    }
}

fn clip(s: &str) -> String {
    s.chars().take(300).collect()
}
