//! The client's SSE reader against a real TCP server that sends its event stream in two
//! chunks, split inside a multi-byte character: what arrives is what was sent.

use std::time::Duration;

use mcp_tasks_client::Client;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Two characters of two and four bytes in UTF-8.
const TEXT: &str = "café 😀";

/// Reads one HTTP/1.1 request: its head, then as many body bytes as `Content-Length` says.
async fn read_request(socket: &mut TcpStream) {
    let mut seen = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.expect("reading the request");
        assert!(n > 0, "the client closed before its request was complete");
        seen.extend_from_slice(&buf[..n]);
        let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse().expect("a content length"))
            .unwrap_or(0);
        if seen.len() >= end + 4 + length {
            return;
        }
    }
}

/// One HTTP chunk of `bytes`, in chunked transfer encoding.
fn chunk(bytes: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", bytes.len()).into_bytes();
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
    out
}

/// Serves one request with `events` as an SSE body, sent as two chunks split at
/// `split` (a byte offset), with a pause between them so they arrive apart. The test
/// joins the server at its end, so a failure there fails the test.
async fn serve_once(events: String, split: usize) -> (String, JoinSet<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    let mut server = JoinSet::new();
    server.spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        read_request(&mut socket).await;
        let bytes = events.as_bytes();
        assert!(
            !events.is_char_boundary(split),
            "the split must fall inside a character"
        );
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                    transfer-encoding: chunked\r\n\r\n";
        socket.write_all(head.as_bytes()).await.expect("head");
        socket
            .write_all(&chunk(&bytes[..split]))
            .await
            .expect("first");
        socket.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_millis(300)).await;
        socket
            .write_all(&chunk(&bytes[split..]))
            .await
            .expect("second");
        // A client that has its response may be gone by now.
        let _ = socket.write_all(b"0\r\n\r\n").await;
    });
    (url, server)
}

async fn join(mut server: JoinSet<()>) {
    while let Some(done) = server.join_next().await {
        done.expect("the server");
    }
}

/// `messages` as SSE events (with a keep-alive comment between them), and the byte offset
/// of the middle of the emoji in the first one.
fn stream_of(messages: &[Value]) -> (String, usize) {
    let mut events = String::new();
    for message in messages {
        events.push_str(&format!("data: {message}\n\n: keep-alive\n\n"));
    }
    let split = events.find('😀').expect("the emoji") + 2;
    (events, split)
}

#[tokio::test]
async fn a_listen_stream_keeps_a_character_split_across_chunks() {
    let notification = json!({
        "jsonrpc": "2.0",
        "method": "notifications/tasks/status",
        "params": { "taskId": "t1", "status": "working", "statusMessage": TEXT }
    });
    let end = json!({ "jsonrpc": "2.0", "id": 1, "result": {} });
    let (events, split) = stream_of(&[notification.clone(), end.clone()]);
    let (url, server) = serve_once(events, split).await;

    let client = Client::with_tasks(url);
    let mut sub = client
        .listen(json!(1), json!({ "taskIds": ["t1"] }))
        .await
        .expect("listen");
    let first = sub.next().await.expect("the first frame");
    assert_eq!(first, Some(notification));
    assert_eq!(
        first
            .as_ref()
            .and_then(|f| f.pointer("/params/statusMessage")),
        Some(&json!(TEXT))
    );
    assert_eq!(sub.next().await.expect("the second frame"), Some(end));
    assert_eq!(sub.next().await.expect("the end"), None);
    join(server).await;
}

#[tokio::test]
async fn an_sse_answer_keeps_a_character_split_across_chunks() {
    let progress = json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": { "progressToken": 1, "progress": 1, "message": TEXT }
    });
    let response = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "result": { "content": [{ "type": "text", "text": TEXT }] }
    });
    let (events, split) = stream_of(&[progress.clone(), response]);
    let (url, server) = serve_once(events, split).await;

    let client = Client::with_tasks(url);
    let exchange = client
        .send(
            json!(1),
            "tools/call",
            json!({ "name": "echo", "arguments": {} }),
        )
        .await
        .expect("tools/call");
    assert_eq!(exchange.notifications, [progress]);
    let result = exchange.into_result().expect("the result");
    assert_eq!(result.pointer("/content/0/text"), Some(&json!(TEXT)));
    join(server).await;
}
