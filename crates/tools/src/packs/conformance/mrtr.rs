//! The `input-required-result-*` fixtures (SEP-2322): sync-only tools that ask for input
//! through MRTR and finish on the retried call. The server signs each round's
//! `requestState`, so a handler only ever sees answers to requests this server made.

use serde_json::{Value, json};

use crate::{ExecutionPolicy, InputKind, InputRequests, Outcome, Tool, ToolContext, ToolResult};

fn no_args() -> Value {
    json!({ "type": "object", "properties": {} })
}

fn schema(property: &str, ty: &str) -> Value {
    json!({
        "type": "object",
        "properties": { property: { "type": ty } },
        "required": [property]
    })
}

fn ask_name(requests: InputRequests, key: &str, message: &str) -> InputRequests {
    requests.elicit(key, message, schema("name", "string"))
}

fn ask_sampling(requests: InputRequests, key: &str, text: &str, max_tokens: u32) -> InputRequests {
    requests.request(
        key,
        json!({ "method": "sampling/createMessage", "params": {
            "messages": [{ "role": "user", "content": { "type": "text", "text": text } }],
            "maxTokens": max_tokens
        } }),
    )
}

fn ask_roots(requests: InputRequests, key: &str) -> InputRequests {
    requests.request(key, json!({ "method": "roots/list", "params": {} }))
}

/// The accepted content field `field` of the answer under `key`.
fn accepted<'a>(ctx: &'a ToolContext, key: &str, field: &str) -> Option<&'a Value> {
    match ctx.elicitation(key)? {
        crate::Elicitation::Accept(content) => content.get(field),
        _ => None,
    }
}

fn sampled_text(ctx: &ToolContext, key: &str) -> Option<String> {
    ctx.response(key)?
        .pointer("/content/text")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn root_uris(ctx: &ToolContext, key: &str) -> Option<Vec<String>> {
    let roots = ctx.response(key)?.get("roots")?.as_array()?;
    Some(
        roots
            .iter()
            .filter_map(|r| r.get("uri").and_then(Value::as_str).map(str::to_owned))
            .collect(),
    )
}

fn sync(name: &str, description: &str) -> crate::ToolBuilder {
    Tool::builder(name)
        .description(description)
        .input_schema(no_args())
        .policy(ExecutionPolicy::SyncOnly)
}

pub(super) fn tools() -> Result<Vec<Tool>, String> {
    Ok(vec![
        sync(
            "test_input_required_result_elicitation",
            "Asks for a name (elicitation), then greets.",
        )
        .asks_for(InputKind::FormElicitation)
        .handler(|ctx| async move { elicitation(&ctx) })
        .build()?,
        sync(
            "test_input_required_result_sampling",
            "Asks the client's model a question (sampling), then reports the answer.",
        )
        .asks_for(InputKind::Sampling)
        .handler(|ctx| async move {
            Ok(match sampled_text(&ctx, "capital_question") {
                Some(text) => Outcome::text(format!("The model answered: {text}")),
                None => Outcome::NeedInput(ask_sampling(
                    InputRequests::new(),
                    "capital_question",
                    "What is the capital of France?",
                    100,
                )),
            })
        })
        .build()?,
        sync(
            "test_input_required_result_list_roots",
            "Asks for the client's roots, then lists them.",
        )
        .asks_for(InputKind::Roots)
        .handler(|ctx| async move {
            Ok(match root_uris(&ctx, "client_roots") {
                Some(uris) => Outcome::text(format!("The client's roots: {}", uris.join(", "))),
                None => Outcome::NeedInput(ask_roots(InputRequests::new(), "client_roots")),
            })
        })
        .build()?,
        sync(
            "test_input_required_result_request_state",
            "Asks for confirmation; the retry must echo the signed requestState.",
        )
        .asks_for(InputKind::FormElicitation)
        .handler(|ctx| async move { confirmed(&ctx) })
        .build()?,
        sync(
            "test_input_required_result_tampered_state",
            "Asks for confirmation under a signed requestState; a tampered one is refused.",
        )
        .asks_for(InputKind::FormElicitation)
        .handler(|ctx| async move { confirmed(&ctx) })
        .build()?,
        sync(
            "test_input_required_result_multiple_inputs",
            "Asks for a name, a sampled greeting and the roots at once.",
        )
        .asks_for(InputKind::FormElicitation)
        .asks_for(InputKind::Sampling)
        .asks_for(InputKind::Roots)
        .handler(|ctx| async move { multiple(&ctx) })
        .build()?,
        sync(
            "test_input_required_result_multi_round",
            "Asks for a name, then (in a second round) a colour.",
        )
        .asks_for(InputKind::FormElicitation)
        .handler(|ctx| async move { multi_round(&ctx) })
        .build()?,
        sync(
            "test_input_required_result_capabilities",
            "Asks only for the kinds of input the client declared.",
        )
        .handler(|ctx| async move { by_capability(&ctx) })
        .build()?,
    ])
}

fn elicitation(ctx: &ToolContext) -> ToolResult {
    Ok(
        match accepted(ctx, "user_name", "name").and_then(Value::as_str) {
            Some(name) => Outcome::text(format!("Hello, {name}!")),
            None => Outcome::NeedInput(ask_name(
                InputRequests::new(),
                "user_name",
                "What is your name?",
            )),
        },
    )
}

fn confirmed(ctx: &ToolContext) -> ToolResult {
    if ctx.response("confirm").is_some() {
        // An answer reaches the handler only under a requestState that verified.
        let ok = accepted(ctx, "confirm", "ok") == Some(&json!(true));
        return Ok(Outcome::text(format!(
            "state-ok: the signed requestState verified; confirmed: {ok}"
        )));
    }
    Ok(Outcome::NeedInput(InputRequests::new().elicit(
        "confirm",
        "Please confirm",
        schema("ok", "boolean"),
    )))
}

fn multiple(ctx: &ToolContext) -> ToolResult {
    let name = accepted(ctx, "user_name", "name").and_then(Value::as_str);
    let (Some(name), Some(greeting), Some(roots)) = (
        name,
        sampled_text(ctx, "greeting"),
        root_uris(ctx, "client_roots"),
    ) else {
        let requests = ask_name(InputRequests::new(), "user_name", "What is your name?");
        let requests = ask_sampling(requests, "greeting", "Generate a greeting", 50);
        return Ok(Outcome::NeedInput(ask_roots(requests, "client_roots")));
    };
    Ok(Outcome::text(format!(
        "{greeting} {name} (roots: {})",
        roots.join(", ")
    )))
}

fn multi_round(ctx: &ToolContext) -> ToolResult {
    let Some(name) = accepted(ctx, "step1", "name").and_then(Value::as_str) else {
        return Ok(Outcome::NeedInput(ask_name(
            InputRequests::new(),
            "step1",
            "Step 1: What is your name?",
        )));
    };
    let Some(color) = accepted(ctx, "step2", "color").and_then(Value::as_str) else {
        return Ok(Outcome::NeedInput(InputRequests::new().elicit(
            "step2",
            "Step 2: What is your favorite color?",
            schema("color", "string"),
        )));
    };
    Ok(Outcome::text(format!("{name} likes {color}.")))
}

fn by_capability(ctx: &ToolContext) -> ToolResult {
    if !ctx.responses().is_empty() {
        return Ok(Outcome::text(format!(
            "Received {} answer(s).",
            ctx.responses().len()
        )));
    }
    let caps = ctx.client_capabilities().cloned().unwrap_or_default();
    let mut requests = InputRequests::new();
    if caps.can_answer("elicitation/create", Some(&json!({ "mode": "form" }))) {
        requests = ask_name(requests, "user_name", "What is your name?");
    }
    if caps.can_answer("sampling/createMessage", None) {
        requests = ask_sampling(requests, "greeting", "Generate a greeting", 50);
    }
    if caps.can_answer("roots/list", None) {
        requests = ask_roots(requests, "client_roots");
    }
    if requests.is_empty() {
        return Ok(Outcome::text(
            "The client declared no kind of input, so none was asked for.",
        ));
    }
    Ok(Outcome::NeedInput(requests))
}
