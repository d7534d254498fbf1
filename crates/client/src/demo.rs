//! `mcp-tasks demo`: the demo sequence against a server running the `demo` pack.

use std::io::Write;
use std::time::Duration;

use serde_json::{Value, json};

use crate::{Client, ClientError, status_of};

/// Runs the sequence, writing one line per step to `out`:
///
/// ```text
/// id=0 resultType=complete status=ack
/// id=1 resultType=task status=working
/// id=2 resultType=complete status=working
/// id=3 resultType=complete status=input_required
/// id=4 resultType=complete status=ack
/// id=5 resultType=complete status=completed
/// ```
///
/// Polls that wait for a state reuse the id of the step they belong to and print once.
/// Then checks that the removed methods `tasks/status`, `tasks/result` and `tasks/list`
/// answer "method not found", writing those checks to `log`.
pub async fn run_demo(
    url: &str,
    out: &mut dyn Write,
    log: &mut dyn Write,
) -> Result<(), ClientError> {
    let client = Client::with_tasks(url);
    let timeout = Duration::from_secs(60);

    let discover = client
        .send(json!(0), "server/discover", json!({}))
        .await?
        .into_result()?;
    line(out, 0, &discover, "ack")?;

    let created = client
        .send(
            json!(1),
            "tools/call",
            json!({ "name": "generate_report", "arguments": { "size": "large" } }),
        )
        .await?
        .into_result()?;
    line(out, 1, &created, status_of(&created))?;
    let task_id = created
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ClientError::Unexpected(format!("tools/call did not create a task: {created}"))
        })?
        .to_owned();
    let poll = |id: i64| {
        let client = &client;
        let task_id = task_id.clone();
        async move {
            client
                .send(json!(id), "tasks/get", json!({ "taskId": task_id }))
                .await?
                .into_result()
        }
    };

    let working = poll(2).await?;
    line(out, 2, &working, status_of(&working))?;

    let waiting = until(timeout, || poll(3), |t| status_of(t) != "working").await?;
    line(out, 3, &waiting, status_of(&waiting))?;

    let ack = client
        .send(
            json!(4),
            "tasks/update",
            json!({
                "taskId": task_id,
                "inputResponses": { "approve_outline": { "action": "accept", "content": { "approved": true } } }
            }),
        )
        .await?
        .into_result()?;
    line(out, 4, &ack, "ack")?;

    let done = until(timeout, || poll(5), crate::is_terminal).await?;
    line(out, 5, &done, status_of(&done))?;

    let mut all_gone = true;
    for (i, method) in ["tasks/status", "tasks/result", "tasks/list"]
        .into_iter()
        .enumerate()
    {
        let reply = client
            .send(json!(6 + i), method, json!({ "taskId": task_id }))
            .await?;
        let code = reply.clone().into_result().err().and_then(|e| e.code());
        let ok = code == Some(-32601) && reply.status == 404;
        all_gone &= ok;
        writeln!(
            log,
            "check {method}: HTTP {} code {} ({})",
            reply.status,
            code.map_or_else(|| "none".into(), |c| c.to_string()),
            if ok {
                "method not found, as expected"
            } else {
                "UNEXPECTED"
            }
        )
        .map_err(io)?;
    }
    if !all_gone {
        return Err(ClientError::Unexpected(
            "a removed tasks method did not answer method-not-found".into(),
        ));
    }
    Ok(())
}

fn line(out: &mut dyn Write, id: i64, result: &Value, status: &str) -> Result<(), ClientError> {
    let result_type = result
        .get("resultType")
        .and_then(Value::as_str)
        .unwrap_or("?");
    writeln!(out, "id={id} resultType={result_type} status={status}").map_err(io)
}

fn io(e: std::io::Error) -> ClientError {
    ClientError::Unexpected(format!("could not write output: {e}"))
}

async fn until<F, Fut>(
    timeout: Duration,
    mut poll: F,
    done: impl Fn(&Value) -> bool,
) -> Result<Value, ClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Value, ClientError>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let task = poll().await?;
        if done(&task) {
            return Ok(task);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(ClientError::Unexpected(format!(
                "task still {} after {timeout:?}",
                status_of(&task)
            )));
        }
        let every = task
            .get("pollIntervalMs")
            .and_then(Value::as_u64)
            .unwrap_or(500)
            .min(1000);
        tokio::time::sleep(Duration::from_millis(every)).await;
    }
}
