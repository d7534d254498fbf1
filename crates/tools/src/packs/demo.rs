//! The demo's `generate_report`: works for a while with a status message, asks the
//! user to approve an outline, then completes with text and `structuredContent`.
//!
//! Answers to `approve_outline`:
//! - `accept` with `approved: true`: the report is written and the task completes.
//! - `accept` with `approved: false`, or `decline`: the task completes (not an error)
//!   with a result saying no report was generated, and `structuredContent.approved`
//!   false. Declining is a normal user choice, not a failure of the tool.
//! - `cancel` (the user dismissed the prompt): the task ends `cancelled`.

use std::time::Duration;

use serde_json::json;

use crate::{
    Elicitation, ExecutionPolicy, InputKind, InputRequests, Outcome, Tool, ToolContext, ToolResult,
};

pub(super) fn tools() -> Result<Vec<Tool>, String> {
    Ok(vec![
        Tool::builder("generate_report")
            .title("Generate report")
            .description("Drafts a report outline, asks you to approve it, then writes the report.")
            .input_schema(json!({
                "type": "object",
                "properties": {
                    "size": {
                        "type": "string",
                        "enum": ["small", "medium", "large"],
                        "default": "small",
                        "description": "How long the report should be."
                    }
                },
                "additionalProperties": false
            }))
            // Task-optional although it asks for input: clients without the Tasks
            // extension answer through MRTR on the retried call.
            .policy(ExecutionPolicy::TaskOptional)
            .asks_for(InputKind::FormElicitation)
            .ttl(Some(Duration::from_secs(15 * 60)))
            .poll_interval(Duration::from_millis(500))
            .handler(generate_report)
            .build()?,
    ])
}

const APPROVE_OUTLINE: &str = "approve_outline";

async fn generate_report(ctx: ToolContext) -> ToolResult {
    let size = ctx.str_arg("size").unwrap_or("small").to_owned();
    let sections: Vec<String> = match size.as_str() {
        "large" => vec![
            "Summary",
            "Background",
            "Findings",
            "Risks",
            "Recommendations",
        ],
        "medium" => vec!["Summary", "Findings", "Recommendations"],
        _ => vec!["Summary", "Findings"],
    }
    .into_iter()
    .map(String::from)
    .collect();

    match ctx.elicitation(APPROVE_OUTLINE) {
        None => {
            ctx.set_status(&format!("Preparing the {size} report outline."))
                .await?;
            ctx.sleep(Duration::from_millis(1500)).await?;
            ctx.save_checkpoint(&json!({ "outline": sections })).await?;
            ctx.set_status("Waiting for the outline to be approved.")
                .await?;
            Ok(Outcome::NeedInput(InputRequests::new().elicit(
                APPROVE_OUTLINE,
                format!("Approve the generated report outline? ({})", sections.join(", ")),
                json!({
                    "type": "object",
                    "properties": { "approved": { "type": "boolean", "title": "Approve the outline" } },
                    "required": ["approved"]
                }),
            )))
        }
        Some(Elicitation::Accept(content)) if content.get("approved") == Some(&json!(true)) => {
            ctx.set_status(&format!("Writing the {size} report."))
                .await?;
            ctx.sleep(Duration::from_millis(1000)).await?;
            Ok(Outcome::structured(
                format!("Generated {size} report with approved outline."),
                json!({ "size": size, "approved": true, "sections": sections }),
            ))
        }
        Some(Elicitation::Accept(_) | Elicitation::Decline) => Ok(Outcome::structured(
            "The outline was declined, so no report was generated.",
            json!({ "size": size, "approved": false }),
        )),
        Some(Elicitation::Cancel) => Ok(Outcome::Cancelled),
    }
}
