//! The tool API against the official MCP material (`crates/wire/tests/official`): the
//! official tool descriptors register, our own packs' descriptors and input requests are
//! valid under the core schema, and the official answers to input requests are accepted.

#[path = "../../wire/tests/official/mod.rs"]
mod official;

use mcp_tasks_tools::{InputRequests, Outcome, Registry, Tool, validate_input_response};
use mcp_tasks_wire::results::{CacheHint, list_result};
use official::{Definitions, Schema};
use serde_json::{Value, json};

fn tool_from(descriptor: &Value) -> Tool {
    let text = |key: &str| {
        descriptor
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut builder = Tool::builder(text("name").expect("a tool example has a name"))
        .description(text("description").unwrap_or_default())
        .input_schema(descriptor["inputSchema"].clone())
        .handler(|_ctx| async { Ok(Outcome::Complete(json!({ "content": [] }))) });
    if let Some(title) = text("title") {
        builder = builder.title(title);
    }
    if let Some(output) = descriptor.get("outputSchema") {
        builder = builder.output_schema(output.clone());
    }
    builder.build().expect("an official tool example builds")
}

#[test]
fn official_tool_descriptors_register_and_list_as_valid_tools() {
    let core = Definitions::load(Schema::Core);
    let examples = official::examples_of("Tool");
    // Several examples share a name, so each is a registry of its own.
    for example in &examples {
        let registry = Registry::new([tool_from(example)])
            .unwrap_or_else(|e| panic!("{}: {e}", example["name"]));
        let list = registry.list().as_array().expect("tools/list is an array");
        assert_eq!(list.len(), 1);
        let listed = &list[0];
        core.check("Tool", listed);
        assert_eq!(listed["name"], example["name"]);
        assert_eq!(listed["inputSchema"], example["inputSchema"]);
        assert_eq!(listed.get("outputSchema"), example.get("outputSchema"));
    }
}

#[test]
fn our_packs_list_valid_tools() {
    let core = Definitions::load(Schema::Core);
    let registry = Registry::from_packs("demo,conformance").expect("the built-in packs");
    let tools = registry.list();
    assert!(tools.as_array().is_some_and(|t| t.len() > 5));
    for tool in tools.as_array().expect("array") {
        core.check("Tool", tool);
    }
    let cache = CacheHint {
        ttl_ms: 60_000,
        public: true,
    };
    let result = Value::Object(list_result("tools", tools.clone(), None, cache));
    core.check("ListToolsResult", &result);
}

#[test]
fn our_input_requests_are_valid_input_requests() {
    let core = Definitions::load(Schema::Core);
    let form = json!({
        "type": "object",
        "properties": { "approved": { "type": "boolean" } },
        "required": ["approved"]
    });
    let official = official::examples_of("InputRequests").remove(0);
    let sampling = official["capital_of_france"].clone();
    let requests = InputRequests::new()
        .elicit("approve_outline", "Approve the outline?", form)
        .request("capital", sampling);
    let map = Value::Object(requests.into_map());
    core.check("InputRequests", &map);
    for request in map.as_object().expect("object").values() {
        core.check("InputRequest", request);
    }
}

#[test]
fn official_answers_to_official_requests_are_accepted() {
    let requests = official::examples_of("InputRequests").remove(0);
    let responses = official::examples_of("InputResponses").remove(0);
    let mut answered = 0;
    for (key, request) in requests.as_object().expect("object") {
        let response = &responses[key];
        validate_input_response(request, response)
            .unwrap_or_else(|e| panic!("the official answer to {key} is refused: {e}"));
        answered += 1;
    }
    assert_eq!(answered, 2);

    // Each official elicitation answer, against an official request it can answer.
    let form = |params: Value| json!({ "method": "elicitation/create", "params": params });
    let all = official::examples();
    let example = |suffix: &str| {
        all.iter()
            .find(|e| e.path.ends_with(suffix))
            .unwrap_or_else(|| panic!("no official example {suffix}"))
            .json
            .clone()
    };
    let single = official::examples_of("ElicitRequest").remove(0);
    let multiple = form(example(
        "ElicitRequestFormParams/elicit-multiple-fields.json",
    ));
    let url = form(official::examples_of("ElicitRequestURLParams").remove(0));
    for (request, answer) in [
        (&single, example("ElicitResult/input-single-field.json")),
        (
            &multiple,
            example("ElicitResult/input-multiple-fields.json"),
        ),
        (
            &url,
            example("ElicitResult/accept-url-mode-no-content.json"),
        ),
    ] {
        validate_input_response(request, &answer)
            .unwrap_or_else(|e| panic!("{answer} refused for {request}: {e}"));
    }
    // And the checks bite: a wrong type, a missing required field.
    let wrong_type = json!({ "action": "accept", "content": { "name": 5 } });
    assert!(validate_input_response(&single, &wrong_type).is_err());
    let missing = json!({ "action": "accept", "content": { "name": "Monalisa" } });
    assert!(validate_input_response(&multiple, &missing).is_err());
}
