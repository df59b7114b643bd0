//! A web console over the outbox table for the people on call: server-rendered HTML, no
//! script, no external resource (it works offline).
//!
//! - `/` the overview: rows per status, the age of the oldest undelivered event, leases past
//!   the lease, keys blocked behind a dead letter, and the trend of the last hour (inline SVG);
//!   it reloads itself every 15 s.
//! - `/dead` the dead letters grouped by error fingerprint, with retry and discard for a group, for all,
//!   and (on a group's list of events) for one.
//! - `/events?q=` the events of a business key (`biz_no`) or the event of an id, every column.
//! - `/health` the outbox's health as JSON ([`sea_orm_outbox::ops::health`] with the default
//!   thresholds): 200 when healthy or degraded, 503 when failing or when the database cannot
//!   be read. The overview shows the same verdict and its reasons, and the relay instances
//!   from their heartbeats ([`sea_orm_outbox::ops::relays`]).
//!
//! Every action (retry, discard) goes through a confirmation page whose form posts it with the
//! console's token. Without a token ([`Console::token`]) the console is read-only: it shows no
//! action and refuses every POST with 403. A wrong token is refused with 403 too and changes
//! nothing; tokens are compared in constant time and never logged or rendered. Each action is
//! logged at INFO (action, group or id, count). The typed token is also the defence against
//! cross-site requests: a page of another site cannot know it.
//!
//! Everything it reads or changes goes through [`sea_orm_outbox::ops`], on the table of the
//! [`Outbox`] it is given; every age it shows comes from the database clock.
//!
//! # Mounting it in a service
//!
//! [`Console::router`] is an axum [`Router`] to nest under a prefix of the service's own
//! server; its links are relative, so any prefix works. Put the service's own authentication
//! in front of it (the token only guards the actions), and run [`Console::sampler`] for the
//! trend:
//!
//! ```no_run
//! use axum::Router;
//! use sea_orm_outbox::{CancellationToken, Outbox};
//! use sea_orm_outbox_console::Console;
//!
//! # async fn run(db: sea_orm::DatabaseConnection) -> std::io::Result<()> {
//! let console = Console::new(db, Outbox::default())
//!     .token(std::env::var("OUTBOX_CONSOLE_TOKEN").unwrap_or_default());
//! let cancel = CancellationToken::new();
//! tokio::spawn(console.sampler(cancel.clone()));
//! let app: Router = Router::new()
//!     // ... the service's routes, then its authentication layer over the console:
//!     .nest("/outbox", console.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! cancel.cancel();
//! # Ok(())
//! # }
//! ```
//!
//! Or serve it alone with [`Console::serve`], as `outbox console` does.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod actions;
mod auth;
mod layout;
mod pages;
mod state;
mod target;
mod trend;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::header::{self, HeaderValue};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use sea_orm::DatabaseConnection;
use sea_orm_outbox::{ops, CancellationToken, Outbox, WorkerConfig};
use tokio::net::TcpListener;

use auth::Token;
use state::Shared;
use trend::Sample;

/// The default of [`Console::sample_every`].
pub const DEFAULT_SAMPLE_EVERY: Duration = Duration::from_secs(15);

/// The console of one outbox table: build it, then mount its [`Console::router`] and run its
/// [`Console::sampler`] (or both at once with [`Console::serve`]).
#[derive(Debug)]
pub struct Console {
    shared: Arc<Shared>,
}

impl Console {
    /// A read-only console of `outbox`'s table on `db`: no token, the default worker lease
    /// (10 minutes) for the count of `SENDING` rows past it, a trend sample every 15 s.
    pub fn new(db: DatabaseConnection, outbox: Outbox) -> Console {
        let lease = WorkerConfig::default().lease;
        Console {
            shared: Arc::new(Shared::new(db, outbox, None, lease, DEFAULT_SAMPLE_EVERY)),
        }
    }

    /// Allows the actions (retry, discard) to whoever types `token` into an action's form. An
    /// empty token leaves the console read-only.
    pub fn token(self, token: impl Into<String>) -> Console {
        self.with(|s| s.token = Token::new(token.into()))
    }

    /// The lease of the workers (`WorkerConfig::lease`): the overview counts the `SENDING`
    /// rows claimed longer ago than this (`ops::stats`). Default 10 minutes.
    pub fn lease(self, lease: Duration) -> Console {
        self.with(|s| s.lease = lease)
    }

    /// How often [`Console::sampler`] reads `ops::stats` for the trend (at least 10 ms).
    /// Default [`DEFAULT_SAMPLE_EVERY`]. The trend keeps the last hour, at most 3,600 samples.
    pub fn sample_every(self, every: Duration) -> Console {
        self.with(|s| s.every = every.max(Duration::from_millis(10)))
    }

    /// `self` with its settings changed by `change`; only while nothing shares them yet
    /// (settings come before [`Console::router`] and [`Console::sampler`]).
    fn with(mut self, change: impl FnOnce(&mut Shared)) -> Console {
        match Arc::get_mut(&mut self.shared) {
            Some(shared) => change(shared),
            None => tracing::warn!(
                "console: a setting changed after the router or the sampler was made is ignored"
            ),
        }
        self
    }

    /// Whether actions are allowed (a token is set).
    pub fn is_writable(&self) -> bool {
        self.shared.writable()
    }

    /// The console's pages and actions: `GET /`, `/dead`, `/events`, `/confirm`, `/health`; `POST
    /// /retry`, `/discard`. Nest it under a prefix (`Router::nest("/outbox", ...)`); every
    /// response carries a restrictive `Content-Security-Policy` and `Cache-Control: no-store`.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", get(pages::overview))
            .route("/dead", get(pages::dead))
            .route("/events", get(pages::events))
            .route("/health", get(pages::health))
            .route("/confirm", get(actions::confirm))
            .route("/retry", post(actions::retry))
            .route("/discard", post(actions::discard))
            .layer(axum::middleware::map_response(protect))
            .with_state(self.shared.clone())
    }

    /// Reads `ops::stats` every [`Console::sample_every`] into the trend of the last hour until
    /// `cancel` is cancelled. Spawn it beside the router; a failed read is logged (WARN) and
    /// leaves a gap.
    pub fn sampler(&self, cancel: CancellationToken) -> impl Future<Output = ()> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            let mut tick = tokio::time::interval(shared.every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let read = tokio::select! {
                    () = cancel.cancelled() => return,
                    _ = tick.tick() => ops::stats(&shared.outbox, &shared.db, shared.lease),
                };
                let stats = tokio::select! {
                    () = cancel.cancelled() => return,
                    stats = read => stats,
                };
                match stats {
                    Ok(stats) => shared.record(Sample::of(&stats, Instant::now())),
                    Err(error) => {
                        tracing::warn!(%error, "console: reading the outbox's stats for the trend failed");
                    }
                }
            }
        }
    }

    /// Serves the console alone on `listener` with its sampler until `cancel` is cancelled,
    /// then lets the requests in progress finish.
    ///
    /// # Errors
    /// The listener's I/O error.
    pub async fn serve(
        self,
        listener: TcpListener,
        cancel: CancellationToken,
    ) -> std::io::Result<()> {
        let sampler = tokio::spawn(self.sampler(cancel.clone()));
        let stop = cancel.clone();
        let served = axum::serve(listener, self.router())
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        cancel.cancel();
        let _ = sampler.await;
        served
    }
}

/// The headers of every response: no script, no frame, no external resource, forms only to
/// the console itself, nothing cached.
async fn protect(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
