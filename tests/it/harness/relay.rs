//! A TCP relay between a process and PostgreSQL that the test can pause: while paused it
//! forwards nothing either way and completes no new connection, but closes nothing
//! either, as a network that drops every packet would (no reset, no end of stream). The
//! process's statements then hang instead of failing, which is what a worker cut off
//! from its database sees.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

/// See the module docs. Dropping it ends every connection it relays.
pub(crate) struct Relay {
    pub(crate) addr: SocketAddr,
    paused: watch::Sender<bool>,
    _accept: AbortOnDropHandle<()>,
}

impl Relay {
    /// Relays connections to the server of `database_url`.
    pub(crate) async fn to(database_url: &str) -> Self {
        let url = url::Url::parse(database_url).expect("a database URL");
        let target = format!(
            "{}:{}",
            url.host_str().expect("a host in the database URL"),
            url.port().unwrap_or(5432)
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let paused = watch::Sender::new(false);
        let gate = paused.subscribe();
        let accept = AbortOnDropHandle::new(tokio::spawn(async move {
            // The relayed connections end with the accept loop (when the relay is dropped).
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let target = target.clone();
                let gate = gate.clone();
                connections.spawn(async move {
                    wait_open(&gate).await;
                    let Ok(server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pipe(client_read, server_write, gate.clone()),
                        pipe(server_read, client_write, gate),
                    );
                });
            }
        }));
        Self {
            addr,
            paused,
            _accept: accept,
        }
    }

    /// `database_url` with the relay in place of the server.
    pub(crate) fn url(&self, database_url: &str) -> String {
        let mut url = url::Url::parse(database_url).expect("a database URL");
        url.set_host(Some("127.0.0.1")).expect("host");
        url.set_port(Some(self.addr.port())).expect("port");
        url.to_string()
    }

    /// Stops forwarding, in both directions, on every connection.
    pub(crate) fn pause(&self) {
        self.paused.send_replace(true);
    }

    pub(crate) fn resume(&self) {
        self.paused.send_replace(false);
    }
}

async fn wait_open(gate: &watch::Receiver<bool>) {
    let mut gate = gate.clone();
    let _ = gate.wait_for(|paused| !paused).await;
}

/// Copies one direction; what it reads while paused it holds until resumed.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    gate: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        wait_open(&gate).await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        wait_open(&gate).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
