//! Finding the authorization server: the `WWW-Authenticate` challenge (RFC 6750 §3, RFC
//! 9728 §5.1), protected resource metadata (RFC 9728) and authorization server metadata
//! (RFC 8414, OpenID Connect Discovery), in the order the MCP authorization spec requires.

use serde::{Deserialize, Serialize};
use url::Url;

use super::OAuthError;

/// One `Bearer` challenge from a `WWW-Authenticate` header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
    pub error: Option<String>,
}

/// The `Bearer` challenge among the header's values, if there is one. Other schemes
/// (`DPoP`, `Basic`) in the same header are skipped.
pub fn parse_challenge<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<Challenge> {
    for value in values {
        let mut current: Option<(String, Challenge)> = None;
        for item in split_outside_quotes(value) {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            // `Scheme param=value` or a bare `Scheme` starts a new challenge.
            let (scheme, rest) = match item.split_once([' ', '\t']) {
                Some((first, rest)) if !first.contains('=') => (Some(first), rest.trim()),
                None if !item.contains('=') => (Some(item), ""),
                _ => (None, item),
            };
            if let Some(scheme) = scheme {
                if let Some((name, challenge)) = current.take()
                    && name.eq_ignore_ascii_case("bearer")
                {
                    return Some(challenge);
                }
                current = Some((scheme.to_owned(), Challenge::default()));
            }
            let Some((_, challenge)) = current.as_mut() else {
                continue;
            };
            if let Some((key, raw)) = rest.split_once('=') {
                let value = unquote(raw.trim());
                match key.trim().to_ascii_lowercase().as_str() {
                    "resource_metadata" => challenge.resource_metadata = Some(value),
                    "scope" => challenge.scope = Some(value),
                    "error" => challenge.error = Some(value),
                    _ => {}
                }
            }
        }
        if let Some((name, challenge)) = current
            && name.eq_ignore_ascii_case("bearer")
        {
            return Some(challenge);
        }
    }
    None
}

fn split_outside_quotes(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn unquote(raw: &str) -> String {
    let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) else {
        return raw.to_owned();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// RFC 9728 protected resource metadata (the fields a client uses).
#[derive(Debug, Clone, Deserialize)]
pub struct ResourceMetadata {
    pub resource: String,
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
}

/// RFC 8414 authorization server metadata (the fields a client uses).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct AuthServerMetadata {
    pub issuer: String,
    #[serde(default)]
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: String,
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub client_id_metadata_document_supported: Option<bool>,
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: Option<bool>,
}

/// Fetches the server's protected resource metadata: from the challenge's
/// `resource_metadata` when given, else the path-based then the root well-known URI. The
/// metadata's `resource` must name this server (same origin, a prefix of its path).
pub(super) async fn resource_metadata(
    http: &reqwest::Client,
    server: &Url,
    hint: Option<&str>,
) -> Result<ResourceMetadata, OAuthError> {
    let candidates: Vec<Url> = match hint {
        Some(hint) => vec![server.join(hint).map_err(|e| {
            OAuthError::Discovery(format!("bad resource_metadata URL {hint:?}: {e}"))
        })?],
        None => {
            let mut urls = Vec::new();
            let path = server.path().trim_end_matches('/');
            if !path.is_empty() {
                urls.push(well_known(server, "oauth-protected-resource", path)?);
            }
            urls.push(well_known(server, "oauth-protected-resource", "")?);
            urls
        }
    };
    let mut tried = Vec::new();
    for url in candidates {
        match get_json::<ResourceMetadata>(http, &url).await? {
            Some(metadata) => {
                check_resource(server, &metadata.resource)?;
                if metadata.authorization_servers.is_empty() {
                    return Err(OAuthError::Discovery(format!(
                        "the protected resource metadata at {url} names no authorization server"
                    )));
                }
                return Ok(metadata);
            }
            None => tried.push(url.to_string()),
        }
    }
    Err(OAuthError::Discovery(format!(
        "no protected resource metadata found (tried {})",
        tried.join(", ")
    )))
}

/// RFC 9728 §3.3 and RFC 8707: a token is requested for the resource the metadata
/// declares, so that resource must be this server, or a prefix of it on the same origin.
fn check_resource(server: &Url, resource: &str) -> Result<(), OAuthError> {
    let mismatch = || OAuthError::ResourceMismatch {
        server: server.to_string(),
        resource: resource.to_owned(),
    };
    let declared = Url::parse(resource).map_err(|_| mismatch())?;
    if declared.fragment().is_some() || declared.origin() != server.origin() {
        return Err(mismatch());
    }
    let prefix = declared.path().trim_end_matches('/');
    let path = server.path();
    let within = path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'));
    if within { Ok(()) } else { Err(mismatch()) }
}

/// Fetches and validates the metadata of the authorization server `issuer`, trying the
/// OAuth and OpenID well-known URIs in the spec's order. A document whose `issuer` is not
/// exactly `issuer` is never used (RFC 8414 §3.3).
pub(super) async fn auth_server_metadata(
    http: &reqwest::Client,
    issuer: &str,
) -> Result<AuthServerMetadata, OAuthError> {
    let base = Url::parse(issuer)
        .map_err(|e| OAuthError::Discovery(format!("bad issuer URL {issuer:?}: {e}")))?;
    let path = base.path().trim_end_matches('/').to_owned();
    let candidates = if path.is_empty() {
        vec![
            well_known(&base, "oauth-authorization-server", "")?,
            well_known(&base, "openid-configuration", "")?,
        ]
    } else {
        let mut appended = base.clone();
        appended.set_path(&format!("{path}/.well-known/openid-configuration"));
        appended.set_query(None);
        vec![
            well_known(&base, "oauth-authorization-server", &path)?,
            well_known(&base, "openid-configuration", &path)?,
            appended,
        ]
    };
    let mut problems = Vec::new();
    for url in candidates {
        match get_json::<AuthServerMetadata>(http, &url).await? {
            Some(metadata) if metadata.issuer == issuer => return Ok(metadata),
            Some(metadata) => problems.push(format!(
                "{url} declares issuer {:?}, not {issuer:?}",
                metadata.issuer
            )),
            None => problems.push(format!("{url}: not found")),
        }
    }
    Err(OAuthError::Discovery(format!(
        "no usable authorization server metadata for {issuer}: {}",
        problems.join("; ")
    )))
}

fn well_known(base: &Url, suffix: &str, path: &str) -> Result<Url, OAuthError> {
    let mut url = base.clone();
    url.set_path(&format!("/.well-known/{suffix}{path}"));
    url.set_query(None);
    url.set_fragment(None);
    Ok(url)
}

/// GETs a JSON document; `None` when the server has none there (a 4xx answer).
async fn get_json<T: for<'de> Deserialize<'de>>(
    http: &reqwest::Client,
    url: &Url,
) -> Result<Option<T>, OAuthError> {
    let response = http
        .get(url.clone())
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|e| OAuthError::Http(format!("GET {url}: {e}")))?;
    let status = response.status();
    if status.is_client_error() {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(OAuthError::Discovery(format!("GET {url}: HTTP {status}")));
    }
    let text = response
        .text()
        .await
        .map_err(|e| OAuthError::Http(format!("GET {url}: {e}")))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| OAuthError::Discovery(format!("GET {url}: not valid metadata: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_bearer_challenge_among_others() {
        let c = parse_challenge([
            r#"DPoP algs="ES256", Bearer error="insufficient_scope", scope="a b", resource_metadata="https://x/.well-known/oauth-protected-resource""#,
        ])
        .expect("a bearer challenge");
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(c.scope.as_deref(), Some("a b"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://x/.well-known/oauth-protected-resource")
        );
        assert_eq!(parse_challenge(["Basic realm=\"x\""]), None);
        let bare = parse_challenge(["Bearer"]).expect("a bare challenge");
        assert_eq!(bare, Challenge::default());
        let escaped = parse_challenge([r#"Bearer scope="a\"b, c""#]).expect("quoted");
        assert_eq!(escaped.scope.as_deref(), Some("a\"b, c"));
    }

    #[test]
    fn a_resource_must_be_this_server_or_a_prefix_of_it() {
        let server = Url::parse("http://localhost:3000/mcp").expect("url");
        assert!(check_resource(&server, "http://localhost:3000/mcp").is_ok());
        assert!(check_resource(&server, "http://localhost:3000").is_ok());
        assert!(check_resource(&server, "http://LOCALHOST:3000/").is_ok());
        assert!(check_resource(&server, "https://evil.example.com/mcp").is_err());
        assert!(check_resource(&server, "http://localhost:3000/mc").is_err());
        assert!(check_resource(&server, "http://localhost:3000/mcp/other").is_err());
        assert!(check_resource(&server, "http://localhost:3001/mcp").is_err());
    }
}
