//! The console's settings. The binary fills these from `--console*` flags.

use serde_json::{Map, Value};

/// Turns the console on (`ServerConfig::console`); `None` there leaves `/console` unserved.
#[derive(Debug, Clone, Default)]
pub struct ConsoleConfig {
    /// Which claim makes a principal an admin of its tenant (`None`: nobody is).
    pub admin_claim: Option<AdminClaim>,
    /// Whether the public scheme is https: cookies then carry `Secure` and the `__Host-`
    /// prefix (the binary takes it from `--public-url`, else from `--resource`, else
    /// https unless the replica listens on loopback).
    pub secure_cookies: bool,
    /// The console's OAuth client id at the authorization server; when unset, the console
    /// registers itself (RFC 7591) the first time someone signs in with OAuth.
    pub oauth_client_id: Option<String>,
}

/// `--console-admin-claim`: `name=value` (the claim is that string, or an array holding
/// it), or a bare `name` (the claim is JSON `true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminClaim {
    pub name: String,
    pub value: Option<String>,
}

impl AdminClaim {
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (name, value) = match spec.split_once('=') {
            Some((name, value)) => (name.trim(), Some(value.trim().to_owned())),
            None => (spec.trim(), None),
        };
        if name.is_empty() {
            return Err(format!(
                "{spec:?} names no claim; use NAME=VALUE or NAME (a claim that must be true)"
            ));
        }
        Ok(Self {
            name: name.to_owned(),
            value,
        })
    }

    /// Whether verified `claims` make their principal an admin.
    pub fn holds(&self, claims: &Map<String, Value>) -> bool {
        let Some(claim) = claims.get(&self.name) else {
            return false;
        };
        match &self.value {
            None => claim == &Value::Bool(true),
            Some(want) => match claim {
                Value::String(s) => s == want,
                Value::Array(items) => items.iter().any(|i| i.as_str() == Some(want)),
                _ => false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn admin_claims_match_exactly() {
        let role = AdminClaim::parse("role=admin").expect("parses");
        assert!(role.holds(&claims(json!({ "role": "admin" }))));
        assert!(role.holds(&claims(json!({ "role": ["user", "admin"] }))));
        assert!(!role.holds(&claims(json!({ "role": "administrator" }))));
        assert!(!role.holds(&claims(json!({ "roles": "admin" }))));
        let flag = AdminClaim::parse("console_admin").expect("parses");
        assert!(flag.holds(&claims(json!({ "console_admin": true }))));
        assert!(!flag.holds(&claims(json!({ "console_admin": "true" }))));
        assert!(AdminClaim::parse("=x").is_err());
    }
}
