//! The trend of the last hour: the sampler's [`OutboxStats`] in a ring buffer, drawn as inline
//! SVG polylines (server-rendered, no script).
//!
//! The time axis is the console process's monotonic clock ([`Instant`]): it spaces the samples
//! the sampler itself took. No event time is compared with it; every age the console shows
//! comes from the database clock through `ops::stats`.
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use maud::{html, Markup};
use sea_orm_outbox::ops::OutboxStats;

use crate::layout;

/// How far back the trend reaches.
pub(crate) const WINDOW: Duration = Duration::from_secs(3600);

/// Most samples kept: one an hour at one a second. A sampler faster than that keeps the last
/// 3,600 samples, less than an hour.
pub(crate) const MAX_SAMPLES: usize = 3600;

/// The rows per status at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    /// When the sampler read it.
    pub(crate) at: Instant,
    pub(crate) wait: u64,
    pub(crate) sending: u64,
    pub(crate) success: u64,
    pub(crate) fail: u64,
}

impl Sample {
    /// The counts of `stats`, read at `at`.
    pub(crate) fn of(stats: &OutboxStats, at: Instant) -> Sample {
        Sample {
            at,
            wait: stats.wait,
            sending: stats.sending,
            success: stats.success,
            fail: stats.fail,
        }
    }
}

/// The samples of the last [`WINDOW`], oldest first, at most [`MAX_SAMPLES`].
#[derive(Debug, Default)]
pub(crate) struct Samples {
    buf: VecDeque<Sample>,
}

impl Samples {
    /// Adds `sample` and drops those older than [`WINDOW`] before it (and the oldest beyond
    /// [`MAX_SAMPLES`]).
    pub(crate) fn push(&mut self, sample: Sample) {
        self.buf.push_back(sample);
        while self.buf.len() > MAX_SAMPLES
            || self
                .buf
                .front()
                .is_some_and(|s| sample.at.duration_since(s.at) > WINDOW)
        {
            self.buf.pop_front();
        }
    }

    /// A copy of the samples, oldest first.
    pub(crate) fn to_vec(&self) -> Vec<Sample> {
        self.buf.iter().copied().collect()
    }
}

/// One line of a chart: its name, colour and value in each sample.
pub(crate) struct Series {
    pub(crate) name: &'static str,
    pub(crate) color: &'static str,
    pub(crate) value: fn(&Sample) -> u64,
}

/// The colour of each status, shared by the cards and the charts.
pub(crate) const WAIT: Series = Series {
    name: "WAIT",
    color: "#b45309",
    value: |s| s.wait,
};
/// `SENDING`.
pub(crate) const SENDING: Series = Series {
    name: "SENDING",
    color: "#1d4ed8",
    value: |s| s.sending,
};
/// `SUCCESS`.
pub(crate) const SUCCESS: Series = Series {
    name: "SUCCESS",
    color: "#15803d",
    value: |s| s.success,
};
/// `FAIL`.
pub(crate) const FAIL: Series = Series {
    name: "FAIL",
    color: "#b91c1c",
    value: |s| s.fail,
};

const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 200.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 14.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 26.0;

/// A chart of `series` over `samples` (taken every `every`) up to `now`: a polyline per
/// series, the y axis from 0 to a round maximum, the x axis in time before now, from the first
/// sample but at least ten intervals wide (so that the first samples do not fill the whole
/// width). `title` names it for screen readers.
pub(crate) fn chart(
    title: &str,
    samples: &[Sample],
    series: &[&Series],
    every: Duration,
    now: Instant,
) -> Markup {
    let first = samples.first().map_or(now, |s| s.at);
    let least = (every * 10).clamp(Duration::from_secs(1), WINDOW);
    let span = now
        .saturating_duration_since(first)
        .clamp(least, WINDOW)
        .as_secs_f64();
    let top = round_up(
        samples
            .iter()
            .flat_map(|s| series.iter().map(move |line| (line.value)(s)))
            .max()
            .unwrap_or(0),
    );
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |at: Instant| {
        let before = now.saturating_duration_since(at).as_secs_f64().min(span);
        LEFT + plot_w * (1.0 - before / span)
    };
    let y = |v: u64| TOP + plot_h * (1.0 - v as f64 / top as f64);
    html! {
        svg class="chart" viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-label=(title) {
            @for i in 0..=2u64 {
                @let v = top * i / 2;
                line class="grid" x1=(LEFT) x2=(WIDTH - RIGHT) y1=(y(v)) y2=(y(v)) {}
                text class="axis" x=(LEFT - 8.0) y=(y(v) + 4.0) text-anchor="end" { (layout::count(v)) }
            }
            @for i in 0..=4u32 {
                @let before = span * f64::from(4 - i) / 4.0;
                @let at = LEFT + plot_w * f64::from(i) / 4.0;
                line class="tick" x1=(at) x2=(at) y1=(HEIGHT - BOTTOM) y2=(HEIGHT - BOTTOM + 4.0) {}
                text class="axis" x=(at) y=(HEIGHT - 6.0) text-anchor=(anchor(i)) { (ago(before)) }
            }
            @for line in series {
                @let points = points(samples, line, &x, &y);
                polyline points=(points) fill="none" stroke=(line.color) stroke-width="2"
                    stroke-linejoin="round" {}
                @if samples.len() == 1 {
                    circle cx=(x(samples[0].at)) cy=(y((line.value)(&samples[0]))) r="3"
                        fill=(line.color) {}
                }
            }
        }
    }
}

/// `x,y` of each sample of `line`, space-separated, as `polyline` takes them.
fn points(
    samples: &[Sample],
    line: &Series,
    x: &impl Fn(Instant) -> f64,
    y: &impl Fn(u64) -> f64,
) -> String {
    let mut out = String::new();
    for s in samples {
        let _ = write!(out, "{:.1},{:.1} ", x(s.at), y((line.value)(s)));
    }
    out.trim_end().to_owned()
}

/// Where the `i`-th of the five time labels is anchored: the outer ones inside the chart.
fn anchor(i: u32) -> &'static str {
    match i {
        0 => "start",
        4 => "end",
        _ => "middle",
    }
}

/// A time label: `now`, or how long before it (`−45 s`, `−15 min`).
fn ago(seconds: f64) -> String {
    if seconds < 0.5 {
        "now".into()
    } else if seconds < 120.0 {
        format!("−{seconds:.0} s")
    } else {
        format!("−{:.0} min", seconds / 60.0)
    }
}

/// The smallest of 1, 2, 5 × 10ⁿ (at least 2, so that the middle line is a whole number) that
/// is at least `max`.
fn round_up(max: u64) -> u64 {
    let mut unit = 1u64;
    loop {
        for step in [1, 2, 5] {
            match unit.checked_mul(step) {
                Some(top) if top >= max.max(2) => return top,
                Some(_) => {}
                None => return u64::MAX,
            }
        }
        unit = match unit.checked_mul(10) {
            Some(next) => next,
            None => return u64::MAX,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: Instant, wait: u64) -> Sample {
        Sample {
            at,
            wait,
            sending: 0,
            success: 0,
            fail: 0,
        }
    }

    #[test]
    fn keeps_the_last_hour() {
        let start = Instant::now();
        let mut samples = Samples::default();
        for minute in 0..=90u64 {
            samples.push(sample(start + Duration::from_secs(minute * 60), minute));
        }
        let kept = samples.to_vec();
        assert_eq!(kept.len(), 61, "minutes 30 to 90");
        assert_eq!((kept[0].wait, kept[60].wait), (30, 90));
    }

    #[test]
    fn keeps_at_most_max_samples() {
        let start = Instant::now();
        let mut samples = Samples::default();
        for i in 0..(MAX_SAMPLES as u64 + 10) {
            samples.push(sample(start + Duration::from_millis(i), i));
        }
        let kept = samples.to_vec();
        assert_eq!(kept.len(), MAX_SAMPLES);
        assert_eq!(kept[0].wait, 10);
    }

    #[test]
    fn round_maxima() {
        let got: Vec<u64> = [0, 1, 2, 3, 7, 10, 11, 180, 2001]
            .iter()
            .map(|&m| round_up(m))
            .collect();
        assert_eq!(got, vec![2, 2, 2, 5, 10, 10, 20, 200, 5000]);
        assert_eq!(round_up(u64::MAX), u64::MAX);
    }

    #[test]
    fn a_chart_has_a_line_per_series_and_labels() {
        let now = Instant::now();
        let samples = [
            sample(now - Duration::from_secs(90), 4),
            sample(now - Duration::from_secs(30), 10),
        ];
        let every = Duration::from_secs(1);
        let svg = chart("backlog", &samples, &[&WAIT, &FAIL], every, now).into_string();
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert!(
            svg.contains(">10<") && svg.contains(">now<") && svg.contains("−90 s"),
            "{svg}"
        );
        // The newest sample is 30 s before now, at three quarters of the width.
        let x = LEFT + (WIDTH - LEFT - RIGHT) * (1.0 - 30.0 / 90.0);
        assert!(svg.contains(&format!("{x:.1},{:.1}", TOP)), "{svg}");
    }
}
