//! What a client keeps between runs: per MCP server, the authorization server it was sent
//! to, the client registration obtained there, and the tokens. One JSON file, written
//! atomically (a temporary file renamed over it) and readable by its owner only, because
//! it holds refresh tokens and client secrets.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::OAuthError;

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenEndpointAuth {
    /// A public client: `client_id` in the body, no secret.
    None,
    ClientSecretBasic,
    ClientSecretPost,
}

impl TokenEndpointAuth {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Self::None),
            "client_secret_basic" => Some(Self::ClientSecretBasic),
            "client_secret_post" => Some(Self::ClientSecretPost),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::ClientSecretBasic => "client_secret_basic",
            Self::ClientSecretPost => "client_secret_post",
        }
    }
}

/// A client identity at one authorization server.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RegisteredClient {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub auth_method: TokenEndpointAuth,
    /// The redirect URI it was registered with (a new one needs a new registration).
    pub redirect_uri: String,
    /// `dynamic`, `metadata_document` or `preregistered`.
    pub how: String,
}

impl std::fmt::Debug for RegisteredClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredClient")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "***"))
            .field("auth_method", &self.auth_method)
            .field("how", &self.how)
            .finish()
    }
}

/// Tokens for one MCP server.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Tokens {
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Unix seconds after which the access token is no longer valid, if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// The scopes granted (or, when the server did not say, requested), space-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("access_token", &"***")
            .field("refresh_token", &self.refresh_token.as_ref().map(|_| "***"))
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .finish()
    }
}

/// Everything kept for one MCP server. Credentials are bound to `issuer`: when the
/// server names another authorization server they are discarded, never presented there.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServerEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<RegisteredClient>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoreFile {
    #[serde(default)]
    servers: BTreeMap<String, ServerEntry>,
}

/// The token cache file, keyed by MCP server URL.
#[derive(Debug, Clone)]
pub struct TokenStore {
    path: PathBuf,
}

impl TokenStore {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// `$XDG_STATE_HOME/mcp-tasks/oauth.json`, else `~/.local/state/mcp-tasks/oauth.json`.
    pub fn default_path() -> Option<PathBuf> {
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))?;
        Some(state.join("mcp-tasks").join("oauth.json"))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn load(&self, server: &str) -> Result<Option<ServerEntry>, OAuthError> {
        Ok(self.read()?.servers.get(server).cloned())
    }

    /// Replaces the entry of `server` (or removes it when `None`), keeping the others.
    pub fn save(&self, server: &str, entry: Option<&ServerEntry>) -> Result<(), OAuthError> {
        let mut file = self.read()?;
        match entry {
            Some(entry) => {
                file.servers.insert(server.to_owned(), entry.clone());
            }
            None => {
                file.servers.remove(server);
            }
        }
        let text = serde_json::to_string_pretty(&file)
            .map_err(|e| OAuthError::Store(format!("cannot encode the token store: {e}")))?;
        self.write_atomically(text.as_bytes())
    }

    fn read(&self) -> Result<StoreFile, OAuthError> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| {
                OAuthError::Store(format!("{} is not a token store: {e}", self.path.display()))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StoreFile::default()),
            Err(e) => Err(OAuthError::Store(format!(
                "cannot read {}: {e}",
                self.path.display()
            ))),
        }
    }

    fn write_atomically(&self, bytes: &[u8]) -> Result<(), OAuthError> {
        let fail = |what: &str, e: std::io::Error| {
            OAuthError::Store(format!("cannot {what} {}: {e}", self.path.display()))
        };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail("create the folder of", e))?;
        }
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let result = (|| {
            let mut file = options.open(&tmp)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(fail("write", e));
        }
        Ok(())
    }
}
