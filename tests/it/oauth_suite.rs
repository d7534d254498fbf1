//! The client's OAuth where our replicas cannot take it: the official conformance
//! suite's own authorization and resource servers (see `harness::suite_servers`) answer
//! with `403 insufficient_scope`, move to another authorization server, refuse every
//! scope, or send a wrong `iss`; the suite's checks of the client are then asserted.

use std::sync::Arc;

use mcp_tasks_client::oauth::Headless;
use mcp_tasks_client::{Client, ClientError, OAuth, OAuthConfig, OAuthError, tasks_capabilities};
use serde_json::json;

use crate::harness::suite_servers::{SuiteScenario, problems, status};
use crate::harness::{Need, skip};

fn client(url: &str) -> Client {
    let config = OAuthConfig::new("mcp-tasks tests");
    let oauth =
        OAuth::new(url, config, Headless::new("http://localhost:3000/callback")).expect("OAuth");
    Client::new(url, tasks_capabilities()).oauth(Arc::new(oauth))
}

#[tokio::test]
async fn a_403_insufficient_scope_reauthorizes_for_the_union_of_held_and_challenged_scopes() {
    if skip(Need::ConformanceSuite).await {
        return;
    }
    let suite = SuiteScenario::start("auth/scope-step-up").await;
    let client = client(&suite.url);
    let tools = client
        .list_tools()
        .await
        .expect("tools/list after the first login");
    assert_eq!(tools.len(), 1);
    client
        .call_tool("test-tool", json!({}))
        .await
        .expect("tools/call after the step-up");
    let checks = suite.checks().await;
    for id in [
        "scope-step-up-initial",
        "scope-step-up-escalation",
        "sep-2350-scope-union-on-reauth",
    ] {
        assert_eq!(
            status(&checks, id),
            "SUCCESS",
            "{id}: {:?}",
            problems(&checks)
        );
    }
    assert!(problems(&checks).is_empty(), "{:?}", problems(&checks));
}

#[tokio::test]
async fn a_scope_that_is_never_granted_stops_after_one_authorization() {
    if skip(Need::ConformanceSuite).await {
        return;
    }
    let suite = SuiteScenario::start("auth/scope-retry-limit").await;
    let refused = client(&suite.url)
        .list_tools()
        .await
        .expect_err("always 403");
    assert!(
        matches!(refused, ClientError::Denied { status: 403, .. }),
        "{refused:?}"
    );
    let checks = suite.checks().await;
    let attempts = checks
        .iter()
        .filter(|c| c["id"] == "scope-retry-auth-attempt")
        .count();
    assert_eq!(attempts, 1, "the same scopes are not asked for again");
    assert_eq!(status(&checks, "scope-retry-limit"), "SUCCESS");
}

#[tokio::test]
async fn a_new_authorization_server_gets_a_new_registration() {
    if skip(Need::ConformanceSuite).await {
        return;
    }
    let suite = SuiteScenario::start("auth/authorization-server-migration").await;
    let client = client(&suite.url);
    client
        .list_tools()
        .await
        .expect("tools/list at the first server");
    client
        .call_tool("test-tool", json!({}))
        .await
        .expect("tools/call after moving to the second server");
    let checks = suite.checks().await;
    for id in [
        "sep-2352-reregister-on-as-change",
        "sep-2352-no-reuse-on-as-change",
        "sep-2352-no-cross-as-credential-reuse",
    ] {
        assert_eq!(
            status(&checks, id),
            "SUCCESS",
            "{id}: {:?}",
            problems(&checks)
        );
    }
}

#[tokio::test]
async fn an_authorization_response_from_another_issuer_is_discarded() {
    if skip(Need::ConformanceSuite).await {
        return;
    }
    for (scenario, check) in [
        (
            "auth/iss-wrong-issuer",
            "sep-2468-client-compare-iss-supported",
        ),
        ("auth/iss-normalized", "sep-2468-client-no-normalization"),
        (
            "auth/iss-supported-missing",
            "sep-2468-client-reject-missing-iss",
        ),
    ] {
        let suite = SuiteScenario::start(scenario).await;
        let refused = client(&suite.url).list_tools().await.expect_err(scenario);
        assert!(
            matches!(refused, ClientError::Auth(OAuthError::Authorization(_))),
            "{scenario}: {refused:?}"
        );
        let checks = suite.checks().await;
        assert_eq!(
            status(&checks, check),
            "SUCCESS",
            "{scenario}: {:?}",
            problems(&checks)
        );
    }
}

#[tokio::test]
async fn metadata_naming_another_resource_or_issuer_is_not_used() {
    if skip(Need::ConformanceSuite).await {
        return;
    }
    let suite = SuiteScenario::start("auth/resource-mismatch").await;
    let refused = client(&suite.url)
        .list_tools()
        .await
        .expect_err("a foreign resource");
    assert!(
        matches!(
            refused,
            ClientError::Auth(OAuthError::ResourceMismatch { .. })
        ),
        "{refused:?}"
    );
    assert_eq!(
        status(&suite.checks().await, "resource-mismatch-rejected"),
        "SUCCESS"
    );

    let suite = SuiteScenario::start("auth/metadata-issuer-mismatch").await;
    let refused = client(&suite.url)
        .list_tools()
        .await
        .expect_err("a foreign issuer");
    assert!(
        matches!(refused, ClientError::Auth(OAuthError::Discovery(_))),
        "{refused:?}"
    );
    assert_eq!(
        status(
            &suite.checks().await,
            "sep-2468-client-validate-metadata-issuer"
        ),
        "SUCCESS"
    );
}
