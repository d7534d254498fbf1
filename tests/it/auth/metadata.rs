//! RFC 9728 protected-resource metadata, published only when tokens are required.

use serde_json::json;

use super::{Challenge, assert_challenge, discover_with};
use crate::harness::http::{self, Request};
use crate::harness::jwt::Jwt;
use crate::harness::{Replica, TestApp, registry};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_resource_metadata_is_published_only_when_tokens_are_required() {
    let servers = vec![
        "https://auth.example.com".to_owned(),
        "https://login.example.org/tenant-1".to_owned(),
    ];
    let app = TestApp::builder()
        .jwt(Jwt::hs256().authorization_servers(servers.clone()))
        .random_state_keys()
        .start()
        .await;
    let (db, replica) = (&app.db, app.replica());
    let http = http::client();
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let response = Request::get()
            .send(&http, &format!("{}{path}", replica.origin()))
            .await;
        assert_eq!(response.status, 200, "{path}");
        let content_type = response.content_type().expect("a Content-Type");
        assert!(
            content_type.starts_with("application/json"),
            "{content_type}"
        );
        let doc = response.json();
        assert_eq!(doc["resource"], replica.url, "{path}: {doc}");
        assert_eq!(
            doc["authorization_servers"],
            json!(servers),
            "{path}: {doc}"
        );
    }
    // The challenge names exactly where the document is.
    let raw = discover_with(&replica.url, &[]).await;
    assert_challenge(&raw, &replica.origin(), Challenge::NoToken, "no token");
    let response = Request::get().send(&http, &replica.metadata_url()).await;
    assert_eq!(response.status, 200);

    // Without JWT authentication there is no such document.
    let plain = Replica::start(&db.store, registry("conformance")).await;
    let origin = plain.origin();
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let response = Request::get().send(&http, &format!("{origin}{path}")).await;
        assert_eq!(response.status, 404, "{path}");
    }
    plain.stop().await;
    app.stop().await;
}
