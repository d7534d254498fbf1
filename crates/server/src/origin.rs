//! The DNS-rebinding defence every HTTP surface shares (`/mcp` and `/console`): which
//! `Host` and `Origin` a request may name.

use axum::http::{HeaderMap, header};

use crate::config::AllowedHosts;

/// DNS-rebinding defence: the `Host` must be one this replica answers to, and an
/// `Origin`, when a browser sends one, must name an allowed host too.
pub fn check_host_and_origin(allowed: &AllowedHosts, headers: &HeaderMap) -> Result<(), String> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(host_without_port);
    match &host {
        Some(h) if allowed.allows(h) => {}
        Some(h) => return Err(format!("Host {h:?} is not allowed")),
        None if matches!(allowed, AllowedHosts::Any) => {}
        None => return Err("a Host header is required".into()),
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin
            .to_str()
            .map_err(|_| "Origin is not valid ASCII".to_owned())?;
        if origin == "null" {
            return Err("an opaque (null) Origin is not allowed".into());
        }
        let origin_host = origin
            .split_once("://")
            .map(|(_, rest)| host_without_port(rest))
            .ok_or_else(|| format!("Origin {origin:?} is not a valid origin"))?;
        let ok = match allowed {
            AllowedHosts::Any => host.as_deref() == Some(origin_host.as_str()),
            list => list.allows(&origin_host),
        };
        if !ok {
            return Err(format!("Origin {origin:?} is not allowed"));
        }
    }
    Ok(())
}

/// `example.com:8080` → `example.com`; `[::1]:80` → `::1`.
fn host_without_port(authority: &str) -> String {
    let authority = authority.split('/').next().unwrap_or_default().trim();
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::host_without_port;

    #[test]
    fn strips_ports() {
        assert_eq!(host_without_port("Example.com:8080"), "example.com");
        assert_eq!(host_without_port("[::1]:80"), "::1");
        assert_eq!(host_without_port("[::1]"), "::1");
        assert_eq!(host_without_port("localhost"), "localhost");
    }
}
