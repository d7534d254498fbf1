//! What an operator sees of a fleet: Prometheus metrics (the names in [`names`] are a
//! contract), OpenTelemetry traces exported over OTLP, and structured logs.
//!
//! Replicas and workers record through [`record`]; the binary installs the recorder
//! ([`Metrics::install`]), the subscriber ([`logs::init`]) and the tracer provider
//! ([`otel::provider_from_env`]). Without them every call here is a no-op.

pub mod logs;
pub mod names;
pub mod otel;
mod prom;
pub mod record;
mod serve;

pub use prom::{LimitsSource, Metrics};
pub use serve::{CONTENT_TYPE, metrics_response, serve_metrics};
