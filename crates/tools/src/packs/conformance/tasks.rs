//! The fixtures the conformance suite's Tasks extension scenarios call by name (`greet`,
//! `slow_compute`, `failing_job`, `confirm_delete`, ...) and the diagnostics of the suite's
//! `server-stateless` scenario.

use std::time::Duration;

use mcp_tasks_wire::ErrorObject;
use serde_json::{Value, json};

use crate::{
    ExecutionPolicy, InputKind, InputRequests, Outcome, Tool, ToolContext, ToolError, ToolResult,
};

pub(super) fn tools() -> Result<Vec<Tool>, String> {
    let no_args = || json!({ "type": "object", "properties": {} });
    Ok(vec![
        Tool::builder("test_logging_tool")
            .description("Returns at once. Sends no log notifications (none are requested without a logLevel).")
            .input_schema(no_args())
            .policy(ExecutionPolicy::SyncOnly)
            .handler(|_ctx| async { Ok(Outcome::text("Nothing was logged: the request set no logLevel.")) })
            .build()?,
        Tool::builder("greet")
            .description("Says hello, synchronously.")
            .input_schema(json!({
                "type": "object",
                "properties": { "name": { "type": "string" } },
                "required": ["name"]
            }))
            .policy(ExecutionPolicy::SyncOnly)
            .handler(|ctx| async move {
                let name = ctx.str_arg("name").unwrap_or_default().to_owned();
                Ok(Outcome::text(format!("Hello, {name}!")))
            })
            .build()?,
        Tool::builder("slow_compute")
            .description("Works for `seconds` seconds, updating its status every second; cancellable.")
            .input_schema(json!({
                "type": "object",
                "properties": {
                    "seconds": { "type": "integer", "minimum": 0, "maximum": 3600 },
                    "label": { "type": "string" }
                },
                "required": ["seconds"]
            }))
            .policy(ExecutionPolicy::TaskOptional)
            .poll_interval(Duration::from_millis(500))
            .handler(slow_compute)
            .build()?,
        Tool::builder("failing_job")
            .description("Always a task; completes after about a second with a tool error (isError).")
            .input_schema(no_args())
            .policy(ExecutionPolicy::TaskRequired)
            .poll_interval(Duration::from_millis(500))
            .handler(|ctx| async move {
                ctx.set_status("Running a job that will fail.").await?;
                ctx.sleep(Duration::from_secs(1)).await?;
                Ok(Outcome::tool_error("The job failed: this tool always fails."))
            })
            .build()?,
        Tool::builder("protocol_error_job")
            .description("Always a task; ends failed with a JSON-RPC error.")
            .input_schema(no_args())
            .policy(ExecutionPolicy::TaskRequired)
            .poll_interval(Duration::from_millis(500))
            .handler(|ctx| async move {
                ctx.sleep(Duration::from_millis(300)).await?;
                Err(ToolError::Protocol(ErrorObject::new(
                    mcp_tasks_wire::codes::INTERNAL_ERROR,
                    "protocol_error_job always ends with a protocol error",
                )))
            })
            .build()?,
        Tool::builder("confirm_delete")
            .description("Asks for confirmation (elicitation) during the task, then reports what it did.")
            .input_schema(json!({
                "type": "object",
                "properties": { "filename": { "type": "string" } },
                "required": ["filename"]
            }))
            .policy(ExecutionPolicy::TaskOptional)
            .asks_for(InputKind::FormElicitation)
            .poll_interval(Duration::from_millis(500))
            .handler(confirm_delete)
            .build()?,
        Tool::builder("multi_input")
            .description("Asks for two inputs at once; they may be answered one at a time.")
            .input_schema(no_args())
            // Needing input does not make a tool task-required: without the Tasks
            // extension both requests come back through MRTR.
            .policy(ExecutionPolicy::TaskOptional)
            .asks_for(InputKind::FormElicitation)
            .poll_interval(Duration::from_millis(500))
            .handler(multi_input)
            .build()?,
        Tool::builder("test_tool_with_task")
            .description("Asks for a name before creating a task (MRTR), then greets in the task.")
            .input_schema(no_args())
            .policy(ExecutionPolicy::TaskOptional)
            .asks_for(InputKind::FormElicitation)
            .poll_interval(Duration::from_millis(500))
            .preflight(|_args, responses| {
                if responses.contains_key("user_name") {
                    Ok(())
                } else {
                    Err(InputRequests::new().elicit(
                        "user_name",
                        "What is your name?",
                        json!({
                            "type": "object",
                            "properties": { "name": { "type": "string" } },
                            "required": ["name"]
                        }),
                    ))
                }
            })
            .handler(|ctx| async move {
                let name = ctx
                    .response("user_name")
                    .and_then(|r| r.pointer("/content/name"))
                    .and_then(Value::as_str)
                    .unwrap_or("stranger")
                    .to_owned();
                ctx.sleep(Duration::from_millis(200)).await?;
                Ok(Outcome::text(format!("Hello, {name}! (from a task)")))
            })
            .build()?,
        Tool::builder("test_missing_capability")
            .description("Requires the client's sampling capability; without it the call is rejected with -32021.")
            .input_schema(no_args())
            .policy(ExecutionPolicy::SyncOnly)
            .requires_capabilities(json!({ "sampling": {} }))
            .handler(|_ctx| async { Ok(Outcome::text("The client declared sampling.")) })
            .build()?,
        Tool::builder("test_streaming_elicitation")
            .description("Asks for input through MRTR (resultType input_required), never with a server-to-client request.")
            .input_schema(no_args())
            .policy(ExecutionPolicy::SyncOnly)
            .asks_for(InputKind::FormElicitation)
            .handler(|ctx| async move {
                match ctx.response("feedback") {
                    Some(answer) => Ok(Outcome::text(format!(
                        "Thanks for the feedback ({}).",
                        answer.get("action").and_then(Value::as_str).unwrap_or("no action")
                    ))),
                    None => Ok(Outcome::NeedInput(InputRequests::new().elicit(
                        "feedback",
                        "How is it going?",
                        json!({
                            "type": "object",
                            "properties": { "feedback": { "type": "string" } }
                        }),
                    ))),
                }
            })
            .build()?,
        Tool::builder("test_trigger_tool_change")
            .description("Would announce a tool-list change; this server's tool list is fixed, so it only says so.")
            .input_schema(no_args())
            .policy(ExecutionPolicy::SyncOnly)
            .handler(|_ctx| async { Ok(Outcome::text("The tool list is fixed; nothing changed.")) })
            .build()?,
    ])
}

async fn slow_compute(ctx: ToolContext) -> ToolResult {
    let seconds = ctx
        .arguments()
        .get("seconds")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let label = ctx.str_arg("label").unwrap_or("job").to_owned();
    for done in 0..seconds {
        ctx.set_status(&format!("Computing {label}: {done} of {seconds} s"))
            .await?;
        ctx.sleep(Duration::from_secs(1)).await?;
    }
    Ok(Outcome::text(format!("Computed {label} in {seconds} s.")))
}

async fn confirm_delete(ctx: ToolContext) -> ToolResult {
    let filename = ctx.str_arg("filename").unwrap_or_default().to_owned();
    match ctx.elicitation("confirm_delete") {
        None => Ok(Outcome::NeedInput(InputRequests::new().elicit(
            "confirm_delete",
            format!("Delete {filename}?"),
            json!({
                "type": "object",
                "properties": { "confirm": { "type": "boolean" } },
                "required": ["confirm"]
            }),
        ))),
        Some(crate::Elicitation::Accept(c)) if c.get("confirm") == Some(&json!(true)) => {
            Ok(Outcome::text(format!("Deleted {filename}.")))
        }
        Some(_) => Ok(Outcome::text(format!(
            "Kept {filename}: deletion was not confirmed."
        ))),
    }
}

async fn multi_input(ctx: ToolContext) -> ToolResult {
    let (Some(name), Some(confirm)) = (ctx.response("name"), ctx.response("confirm")) else {
        return Ok(Outcome::NeedInput(
            InputRequests::new()
                .elicit(
                    "name",
                    "Your name?",
                    json!({
                        "type": "object",
                        "properties": { "name": { "type": "string" } },
                        "required": ["name"]
                    }),
                )
                .elicit(
                    "confirm",
                    "Go ahead?",
                    json!({
                        "type": "object",
                        "properties": { "confirm": { "type": "boolean" } },
                        "required": ["confirm"]
                    }),
                ),
        ));
    };
    let name = name
        .pointer("/content/name")
        .and_then(Value::as_str)
        .unwrap_or("?");
    let confirmed = confirm.pointer("/content/confirm") == Some(&json!(true));
    Ok(Outcome::text(format!(
        "Got name {name:?}; confirmed: {confirmed}."
    )))
}
