//! The gauges as Prometheus scrapes them: a process-wide `metrics-exporter-prometheus`
//! recorder (the workers run on other threads, where a thread-local recorder sees nothing),
//! read back from its text exposition. Gauges are labelled by table: each test relays a table
//! of its own.
#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's recorder, installed on first use; with `gauge_idle` set, a gauge not updated
/// for that long leaves the exposition (as a service should configure it, so that the gauges of
/// a worker that died do not linger).
pub fn install(gauge_idle: Option<Duration>) -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .idle_timeout(MetricKindMask::GAUGE, gauge_idle)
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).expect("the first global recorder");
        handle
    })
}

/// One sample of the exposition: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    /// The labels as written, `a="x",b="y"` (empty without labels).
    pub labels: String,
    pub value: f64,
}

impl Sample {
    /// The series as promtool's input writes it: `name{labels}`.
    pub fn series(&self) -> String {
        if self.labels.is_empty() {
            self.name.clone()
        } else {
            format!("{}{{{}}}", self.name, self.labels)
        }
    }

    /// Whether the sample is labelled `table="table"`.
    pub fn of_table(&self, table: &str) -> bool {
        self.labels.contains(&format!("table=\"{table}\""))
    }
}

/// The samples of `text` (comments and histogram buckets left out).
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            Some(Sample {
                name: name.to_owned(),
                labels: labels.to_owned(),
                value: value.parse().ok()?,
            })
        })
        .filter(|s| !s.name.ends_with("_bucket") && !s.labels.contains("quantile="))
        .collect()
}

/// The gauge `name` of `table` as the recorder exports it now.
pub fn gauge(handle: &PrometheusHandle, name: &str, table: &str) -> Option<f64> {
    samples(&handle.render())
        .into_iter()
        .find(|s| s.name == name && s.of_table(table))
        .map(|s| s.value)
}
