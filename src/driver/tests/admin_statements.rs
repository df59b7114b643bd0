//! The statements of `ops` (the `outbox` tool) rendered per backend, as `statements` renders
//! the relay's.
use std::time::Duration;

use super::render::render;
use crate::driver;
use crate::EventStatus;

/// The statements of `ops` (the `outbox` tool): stats, dead letters, retention.
#[test]
fn admin() {
    use crate::event_record::Column;
    use driver::admin;
    let lease = Duration::from_secs(600);
    let open = [EventStatus::Wait, EventStatus::Sending, EventStatus::Fail];
    insta::assert_snapshot!(
        "admin_count_by_status",
        render(|b| b
            .backend()
            .build(&admin::count_by_status_query(b, Some(&open))))
    );
    insta::assert_snapshot!(
        "admin_oldest_wait",
        render(|b| b
            .backend()
            .build(&admin::oldest_wait_query(b, Column::NextRetryTime)))
    );
    insta::assert_snapshot!(
        "admin_sending_over_lease",
        render(|b| b
            .backend()
            .build(&admin::sending_over_lease_query(b, lease)))
    );
    insta::assert_snapshot!(
        "admin_check_table",
        render(|b| b.backend().build(&admin::check_table_query(b)))
    );
    insta::assert_snapshot!(
        "admin_dead_letters",
        render(|b| b.backend().build(&admin::dead_letters_query(b, 50)))
    );
    insta::assert_snapshot!(
        "admin_dead_letter_ids",
        render(|b| b
            .backend()
            .build(&admin::dead_letter_ids_query(b, 7, driver::RECLAIM_BATCH)))
    );
    insta::assert_snapshot!(
        "admin_retry_dead",
        render(|b| admin::retry_dead_statement(b, &[7, 8]).build(b))
    );
    insta::assert_snapshot!(
        "admin_discard_dead",
        render(|b| admin::discard_dead_statement(b, 7).build(b))
    );
    insta::assert_snapshot!(
        "admin_purge_ids",
        render(|b| b.backend().build(&admin::purge_ids_query(
            b,
            Duration::from_secs(86_400),
            1000
        )))
    );
    insta::assert_snapshot!(
        "admin_purge",
        render(|b| admin::purge_statement(b, &[7, 8]).build(b))
    );
    insta::assert_snapshot!(
        "admin_blocked_keys",
        render(|b| b.build(&admin::blocked_keys_query(b)))
    );
    insta::assert_snapshot!(
        "owned_ids",
        render(|b| b
            .backend()
            .build(&driver::owned_ids_query(b, &[7, 8], "me")))
    );
}
