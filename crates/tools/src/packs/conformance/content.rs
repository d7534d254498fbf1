//! Content fixtures: every kind of `CallToolResult` content, a tool error, progress, a
//! JSON Schema 2020-12 `inputSchema`, and SEP-2243 `x-mcp-header` parameters.

use std::time::Duration;

use serde_json::{Value, json};

use super::RED_PIXEL_PNG;
use crate::{ExecutionPolicy, Outcome, Tool};

/// 44-byte header of an empty 8 kHz mono 8-bit WAV file.
const EMPTY_WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

fn no_args() -> Value {
    json!({ "type": "object", "properties": {} })
}

/// A sync-only tool that always answers `result`.
fn fixed(name: &str, description: &str, result: Value) -> Result<Tool, String> {
    Tool::builder(name)
        .description(description)
        .input_schema(no_args())
        .policy(ExecutionPolicy::SyncOnly)
        .handler(move |_ctx| {
            let result = result.clone();
            async move { Ok(Outcome::Complete(result)) }
        })
        .build()
}

fn image() -> Value {
    json!({ "type": "image", "data": RED_PIXEL_PNG, "mimeType": "image/png" })
}

pub(super) fn tools() -> Result<Vec<Tool>, String> {
    Ok(vec![
        fixed(
            "test_simple_text",
            "Returns one text item.",
            json!({ "content": [{ "type": "text", "text": "This is a simple text response for testing." }] }),
        )?,
        fixed(
            "test_image_content",
            "Returns one image item (a 1x1 red PNG).",
            json!({ "content": [image()] }),
        )?,
        fixed(
            "test_audio_content",
            "Returns one audio item (an empty WAV file).",
            json!({ "content": [{ "type": "audio", "data": EMPTY_WAV, "mimeType": "audio/wav" }] }),
        )?,
        fixed(
            "test_embedded_resource",
            "Returns one embedded text resource.",
            json!({ "content": [{ "type": "resource", "resource": {
                "uri": "test://embedded-resource",
                "mimeType": "text/plain",
                "text": "This is an embedded resource content."
            } }] }),
        )?,
        fixed(
            "test_multiple_content_types",
            "Returns text, an image and an embedded resource.",
            json!({ "content": [
                { "type": "text", "text": "Multiple content types test:" },
                image(),
                { "type": "resource", "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": "{\"test\":\"data\",\"value\":123}"
                } }
            ] }),
        )?,
        fixed(
            "test_error_handling",
            "Always fails in the tool's own terms (isError: true).",
            json!({
                "isError": true,
                "content": [{ "type": "text", "text": "This tool intentionally returns an error for testing" }]
            }),
        )?,
        Tool::builder("test_tool_with_progress")
            .description("Reports progress three times (0, 50, 100 of 100) while it runs.")
            .input_schema(no_args())
            .policy(ExecutionPolicy::TaskOptional)
            .poll_interval(Duration::from_millis(250))
            .handler(|ctx| async move {
                // Each status change is a progress notification for a caller that asked;
                // the pauses let every one of them be seen on its own.
                for done in [0, 50, 100] {
                    ctx.set_status(&format!("{done} of 100")).await?;
                    ctx.sleep(Duration::from_millis(300)).await?;
                }
                Ok(Outcome::text("Progress reported: 0, 50 and 100 of 100."))
            })
            .build()?,
        Tool::builder("json_schema_2020_12_tool")
            .description("Tool with JSON Schema 2020-12 features")
            .input_schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {
                    "address": {
                        "$anchor": "addressDef",
                        "type": "object",
                        "properties": { "street": { "type": "string" }, "city": { "type": "string" } }
                    }
                },
                "properties": {
                    "name": { "type": "string" },
                    "address": { "$ref": "#/$defs/address" },
                    "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                    "phone": { "type": "string" },
                    "email": { "type": "string" }
                },
                "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
                "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
                "then": { "required": ["phone"] },
                "else": { "required": ["email"] },
                "additionalProperties": false
            }))
            .policy(ExecutionPolicy::SyncOnly)
            .handler(|ctx| async move {
                let name = ctx.str_arg("name").unwrap_or("someone").to_owned();
                Ok(Outcome::text(format!("Contact details of {name} accepted.")))
            })
            .build()?,
        Tool::builder("test_custom_headers")
            .description("Echoes its arguments; region, priority and verbose travel as Mcp-Param-* headers too (SEP-2243).")
            .input_schema(json!({
                "type": "object",
                "properties": {
                    "region": { "type": "string", "x-mcp-header": "Region" },
                    "priority": { "type": "integer", "x-mcp-header": "Priority" },
                    "verbose": { "type": "boolean", "x-mcp-header": "Verbose" },
                    "query": { "type": "string" }
                },
                "required": ["region"]
            }))
            .policy(ExecutionPolicy::SyncOnly)
            .handler(|ctx| async move {
                let region = ctx.str_arg("region").unwrap_or_default().to_owned();
                Ok(Outcome::structured(
                    format!("Ran in region {region}."),
                    ctx.arguments().clone(),
                ))
            })
            .build()?,
    ])
}
