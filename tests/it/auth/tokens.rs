//! Tokens: HS256 validated claim by claim, every refusal a 401 challenge; RS256 and ES256
//! keys from a JWK set file, and no algorithm confusion.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use jsonwebtoken::Algorithm;
use mcp_tasks_server::KeySource;
use serde_json::{Value, json};

use super::{Challenge, assert_challenge, bearer, discover_with, post};
use crate::harness::TestApp;
use crate::harness::jwt::{
    EcKey, Jwt, OTHER_SECRET, RsaKey, SECRET, TempDir, claims, hmac_key, hs256, now, sign,
    unsigned, with,
};
use crate::harness::spec::all_text;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hs256_tokens_are_validated_and_every_refusal_is_a_401_challenge() {
    let app = TestApp::builder()
        .jwt(Jwt::hs256())
        .random_state_keys()
        .start()
        .await;
    let (db, replica) = (&app.db, app.replica());
    let aud = replica.url.clone();
    let good = claims(&aud, "alice", "t1");
    let token = hs256(SECRET.as_bytes(), &good);

    // A valid token works for discovery and for a tool call.
    let client = replica.bearer_client(&token);
    let discovered = client.discover().await.expect("server/discover");
    assert!(discovered["capabilities"].is_object(), "{discovered}");
    let greeted = client
        .call_tool("greet", json!({ "name": "Alice" }))
        .await
        .expect("tools/call");
    assert_eq!(all_text(&greeted), "Hello, Alice!", "{greeted}");
    // The auth scheme is case-insensitive (RFC 7235 §2.1).
    let lower = discover_with(
        &replica.url,
        &[("authorization", format!("bearer {token}"))],
    )
    .await;
    assert_eq!(lower.status, 200, "{}", lower.text());
    // An audience list that names this resource is fine.
    let listed = hs256(
        SECRET.as_bytes(),
        &with(
            good.clone(),
            "aud",
            Some(json!(["https://other.example/api", aud])),
        ),
    );
    let raw = discover_with(&replica.url, &[bearer(&listed)]).await;
    assert_eq!(raw.status, 200, "aud as a list: {}", raw.text());
    // Clock skew within the 30 s leeway is tolerated on exp and nbf.
    for (what, claim, value) in [
        ("exp 5 s ago", "exp", now() - 5),
        ("nbf in 5 s", "nbf", now() + 5),
    ] {
        let t = hs256(
            SECRET.as_bytes(),
            &with(good.clone(), claim, Some(json!(value))),
        );
        let raw = discover_with(&replica.url, &[bearer(&t)]).await;
        assert_eq!(raw.status, 200, "{what}: {}", raw.text());
    }

    let h = |c: Value| hs256(SECRET.as_bytes(), &c);
    let cases: Vec<(&str, Option<String>, Challenge)> = vec![
        ("no Authorization header", None, Challenge::NoToken),
        (
            "a Basic credential",
            Some(format!("Basic {}", STANDARD.encode("alice:password"))),
            Challenge::OtherScheme,
        ),
        (
            "a valid token under another scheme",
            Some(format!("Token {token}")),
            Challenge::OtherScheme,
        ),
        (
            "a garbage token",
            Some("Bearer not-a-jwt".into()),
            Challenge::InvalidToken("malformed"),
        ),
        (
            "three garbage segments",
            Some("Bearer eyJhbGciOiJIUzI1NiJ9.e30.AAAA".into()),
            Challenge::InvalidToken(""),
        ),
        (
            "a token signed with another secret",
            Some(format!("Bearer {}", hs256(OTHER_SECRET.as_bytes(), &good))),
            Challenge::InvalidToken("signature"),
        ),
        (
            "an HS384 token under the right secret",
            Some(format!(
                "Bearer {}",
                sign(Algorithm::HS384, None, &hmac_key(SECRET.as_bytes()), &good)
            )),
            Challenge::InvalidToken("not accepted"),
        ),
        (
            "an expired token",
            Some(format!(
                "Bearer {}",
                h(with(good.clone(), "exp", Some(json!(now() - 120))))
            )),
            Challenge::InvalidToken("expired"),
        ),
        (
            "a token without exp",
            Some(format!("Bearer {}", h(with(good.clone(), "exp", None)))),
            Challenge::InvalidToken("exp"),
        ),
        (
            "a token not valid for two more minutes",
            Some(format!(
                "Bearer {}",
                h(with(good.clone(), "nbf", Some(json!(now() + 120))))
            )),
            Challenge::InvalidToken("nbf"),
        ),
        (
            "a token for another audience",
            Some(format!(
                "Bearer {}",
                h(with(
                    good.clone(),
                    "aud",
                    Some(json!("https://elsewhere.example/mcp"))
                ))
            )),
            Challenge::InvalidToken("audience"),
        ),
        (
            "a token without an audience",
            Some(format!("Bearer {}", h(with(good.clone(), "aud", None)))),
            Challenge::InvalidToken("aud"),
        ),
        (
            "a token from another issuer",
            Some(format!(
                "Bearer {}",
                h(with(
                    good.clone(),
                    "iss",
                    Some(json!("https://evil.example"))
                ))
            )),
            Challenge::InvalidToken("issuer"),
        ),
        (
            "a token without a tenant",
            Some(format!("Bearer {}", h(with(good.clone(), "tenant", None)))),
            Challenge::InvalidToken("tenant"),
        ),
        (
            "a token whose tenant is not a string",
            Some(format!(
                "Bearer {}",
                h(with(good.clone(), "tenant", Some(json!(7))))
            )),
            Challenge::InvalidToken("tenant"),
        ),
        (
            "a token whose tenant has a control character",
            Some(format!(
                "Bearer {}",
                h(with(good.clone(), "tenant", Some(json!("t1\nadmin"))))
            )),
            Challenge::InvalidToken("tenant"),
        ),
        (
            "a token without sub",
            Some(format!("Bearer {}", h(with(good.clone(), "sub", None)))),
            Challenge::InvalidToken("sub"),
        ),
        (
            "a token with an empty sub",
            Some(format!(
                "Bearer {}",
                h(with(good.clone(), "sub", Some(json!(""))))
            )),
            Challenge::InvalidToken("sub"),
        ),
        (
            "an unsigned token (alg none)",
            Some(format!("Bearer {}", unsigned(&good))),
            Challenge::InvalidToken(""),
        ),
    ];
    for (what, authorization, expect) in &cases {
        let headers: Vec<(&str, String)> = authorization
            .iter()
            .map(|a| ("authorization", a.clone()))
            .collect();
        let raw = discover_with(&replica.url, &headers).await;
        assert_challenge(&raw, &replica.origin(), *expect, what);
        // A refused caller never reaches a method: no task is created either.
        let raw = post(
            &replica.url,
            &headers,
            json!(2),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 1 } }),
        )
        .await;
        assert_challenge(&raw, &replica.origin(), *expect, what);
    }
    assert_eq!(
        db.count_tasks("true").await,
        0,
        "no refused call created a task"
    );

    app.stop().await;
}

// ---------------------------------------------------------------------------------------
// RS256 and ES256 from a JWK set file; algorithm confusion
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rs256_and_es256_keys_from_a_jwk_set_file_and_no_algorithm_confusion() {
    let rsa = tokio::task::spawn_blocking(RsaKey::generate)
        .await
        .expect("RSA key");
    let ec = EcKey::generate();
    let outsider = EcKey::generate();
    let dir = TempDir::new();
    let path = dir.0.join("jwks.json");
    std::fs::write(
        &path,
        json!({ "keys": [rsa.jwk("rsa-1"), ec.jwk("ec-1")] }).to_string(),
    )
    .expect("write the JWK set");
    let app = TestApp::builder()
        .jwt(Jwt::new(KeySource::JwksFile(path)))
        .random_state_keys()
        .start()
        .await;
    let replica = app.replica();
    let good = claims(&replica.url, "alice", "t1");

    for (what, token) in [
        ("RS256 with its kid", rsa.sign(Some("rsa-1"), &good)),
        ("ES256 with its kid", ec.sign(Some("ec-1"), &good)),
    ] {
        let client = replica.bearer_client(&token);
        client
            .discover()
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let greeted = client
            .call_tool("greet", json!({ "name": "Alice" }))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(all_text(&greeted), "Hello, Alice!", "{what}: {greeted}");
    }

    let confusion = sign(
        Algorithm::HS256,
        Some("rsa-1"),
        &hmac_key(rsa.public_pem.as_bytes()),
        &good,
    );
    let refused = [
        (
            "an unknown kid (signed by a key of the set)",
            rsa.sign(Some("rsa-2"), &good),
            "unknown",
        ),
        (
            "an unknown ES256 kid",
            ec.sign(Some("ec-2"), &good),
            "unknown",
        ),
        (
            "the kid of a key of another algorithm",
            rsa.sign(Some("ec-1"), &good),
            "unknown",
        ),
        (
            "a key outside the set claiming a known kid",
            outsider.sign(Some("ec-1"), &good),
            "signature",
        ),
        (
            "a key outside the set, no kid",
            outsider.sign(None, &good),
            "signature",
        ),
        (
            "HS256 keyed with the RSA public key (algorithm confusion)",
            confusion,
            "not accepted",
        ),
        (
            "HS256 with any secret",
            hs256(SECRET.as_bytes(), &good),
            "not accepted",
        ),
        ("alg none", unsigned(&good), ""),
    ];
    for (what, token, why) in &refused {
        let raw = discover_with(&replica.url, &[bearer(token)]).await;
        assert_challenge(&raw, &replica.origin(), Challenge::InvalidToken(why), what);
    }

    app.stop().await;
}
