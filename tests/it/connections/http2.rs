//! HTTP/2 by hand, over a bare socket: the limits the replica advertises, and a
//! rapid-reset flood.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{bounded, connect, normal_requests, until_closed};
use crate::harness::{Replica, TestDb, registry};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len())
        .expect("small frame")
        .to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Reads frames (type, flags, payload) until `stop` says so or the connection closes.
async fn h2_frames(stream: &mut TcpStream, mut stop: impl FnMut(u8, &[u8]) -> bool) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        while buf.len() >= 9 {
            let len = usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            let kind = buf[3];
            let payload: Vec<u8> = buf[9..9 + len].to_vec();
            buf.drain(..9 + len);
            if stop(kind, &payload) {
                return true;
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_limits_are_advertised_and_a_rapid_reset_flood_is_cut_off() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;

    let mut h2 = connect(replica.addr).await;
    h2.write_all(&[PREFACE, &h2_frame(4, 0, 0, &[])].concat())
        .await
        .expect("write");
    let mut settings = Vec::new();
    let found = bounded(
        "the server's SETTINGS",
        h2_frames(&mut h2, |kind, payload| {
            if kind != 4 || payload.is_empty() {
                return false;
            }
            settings = payload
                .chunks(6)
                .map(|s| {
                    let id = u16::from_be_bytes([s[0], s[1]]);
                    (id, u32::from_be_bytes([s[2], s[3], s[4], s[5]]))
                })
                .collect();
            true
        }),
    )
    .await;
    assert!(found, "no SETTINGS frame from the server");
    // SETTINGS_MAX_CONCURRENT_STREAMS (3) and SETTINGS_MAX_HEADER_LIST_SIZE (6).
    assert!(settings.contains(&(3, 100)), "{settings:?}");
    assert!(settings.contains(&(6, 16 * 1024)), "{settings:?}");

    // Requests (GET /, static HPACK entries only) each reset at once by the client.
    let mut flood = Vec::new();
    for n in 0..500u32 {
        let stream = 2 * n + 1;
        flood.extend(h2_frame(1, 0x5, stream, &[0x82, 0x86, 0x84]));
        flood.extend(h2_frame(3, 0, stream, &8u32.to_be_bytes()));
    }
    let _ = h2.write_all(&flood).await;
    let mut goaway = None;
    bounded(
        "a GOAWAY after the flood",
        h2_frames(&mut h2, |kind, payload| {
            if kind == 7 && payload.len() >= 8 {
                goaway = Some(u32::from_be_bytes([
                    payload[4], payload[5], payload[6], payload[7],
                ]));
                return true;
            }
            false
        }),
    )
    .await;
    // ENHANCE_YOUR_CALM.
    assert_eq!(
        goaway,
        Some(0xb),
        "the flood ends with GOAWAY(ENHANCE_YOUR_CALM)"
    );
    until_closed(&mut h2, "the flooding connection").await;

    normal_requests(&replica.client("alice")).await;
    replica.stop().await;
}
