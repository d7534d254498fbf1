//! A round-robin HTTP proxy in front of several replicas, so that the requests of one
//! client session are spread over all of them, as behind a load balancer without
//! affinity. Each POST goes to the next replica in turn (other methods to the first), and
//! every hop is logged, so tests can check where each message went.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::task::JoinHandle;

/// One request the proxy forwarded.
#[derive(Debug, Clone)]
pub(crate) struct Hop {
    /// Index of the replica it went to.
    pub(crate) backend: usize,
    pub(crate) http_method: String,
    /// The JSON-RPC method, `response` for a client's response, or empty.
    pub(crate) rpc: String,
    /// `params.name`, when the message has one (the tool of a `tools/call`).
    pub(crate) name: String,
}

struct Shared {
    backends: Vec<String>,
    posts: AtomicUsize,
    hops: Mutex<Vec<Hop>>,
    http: reqwest::Client,
}

pub(crate) struct Proxy {
    pub(crate) url: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// `backends` are MCP endpoint URLs (`http://addr/mcp`).
    pub(crate) async fn start(backends: Vec<String>) -> Self {
        let shared = Arc::new(Shared {
            backends,
            posts: AtomicUsize::new(0),
            hops: Mutex::new(Vec::new()),
            http: reqwest::Client::builder().build().expect("proxy client"),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{addr}/mcp"),
            shared,
            task,
        }
    }

    pub(crate) fn hops(&self) -> Vec<Hop> {
        self.shared
            .hops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn stop(self) {
        self.task.abort();
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 16 * 1024 * 1024).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let backend = if parts.method == axum::http::Method::POST {
        shared.posts.fetch_add(1, Ordering::SeqCst) % shared.backends.len()
    } else {
        0
    };
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let rpc = match message.get("method").and_then(Value::as_str) {
        Some(method) => method.to_owned(),
        None if message.get("result").is_some() || message.get("error").is_some() => {
            "response".to_owned()
        }
        None => String::new(),
    };
    let name = message
        .pointer("/params/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    shared
        .hops
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Hop {
            backend,
            http_method: parts.method.to_string(),
            rpc,
            name,
        });

    let mut upstream = shared
        .http
        .request(parts.method.clone(), &shared.backends[backend])
        .body(bytes);
    for (name, value) in &parts.headers {
        if name != header::HOST && name != header::CONTENT_LENGTH {
            upstream = upstream.header(name, value);
        }
    }
    let answer = match upstream.send().await {
        Ok(answer) => answer,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if name != header::TRANSFER_ENCODING && name != header::CONNECTION {
            response = response.header(name, value);
        }
    }
    // Streamed through, so SSE frames reach the client as the replica sends them.
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}
