//! What a run of a handler returns: an [`Outcome`] or a [`ToolError`], in a [`BoxFuture`].
//! A leaf: the tool definition and the handler's context both use these.

use std::future::Future;
use std::pin::Pin;

use mcp_tasks_wire::ErrorObject;
use mcp_tasks_wire::results::text_result;
use serde_json::Value;

use crate::InputRequests;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How one run of a handler ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A `CallToolResult`. A tool-level failure is `isError: true` here, and the task is
    /// still `completed`.
    Complete(Value),
    /// The handler needs answers before it can go on. Keys must be new for this task.
    NeedInput(InputRequests),
    /// The handler stopped because it was asked to.
    Cancelled,
}

impl Outcome {
    pub fn text(text: impl Into<String>) -> Self {
        Self::Complete(text_result(text, false))
    }

    /// A tool-level error: the call ran and failed in the tool's own terms.
    pub fn tool_error(text: impl Into<String>) -> Self {
        Self::Complete(text_result(text, true))
    }

    /// Text plus `structuredContent`.
    pub fn structured(text: impl Into<String>, structured: Value) -> Self {
        let mut result = text_result(text, false);
        result["structuredContent"] = structured;
        Self::Complete(result)
    }
}

/// Why a handler did not produce an [`Outcome`].
#[derive(Debug, Clone, PartialEq)]
pub enum ToolError {
    /// A JSON-RPC error: the task ends `failed` with it.
    Protocol(ErrorObject),
    /// The run was interrupted (cancelled, lease lost, shutdown); the worker decides
    /// what to record.
    Interrupted,
}

impl From<ErrorObject> for ToolError {
    fn from(e: ErrorObject) -> Self {
        Self::Protocol(e)
    }
}

pub type ToolResult = Result<Outcome, ToolError>;
