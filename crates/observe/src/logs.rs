//! The process's `tracing` subscriber: log lines on stderr (text, or one JSON object a
//! line) and, when trace export is on, the OpenTelemetry layer.
//!
//! A JSON line has `timestamp`, `level`, `target`, `message`, the event's own fields, and
//! the fields of the spans it happened in (`task_id`, `tool`, `method`, …), innermost
//! first, plus `trace_id` and `span_id` of the innermost span that has them. Spans and
//! events never carry tool arguments, answers or results, so neither do the lines.

use std::fmt;

use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber: `filter` (EnvFilter syntax) decides what is logged;
/// spans reach `provider` (when there is one) at info and above from our own crates,
/// whatever the log filter says.
pub fn init(
    filter: &str,
    format: LogFormat,
    provider: Option<&SdkTracerProvider>,
) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| e.to_string())?;
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .fmt_fields(TextFields)
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines)
            .with_writer(std::io::stderr)
            .boxed(),
    }
    .with_filter(filter);
    let traces = provider.map(|p| {
        crate::otel::layer(p).with_filter(Targets::new().with_target("mcp_tasks", Level::INFO))
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init()
        .map_err(|e| format!("cannot set up logging: {e}"))
}

/// Fields as the default text format writes them, less the dotted ones (`http.*`,
/// `rpc.*`, `otel.*`): those are span attributes for the trace backend.
struct TextFields;

impl<'w> FormatFields<'w> for TextFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: Writer<'w>,
        fields: R,
    ) -> fmt::Result {
        let mut visitor = TextVisitor {
            writer: &mut writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct TextVisitor<'a, 'w> {
    writer: &'a mut Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Visit for TextVisitor<'_, '_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if self.result.is_err() || name.contains('.') {
            return;
        }
        let space = if self.first { "" } else { " " };
        self.first = false;
        self.result = if name == "message" {
            write!(self.writer, "{space}{value:?}")
        } else {
            write!(self.writer, "{space}{name}={value:?}")
        };
    }
}

/// One JSON object per event (see the module docs).
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = Map::new();
        let now = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        line.insert("timestamp".into(), now.into());
        let meta = event.metadata();
        line.insert("level".into(), meta.level().as_str().into());
        line.insert("target".into(), meta.target().into());
        let mut fields = Fields(Map::new());
        event.record(&mut fields);
        line.insert(
            "message".into(),
            fields.0.remove("message").unwrap_or(Value::from("")),
        );
        for (k, v) in fields.0 {
            line.entry(log_key(k)).or_insert(v);
        }
        if let Some(scope) = ctx.event_scope() {
            let mut have_ids = false;
            for span in scope {
                let ext = span.extensions();
                if !have_ids && let Some(otel) = ext.get::<tracing_opentelemetry::OtelData>() {
                    let ids = otel.trace_id().zip(otel.span_id());
                    if let Some((trace, span_id)) = ids.filter(|(t, s)| {
                        *t != opentelemetry::TraceId::INVALID
                            && *s != opentelemetry::SpanId::INVALID
                    }) {
                        line.insert("trace_id".into(), trace.to_string().into());
                        line.insert("span_id".into(), span_id.to_string().into());
                        have_ids = true;
                    }
                }
                let Some(formatted) = ext.get::<FormattedFields<N>>() else {
                    continue;
                };
                let Ok(Value::Object(span_fields)) = serde_json::from_str(formatted) else {
                    continue;
                };
                for (k, v) in span_fields {
                    // Dotted names (`http.*`, `rpc.*`, `otel.*`) are span attributes for
                    // the trace backend, not log fields.
                    if !k.contains('.') {
                        line.entry(log_key(k)).or_insert(v);
                    }
                }
            }
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// Code names a task `task`; lines call it `task_id`, as log pipelines expect.
fn log_key(key: String) -> String {
    if key == "task" { "task_id".into() } else { key }
}

struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.insert(field.name().into(), value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}
