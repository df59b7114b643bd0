//! A TCP proxy between publishers and their server, which the outage case takes down.
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Forwards connections from a loopback port to a server; [`Proxy::down`] drops every
/// connection and refuses new ones until [`Proxy::up`].
pub struct Proxy {
    addr: String,
    up: Arc<watch::Sender<bool>>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// A proxy to `target` (`host:port`) on a free loopback port below 32768.
    ///
    /// # Panics
    /// When no port of 20000–32767 can be bound.
    pub async fn start(target: &str) -> Proxy {
        let listener = bind_below_ephemeral().await;
        let addr = listener.local_addr().expect("local address").to_string();
        let (up, _) = watch::channel(true);
        let up = Arc::new(up);
        let (target, state) = (target.to_owned(), up.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if !*state.borrow() {
                    drop(client);
                    continue;
                }
                let (target, mut down) = (target.clone(), state.subscribe());
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let mut client = client;
                    tokio::select! {
                        _ = copy_bidirectional(&mut client, &mut server) => {}
                        _ = down.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Proxy { addr, up, task }
    }

    /// The proxy's address (`127.0.0.1:port`), for the publishers.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Drops every connection through the proxy and refuses new ones.
    pub fn down(&self) {
        self.up.send_replace(false);
    }

    /// Accepts connections again.
    pub fn up(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.down();
        self.task.abort();
    }
}

/// A free loopback port of 20000–32767, for a server a test starts for itself (it is free when
/// this returns; another process may take it before the server binds it). It never returns
/// one port twice in a process, so cases running at the same time get different ports.
///
/// # Panics
/// When no port of 20000–32767 is free.
pub async fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let listener = bind_below_ephemeral().await;
        let port = listener.local_addr().expect("local address").port();
        if HANDED_OUT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(port)
        {
            return port;
        }
    }
}

/// Calls of [`bind_below_ephemeral`] so far in this process: each starts one port further.
static SEARCHES: AtomicU32 = AtomicU32::new(0);

/// A listener on a loopback port of 20000–32767 (ports from 32768 on are the ephemeral ones).
async fn bind_below_ephemeral() -> TcpListener {
    let first = std::process::id() % 12_000 + SEARCHES.fetch_add(1, Ordering::Relaxed);
    for i in 0..12_768u32 {
        let port = 20_000 + ((first + i) % 12_768) as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)).await {
            return listener;
        }
        if i > 200 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    panic!("no free loopback port in 20000-32767");
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn free_ports_differ_until_bound() {
        let (a, b) = (super::free_port().await, super::free_port().await);
        assert_ne!(a, b, "two calls before any server binds");
        assert!((20_000..32_768).contains(&a) && (20_000..32_768).contains(&b));
    }
}
