//! What every handler shares: the connection, the table, the token, the lease `ops::stats`
//! judges by, and the trend's samples.
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sea_orm::DatabaseConnection;
use sea_orm_outbox::Outbox;

use crate::auth::Token;
use crate::trend::{Sample, Samples};

/// The console's state, shared by its handlers and its sampler.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) db: DatabaseConnection,
    pub(crate) outbox: Outbox,
    /// `None`: read-only.
    pub(crate) token: Option<Token>,
    /// The workers' lease, for `ops::stats`' count of `SENDING` rows past it.
    pub(crate) lease: Duration,
    /// How often the sampler reads `ops::stats`.
    pub(crate) every: Duration,
    samples: Mutex<Samples>,
}

/// The state as the router holds it.
pub(crate) type State = Arc<Shared>;

impl Shared {
    /// The state of a console on `db` and `outbox`.
    pub(crate) fn new(
        db: DatabaseConnection,
        outbox: Outbox,
        token: Option<Token>,
        lease: Duration,
        every: Duration,
    ) -> Shared {
        Shared {
            db,
            outbox,
            token,
            lease,
            every,
            samples: Mutex::default(),
        }
    }

    /// Whether actions are allowed (a token is configured).
    pub(crate) fn writable(&self) -> bool {
        self.token.is_some()
    }

    /// Records a sample of the trend.
    pub(crate) fn record(&self, sample: Sample) {
        // A panic while the lock was held cannot leave the buffer half-written: keep using it.
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sample);
    }

    /// The trend's samples, oldest first.
    pub(crate) fn samples(&self) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .to_vec()
    }
}
