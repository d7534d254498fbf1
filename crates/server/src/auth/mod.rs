//! Who is calling. Every task is owned by a tenant and a principal, and every task
//! method acts only within the caller's own.

mod jwt;

use axum::http::HeaderMap;
use futures::future::BoxFuture;
use mcp_tasks_store::Owner;

pub use jwt::{JwtAuth, JwtConfig, KeySource};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("authentication required: send a bearer token")]
    Missing,
    #[error("invalid token: {0}")]
    Invalid(String),
}

/// Turns request headers into an [`Owner`].
pub trait Authenticator: Send + Sync + 'static {
    fn authenticate<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<Owner, AuthError>>;

    /// The owner and, when the credentials carry any, their verified claims (the
    /// console's admin claim is read from them). Without claims of its own, an
    /// authenticator's callers carry none.
    fn identify<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<Identity, AuthError>> {
        Box::pin(async move {
            Ok(Identity {
                owner: self.authenticate(headers).await?,
                claims: None,
            })
        })
    }

    /// [`Authenticator::identify`], accepting credentials that have expired but are
    /// otherwise good (for a JWT: signature, issuer and audience): whose they were is
    /// still certain, which is all that signing out of the console needs to end its
    /// session everywhere. An authenticator that cannot tell is as strict as `identify`.
    fn identify_expired<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<Identity, AuthError>> {
        self.identify(headers)
    }
}

/// Who a caller is, with the claims its token was verified with.
#[derive(Debug, Clone)]
pub struct Identity {
    pub owner: Owner,
    pub claims: Option<serde_json::Map<String, serde_json::Value>>,
}

/// No authentication: one tenant, one anonymous principal. For local use only.
#[derive(Debug, Clone)]
pub struct NoAuth {
    owner: Owner,
}

impl Default for NoAuth {
    fn default() -> Self {
        Self {
            owner: Owner::new("default", "anonymous"),
        }
    }
}

impl Authenticator for NoAuth {
    fn authenticate<'a>(
        &'a self,
        _headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<Owner, AuthError>> {
        Box::pin(std::future::ready(Ok(self.owner.clone())))
    }
}

/// Tenants and principals end up in SQL keys, logs and headers: keep them printable and
/// bounded.
pub(crate) fn valid_identity(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && !s.chars().any(char::is_control)
}

/// RFC 9728 protected-resource metadata this server publishes when it requires tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedResource {
    /// The resource identifier: this server's MCP endpoint URL, which tokens must name as
    /// their audience.
    pub resource: String,
    pub authorization_servers: Vec<String>,
}

impl ProtectedResource {
    /// Where the metadata document is served, per RFC 9728 §3 (the well-known path at the
    /// resource's origin).
    pub fn metadata_url(&self) -> String {
        let origin_end = self
            .resource
            .find("://")
            .and_then(|i| self.resource[i + 3..].find('/').map(|j| i + 3 + j))
            .unwrap_or(self.resource.len());
        format!(
            "{}/.well-known/oauth-protected-resource",
            &self.resource[..origin_end]
        )
    }

    pub fn document(&self) -> serde_json::Value {
        serde_json::json!({
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "mcp-tasks",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_lives_at_the_origin() {
        let r = ProtectedResource {
            resource: "https://mcp.example.com/mcp".into(),
            authorization_servers: vec![],
        };
        assert_eq!(
            r.metadata_url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
        let bare = ProtectedResource {
            resource: "https://mcp.example.com".into(),
            authorization_servers: vec![],
        };
        assert_eq!(
            bare.metadata_url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
    }

    #[test]
    fn identities_are_printable() {
        assert!(valid_identity("tenant-1"));
        assert!(!valid_identity(""));
        assert!(!valid_identity("a\u{0}b"));
        assert!(!valid_identity("a\nb"));
        assert!(!valid_identity(&"x".repeat(257)));
    }
}
