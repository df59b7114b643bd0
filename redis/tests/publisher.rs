//! The publisher against the Redis server of `REDIS_URL` (default `redis://127.0.0.1:6379`):
//! per-command results of a pipeline, `MAXLEN`, the entry's fields, the start-up checks.
use std::time::Duration;

use sea_orm_outbox::{OutboxError, OutboxMessage, PublishErrorKind, Publisher};
use sea_orm_outbox_redis::{
    RedisConfig, RedisPublisher, RedisStreamConsumer, DEFAULT_URL, ENV_URL,
};

/// The server's URL, or `None` (the test is skipped) when nothing answers outside CI.
fn server() -> Option<String> {
    let url = std::env::var(ENV_URL).unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let up = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(3)))
        .is_ok();
    if up {
        return Some(url);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "no Redis at {url}"
    );
    eprintln!("SKIPPED: no Redis at {url}");
    None
}

fn prefix(case: &str) -> String {
    format!(
        "outbox_{case}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

fn sync_connection(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .expect("URL")
        .get_connection()
        .expect("connection")
}

/// A stream key holding another type fails its own `XADD` only (a configuration error); the
/// other entries of the pipeline are added, in order, with every field.
#[tokio::test]
async fn one_failed_command_fails_only_its_message() {
    let Some(url) = server() else { return };
    let dest = prefix("pipeline");
    let mut admin = sync_connection(&url);
    let _: () = redis::cmd("SET")
        .arg(format!("{dest}:Broken"))
        .arg("not a stream")
        .query(&mut admin)
        .expect("SET");
    let config = RedisConfig::new(&url).stream_prefix(&dest).max_len(5);
    let publisher = RedisPublisher::start(config.clone()).await.expect("starts");
    assert!(publisher.batches());
    let messages: Vec<OutboxMessage> = (1..=10)
        .map(|i| {
            let kind = if i == 3 { "Broken" } else { "OrderCreated" };
            OutboxMessage::new(i, format!("order-{i}"), kind, format!(r#"{{"n":{i}}}"#))
                .with_header("tenant", "acme")
        })
        .collect();
    let results = publisher.publish_batch(&messages).await;
    assert_eq!(results.len(), 10);
    for (i, r) in results.iter().enumerate() {
        if i == 2 {
            let e = r.as_ref().expect_err("WRONGTYPE");
            assert_eq!(e.kind, PublishErrorKind::Configuration, "{e}");
            assert!(e.message.contains("WRONGTYPE"), "{e}");
        } else {
            assert!(r.is_ok(), "message {}: {r:?}", i + 1);
        }
    }
    let mut consumer = RedisStreamConsumer::start(&config).await.expect("consumer");
    let got = consumer.poll(Duration::from_secs(2)).await.expect("XREAD");
    // MAXLEN ~ 5 trims whole nodes only: the stream is never cut below 5 entries.
    assert!(got.len() >= 5 && got.len() <= 9, "{} entries", got.len());
    let ids: Vec<i64> = got.iter().filter_map(|e| e.event_id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let last = got.last().expect("an entry");
    assert_eq!(last.event_id, Some(10));
    assert_eq!(last.stream, format!("{dest}:OrderCreated"));
    assert_eq!(
        (last.biz_no.as_str(), last.payload.as_str()),
        ("order-10", r#"{"n":10}"#)
    );
    assert_eq!(last.headers, [("tenant".to_owned(), "acme".to_owned())]);
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{dest}:Broken"))
        .arg(format!("{dest}:OrderCreated"))
        .query(&mut admin)
        .expect("DEL");
    publisher.shutdown().await;
}

/// Nothing listening: `start` fails with a broker error naming the variable, not the password.
#[tokio::test]
async fn start_names_the_url_without_its_password() {
    let config =
        RedisConfig::new("redis://app:pw-5150@127.0.0.1:1").send_timeout(Duration::from_secs(1));
    let e = RedisPublisher::start(config)
        .await
        .expect_err("nothing listens on port 1");
    let text = e.to_string();
    assert!(matches!(e, OutboxError::Broker(_)), "{text}");
    assert!(
        text.contains(ENV_URL) && !text.contains("pw-5150"),
        "{text}"
    );
    assert!(text.contains("redis://app:redacted@127.0.0.1:1"), "{text}");
}

/// A private `redis-server` with `requirepass` on a loopback port below 32768, killed on drop.
struct PrivateServer {
    child: std::process::Child,
    port: u16,
}

impl PrivateServer {
    /// Starts one with password `password`; `None` (the test is skipped) when the binary is
    /// missing outside CI.
    async fn start(password: &str) -> Option<PrivateServer> {
        let start = 20_000 + (std::process::id() % 12_000) as u16;
        let port = (0..12_768u16)
            .map(|i| 20_000 + (start - 20_000 + i) % 12_768)
            .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
            .expect("a free port below 32768");
        let spawned = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--requirepass",
                password,
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "redis-server: {e}"
                );
                eprintln!("SKIPPED: redis-server: {e}");
                return None;
            }
        };
        let server = PrivateServer { child, port };
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Some(server);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the private redis-server did not listen on {port}");
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server with `requirepass`: no password and a wrong one are refused at start with an
/// error naming REDIS_PASSWORD and never showing the password; the right one starts.
#[tokio::test]
async fn start_checks_the_password() {
    let Some(server) = PrivateServer::start("right-pw-8086").await else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", server.port);
    let e = RedisPublisher::start(RedisConfig::new(&url))
        .await
        .expect_err("no password");
    let text = e.to_string();
    assert!(matches!(e, OutboxError::InvalidConfig(_)), "{text}");
    assert!(
        text.contains("REDIS_PASSWORD") && text.contains("NOAUTH"),
        "{text}"
    );
    for config in [
        RedisConfig::new(&url).password("wrong-pw-1234"),
        RedisConfig::new(format!("redis://:wrong-pw-1234@127.0.0.1:{}", server.port)),
    ] {
        let e = RedisPublisher::start(config)
            .await
            .expect_err("wrong password");
        let text = e.to_string();
        assert!(matches!(e, OutboxError::InvalidConfig(_)), "{text}");
        assert!(
            text.contains("REDIS_PASSWORD") && !text.contains("wrong-pw-1234"),
            "{text}"
        );
    }
    let publisher = RedisPublisher::start(RedisConfig::new(&url).password("right-pw-8086"))
        .await
        .expect("the right password");
    let m = OutboxMessage::new(1, "k", "OrderCreated", "{}");
    publisher.publish(&m).await.expect("published");
    publisher.shutdown().await;
}
