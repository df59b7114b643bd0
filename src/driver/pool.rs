//! What the guarded pools of Postgres and MySQL/MariaDB share (see [`crate::guarded_pool`]):
//! the relay pool's options, the bounded check of a connection given back or idle, and its
//! verdict. Each backend's check is its `pool.rs`.
#![cfg(any(feature = "postgres", feature = "mysql"))]

/// How long a connection of a guarded pool may have been idle and still be handed out
/// without a check (1 second); every connection is checked when it is given back anyway.
const IDLE_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// A backend's check of one connection for a leaked transaction: whether to keep it.
pub(super) type Check<DB> =
    for<'c> fn(
        &'c mut <DB as sea_orm::sqlx::Database>::Connection,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'c>>;

/// The pool options of the relay's guarded pool, from the application's `app`: at most `max`
/// connections, opened lazily, closed after 60 s idle, sqlx's ping before acquire off; instead
/// every connection given back, and every one idle for [`IDLE_RECHECK`] or
/// longer before it is handed out, passes `check` ([`bounded`]).
pub(super) fn guarded_options<DB: sea_orm::sqlx::Database>(
    app: &sea_orm::sqlx::pool::PoolOptions<DB>,
    max: u32,
    check: Check<DB>,
) -> sea_orm::sqlx::pool::PoolOptions<DB> {
    app.clone()
        .max_connections(max)
        .min_connections(0)
        .idle_timeout(std::time::Duration::from_secs(60))
        .test_before_acquire(false)
        .after_release(move |conn, _| Box::pin(bounded(check(conn))))
        .before_acquire(move |conn, meta| {
            Box::pin(async move {
                if meta.idle_for < IDLE_RECHECK {
                    return Ok(true);
                }
                bounded(check(conn)).await
            })
        })
}

/// How long a connection of a [`crate::guarded_pool`] may take to answer its check (10 s): one
/// cancelled mid-answer can be out of step and never answer, and would hold its place in the
/// pool for ever. Long, because the check first waits for any abandoned query's answer.
const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs a connection's `check` within [`CHECK_TIMEOUT`]: `Ok(keep)` with its verdict, or an
/// error (sqlx then closes the connection without a goodbye) when it does not answer in time.
async fn bounded(
    check: impl std::future::Future<Output = bool>,
) -> Result<bool, sea_orm::sqlx::Error> {
    tokio::time::timeout(CHECK_TIMEOUT, check)
        .await
        .map_err(|_| {
            sea_orm::sqlx::Error::Protocol(format!(
                "a pooled connection did not answer the outbox's check within {CHECK_TIMEOUT:?} \
                 (a command cancelled mid-answer leaves it out of step); closing it"
            ))
        })
}

/// The check's verdict on a connection found `open` (inside a transaction) or not: a leaked
/// one is logged, counted and closed; returns whether to keep it.
pub(super) fn verdict(open: bool) -> bool {
    if open {
        crate::metrics::leaked_transaction();
        tracing::warn!(
            "a pooled connection is inside an open transaction it did not open (a cancelled \
             begin(), or a transaction left unfinished); closing it, the server rolls the \
             transaction back"
        );
    }
    !open
}

/// A connection whose check failed for another reason (it died while idle, say): closed, like
/// sqlx's own ping would (and another is taken). Returns false (do not keep it).
pub(super) fn dead(e: &sea_orm::sqlx::Error) -> bool {
    tracing::debug!(error = %e, "a pooled relay connection failed its check; closing it");
    false
}
