//! Bad arguments to the operations are refused, not panicked on. Runs on Postgres, MariaDB and
//! SQLite (see `tests/common`); the maintenance services' own tests are unit tests
//! (`src/relay/maintenance/tests.rs`).
mod common;

use std::time::Duration;

use common::TestContext;

backend_tests!(bad_arguments_are_refused_not_panicked_on);

/// Limits no database takes are clear errors (found by an adopter: `dead_letters(u64::MAX)`
/// panicked in the driver).
async fn bad_arguments_are_refused_not_panicked_on(ctx: &TestContext) {
    use sea_orm_outbox::{ops, OutboxError};
    let e = ops::dead_letters(&sea_orm_outbox::Outbox::default(), &ctx.db, u64::MAX)
        .await
        .expect_err("limit");
    assert!(matches!(e, OutboxError::InvalidArgument(_)), "{e}");
    assert!(
        ops::dead_letters(&sea_orm_outbox::Outbox::default(), &ctx.db, 0)
            .await
            .expect("zero")
            .is_empty()
    );
    for batch in [0, u64::MAX] {
        let e = ops::purge_delivered(
            &sea_orm_outbox::Outbox::default(),
            &ctx.db,
            Duration::from_secs(1),
            batch,
        )
        .await
        .expect_err("batch");
        assert!(matches!(e, OutboxError::InvalidArgument(_)), "{e}");
    }
}
