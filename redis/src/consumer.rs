//! [`RedisStreamConsumer`], a small consumer for tests, examples and demos that read back what
//! the relay sent, and the [`ReceivedEntry`]s it returns.
use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::streams::StreamReadReply;
use redis::{AsyncConnectionConfig, Client, Value};
use sea_orm_outbox::OutboxError;

use crate::config::RedisConfig;
use crate::credentials::scrub;
use crate::entry::{
    FIELD_BIZ_NO, FIELD_EVENT_ID, FIELD_EVENT_TYPE, FIELD_PAYLOAD, HEADER_FIELD_PREFIX,
};

/// Entries read per stream and call at most.
const READ_COUNT: usize = 1_000;
/// How long [`RedisStreamConsumer::poll`] sleeps between looks for streams while it has none.
const DISCOVERY_PAUSE: Duration = Duration::from_millis(50);

/// One stream entry as [`RedisStreamConsumer`] read it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceivedEntry {
    /// The stream it was read from (`<stream_prefix>:<event_type>`).
    pub stream: String,
    /// Its stream entry id (`<milliseconds>-<sequence>`), assigned by Redis.
    pub id: String,
    /// The `eventId` field as a number (`None` when missing or not a number).
    pub event_id: Option<i64>,
    /// The `eventType` field (empty when missing).
    pub event_type: String,
    /// The `bizNo` field (empty when missing).
    pub biz_no: String,
    /// The `payload` field (empty when missing).
    pub payload: String,
    /// The event's headers: each `h:<name>` field as (`name`, value), sorted by name.
    pub headers: Vec<(String, String)>,
}

/// A small consumer for tests and demos: reads every stream whose key starts with
/// `<stream_prefix>:` from its first entry on, with `XREAD` (no consumer group, nothing
/// acknowledged), and finds new streams with `SCAN` on each call.
///
/// Meant for an application's own tests: publish through the relay, then read the entries
/// back and check them (the `eventId` field, the headers, the order of a key). Not a
/// production consumer: a service reads with a consumer group (`XREADGROUP` / `XACK`) and
/// deduplicates on `eventId`.
///
/// ```no_run
/// # async fn demo() -> Result<(), sea_orm_outbox::OutboxError> {
/// use std::time::Duration;
/// use sea_orm_outbox_redis::{RedisConfig, RedisStreamConsumer};
///
/// let mut consumer = RedisStreamConsumer::start(&RedisConfig::from_env()?).await?;
/// let got = consumer.poll(Duration::from_secs(1)).await?;
/// assert!(got.iter().all(|e| e.event_id.is_some()));
/// # Ok(()) }
/// ```
pub struct RedisStreamConsumer {
    conn: MultiplexedConnection,
    prefix: String,
    /// Each stream read so far and the id of its last entry read (`0`: none yet).
    cursors: BTreeMap<String, String>,
    config: RedisConfig,
}

impl RedisStreamConsumer {
    /// Connects to the server of `config` (its URL and credentials) to read the streams of
    /// its [`RedisConfig::stream_prefix`].
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for a configuration that fails
    /// [`RedisConfig::validate`]; [`OutboxError::Broker`] when the connection fails.
    pub async fn start(config: &RedisConfig) -> Result<Self, OutboxError> {
        config.validate()?;
        let client = Client::open(config.connection_info()?)
            .map_err(|e| OutboxError::Broker(scrub(&e.to_string(), config.password.as_ref())))?;
        // Replies to a blocking XREAD come after the wait: `poll` bounds each call itself.
        let settings = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(config.send_timeout))
            .set_response_timeout(None);
        let conn = client
            .get_multiplexed_async_connection_with_config(&settings)
            .await
            .map_err(|e| {
                OutboxError::Broker(format!(
                    "Redis consumer cannot connect to {}: {}",
                    config.redacted_url(),
                    scrub(&e.to_string(), config.password.as_ref())
                ))
            })?;
        Ok(RedisStreamConsumer {
            conn,
            prefix: config.stream_prefix.clone(),
            cursors: BTreeMap::new(),
            config: config.clone(),
        })
    }

    /// The entries added since the last call (from the first one on the first call), waiting
    /// up to `wait` for one; empty when none came. Streams are read in key order, each in the
    /// order its entries were added.
    ///
    /// # Errors
    /// [`OutboxError::Broker`] when a command fails.
    pub async fn poll(&mut self, wait: Duration) -> Result<Vec<ReceivedEntry>, OutboxError> {
        let end = tokio::time::Instant::now() + wait;
        self.discover().await?;
        while self.cursors.is_empty() && tokio::time::Instant::now() < end {
            tokio::time::sleep(DISCOVERY_PAUSE).await;
            self.discover().await?;
        }
        if self.cursors.is_empty() {
            return Ok(Vec::new());
        }
        let block_ms = end
            .saturating_duration_since(tokio::time::Instant::now())
            .as_millis()
            .max(1);
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT")
            .arg(READ_COUNT)
            .arg("BLOCK")
            .arg(block_ms as u64);
        cmd.arg("STREAMS")
            .arg(self.cursors.keys().collect::<Vec<_>>());
        cmd.arg(self.cursors.values().collect::<Vec<_>>());
        let reply = tokio::time::timeout(
            wait + self.config.send_timeout,
            cmd.query_async::<Option<StreamReadReply>>(&mut self.conn),
        )
        .await
        .map_err(|_| OutboxError::Broker("Redis XREAD did not answer in time".into()))?
        .map_err(|e| self.error("XREAD", &e))?;
        let mut out = Vec::new();
        for key in reply.map(|r| r.keys).unwrap_or_default() {
            for entry in key.ids {
                if let Some(cursor) = self.cursors.get_mut(&key.key) {
                    cursor.clone_from(&entry.id);
                }
                out.push(received(&key.key, entry.id, entry.map));
            }
        }
        Ok(out)
    }

    /// The streams found so far.
    pub fn streams(&self) -> impl Iterator<Item = &str> {
        self.cursors.keys().map(String::as_str)
    }

    /// Deletes the streams found so far (and looks for new ones first); returns how many
    /// existed. For the end of a test.
    ///
    /// # Errors
    /// [`OutboxError::Broker`] when a command fails.
    pub async fn delete_streams(&mut self) -> Result<usize, OutboxError> {
        self.discover().await?;
        if self.cursors.is_empty() {
            return Ok(0);
        }
        let keys: Vec<&String> = self.cursors.keys().collect();
        let deleted: usize = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| self.error("DEL", &e))?;
        self.cursors.clear();
        Ok(deleted)
    }

    /// Adds the streams of the prefix not known yet, read from their first entry.
    async fn discover(&mut self) -> Result<(), OutboxError> {
        let pattern = format!("{}:*", glob_escape(&self.prefix));
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(READ_COUNT)
                .arg("TYPE")
                .arg("stream")
                .query_async(&mut self.conn)
                .await
                .map_err(|e| self.error("SCAN", &e))?;
            for key in keys {
                self.cursors.entry(key).or_insert_with(|| "0".to_owned());
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    fn error(&self, command: &str, e: &redis::RedisError) -> OutboxError {
        OutboxError::Broker(format!(
            "Redis {command} failed: {}",
            scrub(&e.to_string(), self.config.password.as_ref())
        ))
    }
}

/// `text` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The entry `id` of `stream` with `fields`, as a [`ReceivedEntry`].
fn received(
    stream: &str,
    id: String,
    fields: std::collections::HashMap<String, Value>,
) -> ReceivedEntry {
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    };
    let field = |name: &str| fields.get(name).map(text).unwrap_or_default();
    let mut headers: Vec<(String, String)> = fields
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(HEADER_FIELD_PREFIX)
                .map(|name| (name.to_owned(), text(v)))
        })
        .collect();
    headers.sort();
    ReceivedEntry {
        stream: stream.to_owned(),
        id,
        event_id: field(FIELD_EVENT_ID).parse().ok(),
        event_type: field(FIELD_EVENT_TYPE),
        biz_no: field(FIELD_BIZ_NO),
        payload: field(FIELD_PAYLOAD),
        headers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_become_received_entries() {
        let fields = [
            ("eventId", "42"),
            ("eventType", "OrderPaid"),
            ("bizNo", "order-42"),
            ("payload", "{}"),
            ("h:tenant", "acme"),
            ("h:a", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::BulkString(v.as_bytes().to_vec())))
        .collect();
        let e = received("outbox:OrderPaid", "1-0".into(), fields);
        assert_eq!(e.event_id, Some(42));
        assert_eq!(
            (e.event_type.as_str(), e.biz_no.as_str(), e.payload.as_str()),
            ("OrderPaid", "order-42", "{}")
        );
        assert_eq!(
            e.headers,
            [("a".into(), "1".into()), ("tenant".into(), "acme".into())]
        );
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
