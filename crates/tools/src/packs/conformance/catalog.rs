//! The resources, templates, prompts and completions the suite's `resources-*`,
//! `prompts-*`, `completion-complete` and `input-required-result-non-tool-request`
//! scenarios read.

use serde_json::{Map, Value, json};

use super::RED_PIXEL_PNG;
use crate::InputRequests;
use crate::catalog::{Fetched, Prompt, Resource, ResourceTemplate, StaticProvider};

fn user_text(text: &str) -> Value {
    json!({ "role": "user", "content": { "type": "text", "text": text } })
}

fn messages(description: &str, messages: Vec<Value>) -> Fetched {
    Fetched::Done(json!({ "description": description, "messages": messages }))
}

fn arg<'a>(arguments: &'a Map<String, Value>, name: &str) -> &'a str {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub(super) fn provider() -> Result<StaticProvider, String> {
    StaticProvider::new()
        .resource(
            Resource::text(
                "test://static-text",
                "static-text",
                "text/plain",
                "This is the content of the static text resource.",
            )
            .description("A fixed text resource."),
        )?
        .resource(
            Resource::blob("test://static-binary", "static-binary", "image/png", RED_PIXEL_PNG)
                .description("A fixed binary resource (a 1x1 red PNG)."),
        )?
        .template(
            ResourceTemplate::new(
                "test://template/{id}/data",
                "template-data",
                "application/json",
                |uri, vars| {
                    let id = vars.get("id").map_or("", String::as_str);
                    let text = json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
                    vec![json!({ "uri": uri, "mimeType": "application/json", "text": text.to_string() })]
                },
            )?
            .description("Data for one id; the id is substituted into the contents.")
            .complete("id", &["123", "456", "789"]),
        )?
        .prompt(
            Prompt::builder("test_simple_prompt")
                .description("A prompt without arguments.")
                .build(|_, _| {
                    Ok(messages(
                        "A simple prompt",
                        vec![user_text("This is a simple prompt for testing.")],
                    ))
                }),
        )?
        .prompt(
            Prompt::builder("test_prompt_with_arguments")
                .description("A prompt with two required arguments.")
                .argument("arg1", "First test argument", true)
                .argument("arg2", "Second test argument", true)
                .complete("arg1", &["paris", "park", "party", "test", "testing"])
                .complete("arg2", &["world", "work", "wonder"])
                .build(|args, _| {
                    Ok(messages(
                        "A prompt with arguments",
                        vec![user_text(&format!(
                            "Prompt with arguments: arg1='{}', arg2='{}'",
                            arg(args, "arg1"),
                            arg(args, "arg2")
                        ))],
                    ))
                }),
        )?
        .prompt(
            Prompt::builder("test_prompt_with_embedded_resource")
                .description("A prompt that embeds the resource it is given.")
                .argument("resourceUri", "URI of the resource to embed", true)
                .build(|args, _| {
                    Ok(messages(
                        "A prompt with an embedded resource",
                        vec![
                            json!({ "role": "user", "content": { "type": "resource", "resource": {
                                "uri": arg(args, "resourceUri"),
                                "mimeType": "text/plain",
                                "text": "Embedded resource content for testing."
                            } } }),
                            user_text("Please process the embedded resource above."),
                        ],
                    ))
                }),
        )?
        .prompt(
            Prompt::builder("test_prompt_with_image")
                .description("A prompt with an image.")
                .build(|_, _| {
                    Ok(messages(
                        "A prompt with an image",
                        vec![
                            json!({ "role": "user", "content": {
                                "type": "image", "data": RED_PIXEL_PNG, "mimeType": "image/png"
                            } }),
                            user_text("Please analyze the image above."),
                        ],
                    ))
                }),
        )?
        .prompt(
            Prompt::builder("test_input_required_result_prompt")
                .description("Asks (MRTR) what context to use, then renders with it.")
                .build(|_, responses| {
                    let context = responses
                        .get("user_context")
                        .filter(|r| r.get("action") == Some(&json!("accept")))
                        .and_then(|r| r.pointer("/content/context"))
                        .and_then(Value::as_str);
                    Ok(match context {
                        Some(context) => messages(
                            "A prompt rendered with the context given",
                            vec![user_text(&format!("Use this context: {context}"))],
                        ),
                        None => Fetched::NeedInput(InputRequests::new().elicit(
                            "user_context",
                            "What context should the prompt use?",
                            json!({
                                "type": "object",
                                "properties": { "context": { "type": "string" } },
                                "required": ["context"]
                            }),
                        )),
                    })
                }),
        )
}
