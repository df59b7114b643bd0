//! The console in a headless Chromium driven through chromedriver (WebDriver), mounted under
//! `/outbox` in an app router, on real rows: the overview shows what `ops::stats` reads, a
//! dead-letter group retried through its confirmation page is delivered by a relay while the
//! other group stays dead, a missing or wrong token changes nothing, the search finds an event
//! by its key, and a console without a token is read-only. Postgres and MariaDB; under CI=true
//! a missing chromium or chromedriver fails the tests.
//!
//! `OUTBOX_CONSOLE_SCREENSHOT=1` saves the overview (Postgres) to `docs/console.png`; otherwise
//! the screenshot goes to the temp directory.
#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use std::sync::Arc;
use std::time::Duration;

use common::http::http;
use common::{count, wait_until, Backend, Fleet, TestContext};
use fantoccini::{Client, Locator};
use sea_orm_outbox::ops::HealthThresholds;
use sea_orm_outbox::{ops, EventStatus, InMemoryPublisher, Outbox};
use sea_orm_outbox_console::Console;
use support::{arrive, number, statuses, text, Browser, Seeded, Served, BROKER};

/// The token of the writable console.
const TOKEN: &str = "console-token-7f3a91";
/// The lease the console is given (its default), for `ops::stats`.
const LEASE: Duration = Duration::from_secs(600);
/// WebDriver's Enter key.
const ENTER: &str = "\u{E007}";

backend_test! {
    /// Overview, retry of one group delivered by a relay, refusals, search (Postgres).
    postgres_console_in_a_browser: Postgres, "console_browser" => console_in_a_browser;
    /// The same on MariaDB.
    mariadb_console_in_a_browser: MySql, "console_browser" => console_in_a_browser;
    /// Without a token: no action buttons, every action refused.
    postgres_read_only_console: Postgres, "console_read_only" => read_only_console;
}

async fn console_in_a_browser(ctx: &TestContext) {
    let seeded = support::seed(ctx).await;
    let console = Console::new(ctx.db.clone(), Outbox::default())
        .token(TOKEN)
        .sample_every(Duration::from_millis(200));
    let served = Served::start(console).await;
    Browser::with(async |client: &Client| {
        overview_shows_the_stats(ctx, client, &served).await;
        retrying_a_group_delivers_only_its_events(ctx, client, &served, &seeded).await;
        actions_without_the_token_change_nothing(ctx, client, &served, &seeded).await;
        search_finds_an_event_by_its_key(ctx, client, &served, &seeded).await;
    })
    .await;
    served.stop().await;
}

/// (a) The overview at the prefix without a trailing slash, after some trend samples: its
/// numbers are those of `ops::stats`, its links stay under the prefix.
async fn overview_shows_the_stats(ctx: &TestContext, client: &Client, served: &Served) {
    // Rows come and go while the sampler samples, for a trend with a shape.
    let traffic_waiting = support::traffic(ctx, Duration::from_millis(250)).await;
    client.goto(&served.url("")).await.expect("overview");
    let sampled = wait_until(
        Duration::from_secs(20),
        Duration::from_millis(250),
        || async {
            client.refresh().await.expect("reload");
            match client.find(Locator::Css("#trend")).await {
                Ok(trend) => trend
                    .attr("data-samples")
                    .await
                    .ok()
                    .flatten()
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n >= 15),
                Err(_) => false,
            }
        },
    )
    .await;
    assert!(sampled, "the overview shows a trend of 15 samples");
    let stats = ops::stats(&Outbox::default(), &ctx.db, LEASE)
        .await
        .expect("stats");
    let shown = [
        number(client, "#count-WAIT .n").await,
        number(client, "#count-SENDING .n").await,
        number(client, "#count-SUCCESS .n").await,
        number(client, "#count-FAIL .n").await,
        number(client, "#over-lease").await,
        number(client, "#blocked-keys").await,
    ];
    let read = [
        stats.wait,
        stats.sending,
        stats.success,
        stats.fail,
        stats.sending_over_lease,
        stats.blocked_keys,
    ];
    assert_eq!(
        shown, read,
        "WAIT, SENDING, SUCCESS, FAIL, over the lease, blocked keys"
    );
    let waiting = (4 + 1 + traffic_waiting) as u64;
    assert_eq!(
        (stats.wait, stats.fail),
        (waiting, 5),
        "premise: seed and traffic"
    );
    assert_ne!(text(client, "#oldest-wait").await, "nothing waits");
    assert_eq!(
        client
            .find_all(Locator::Css("svg.chart polyline"))
            .await
            .expect("lines")
            .len(),
        4
    );

    // The navigation's relative links stay under the prefix.
    client
        .find(Locator::LinkText("Dead letters"))
        .await
        .expect("nav")
        .click()
        .await
        .expect("click");
    arrive(client, "#groups").await;
    let url = client.current_url().await.expect("url");
    assert_eq!(url.path(), "/outbox/dead");
}

/// Saves the viewport as PNG: the overview to `docs/console.png` with
/// `OUTBOX_CONSOLE_SCREENSHOT=1` (from the Postgres run), any other page (and the overview
/// without the variable) to `outbox-console-<backend>-<page>.png` in the temp directory.
async fn screenshot(ctx: &TestContext, client: &Client, page: &str) {
    // The whole overview: a taller window for the picture, then the test's size again.
    client.set_window_size(1280, 1400).await.expect("resize");
    let png = client.screenshot().await.expect("screenshot");
    client.set_window_size(1280, 900).await.expect("resize");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let to_docs = std::env::var("OUTBOX_CONSOLE_SCREENSHOT").as_deref() == Ok("1")
        && ctx.backend == Backend::Postgres
        && page == "overview";
    let path = if to_docs {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/console.png")
    } else {
        std::env::temp_dir().join(format!("outbox-console-{:?}-{page}.png", ctx.backend))
    };
    std::fs::write(&path, png).expect("write the screenshot");
    eprintln!("screenshot: {}", path.display());
}

/// (b) Retry of the larger group through its confirmation page and the token: exactly its
/// events go back to WAIT, a relay delivers them, the other group stays dead.
async fn retrying_a_group_delivers_only_its_events(
    ctx: &TestContext,
    client: &Client,
    served: &Served,
    seeded: &Seeded,
) {
    client
        .goto(&served.url("/dead"))
        .await
        .expect("dead letters");
    screenshot(ctx, client, "dead").await;
    let first = client
        .find(Locator::Css("#groups tr.group"))
        .await
        .expect("a group");
    assert_eq!(
        first.attr("data-count").await.expect("count").as_deref(),
        Some("3")
    );
    assert_eq!(
        first.attr("data-errors").await.expect("errors").as_deref(),
        Some("3"),
        "three errors differing in a number form one group"
    );
    let error = first.find(Locator::Css("code")).await.expect("error");
    assert_eq!(
        error.attr("title").await.expect("title").as_deref(),
        Some(BROKER)
    );
    first
        .find(Locator::LinkText("Retry"))
        .await
        .expect("retry")
        .click()
        .await
        .expect("click");
    arrive(client, "#confirm-heading").await;
    screenshot(ctx, client, "confirm").await;
    let heading = text(client, "#confirm-heading").await;
    assert!(
        heading.starts_with("Retry 3 dead letters with error “broker unavailable"),
        "{heading}"
    );
    submit_token(client, TOKEN).await;
    arrive(client, "#outcome").await;
    assert_eq!(number(client, "#outcome").await, 3);
    let source = client.source().await.expect("source");
    assert!(!source.contains(TOKEN), "the token is never rendered");

    assert_eq!(statuses(ctx, &seeded.broker).await, [EventStatus::Wait; 3]);
    assert_eq!(
        statuses(ctx, &seeded.too_large).await,
        [EventStatus::Fail; 2]
    );
    let publisher = Arc::new(InMemoryPublisher::new());
    let relay = Fleet::start(ctx, 4, publisher.clone(), [common::test_config("console")]).await;
    let delivered = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async { statuses(ctx, &seeded.broker).await == [EventStatus::Success; 3] },
    )
    .await;
    relay_and_health_on_the_overview(ctx, client, served).await;
    relay.stop().await;
    assert!(delivered, "the relay delivers the retried group");
    let sent = publisher.distinct_ids();
    assert!(seeded.broker.iter().all(|id| sent.contains(id)));
    assert!(!seeded.too_large.iter().any(|id| sent.contains(id)));
    assert_eq!(
        statuses(ctx, &seeded.too_large).await,
        [EventStatus::Fail; 2]
    );
    assert!(
        seeded.wait.iter().all(|id| sent.contains(id)),
        "premise: the relay ran"
    );
}

/// While a relay runs: the overview lists its instance (from its heartbeat) as alive, its
/// health badge and panel give the verdict of `ops::health`, and `/health` answers it as JSON.
/// The screenshot of the overview is taken here, with the trend and a relay.
async fn relay_and_health_on_the_overview(ctx: &TestContext, client: &Client, served: &Served) {
    client.goto(&served.url("")).await.expect("overview");
    arrive(client, "#relays").await;
    let relays = ops::relays(&Outbox::default(), &ctx.db)
        .await
        .expect("relays");
    let alive: Vec<_> = relays.iter().filter(|r| r.alive).collect();
    assert!(!alive.is_empty(), "premise: the relay wrote its heartbeat");
    let shown = text(client, "#relays").await;
    for r in &alive {
        assert!(
            shown.contains(&r.instance_id),
            "{} in {shown}",
            r.instance_id
        );
    }
    let health = ops::health(&Outbox::default(), &ctx.db, &HealthThresholds::default())
        .await
        .expect("health");
    let badge = client
        .find(Locator::Css("#health-badge"))
        .await
        .expect("the health badge")
        .attr("data-status")
        .await
        .expect("status");
    assert_eq!(badge.as_deref(), Some(health.status.as_str()));
    screenshot(ctx, client, "overview").await;

    client.goto(&served.url("/health")).await.expect("/health");
    // Chromium shows a JSON answer's text in a `pre`.
    let body = text(client, "pre").await;
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(json["status"], health.status.as_str(), "{body}");
    let codes: Vec<_> = health.reasons.iter().map(|r| r.code.as_str()).collect();
    let answered: Vec<_> = json["reasons"]
        .as_array()
        .expect("reasons")
        .iter()
        .map(|r| r["code"].as_str().expect("code"))
        .collect();
    assert_eq!(answered, codes, "{body}");
}

/// Types `token` into the confirmation form and submits it.
async fn submit_token(client: &Client, token: &str) {
    let input = client
        .find(Locator::Css("input[name=token]"))
        .await
        .expect("token field");
    assert_eq!(
        input.attr("type").await.expect("type").as_deref(),
        Some("password")
    );
    if !token.is_empty() {
        input.send_keys(token).await.expect("type the token");
    }
    let submit = client
        .find(Locator::Css("button[type=submit]"))
        .await
        .expect("button");
    submit.click().await.expect("submit");
}

/// (c) Discarding the other group with a wrong token, with none, and POSTs without the form:
/// each is refused with 403 and the dead letters stay.
async fn actions_without_the_token_change_nothing(
    ctx: &TestContext,
    client: &Client,
    served: &Served,
    seeded: &Seeded,
) {
    for token in ["wrong-token", ""] {
        client
            .goto(&served.url("/dead"))
            .await
            .expect("dead letters");
        let group = client
            .find(Locator::Css("#groups tr.group"))
            .await
            .expect("a group");
        assert_eq!(
            group.attr("data-count").await.expect("count").as_deref(),
            Some("2")
        );
        group
            .find(Locator::LinkText("Discard"))
            .await
            .expect("discard")
            .click()
            .await
            .expect("click");
        arrive(client, "#confirm-heading").await;
        assert!(text(client, "#confirm-heading")
            .await
            .starts_with("Discard 2 dead letters"));
        submit_token(client, token).await;
        arrive(client, "#message-title").await;
        assert_eq!(text(client, "h1").await, "Refused", "token {token:?}");
        assert!(text(client, "main").await.contains("The token is wrong"));
    }
    for body in [
        "scope=all",
        "scope=all&token=wrong-token",
        "scope=all&token=",
    ] {
        let reply = http(served.addr, "POST", "/outbox/discard", body).await;
        assert_eq!(reply.status, 403, "{body}");
    }
    let reply = http(served.addr, "GET", "/outbox/discard?scope=all", "").await;
    assert_eq!(reply.status, 405, "actions are POST only");
    assert_eq!(
        statuses(ctx, &seeded.too_large).await,
        [EventStatus::Fail; 2]
    );
    assert_eq!(count(&ctx.db, EventStatus::Fail).await, 2);

    // The group's own list: its two events, each with its buttons.
    client
        .goto(&served.url("/dead"))
        .await
        .expect("dead letters");
    let group = client
        .find(Locator::Css("#groups tr.group"))
        .await
        .expect("a group");
    let events = group
        .find(Locator::LinkText("Events"))
        .await
        .expect("events");
    events.click().await.expect("click");
    arrive(client, "#group-events").await;
    screenshot(ctx, client, "group").await;
    let rows = client
        .find_all(Locator::Css("#events tr.event"))
        .await
        .expect("rows");
    let mut ids = Vec::new();
    for row in rows {
        ids.push(
            row.attr("data-id")
                .await
                .expect("id")
                .expect("data-id")
                .parse::<i64>()
                .expect("id"),
        );
    }
    assert_eq!(ids, seeded.too_large);
}

/// (d) The header's search box finds the events of a key; a payload holding HTML shows as text.
async fn search_finds_an_event_by_its_key(
    ctx: &TestContext,
    client: &Client,
    served: &Served,
    seeded: &Seeded,
) {
    client.goto(&served.url("")).await.expect("overview");
    let search = client
        .find(Locator::Css("header input[name=q]"))
        .await
        .expect("search box");
    search
        .send_keys(&format!("ORD-L-0{ENTER}"))
        .await
        .expect("search");
    arrive(client, "#found").await;
    screenshot(ctx, client, "events").await;
    let id = seeded.too_large[0];
    let row = format!("table.event[data-id='{id}']");
    assert_eq!(text(client, &format!("{row} td.status")).await, "FAIL");
    assert!(text(client, &format!("{row} td.last-error"))
        .await
        .contains("over 4194304 bytes"));
    assert_eq!(number(client, "#found").await, 1);

    client
        .goto(&served.url("/events?q=ORD-HTML"))
        .await
        .expect("search");
    let payload = text(
        client,
        &format!("table.event[data-id='{}'] td.payload", seeded.html),
    )
    .await;
    assert_eq!(payload, support::HTML_PAYLOAD, "shown as text");
    let tags = client
        .find_all(Locator::Css("td.payload b, td.payload script"))
        .await
        .expect("find");
    assert!(tags.is_empty(), "the payload's HTML is escaped");
    assert!(
        text(client, "main").await.contains(r#"{"tenant":"acme"}"#),
        "headers shown"
    );
    client
        .goto(&served.url(&format!("/events?q={}", seeded.html)))
        .await
        .expect("by id");
    assert_eq!(number(client, "#found").await, 1);
}

async fn read_only_console(ctx: &TestContext) {
    let seeded = support::seed(ctx).await;
    let console = Console::new(ctx.db.clone(), Outbox::default());
    assert!(!console.is_writable());
    let served = Served::start(console).await;
    Browser::with(async |client: &Client| {
        client
            .goto(&served.url("/dead"))
            .await
            .expect("dead letters");
        assert_eq!(
            client
                .find_all(Locator::Css("#groups tr.group"))
                .await
                .expect("rows")
                .len(),
            2
        );
        let mut labels = Vec::new();
        for button in client
            .find_all(Locator::Css("a.button, button"))
            .await
            .expect("buttons")
        {
            labels.push(button.text().await.expect("label"));
        }
        assert!(
            labels.iter().all(|l| l == "Events"),
            "no action buttons: {labels:?}"
        );
        assert_eq!(text(client, ".badge").await, "read-only");
        client
            .goto(&served.url("/confirm?action=retry&scope=all"))
            .await
            .expect("confirm");
        assert_eq!(text(client, "h1").await, "Refused");
        assert!(text(client, "main").await.contains("read-only"));
        client
            .goto(&served.url(&format!("/events?q={}", seeded.broker[0])))
            .await
            .expect("search");
        assert_eq!(number(client, "#found").await, 1);
        assert!(client
            .find_all(Locator::LinkText("Retry"))
            .await
            .expect("find")
            .is_empty());
    })
    .await;
    for body in [
        "scope=all",
        "scope=all&token=anything",
        "scope=event&id=1&token=",
    ] {
        for action in ["/outbox/retry", "/outbox/discard"] {
            let reply = http(served.addr, "POST", action, body).await;
            assert_eq!(reply.status, 403, "{action} {body}");
            assert!(reply.body.contains("read-only"), "{}", reply.body);
        }
    }
    assert_eq!(
        count(&ctx.db, EventStatus::Fail).await,
        5,
        "nothing changed"
    );
    served.stop().await;
}
