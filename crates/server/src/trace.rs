//! W3C trace context of the request that creates a task. It is stored with the task so
//! the worker that runs it, possibly hours later, continues the same trace.

use std::collections::HashMap;

use axum::http::HeaderMap;
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Value, json};

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The trace context to store with a task: the current span's (the `tools/call` being
/// served) when traces are exported; otherwise a child of the caller's `traceparent`
/// when it sent a valid one, or a new trace.
pub(crate) fn for_request(headers: &HeaderMap) -> Value {
    if let Some(own) = mcp_tasks_observe::otel::span_context(&tracing::Span::current()) {
        return json!(own);
    }
    let propagator = TraceContextPropagator::new();
    let parent = propagator.extract(&Headers(headers));
    let parent = parent.span().span_context().clone();
    let (trace_id, flags, state) = if parent.is_valid() {
        (
            parent.trace_id(),
            parent.trace_flags(),
            parent.trace_state().clone(),
        )
    } else {
        (
            TraceId::from_bytes(rand::random::<[u8; 16]>()),
            TraceFlags::SAMPLED,
            TraceState::default(),
        )
    };
    let span = SpanContext::new(
        trace_id,
        SpanId::from_bytes(rand::random::<[u8; 8]>()),
        flags,
        true,
        state,
    );
    let mut carrier: HashMap<String, String> = HashMap::new();
    propagator.inject_context(&Context::new().with_remote_span_context(span), &mut carrier);
    json!(carrier)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continues_a_valid_parent_and_starts_a_trace_otherwise() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        let t = for_request(&headers);
        let tp = t["traceparent"].as_str().unwrap();
        assert!(
            tp.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{tp}"
        );
        assert!(!tp.contains("00f067aa0ba902b7"));

        headers.insert("traceparent", "garbage".parse().unwrap());
        let fresh = for_request(&headers);
        assert_eq!(fresh["traceparent"].as_str().unwrap().len(), 55);
        assert!(!fresh["traceparent"].as_str().unwrap().contains("4bf92f35"));
    }
}
