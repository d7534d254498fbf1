//! The load generator: many keep-alive HTTP/1.1 connections, each a tokio task that writes
//! a prepared request and reads the answer with `httparse`, in this process. No per-request
//! process, no HTTP client library in the way: what it measures is the service.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::task::JoinSet;

use crate::stats::Summary;

/// Where the service is: `http://host:port/path`.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    host: String,
    path: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> anyhow::Result<Self> {
        let rest = url
            .strip_prefix("http://")
            .context("the load generator speaks plain http:// only")?;
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/mcp"),
        };
        let addr = std::net::ToSocketAddrs::to_socket_addrs(host)?
            .next()
            .with_context(|| format!("resolving {host}"))?;
        Ok(Self {
            addr,
            host: host.to_owned(),
            path: path.to_owned(),
        })
    }

    /// The URL the requests go to.
    pub(crate) fn url(&self) -> String {
        format!("http://{}{}", self.host, self.path)
    }

    /// The bytes of one MCP POST (2026-07-28 headers; `name` is what `Mcp-Name` mirrors).
    pub(crate) fn request(&self, method: &str, name: &str, body: &str) -> Vec<u8> {
        format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: {method}\r\nMcp-Name: {name}\r\nContent-Length: {}\r\n\r\n{body}",
            self.path,
            self.host,
            body.len()
        )
        .into_bytes()
    }
}

/// One keep-alive connection.
pub(crate) struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub(crate) async fn open(target: &Target) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(target.addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        })
    }

    /// Sends one request and returns the status and body of its answer.
    pub(crate) async fn exchange(&mut self, request: &[u8]) -> anyhow::Result<(u16, &[u8])> {
        self.stream.write_all(request).await?;
        self.buf.clear();
        loop {
            if self.buf.len() == self.buf.capacity() {
                self.buf.reserve(self.buf.len());
            }
            let n = self.stream.read_buf(&mut self.buf).await?;
            if n == 0 {
                bail!("the service closed the connection");
            }
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut headers);
            let httparse::Status::Complete(head) = response.parse(&self.buf)? else {
                continue;
            };
            let status = response.code.unwrap_or(0);
            let length = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| {
                    std::str::from_utf8(h.value)
                        .ok()?
                        .trim()
                        .parse::<usize>()
                        .ok()
                })
                .context("an answer without Content-Length (the benchmarks ask for JSON ones)")?;
            while self.buf.len() < head + length {
                self.buf.reserve(head + length - self.buf.len());
                if self.stream.read_buf(&mut self.buf).await? == 0 {
                    bail!("the service closed the connection mid-answer");
                }
            }
            return Ok((status, &self.buf[head..head + length]));
        }
    }
}

/// What one run of the generator saw.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) ok: u64,
    pub(crate) errors: u64,
    pub(crate) elapsed: Duration,
    pub(crate) latency: Option<Summary>,
    /// The first error seen, for the report.
    pub(crate) first_error: Option<String>,
}

impl Run {
    pub(crate) fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Makes the request for the `n`th call; checks an answer body (an `Err` counts as an
/// error). Shared by every connection.
pub(crate) trait Script: Send + Sync + 'static {
    fn request(&self, n: u64) -> Vec<u8>;
    fn answer(&self, n: u64, sent: Instant, body: &[u8]) -> Result<(), String>;
}

/// `connections` connections, each sending its next request as soon as the last one was
/// answered (closed loop), for `duration`; or, with `rate`, requests started at that
/// total rate (open loop: latency then includes any queueing behind a slow answer).
pub(crate) async fn drive(
    target: &Target,
    connections: usize,
    duration: Duration,
    rate: Option<f64>,
    script: Arc<dyn Script>,
) -> anyhow::Result<Run> {
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        conns.push(Conn::open(target).await?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let first_error: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let started = Instant::now();
    let mut set = JoinSet::new();
    for mut conn in conns {
        let target = target.clone();
        let (stop, counter, errors, first_error, script) = (
            stop.clone(),
            counter.clone(),
            errors.clone(),
            first_error.clone(),
            script.clone(),
        );
        set.spawn(async move {
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                if let Some(rate) = rate {
                    // The nth request of the whole run is due at n / rate.
                    let due = started + Duration::from_secs_f64(n as f64 / rate);
                    if due > started + duration {
                        break;
                    }
                    tokio::time::sleep_until(due.into()).await;
                }
                let sent = Instant::now();
                let request = script.request(n);
                let failure = match conn.exchange(&request).await {
                    Ok((200, body)) => script.answer(n, sent, body).err(),
                    Ok((status, body)) => Some(format!(
                        "HTTP {status}: {}",
                        String::from_utf8_lossy(&body[..body.len().min(300)])
                    )),
                    Err(e) => {
                        if let Ok(fresh) = Conn::open(&target).await {
                            conn = fresh;
                        }
                        Some(e.to_string())
                    }
                };
                match failure {
                    None => latencies.push(sent.elapsed()),
                    Some(e) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        first_error.lock().await.get_or_insert(e);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            latencies
        });
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    while let Some(joined) = set.join_next().await {
        latencies.extend(joined?);
    }
    let elapsed = started.elapsed();
    let ok = latencies.len() as u64;
    let first_error = first_error.lock().await.take();
    Ok(Run {
        ok,
        errors: errors.load(Ordering::Relaxed),
        elapsed,
        latency: Summary::of(latencies),
        first_error,
    })
}
