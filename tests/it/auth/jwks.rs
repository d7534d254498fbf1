//! A JWK set URL, and key rotation: fetched again for an unknown kid, at most once per
//! interval.

use std::time::{Duration, Instant};

use mcp_tasks_server::KeySource;
use serde_json::json;

use super::{Challenge, assert_challenge, bearer, discover_with};
use crate::harness::TestApp;
use crate::harness::jwt::{EcKey, JwksServer, Jwt, claims};

/// Sends `n` discovery requests with `token` at once; returns their statuses.
async fn burst(url: &str, token: &str, n: usize) -> Vec<u16> {
    let requests = (0..n).map(|_| async move { discover_with(url, &[bearer(token)]).await.status });
    futures::future::join_all(requests).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwk_set_url_is_fetched_again_for_an_unknown_kid_at_most_once_per_interval() {
    const INTERVAL: Duration = Duration::from_millis(400);
    let (a, b) = (EcKey::generate(), EcKey::generate());
    let jwks = JwksServer::start(&json!({ "keys": [a.jwk("key-a")] })).await;
    let app = TestApp::builder()
        .jwt(Jwt::new(KeySource::jwks(&jwks.url)).tweak(|c| c.refresh_min_interval = INTERVAL))
        .random_state_keys()
        .start()
        .await;
    let replica = app.replica();
    assert_eq!(jwks.fetches(), 1, "the set is fetched at start-up");
    let good = claims(&replica.url, "alice", "t1");
    let token_a = a.sign(Some("key-a"), &good);
    let token_b = b.sign(Some("key-b"), &good);

    // Known keys never cause a fetch, however many requests come.
    let statuses = burst(&replica.url, &token_a, 20).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(
        jwks.fetches(),
        1,
        "a burst of known-kid tokens fetched the set"
    );

    // An unknown kid makes the replica look again; the set does not have it yet.
    tokio::time::sleep(INTERVAL + Duration::from_millis(100)).await;
    let raw = discover_with(&replica.url, &[bearer(&token_b)]).await;
    assert_challenge(
        &raw,
        &replica.origin(),
        Challenge::InvalidToken("unknown"),
        "key B before it is published",
    );
    assert_eq!(jwks.fetches(), 2, "an unknown kid triggers one fetch");

    // A burst of unknown kids fetches at most once per interval.
    tokio::time::sleep(INTERVAL + Duration::from_millis(100)).await;
    let before = jwks.fetches();
    let started = Instant::now();
    let statuses = burst(&replica.url, &token_b, 20).await;
    let elapsed = started.elapsed();
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
    let fetched = jwks.fetches() - before;
    let allowed = 1 + (elapsed.as_millis() / INTERVAL.as_millis()) as usize;
    assert!(
        (1..=allowed).contains(&fetched),
        "{fetched} fetches for 20 unknown-kid requests in {elapsed:?} (interval {INTERVAL:?})"
    );

    // The issuer rotates: B is published. After the interval, B's next token is accepted.
    jwks.serve(&json!({ "keys": [a.jwk("key-a"), b.jwk("key-b")] }));
    tokio::time::sleep(INTERVAL + Duration::from_millis(100)).await;
    let before = jwks.fetches();
    let raw = discover_with(&replica.url, &[bearer(&token_b)]).await;
    assert_eq!(raw.status, 200, "key B after rotation: {}", raw.text());
    assert_eq!(
        jwks.fetches(),
        before + 1,
        "the unknown kid was fetched once"
    );
    // Now both keys are known: no more fetches.
    let statuses = burst(&replica.url, &token_b, 10).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let statuses = burst(&replica.url, &token_a, 10).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(jwks.fetches(), before + 1, "known keys caused a fetch");

    app.stop().await;
}
