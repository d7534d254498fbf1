//! Logging in to an OAuth-protected MCP server, as the MCP authorization spec (2026-07-28)
//! describes: a `401` sends the client to the server's protected resource metadata, then
//! to the authorization server's metadata; the client registers (pre-registered, a client
//! ID metadata document, or dynamic registration), runs the authorization code grant with
//! PKCE and `resource`, and retries. A `403 insufficient_scope` asks again for the union of
//! the scopes held and the scopes challenged; an expired token is refreshed.
//!
//! [`OAuth`] is attached to a [`Client`](crate::Client) with
//! [`Client::oauth`](crate::Client::oauth); every request then carries its token and
//! recovers from these answers by itself. Tokens and registrations are kept in a
//! [`TokenStore`] file when one is configured, so the next run starts logged in.

mod agent;
mod discovery;
mod flow;
mod store;

use std::collections::BTreeSet;

use reqwest::header::HeaderMap;
use tokio::sync::Mutex;
use url::Url;

pub use agent::{Headless, LoopbackBrowser, UserAgent};
pub use discovery::{AuthServerMetadata, Challenge, ResourceMetadata, parse_challenge};
pub use store::{RegisteredClient, ServerEntry, TokenEndpointAuth, TokenStore, Tokens};

/// An access token this close to its expiry is refreshed before use.
const EXPIRY_SLACK_SECS: i64 = 30;

#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("OAuth discovery failed: {0}")]
    Discovery(String),
    #[error(
        "the server's protected resource metadata names the resource {resource}, not {server}; refusing to authorize"
    )]
    ResourceMismatch { server: String, resource: String },
    #[error("client registration failed: {0}")]
    Registration(String),
    #[error("authorization failed: {0}")]
    Authorization(String),
    #[error("token request failed: {0}")]
    Token(String),
    #[error("{0}")]
    Http(String),
    #[error("token store: {0}")]
    Store(String),
}

/// A client ID (and secret) registered with the authorization server beforehand.
#[derive(Clone)]
pub struct Preregistered {
    pub client_id: String,
    pub client_secret: Option<String>,
    /// How to authenticate at the token endpoint; by default the secret goes in HTTP Basic
    /// (or `client_secret_post` when the server supports only that), and no secret means a
    /// public client.
    pub auth_method: Option<TokenEndpointAuth>,
}

impl std::fmt::Debug for Preregistered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preregistered")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "***"))
            .finish()
    }
}

/// A machine client's own credentials, for the client credentials grant (an OAuth
/// extension for clients acting on their own behalf: no user, no browser).
#[derive(Clone)]
pub struct ClientCredentials {
    pub client_id: String,
    pub secret: ClientSecretKind,
}

/// How a machine client proves who it is at the token endpoint.
#[derive(Clone)]
pub enum ClientSecretKind {
    /// A shared secret, sent with HTTP Basic (`client_secret_basic`).
    Secret(String),
    /// A private key (PEM) signing a `private_key_jwt` assertion, with its JWS algorithm
    /// (`ES256`, `RS256`, `EdDSA`…).
    PrivateKeyJwt { pem: String, algorithm: String },
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.secret {
            ClientSecretKind::Secret(_) => "client_secret_basic",
            ClientSecretKind::PrivateKeyJwt { .. } => "private_key_jwt",
        };
        f.debug_struct("ClientCredentials")
            .field("client_id", &self.client_id)
            .field("secret", &kind)
            .finish()
    }
}

/// How this client presents itself to authorization servers.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// `client_name` in dynamic registration.
    pub client_name: String,
    /// `application_type` in dynamic registration: `native` for CLIs and desktop apps.
    pub application_type: String,
    /// The HTTPS URL of this client's metadata document, used as its `client_id` where the
    /// authorization server supports client ID metadata documents.
    pub client_metadata_url: Option<String>,
    /// Credentials registered beforehand; they take precedence over any registration.
    pub preregistered: Option<Preregistered>,
    /// Set for a machine client: tokens come from the client credentials grant instead of
    /// a user's authorization (the user agent is then never used).
    pub client_credentials: Option<ClientCredentials>,
    /// Ask for `offline_access` (a refresh token) when the authorization server offers it.
    pub offline_access: bool,
    /// Where tokens and registrations survive the process.
    pub store: Option<TokenStore>,
}

impl OAuthConfig {
    pub fn new(client_name: impl Into<String>) -> Self {
        Self {
            client_name: client_name.into(),
            application_type: "native".into(),
            client_metadata_url: None,
            preregistered: None,
            client_credentials: None,
            offline_access: true,
            store: None,
        }
    }
}

/// The OAuth state of one MCP server URL: shared by every request of the clients it is
/// attached to, and by every process that uses the same store file.
#[derive(Debug)]
pub struct OAuth {
    server: Url,
    config: OAuthConfig,
    agent: Box<dyn UserAgent>,
    http: reqwest::Client,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    loaded: bool,
    entry: ServerEntry,
    /// The resource identifier tokens are requested for (from the resource metadata).
    resource: Option<String>,
    metadata: Option<AuthServerMetadata>,
}

impl OAuth {
    /// OAuth for the MCP endpoint `server_url`, completing authorizations through `agent`.
    pub fn new(
        server_url: &str,
        config: OAuthConfig,
        agent: impl UserAgent + 'static,
    ) -> Result<Self, OAuthError> {
        let server = Url::parse(server_url)
            .map_err(|e| OAuthError::Discovery(format!("bad server URL {server_url:?}: {e}")))?;
        // Redirects are never followed: a token endpoint or metadata document that moves is
        // an error, not something to chase with credentials attached.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(std::time::Duration::from_secs(10))
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(|e| OAuthError::Http(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            server,
            config,
            agent: Box::new(agent),
            http,
            state: Mutex::new(State::default()),
        })
    }

    /// The access token to send now, if there is one: from memory or the store, refreshed
    /// first when it is about to expire and a refresh token allows.
    pub async fn access_token(&self) -> Result<Option<String>, OAuthError> {
        let mut state = self.state.lock().await;
        self.load(&mut state)?;
        let Some(tokens) = state.entry.tokens.clone() else {
            return Ok(None);
        };
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let expiring = tokens
            .expires_at
            .is_some_and(|at| at - EXPIRY_SLACK_SECS <= now);
        if expiring && tokens.refresh_token.is_some() && self.refresh_locked(&mut state).await? {
            return Ok(state.entry.tokens.as_ref().map(|t| t.access_token.clone()));
        }
        Ok(Some(tokens.access_token))
    }

    /// The tokens held now (for display; never log them).
    pub async fn tokens(&self) -> Result<Option<Tokens>, OAuthError> {
        let mut state = self.state.lock().await;
        self.load(&mut state)?;
        Ok(state.entry.tokens.clone())
    }

    /// Forgets this server's tokens and registration, here and in the store.
    pub async fn logout(&self) -> Result<(), OAuthError> {
        let mut state = self.state.lock().await;
        state.loaded = true;
        state.entry = ServerEntry::default();
        if let Some(store) = &self.config.store {
            store.save(self.server.as_str(), None)?;
        }
        Ok(())
    }

    /// Uses the refresh token now. `Ok(false)`: there is none, or the server refused it.
    pub async fn refresh(&self) -> Result<bool, OAuthError> {
        let mut state = self.state.lock().await;
        self.load(&mut state)?;
        self.refresh_locked(&mut state).await
    }

    /// After a `401` to a request that carried `sent` (or no token): refreshes, or runs
    /// the whole authorization again, as the challenge and the metadata say.
    pub async fn unauthorized(
        &self,
        headers: &HeaderMap,
        sent: Option<&str>,
    ) -> Result<(), OAuthError> {
        let challenge = challenge_of(headers).unwrap_or_default();
        let mut state = self.state.lock().await;
        self.load(&mut state)?;
        let current = state.entry.tokens.as_ref().map(|t| t.access_token.clone());
        if current.is_some() && current.as_deref() != sent {
            // Another request already replaced the token this one was refused with.
            return Ok(());
        }
        let (issuer, prm_scopes) = self.discover(&mut state, &challenge).await?;
        let same_server = state.entry.issuer.as_deref() == Some(issuer.as_str());
        if same_server && self.refresh_locked(&mut state).await? {
            return Ok(());
        }
        let scope = challenge
            .scope
            .clone()
            .or_else(|| prm_scopes.map(|s| s.join(" ")))
            .filter(|s| !s.trim().is_empty());
        self.authorize_locked(&mut state, scope).await
    }

    /// After a `403`: when it is `insufficient_scope` naming scopes not yet requested,
    /// authorizes again for those plus the ones held. `Ok(false)`: retrying cannot help.
    pub async fn forbidden(&self, headers: &HeaderMap) -> Result<bool, OAuthError> {
        let Some(challenge) = challenge_of(headers) else {
            return Ok(false);
        };
        let Some(wanted) = challenge.scope.clone() else {
            return Ok(false);
        };
        if challenge.error.as_deref() != Some("insufficient_scope") {
            return Ok(false);
        }
        let mut state = self.state.lock().await;
        self.load(&mut state)?;
        let held: BTreeSet<String> = state
            .entry
            .tokens
            .as_ref()
            .and_then(|t| t.scope.as_deref())
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let wanted: BTreeSet<String> = wanted.split_whitespace().map(str::to_owned).collect();
        if wanted.is_subset(&held) {
            // The same scopes again would get the same answer.
            return Ok(false);
        }
        self.discover(&mut state, &challenge).await?;
        let union: Vec<String> = held.union(&wanted).cloned().collect();
        self.authorize_locked(&mut state, Some(union.join(" ")))
            .await?;
        Ok(true)
    }

    fn load(&self, state: &mut State) -> Result<(), OAuthError> {
        if state.loaded {
            return Ok(());
        }
        if let Some(store) = &self.config.store
            && let Some(entry) = store.load(self.server.as_str())?
        {
            state.entry = entry;
        }
        state.loaded = true;
        Ok(())
    }

    fn save(&self, state: &State) -> Result<(), OAuthError> {
        match &self.config.store {
            Some(store) => store.save(self.server.as_str(), Some(&state.entry)),
            None => Ok(()),
        }
    }

    /// Reads the resource metadata and the authorization server's metadata; a server that
    /// now names another authorization server loses the credentials of the old one.
    async fn discover(
        &self,
        state: &mut State,
        challenge: &Challenge,
    ) -> Result<(String, Option<Vec<String>>), OAuthError> {
        let prm = discovery::resource_metadata(
            &self.http,
            &self.server,
            challenge.resource_metadata.as_deref(),
        )
        .await?;
        let issuer = prm.authorization_servers[0].clone();
        let metadata = discovery::auth_server_metadata(&self.http, &issuer).await?;
        if state.entry.issuer.as_deref() != Some(issuer.as_str()) {
            if state
                .entry
                .client
                .as_ref()
                .is_some_and(|c| c.how == "preregistered")
            {
                return Err(OAuthError::Registration(format!(
                    "the pre-registered client belongs to {}, but the server now names {issuer}",
                    state.entry.issuer.as_deref().unwrap_or("?")
                )));
            }
            state.entry = ServerEntry {
                issuer: Some(issuer.clone()),
                ..ServerEntry::default()
            };
        }
        state.resource = Some(prm.resource.clone());
        state.metadata = Some(metadata);
        Ok((issuer, prm.scopes_supported))
    }

    async fn authorize_locked(
        &self,
        state: &mut State,
        scope: Option<String>,
    ) -> Result<(), OAuthError> {
        let (Some(metadata), Some(resource)) = (state.metadata.clone(), state.resource.clone())
        else {
            return Err(OAuthError::Discovery(
                "authorization before discovery".into(),
            ));
        };
        if let Some(credentials) = &self.config.client_credentials {
            let tokens = flow::client_credentials(
                &self.http,
                &metadata,
                credentials,
                &resource,
                scope.as_deref(),
            )
            .await?;
            state.entry.tokens = Some(tokens);
            return self.save(state);
        }
        let redirect_uri = self.agent.redirect_uri();
        let reusable = state
            .entry
            .client
            .as_ref()
            .is_some_and(|c| c.redirect_uri == redirect_uri || c.how == "preregistered");
        if !reusable {
            let client = flow::register(&self.http, &self.config, &metadata, &redirect_uri).await?;
            state.entry.client = Some(client);
            self.save(state)?;
        }
        let Some(client) = state.entry.client.clone() else {
            return Err(OAuthError::Registration("no client identity".into()));
        };
        let scope = self.with_offline_access(scope, &metadata);
        let tokens = flow::authorize(
            &self.http,
            self.agent.as_ref(),
            flow::Grant {
                metadata: &metadata,
                client: &client,
                resource: &resource,
                scope: scope.as_deref(),
            },
        )
        .await?;
        state.entry.tokens = Some(tokens);
        self.save(state)
    }

    fn with_offline_access(
        &self,
        scope: Option<String>,
        metadata: &AuthServerMetadata,
    ) -> Option<String> {
        let offered = metadata
            .scopes_supported
            .as_ref()
            .is_some_and(|s| s.iter().any(|x| x == "offline_access"));
        match scope {
            Some(s) if self.config.offline_access && offered => {
                if s.split_whitespace().any(|x| x == "offline_access") {
                    Some(s)
                } else {
                    Some(format!("{s} offline_access"))
                }
            }
            other => other,
        }
    }

    async fn refresh_locked(&self, state: &mut State) -> Result<bool, OAuthError> {
        let (Some(tokens), Some(client)) = (state.entry.tokens.clone(), state.entry.client.clone())
        else {
            return Ok(false);
        };
        if tokens.refresh_token.is_none() {
            return Ok(false);
        }
        if state.metadata.is_none() || state.resource.is_none() {
            self.discover(state, &Challenge::default()).await?;
        }
        let (Some(metadata), Some(resource)) = (state.metadata.clone(), state.resource.clone())
        else {
            return Ok(false);
        };
        match flow::refresh(&self.http, &metadata, &client, &resource, &tokens).await {
            Ok(fresh) => {
                state.entry.tokens = Some(fresh);
                self.save(state)?;
                Ok(true)
            }
            Err(OAuthError::Token(reason)) => {
                tracing::info!(%reason, "the refresh token was refused; authorizing again");
                state.entry.tokens = None;
                self.save(state)?;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

fn challenge_of(headers: &HeaderMap) -> Option<Challenge> {
    parse_challenge(
        headers
            .get_all("www-authenticate")
            .iter()
            .filter_map(|v| v.to_str().ok()),
    )
}
