//! A plain HTTP/1.1 request over TCP, for the suites that check a server the tool or a test
//! starts (the console) without an HTTP client crate.
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A response: its status code and its body as text.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: String,
}

/// Sends `method path` to `addr` with `body` as a form (`application/x-www-form-urlencoded`)
/// and `Connection: close`, and reads the whole response. Panics when the server does not
/// answer with an HTTP status line.
pub async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Reply {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status line in {head:?}"));
    Reply {
        status,
        body: body.to_owned(),
    }
}
