//! [`Server`]: a broker process a suite starts for itself (a private server for the
//! wrong-credentials or outage case), and [`server_bin`], which finds its binary.
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// A server process on a loopback port, killed when dropped (or by [`Server::stop`]).
#[derive(Debug)]
pub struct Server {
    child: Child,
}

impl Server {
    /// Spawns `command` (its output discarded) and waits until `127.0.0.1:port` accepts
    /// connections, polling every 50 ms.
    ///
    /// # Panics
    /// When the binary cannot be started (the message names `bin_variable`, the variable that
    /// points at it), exits first, or the port does not accept connections within `within`.
    pub async fn spawn(
        mut command: Command,
        port: u16,
        within: Duration,
        bin_variable: &str,
    ) -> Server {
        let program = command
            .as_std()
            .get_program()
            .to_string_lossy()
            .into_owned();
        let child = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program} (set {bin_variable}): {e}"));
        let mut server = Server { child };
        let started = Instant::now();
        while started.elapsed() < within {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("{program} exited before it accepted connections on port {port}: {status}");
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{program} on port {port} did not accept connections within {within:?}");
    }

    /// Kills the server and waits for it to exit.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The path of the server binary `name`: the environment variable `variable` when set, else
/// `name` on the `PATH`, else `fallback`.
pub fn server_bin(variable: &str, name: &str, fallback: &str) -> String {
    if let Some(bin) = std::env::var(variable).ok().filter(|b| !b.is_empty()) {
        return bin;
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    on_path.map_or_else(|| fallback.to_owned(), |p| p.display().to_string())
}
