//! The client the official MCP conformance suite drives (`conformance client --command`):
//! `conformance_client <server-url>`, with the scenario in `MCP_CONFORMANCE_SCENARIO` and
//! its data in `MCP_CONFORMANCE_CONTEXT`. Each scenario is what an application would do
//! with the library; the suite's servers judge the traffic. Exits non-zero when the
//! library refuses something (a mismatched resource, a wrong `iss`, ...), as it should.
//!
//! `tests/conformance/client-check` runs every client scenario against it.

use std::sync::Arc;

use mcp_tasks_client::oauth::{ClientCredentials, ClientSecretKind, Headless, Preregistered};
use mcp_tasks_client::{CallRound, Client, OAuth, OAuthConfig, tasks_capabilities};
use serde_json::{Map, Value, json};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The suite's authorization servers redirect here without anyone listening: the
/// headless agent reads the code from the redirect itself.
const REDIRECT_URI: &str = "http://localhost:3000/callback";
/// The client ID metadata document URL the suite accepts for `auth/basic-cimd`.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MCP_TASKS_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: MCP_CONFORMANCE_SCENARIO=<scenario> conformance_client <server-url>");
        std::process::exit(2);
    };
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    if let Err(e) = run(&scenario, &url, &context).await {
        eprintln!("{scenario}: {e}");
        std::process::exit(1);
    }
}

async fn run(scenario: &str, url: &str, context: &Value) -> Result<()> {
    if scenario.starts_with("auth/") {
        return auth(scenario, url, context).await;
    }
    let client = Client::new(url, tasks_capabilities());
    match scenario {
        "tools_call" => {
            let tools = client.list_tools().await?;
            if let Some(name) = tools
                .first()
                .and_then(|t| t.get("name"))
                .and_then(Value::as_str)
            {
                client.call_tool(name, json!({ "a": 2, "b": 3 })).await?;
            }
        }
        "request-metadata" => {
            client.discover().await?;
            client.list_tools().await?;
        }
        "json-schema-ref-no-deref" => {
            client.list_tools().await?;
        }
        "http-standard-headers" => standard_headers(&client).await?,
        "http-custom-headers" => {
            client.list_tools().await?;
            let calls = context.get("toolCalls").and_then(Value::as_array);
            for call in calls.into_iter().flatten() {
                let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
                let args = call.get("arguments").cloned().unwrap_or(json!({}));
                client.call_tool(name, args).await?;
            }
        }
        "http-invalid-tool-headers" => {
            // Only the tools that survived validation are called.
            for tool in client.list_tools().await? {
                let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
                client.call_tool(name, arguments_for(&tool)).await?;
            }
        }
        "json-schema-2020-12-preservation" => {
            let tools = client.list_tools().await?;
            let focal = tools
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("json_schema_2020_12_tool"))
                .ok_or("the server does not offer json_schema_2020_12_tool")?;
            let schema = focal.get("inputSchema").cloned().unwrap_or(Value::Null);
            client
                .call_tool("json_schema_echo", json!({ "schema": schema }))
                .await?;
        }
        "sep-2322-client-request-state" => mrtr(&client).await?,
        other => return Err(format!("unknown scenario {other:?}").into()),
    }
    Ok(())
}

/// Lists and uses every tool, resource and prompt the server offers.
async fn standard_headers(client: &Client) -> Result<()> {
    for tool in client.list_tools().await? {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        client.call_tool(name, arguments_for(&tool)).await?;
    }
    let resources = client.request("resources/list", json!({})).await?;
    for r in resources
        .get("resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let uri = r.get("uri").cloned().unwrap_or(Value::Null);
        client
            .request("resources/read", json!({ "uri": uri }))
            .await?;
    }
    let prompts = client.request("prompts/list", json!({})).await?;
    for p in prompts
        .get("prompts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = p.get("name").cloned().unwrap_or(Value::Null);
        client
            .request("prompts/get", json!({ "name": name }))
            .await?;
    }
    Ok(())
}

/// SEP-2322: each MRTR exchange answered, an unrelated call in between carrying nothing of
/// it, and a result without `resultType` taken as complete.
async fn mrtr(client: &Client) -> Result<()> {
    client.list_tools().await?;
    if let CallRound::InputRequired(input) = client
        .call_tool_round("test_mrtr_echo_state", json!({}), None)
        .await?
    {
        client
            .call_tool_round("test_mrtr_unrelated", json!({}), None)
            .await?;
        let retry = input.retry_params(answers(&input.input_requests));
        client
            .call_tool_round("test_mrtr_echo_state", json!({}), Some(retry))
            .await?;
    }
    if let CallRound::InputRequired(input) = client
        .call_tool_round("test_mrtr_no_state", json!({}), None)
        .await?
    {
        let retry = input.retry_params(answers(&input.input_requests));
        client
            .call_tool_round("test_mrtr_no_state", json!({}), Some(retry))
            .await?;
    }
    match client
        .call_tool_round("test_mrtr_no_result_type", json!({}), None)
        .await?
    {
        CallRound::Complete(_) => Ok(()),
        other => Err(format!("a result without resultType was taken as {other:?}").into()),
    }
}

/// Accepts every elicitation, filling each field of its schema.
fn answers(requests: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, request) in requests {
        if request.get("method").and_then(Value::as_str) != Some("elicitation/create") {
            continue;
        }
        let schema = request
            .pointer("/params/requestedSchema")
            .cloned()
            .unwrap_or(Value::Null);
        out.insert(
            key.clone(),
            json!({ "action": "accept", "content": sample(&schema) }),
        );
    }
    out
}

/// A value for each property of an object schema (for calls and elicitation answers).
fn sample(schema: &Value) -> Value {
    let mut content = Map::new();
    let props = schema.get("properties").and_then(Value::as_object);
    for (name, prop) in props.into_iter().flatten() {
        let value = match prop.get("type").and_then(Value::as_str) {
            Some("boolean") => json!(true),
            Some("integer") | Some("number") => json!(1),
            Some("object") => sample(prop),
            Some("array") => json!([]),
            _ => json!("x"),
        };
        content.insert(name.clone(), value);
    }
    Value::Object(content)
}

fn arguments_for(tool: &Value) -> Value {
    sample(tool.get("inputSchema").unwrap_or(&Value::Null))
}

/// The `auth/*` scenarios: a client with OAuth lists the tools and calls each one; the
/// library does discovery, registration, authorization, step-up and re-registration.
async fn auth(scenario: &str, url: &str, context: &Value) -> Result<()> {
    let mut config = OAuthConfig::new("mcp-tasks conformance client");
    config.client_metadata_url = Some(CLIENT_METADATA_URL.into());
    if scenario == "auth/pre-registration" {
        let id = context.get("client_id").and_then(Value::as_str);
        config.preregistered = id.map(|id| Preregistered {
            client_id: id.to_owned(),
            client_secret: context
                .get("client_secret")
                .and_then(Value::as_str)
                .map(str::to_owned),
            auth_method: None,
        });
    }
    let text = |k: &str| context.get(k).and_then(Value::as_str).map(str::to_owned);
    match scenario {
        "auth/client-credentials-basic" => {
            config.client_credentials = Some(ClientCredentials {
                client_id: text("client_id").ok_or("no client_id in the context")?,
                secret: ClientSecretKind::Secret(
                    text("client_secret").ok_or("no client_secret in the context")?,
                ),
            });
        }
        "auth/client-credentials-jwt" => {
            config.client_credentials = Some(ClientCredentials {
                client_id: text("client_id").ok_or("no client_id in the context")?,
                secret: ClientSecretKind::PrivateKeyJwt {
                    pem: text("private_key_pem").ok_or("no private_key_pem in the context")?,
                    algorithm: text("signing_algorithm").unwrap_or_else(|| "ES256".into()),
                },
            });
        }
        _ => {}
    }
    let oauth = Arc::new(OAuth::new(url, config, Headless::new(REDIRECT_URI))?);
    let client = Client::new(url, tasks_capabilities()).oauth(oauth);
    for tool in client.list_tools().await? {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        client.call_tool(name, arguments_for(&tool)).await?;
    }
    Ok(())
}
