//! The frame every page shares (header, navigation, style), the error pages, and how numbers,
//! ages, times and long texts are shown. Every value goes through maud, which escapes it.
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use sea_orm_outbox::ops::HealthStatus;
use sea_orm_outbox::OutboxError;

/// The pages of the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Dead,
    Events,
    /// A page outside the bar (a confirmation, a result, an error).
    None,
}

/// The style of every page: small, inline, no external resource.
const STYLE: &str = r#"
:root{--fg:#1f2937;--muted:#6b7280;--line:#e5e7eb;--bg:#f9fafb;--accent:#1d4ed8}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;align-items:center;gap:24px;padding:10px 24px;background:#111827;color:#f9fafb}
header .brand{font-weight:600;font-size:15px}
header nav a{color:#d1d5db;text-decoration:none;margin-right:16px}
header nav a.on{color:#fff;border-bottom:2px solid #93c5fd}
header form{margin-left:auto}
header input{padding:4px 8px;border-radius:4px;border:1px solid #374151;background:#1f2937;color:#f9fafb;width:220px}
.badges{display:flex;gap:8px}
.badge{font-size:12px;padding:2px 8px;border-radius:10px;background:#374151;color:#e5e7eb}
.badge.rw{background:#7c2d12;color:#ffedd5}
.badge.healthy{background:#dcfce7;color:#14532d}.badge.degraded{background:#fef3c7;color:#78350f}.badge.failing{background:#fee2e2;color:#7f1d1d}
header .badge.healthy,header .badge.degraded,header .badge.failing{text-decoration:none}
main{max-width:1120px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:20px;margin:4px 0 16px}
h2{font-size:16px;margin:28px 0 10px}
.muted{color:var(--muted)}
.cards{display:grid;grid-template-columns:repeat(4,1fr);gap:12px}
.card{background:#fff;border:1px solid var(--line);border-left:4px solid var(--c);border-radius:6px;padding:10px 14px}
.card .n{font-size:26px;font-weight:600;font-variant-numeric:tabular-nums}
.card .label{font-size:12px;letter-spacing:.04em;color:var(--muted)}
.card a{color:inherit;text-decoration:none}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid var(--line)}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:12px;color:var(--muted);font-weight:600;background:#f3f4f6}
td.num{text-align:right;font-variant-numeric:tabular-nums}
table.kv th{width:200px}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{margin:0;white-space:pre-wrap;word-break:break-all;max-height:260px;overflow:auto}
.chart{width:100%;height:auto;background:#fff;border:1px solid var(--line);border-radius:6px}
.chart .grid{stroke:#e5e7eb}.chart .tick{stroke:#9ca3af}.chart .axis{font-size:11px;fill:#6b7280}
.legend{display:flex;gap:14px;font-size:12px;margin:4px 0 8px}
.legend i{display:inline-block;width:14px;height:3px;margin-right:5px;vertical-align:middle;background:var(--c)}
.charts{display:grid;grid-template-columns:1fr 1fr;gap:14px}
a.button,button{display:inline-block;font:inherit;font-size:13px;padding:3px 10px;border-radius:4px;border:1px solid #9ca3af;background:#fff;color:var(--fg);text-decoration:none;cursor:pointer}
a.button.danger,button.danger{border-color:#b91c1c;color:#b91c1c}
button.primary{background:var(--accent);border-color:var(--accent);color:#fff}
.actions{display:flex;gap:6px}
td.time{white-space:nowrap}
main input[type=search]{width:320px;padding:5px 8px;border:1px solid #9ca3af;border-radius:4px}
.box{background:#fff;border:1px solid var(--line);border-radius:6px;padding:16px 18px;max-width:720px}
.box input[type=password]{padding:5px 8px;width:260px;border:1px solid #9ca3af;border-radius:4px}
.refused{border-left:4px solid #b91c1c}
.done{border-left:4px solid #15803d}
"#;

/// How a page is framed: its title, the navigation entry marked, the console's mode, and how
/// often it reloads itself.
pub(crate) struct Frame<'a> {
    pub(crate) title: &'a str,
    pub(crate) nav: Nav,
    /// Whether actions are allowed: the mode badge.
    pub(crate) writable: bool,
    /// What the relative links start with: empty, except on the overview when it is served
    /// at the prefix without a trailing slash ([`base`]).
    pub(crate) base: &'a str,
    /// Reload the page every that many seconds (`<meta http-equiv="refresh">`).
    pub(crate) refresh: Option<u64>,
    /// The outbox's health, shown as a badge (the overview's; other pages show none).
    pub(crate) health: Option<HealthStatus>,
}

impl<'a> Frame<'a> {
    /// A page `title` under `nav`, links from the console's root, no reload.
    pub(crate) fn new(title: &'a str, nav: Nav, writable: bool) -> Frame<'a> {
        Frame {
            title,
            nav,
            writable,
            base: "",
            refresh: None,
            health: None,
        }
    }
}

/// What relative links start with on the page at `path` (the request's whole path, prefix
/// included) when it is the console's root. Links are relative so that the console works
/// under any prefix; at `/outbox/` (or `/`) they resolve as they are, but a router nested at
/// `/outbox` serves the root at `/outbox`, where `dead` would resolve to `/dead`: there the
/// links start with `outbox/`.
pub(crate) fn base(path: &str) -> String {
    if path.ends_with('/') {
        return String::new();
    }
    let last = path.rsplit('/').next().unwrap_or_default();
    format!("{last}/")
}

/// A whole page: the header with the navigation, the mode badge and the search box, then
/// `body`.
pub(crate) fn page(frame: Frame<'_>, body: Markup) -> Markup {
    let Frame {
        title,
        nav,
        writable,
        base,
        refresh,
        health,
    } = frame;
    let link = |href: &str, label: &str, this: Nav| {
        html! { a href={ (base) (href) } class=[(nav == this).then_some("on")] { (label) } }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(seconds) = refresh {
                    meta http-equiv="refresh" content=(seconds);
                }
                title { (title) " · outbox console" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    span.brand { "outbox console" }
                    nav {
                        // Relative links: the console works under any prefix it is nested at.
                        (link("./", "Overview", Nav::Overview))
                        (link("dead", "Dead letters", Nav::Dead))
                        (link("events", "Search", Nav::Events))
                    }
                    // The console's state at a glance: its mode, and the outbox's health.
                    div.badges {
                        @if let Some(status) = health {
                            a #health-badge class={ "badge " (status.as_str()) } data-status=(status.as_str())
                                href={ (base) "health" } title="The outbox's health (JSON)" {
                                (status.as_str())
                            }
                        }
                        @if writable {
                            span.badge.rw title="Retry and discard need the console's token" {
                                "actions enabled"
                            }
                        } @else {
                            span.badge title="Started without a token: nothing can be changed here" {
                                "read-only"
                            }
                        }
                    }
                    form method="get" action={ (base) "events" } {
                        input type="search" name="q" placeholder="biz_no or event id" aria-label="Search events";
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A short page with `status`: a refusal, an error, or an action's outcome.
pub(crate) fn message(status: StatusCode, title: &str, writable: bool, body: Markup) -> Response {
    let class = if status.is_success() {
        "box done"
    } else {
        "box refused"
    };
    let frame = Frame::new(title, Nav::None, writable);
    let page = page(
        frame,
        html! { h1 #message-title { (title) } div class=(class) { (body) } },
    );
    (status, page).into_response()
}

/// A failed read or action as a 500 page with the error's text (the console never holds the
/// database URL, so the text names no password).
pub(crate) fn failure(writable: bool, error: &OutboxError) -> Response {
    tracing::warn!(%error, "console: a database operation failed");
    message(
        StatusCode::INTERNAL_SERVER_ERROR,
        "The database operation failed",
        writable,
        html! { p { code { (error) } } p { a href="./" { "Back to the overview" } } },
    )
}

/// `n` with a thin space between thousands (`12 345`).
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('\u{2009}');
        }
        out.push(c);
    }
    out
}

/// An age in seconds as `850 ms`, `42 s`, `12 min 5 s`, `3 h 4 min` or `2 d 3 h`.
pub(crate) fn age(seconds: f64) -> String {
    let s = seconds.max(0.0);
    if s < 1.0 {
        return format!("{:.0} ms", s * 1000.0);
    }
    let whole = s as u64;
    match whole {
        0..60 => format!("{s:.1} s"),
        60..3600 if whole.is_multiple_of(60) => format!("{} min", whole / 60),
        60..3600 => format!("{} min {} s", whole / 60, whole % 60),
        3600..86_400 => format!("{} h {} min", whole / 3600, whole % 3600 / 60),
        _ => format!("{} d {} h", whole / 86_400, whole % 86_400 / 3600),
    }
}

/// A database time as `2026-05-01 12:00:00.123 UTC`.
pub(crate) fn time(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string()
}

/// `text` cut to at most `max` characters, and whether it was cut.
pub(crate) fn clip(text: &str, max: usize) -> (&str, bool) {
    match text.char_indices().nth(max) {
        Some((end, _)) => (&text[..end], true),
        None => (text, false),
    }
}

/// `text` cut to `max` characters with a note of its full length when it was cut, in a `pre`.
pub(crate) fn long_text(text: &str, max: usize) -> Markup {
    let (shown, cut) = clip(text, max);
    html! {
        pre { (shown) }
        @if cut {
            span.muted { "… shown " (count(max as u64)) " of " (count(text.chars().count() as u64)) " characters" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1234567), "1\u{2009}234\u{2009}567");
        assert_eq!(age(0.25), "250 ms");
        assert_eq!(age(42.04), "42.0 s");
        assert_eq!(age(725.0), "12 min 5 s");
        assert_eq!(age(600.0), "10 min");
        assert_eq!(age(3.0 * 3600.0 + 240.0), "3 h 4 min");
        assert_eq!(age(2.0 * 86_400.0 + 3.0 * 3600.0), "2 d 3 h");
        assert_eq!(clip("héllo", 2), ("hé", true));
        assert_eq!(clip("hé", 2), ("hé", false));
    }

    #[test]
    fn links_from_the_root() {
        assert_eq!(base("/"), "");
        assert_eq!(base("/outbox/"), "");
        assert_eq!(base("/outbox"), "outbox/");
        assert_eq!(base("/ops/outbox"), "outbox/");
    }

    #[test]
    fn text_is_escaped() {
        let html = long_text("<script>alert(1)</script>", 100).into_string();
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
    }
}
