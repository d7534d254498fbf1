//! `archive_files`: a long tool. It scans the files (a status message per file, so a
//! client following the task sees "3/8: scanning report-3.pdf"), saves what it found in a
//! checkpoint, asks whether to delete the originals (an input request: the task goes
//! `input_required` and the worker lets it go), and when the answer comes, any worker
//! picks the task up again from the checkpoint and archives. Cancellation stops it at the
//! next file: every wait goes through `ctx.sleep`, which wakes when the task is cancelled.

use std::time::Duration;

use mcp_tasks::tools::{
    Elicitation, ExecutionPolicy, InputRequests, Outcome, Tool, ToolContext, ToolResult,
};
use serde_json::{Value, json};

const DELETE_ORIGINALS: &str = "delete_originals";

pub(crate) fn tool() -> Result<Tool, String> {
    Tool::builder("archive_files")
        .title("Archive files")
        .description(
            "Scans the files of a folder, asks whether to delete the originals, and archives them.",
        )
        .input_schema(json!({
            "type": "object",
            "properties": {
                "folder": { "type": "string", "description": "Folder to archive" },
                "files": { "type": "integer", "minimum": 1, "maximum": 1000, "default": 5 },
                "ms_per_file": { "type": "integer", "minimum": 0, "maximum": 60000, "default": 200 }
            },
            "required": ["folder"],
            "additionalProperties": false
        }))
        .policy(ExecutionPolicy::TaskRequired)
        // Archiving the same files twice is harmless: a run lost with its worker may run again.
        .idempotent(true)
        .ttl(Some(Duration::from_secs(3600)))
        .poll_interval(Duration::from_millis(250))
        .handler(archive)
        .build()
}

async fn archive(ctx: ToolContext) -> ToolResult {
    let folder = ctx.str_arg("folder").unwrap_or("/").to_owned();
    let files = ctx.arguments()["files"].as_u64().unwrap_or(5);
    let pause = Duration::from_millis(ctx.arguments()["ms_per_file"].as_u64().unwrap_or(200));
    let names: Vec<String> = (1..=files).map(|i| format!("report-{i}.pdf")).collect();

    // First run: scan, remember, ask. A later run (after the answer) starts from the checkpoint.
    let Some(answer) = ctx.elicitation(DELETE_ORIGINALS) else {
        for (i, name) in names.iter().enumerate() {
            ctx.set_status(&format!("{}/{files}: scanning {name}", i + 1))
                .await?;
            ctx.sleep(pause).await?;
        }
        ctx.save_checkpoint(&json!({ "scanned": names })).await?;
        ctx.set_status("Waiting for your answer").await?;
        return Ok(Outcome::NeedInput(InputRequests::new().elicit(
            DELETE_ORIGINALS,
            format!(
                "Found {files} files in {folder}. Delete the originals once they are archived?"
            ),
            json!({
                "type": "object",
                "properties": { "delete": { "type": "boolean", "title": "Delete the originals" } },
                "required": ["delete"]
            }),
        )));
    };
    let delete = match answer {
        Elicitation::Accept(content) => content.get("delete") == Some(&Value::Bool(true)),
        Elicitation::Decline => false,
        Elicitation::Cancel => return Ok(Outcome::Cancelled),
    };
    let scanned = ctx
        .checkpoint()
        .and_then(|c| c["scanned"].as_array())
        .map_or(names.len(), Vec::len);
    for i in 1..=scanned {
        ctx.set_status(&format!("{i}/{scanned}: archiving")).await?;
        ctx.sleep(pause).await?;
    }
    Ok(Outcome::structured(
        format!(
            "Archived {scanned} files from {folder}{}.",
            if delete {
                " and deleted the originals"
            } else {
                "; the originals are kept"
            }
        ),
        json!({ "folder": folder, "archived": scanned, "deleted": delete }),
    ))
}
