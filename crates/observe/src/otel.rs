//! OpenTelemetry traces: OTLP export configured by the standard `OTEL_*` variables, and
//! the W3C trace context moved between processes (the request that creates a task, the
//! worker that runs it minutes later, the tools and upstream servers it calls).

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanKind, TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SdkTracerProvider, Span, SpanData, SpanProcessor,
};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Why trace export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    #[error("{0}")]
    Config(String),
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the environment asks for trace export: an OTLP endpoint is set, and neither
/// `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` turns it off.
pub fn export_requested() -> bool {
    let endpoint =
        env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"));
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let exporter_none = env("OTEL_TRACES_EXPORTER").is_some_and(|v| v == "none");
    endpoint.is_some() && !disabled && !exporter_none
}

/// A tracer provider exporting over OTLP as the environment says, or `None` when it asks
/// for no export. The exporter reads the endpoint, headers and timeout itself
/// (`OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`, `_HEADERS`, `_TIMEOUT`); the SDK reads the
/// sampler (`OTEL_TRACES_SAMPLER`, `_ARG`), the batch settings (`OTEL_BSP_*`) and the
/// resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`). For gRPC it must be
/// called inside a Tokio runtime, which must outlive [`SdkTracerProvider::shutdown`].
pub fn provider_from_env() -> Result<Option<SdkTracerProvider>, OtelError> {
    if !export_requested() {
        return Ok(None);
    }
    let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    let exporter = match protocol.as_str() {
        "grpc" => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .build()?,
        "http/protobuf" => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()?,
        other => {
            return Err(OtelError::Config(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={other:?} is not supported: use grpc or http/protobuf"
            )));
        }
    };
    let mut resource = Resource::builder();
    let named_in_attributes = env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| {
        a.split(',')
            .any(|kv| kv.trim().starts_with("service.name="))
    });
    if env("OTEL_SERVICE_NAME").is_none() && !named_in_attributes {
        resource = resource.with_service_name("mcp-tasks");
    }
    let resource = resource
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(DbSpans(BatchSpanProcessor::builder(exporter).build()))
        .build();
    Ok(Some(provider))
}

/// The `tracing` layer that turns spans into OpenTelemetry spans of `provider`.
pub fn layer<S>(
    provider: &SdkTracerProvider,
) -> tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer("mcp-tasks"))
}

/// The store's spans (`db.*`, one per public method) are SQL client spans: they get
/// the database semantic conventions here, so the store itself stays free of them.
/// Those without a parent (the workers' polls, heartbeats and maintenance, several a
/// second) are dropped: a trace of one statement that nobody asked for is noise.
#[derive(Debug)]
struct DbSpans<P>(P);

impl<P: SpanProcessor> SpanProcessor for DbSpans<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        if let Some(operation) = span.name.strip_prefix("db.") {
            if span.parent_span_id == opentelemetry::trace::SpanId::INVALID {
                return;
            }
            let operation = operation.to_owned();
            span.span_kind = SpanKind::Client;
            span.attributes.extend([
                KeyValue::new("db.system", "postgresql"),
                KeyValue::new("db.system.name", "postgresql"),
                KeyValue::new("db.operation.name", operation),
            ]);
        }
        self.0.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// Makes `span` a child of the W3C trace context in `carrier` (request headers, or the
/// context stored with a task). Without a valid context, or without trace export, the
/// span keeps the parent it has.
pub fn continue_trace(span: &tracing::Span, carrier: &dyn Extractor) {
    let parent = TraceContextPropagator::new().extract(carrier);
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// The same, from a stored context (`{"traceparent": …, "tracestate": …}`).
pub fn continue_stored_trace(span: &tracing::Span, stored: Option<&serde_json::Value>) {
    let Some(serde_json::Value::Object(map)) = stored else {
        return;
    };
    let carrier: HashMap<String, String> = map
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
        .collect();
    continue_trace(span, &carrier);
}

/// The W3C context of `span` (`traceparent`, and `tracestate` when there is one), when
/// trace export gave it a valid span context; `None` otherwise.
pub fn span_context(span: &tracing::Span) -> Option<HashMap<String, String>> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    Some(carrier)
}
