//! How `serve` and `dev` authenticate callers.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use mcp_tasks_server::{Authenticator, JwtAuth, JwtConfig, KeySource, NoAuth, ProtectedResource};
use mcp_tasks_wire::secret::Secret;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AuthMode {
    /// One tenant, one anonymous principal: local use only.
    None,
    /// Bearer JWTs (OAuth 2.1 resource server).
    Jwt,
}

#[derive(Debug, Args)]
pub(super) struct AuthArgs {
    /// How callers are authenticated.
    #[arg(long, env = "MCP_TASKS_AUTH", value_enum, default_value_t = AuthMode::None)]
    auth: AuthMode,
    /// With --auth none, allow listening on a non-loopback address.
    #[arg(long, env = "MCP_TASKS_ALLOW_UNAUTHENTICATED")]
    allow_unauthenticated: bool,
    /// JWK set with the RS256/ES256 verification keys: a file path or an http(s) URL.
    #[arg(long, env = "MCP_TASKS_JWT_JWKS")]
    jwt_jwks: Option<String>,
    /// Shared HS256 secret (at least 32 bytes), instead of a JWK set.
    #[arg(long, env = "MCP_TASKS_JWT_HS256_SECRET", hide_env_values = true)]
    jwt_hs256_secret: Option<Secret>,
    /// Required `iss` of tokens.
    #[arg(long, env = "MCP_TASKS_JWT_ISSUER")]
    jwt_issuer: Option<String>,
    /// Required `aud` of tokens (defaults to --resource).
    #[arg(long, env = "MCP_TASKS_JWT_AUDIENCE")]
    jwt_audience: Option<String>,
    /// Claim that names the tenant.
    #[arg(long, env = "MCP_TASKS_TENANT_CLAIM", default_value = "tenant")]
    tenant_claim: String,
    /// This server's resource identifier (its public MCP endpoint URL), published as
    /// RFC 9728 metadata; required with --auth jwt.
    #[arg(long, env = "MCP_TASKS_RESOURCE")]
    resource: Option<String>,
    /// Authorization servers that issue tokens for this resource, comma-separated.
    #[arg(long, env = "MCP_TASKS_AUTHORIZATION_SERVERS", value_delimiter = ',')]
    authorization_servers: Vec<String>,
}

impl AuthArgs {
    /// Why a replica on `listen` must not start without authentication, checked before
    /// anything is connected: beyond loopback the operator must say that something in
    /// front authenticates callers, and must name the hosts clients use (`allowed_hosts`,
    /// as given), since with no Host check a web page anywhere could reach it through DNS
    /// rebinding.
    pub(super) fn refuse_unsafe(
        &self,
        listen: SocketAddr,
        allowed_hosts: Option<&str>,
    ) -> anyhow::Result<()> {
        if self.auth != AuthMode::None || listen.ip().is_loopback() {
            return Ok(());
        }
        if !self.allow_unauthenticated {
            bail!(
                "refusing to listen on {listen} without authentication: anyone who can reach it could read and cancel every task. Use --auth jwt, listen on a loopback address, or pass --allow-unauthenticated (MCP_TASKS_ALLOW_UNAUTHENTICATED=true) if something in front of this server authenticates callers"
            );
        }
        if allowed_hosts.is_none() {
            bail!(
                "refusing to listen on {listen} without authentication and without MCP_TASKS_ALLOWED_HOSTS: with any Host accepted, a web page on any site could reach this unauthenticated replica through DNS rebinding (its own name made to resolve to this address) and read and cancel every task. Set MCP_TASKS_ALLOWED_HOSTS (--allowed-hosts) to the host names clients use to reach it, comma-separated (`*` accepts any, only for a proxy in front that checks Host itself)"
            );
        }
        Ok(())
    }

    /// The authenticator, or why the configuration cannot be served.
    pub(super) async fn authenticator(
        &self,
        listen: SocketAddr,
    ) -> anyhow::Result<(Arc<dyn Authenticator>, Option<ProtectedResource>)> {
        match self.auth {
            AuthMode::None => {
                tracing::warn!(
                    %listen,
                    "authentication is off (--auth none): every caller is the same anonymous principal"
                );
                Ok((Arc::new(NoAuth::default()), None))
            }
            AuthMode::Jwt => {
                let resource = self.resource.clone().context(
                    "--auth jwt needs --resource (MCP_TASKS_RESOURCE): this server's public MCP endpoint URL",
                )?;
                let keys = match (&self.jwt_jwks, &self.jwt_hs256_secret) {
                    (Some(jwks), None) => KeySource::jwks(jwks),
                    (None, Some(secret)) => KeySource::Hs256(secret.clone()),
                    (Some(_), Some(_)) => {
                        bail!(
                            "give either MCP_TASKS_JWT_JWKS or MCP_TASKS_JWT_HS256_SECRET, not both"
                        )
                    }
                    (None, None) => {
                        bail!("--auth jwt needs MCP_TASKS_JWT_JWKS or MCP_TASKS_JWT_HS256_SECRET")
                    }
                };
                let mut config = JwtConfig::new(keys);
                config.issuer.clone_from(&self.jwt_issuer);
                config.audience = Some(
                    self.jwt_audience
                        .clone()
                        .unwrap_or_else(|| resource.clone()),
                );
                config.tenant_claim.clone_from(&self.tenant_claim);
                let auth = JwtAuth::new(config).await.map_err(anyhow::Error::msg)?;
                tracing::info!(%resource, "authentication: bearer JWTs");
                Ok((
                    Arc::new(auth),
                    Some(ProtectedResource {
                        resource,
                        authorization_servers: self.authorization_servers.clone(),
                    }),
                ))
            }
        }
    }
}
