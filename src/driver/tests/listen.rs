//! The relay's connection in `StatementProtocol::Simple` (Postgres behind a transaction-mode
//! pooler): rows read in the text format decode into the same models as prepared reads.
use std::time::Duration;

use sea_orm::EntityTrait;

use crate::common::{new_event, TestContext};
use crate::driver::{self, RelayDb};
use crate::event_record::Entity;
use crate::StatementProtocol;

crate::backend_test! {
    postgres_simple_protocol_rows_decode_into_models: Postgres, "listen_simple_decode" => simple_protocol_rows_decode;
}

/// Rows read with the simple protocol come back in the text format; they decode into the same
/// models as the binary rows of prepared statements: `timestamptz` (microseconds), `i32`/`i64`,
/// text, and `NULL` and non-`NULL` nullable columns, a `'` and `\` in `last_error` included.
async fn simple_protocol_rows_decode(ctx: &TestContext) {
    for i in 0..3 {
        new_event(&ctx.db, &format!("DECODE-{i}")).await;
    }
    let simple = RelayDb::new(ctx.pool(2).await, StatementProtocol::Simple).expect("postgres");
    // Claimed through the simple protocol: the rows of the claim's `UPDATE ... RETURNING`, text
    // format.
    let claimed = driver::claim_batch(&simple, "decode#01", 3)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 3);
    let fresh = |id| async move {
        Entity::find_by_id(id)
            .one(&ctx.db)
            .await
            .expect("read")
            .expect("row")
    };
    for m in &claimed {
        assert_eq!(
            m,
            &fresh(m.id).await,
            "the claimed row as a prepared read sees it"
        );
    }
    let (a, b, c) = (&claimed[0], &claimed[1], &claimed[2]);
    let reason = "it's \\ 'quoted'\n\ttabbed, ünïcode";
    let t = simple
        .transition(|d| {
            d.release_for_retry(a.id, "decode#01", Duration::from_millis(1), reason, true)
        })
        .await
        .expect("release");
    assert_eq!(t, driver::Transition::Applied);
    let t = simple
        .transition(|d| d.mark_success(b.id, "decode#01"))
        .await
        .expect("success");
    assert_eq!(t, driver::Transition::Applied);
    let t = simple
        .transition(|d| d.mark_success(c.id, "someone-else#02"))
        .await
        .expect("guarded");
    assert_eq!(
        t,
        driver::Transition::LeaseLost,
        "the owner guard holds inlined"
    );
    for m in &claimed {
        let via_simple = Entity::find_by_id(m.id)
            .one(&simple)
            .await
            .expect("simple read")
            .expect("row");
        let via_prepared = fresh(m.id).await;
        assert_eq!(via_simple, via_prepared, "text and binary rows agree");
    }
    let released = fresh(a.id).await;
    assert_eq!(released.last_error.as_deref(), Some(reason));
    assert_eq!((released.claim_owner, released.claimed_at), (None, None));
    assert_eq!(released.retry_count, 1);
    assert!(fresh(c.id).await.claimed_at.is_some());
    // Microseconds survive the text format.
    let sub_second = claimed
        .iter()
        .any(|m| m.create_time.timestamp_subsec_micros() != 0);
    assert!(sub_second, "timestamps keep their microseconds");
    assert!(
        RelayDb::new(ctx.pool(2).await, StatementProtocol::Extended).is_ok(),
        "the default protocol needs no check"
    );
}
