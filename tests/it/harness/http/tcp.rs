//! Requests over a bare TCP connection, for what an HTTP client library refuses to send
//! (CR, LF, NUL in header values, header names in odd case, bodies that never end), with
//! the bytes on the wire exactly as written.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Answer, Request};

/// What a bare TCP exchange produced.
#[derive(Debug)]
pub(crate) enum Tcp {
    /// The server closed the connection (or reset it) without answering.
    Closed,
    Answer(Answer),
}

impl Tcp {
    /// Refused at the HTTP layer: 400 (any body) or a closed connection; never accepted.
    pub(crate) fn assert_refused(&self, what: &str) {
        match self {
            Tcp::Closed => {}
            Tcp::Answer(a) => {
                assert_eq!(a.status, 400, "{what}: must be refused: {}", a.excerpt());
                // When the MCP layer answers rather than the HTTP parser, it is a
                // header error.
                if a.content_type() == Some("application/json") {
                    let body = a.jsonrpc(what);
                    assert_eq!(body["error"]["code"], -32020, "{what}: {body}");
                }
            }
        }
    }

    pub(crate) fn answer(self, what: &str) -> Answer {
        match self {
            Tcp::Answer(a) => a,
            Tcp::Closed => panic!("{what}: the server closed the connection without answering"),
        }
    }
}

impl Request {
    /// The request as bytes on the wire, with `Content-Length` for its body, header names
    /// and values byte for byte as written.
    pub(crate) fn wire(&self, addr: SocketAddr) -> Vec<u8> {
        let mut wire = format!(
            "{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.method,
            self.path,
            self.body.len()
        )
        .into_bytes();
        for (n, v) in &self.headers {
            wire.extend_from_slice(n.as_bytes());
            wire.extend_from_slice(b": ");
            wire.extend_from_slice(v);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"\r\n");
        wire.extend_from_slice(&self.body);
        wire
    }

    /// Sends the request over a bare TCP connection.
    pub(crate) async fn send_tcp(&self, addr: SocketAddr) -> Tcp {
        exchange(addr, self.wire(addr)).await
    }
}

/// Writes `bytes` on a fresh connection (from another task, so a server that answers
/// early is heard while the write is still going on) and reads one answer. The write
/// side stays open until the answer is read, so a server waiting for the rest of a body
/// would wait forever: the read times out after 20 s, which fails the test.
pub(crate) async fn exchange(addr: SocketAddr, bytes: Vec<u8>) -> Tcp {
    exchange_then(addr, bytes, Vec::new()).await
}

/// Like [`exchange`], and then keeps writing `more` (for bodies sent slowly).
pub(crate) async fn exchange_then(addr: SocketAddr, bytes: Vec<u8>, more: Vec<Vec<u8>>) -> Tcp {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        let mut written = 0usize;
        if wr.write_all(&bytes).await.is_ok() {
            written += bytes.len();
            for chunk in more {
                if wr.write_all(&chunk).await.is_err() {
                    break;
                }
                written += chunk.len();
            }
        }
        let _ = done_rx.await;
        written
    });
    let answer = tokio::time::timeout(Duration::from_secs(20), read_answer(&mut rd))
        .await
        .expect("no answer and no close within 20 s: the server is waiting for something");
    let _ = done_tx.send(());
    let _ = writer.await;
    answer
}

/// Writes `bytes`, then closes the write side (the request ends there), and reads the
/// answer.
pub(crate) async fn half_closed(addr: SocketAddr, bytes: Vec<u8>) -> Tcp {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(&bytes).await.expect("write");
    stream.shutdown().await.expect("shutdown");
    let (mut rd, _wr) = stream.into_split();
    tokio::time::timeout(Duration::from_secs(20), read_answer(&mut rd))
        .await
        .expect("no answer and no close within 20 s after the client finished")
}

async fn read_answer(rd: &mut tokio::net::tcp::OwnedReadHalf) -> Tcp {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match rd.read(&mut chunk).await {
            Ok(0) | Err(_) if buf.is_empty() => return Tcp::Closed,
            Ok(0) | Err(_) => panic!(
                "connection ended inside an answer's head: {:?}",
                String::from_utf8_lossy(&buf)
            ),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = HeaderMap::new();
    for (n, v) in lines.filter_map(|l| l.split_once(':')) {
        headers.append(
            HeaderName::from_bytes(n.trim().as_bytes()).expect("header name"),
            HeaderValue::from_bytes(v.trim().as_bytes()).expect("header value"),
        );
    }
    assert!(
        headers.get("transfer-encoding").is_none(),
        "no chunked answers expected: {head}"
    );
    let mut body = buf[head_end + 4..].to_vec();
    match headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(len) => {
            while body.len() < len {
                match rd.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => body.extend_from_slice(&chunk[..n]),
                }
            }
            body.truncate(len);
        }
        None => loop {
            match rd.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        },
    }
    Tcp::Answer(Answer {
        status,
        headers,
        body,
    })
}
