//! A TCP proxy whose connections can be frozen one by one, as a stuck proxy, NAT or firewall
//! freezes them: a frozen connection forwards nothing more in either direction and keeps both
//! of its sockets open, so neither peer sees a FIN or an RST.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The freeze flag of each connection, by the local port of the proxy's socket to the server:
/// the client port the server sees (Postgres: `pg_stat_activity.client_port`).
type Flags = Arc<Mutex<HashMap<u16, Arc<AtomicBool>>>>;

/// The proxy; dropping it closes every connection through it.
pub struct Freezer {
    /// The loopback port it listens on.
    pub port: u16,
    flags: Flags,
    accept: JoinHandle<()>,
}

impl Freezer {
    /// A proxy on a free loopback port that forwards each connection to `host`:`port`.
    pub async fn start(host: &str, port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let flags = Flags::default();
        let upstream = (host.to_owned(), port);
        Freezer {
            port: listener.local_addr().expect("proxy address").port(),
            flags: flags.clone(),
            accept: tokio::spawn(accept(listener, upstream, flags)),
        }
    }

    /// Freezes the connection the server sees from `client_port`; false when no connection
    /// through this proxy has that port.
    pub fn freeze(&self, client_port: u16) -> bool {
        self.flag(client_port)
            .map(|f| f.store(true, Ordering::SeqCst))
            .is_some()
    }

    /// Whether the connection from `client_port` is frozen.
    pub fn is_frozen(&self, client_port: u16) -> bool {
        self.flag(client_port)
            .is_some_and(|f| f.load(Ordering::SeqCst))
    }

    fn flag(&self, client_port: u16) -> Option<Arc<AtomicBool>> {
        let flags = self.flags.lock().unwrap_or_else(|p| p.into_inner());
        flags.get(&client_port).cloned()
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Accepts connections and forwards each to `upstream`; the forwarding tasks belong to this
/// one, so that aborting it closes them all.
async fn accept(listener: TcpListener, upstream: (String, u16), flags: Flags) {
    let mut connections = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        while connections.try_join_next().is_some() {}
        // A client whose server cannot be reached is closed at once.
        let Ok(server) = TcpStream::connect((upstream.0.as_str(), upstream.1)).await else {
            continue;
        };
        let Ok(local) = server.local_addr() else {
            continue;
        };
        let frozen = Arc::new(AtomicBool::new(false));
        flags
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(local.port(), frozen.clone());
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        connections.spawn(forward(client_read, server_write, frozen.clone()));
        connections.spawn(forward(server_read, client_write, frozen));
    }
}

/// Copies `from` to `to` until either side closes. Once `frozen`, it drops what it read and
/// holds both halves open for good, neither forwarding nor closing.
async fn forward(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, frozen: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await.unwrap_or(0);
        if frozen.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if n == 0 || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
