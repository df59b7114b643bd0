//! The statements of `ops` (the `outbox` tool) rendered per backend, as `statements` renders
//! the relay's.
use std::time::Duration;

use super::render::{render, render_each};
use crate::driver;
use crate::EventStatus;

/// The statements of `ops` (the `outbox` tool): stats, dead letters, retention.
#[test]
fn admin() {
    use crate::event_record::Column;
    let lease = Duration::from_secs(600);
    let open = [EventStatus::Wait, EventStatus::Sending, EventStatus::Fail];
    insta::assert_snapshot!(
        "admin_count_by_status",
        render(|b| b.backend().build(&b.count_by_status(Some(&open))))
    );
    insta::assert_snapshot!(
        "admin_oldest_wait",
        render(|b| b.backend().build(&b.oldest_wait(Column::NextRetryTime)))
    );
    insta::assert_snapshot!(
        "admin_sending_over_lease",
        render(|b| b.backend().build(&b.sending_over_lease(lease)))
    );
    insta::assert_snapshot!(
        "admin_check_table",
        render(|b| b.backend().build(&b.check_table()))
    );
    insta::assert_snapshot!(
        "admin_dead_letters",
        render(|b| b.backend().build(&b.dead_letters(50)))
    );
    insta::assert_snapshot!(
        "admin_dead_letter_ids",
        render(|b| b
            .backend()
            .build(&b.dead_letter_ids(7, driver::RECLAIM_BATCH)))
    );
    insta::assert_snapshot!(
        "admin_retry_dead",
        render(|b| b.retry_dead(&[7, 8]).build())
    );
    insta::assert_snapshot!(
        "admin_discard_dead",
        render(|b| b.discard_dead(&[7, 8]).build())
    );
    insta::assert_snapshot!(
        "admin_purge_ids",
        render(|b| b
            .backend()
            .build(&b.purge_ids(Duration::from_secs(86_400), 1000)))
    );
    insta::assert_snapshot!(
        "admin_purge",
        render(|b| b.purge(&[7, 8], Duration::from_secs(86_400)).build())
    );
    insta::assert_snapshot!("admin_blocked_keys", render(|b| b.build(&b.blocked_keys())));
    insta::assert_snapshot!(
        "owned_ids",
        render(|b| b.backend().build(&b.owned_ids(&[7, 8], "me")))
    );
}

/// The statements of the dead letters grouped by error and of the search.
#[test]
fn dead_letter_groups_and_search() {
    insta::assert_snapshot!(
        "admin_dead_letter_groups",
        render(|b| b.build(&b.dead_letter_groups()))
    );
    insta::assert_snapshot!(
        "admin_dead_letter_errors",
        render(|b| b.build(&b.dead_letter_errors(7, driver::RECLAIM_BATCH)))
    );
    insta::assert_snapshot!(
        "admin_dead_letters_by_ids",
        render(|b| b.build(&b.dead_letters_by_ids(&[7, 8])))
    );
    let errors = ["boom 1".to_owned(), "boom 2".to_owned()];
    insta::assert_snapshot!(
        "admin_retry_dead_group",
        render(|b| b.retry_dead_group(&[7, 8], Some(&errors)).build())
    );
    insta::assert_snapshot!(
        "admin_discard_dead_group",
        render(|b| b.discard_dead_group(&[7, 8], None).build())
    );
    insta::assert_snapshot!(
        "admin_find_events",
        render(|b| b.build(&b.find_events("42", Some(42), 50)))
    );
    insta::assert_snapshot!(
        "admin_find_events_by_key",
        render(|b| b.build(&b.find_events("ORD-1", None, 50)))
    );
}

/// The statements of the heartbeats and the health verdict.
#[test]
fn health() {
    use crate::driver::relays::Beat;
    insta::assert_snapshot!("health_backlog", render(|b| b.build(&b.backlog())));
    insta::assert_snapshot!(
        "health_dead_letters_since",
        render(|b| b.build(&b.dead_letters_since(Duration::from_secs(300))))
    );
    insta::assert_snapshot!(
        "health_snapshot_holder",
        render_each(|b| b.snapshot_holders(5))
    );
    let table = driver::Table::new(Some("app"), "outbox_events").expect("a valid name");
    let beat = |first, round, success| Beat {
        instance_id: "order-1-abcdef",
        version: "0.1.0",
        timeout: Duration::from_secs(30),
        first,
        round,
        success,
    };
    insta::assert_snapshot!(
        "relay_heartbeat_first",
        render_each(|b| {
            let b = b.with_table(table);
            Some(b.build(&b.heartbeat(&beat(true, false, false))))
        })
    );
    insta::assert_snapshot!(
        "relay_heartbeat_round",
        render_each(|b| Some(b.build(&b.heartbeat(&beat(false, true, false)))))
    );
    insta::assert_snapshot!(
        "relay_heartbeat_success",
        render_each(|b| Some(b.build(&b.heartbeat(&beat(false, true, true)))))
    );
    insta::assert_snapshot!(
        "relay_relays",
        render_each(|b| {
            let b = b.with_table(table);
            Some(b.build(&b.relays()))
        })
    );
    insta::assert_snapshot!(
        "relay_delete",
        render_each(|b| Some(b.build(&b.delete_relay("order-1-abcdef"))))
    );
    insta::assert_snapshot!(
        "relay_delete_expired",
        render_each(|b| Some(
            b.build(&b.delete_expired_relays(driver::relays::EXPIRED_RELAYS_KEPT))
        ))
    );
    insta::assert_snapshot!(
        "relay_table_probe",
        render_each(|b| Some(b.build(&b.relay_table_probe())))
    );
}
