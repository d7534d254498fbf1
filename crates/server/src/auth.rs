//! Who is calling. Every task is owned by a tenant and a principal, and every task
//! method acts only within the caller's own.

use axum::http::HeaderMap;
use mcp_tasks_store::Owner;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("authentication required")]
    Missing,
    #[error("invalid credentials: {0}")]
    Invalid(String),
}

/// Turns request headers into an [`Owner`].
pub trait Authenticator: Send + Sync + 'static {
    fn authenticate(&self, headers: &HeaderMap) -> Result<Owner, AuthError>;
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
    fn authenticate(&self, _headers: &HeaderMap) -> Result<Owner, AuthError> {
        Ok(self.owner.clone())
    }
}
