//! The report: one `figure: NAME VALUE` line per figure as it is measured (`.ci/bench-smoke`
//! reads them), and the table of every figure with its notes at the end.
use std::fmt::Write as _;

/// The figures measured so far: (name, value, notes).
#[derive(Default)]
pub struct Figures(Vec<(String, String, String)>);

impl Figures {
    /// Prints `figure: name value` and keeps it, with `note`, for the table.
    pub fn add(&mut self, name: &str, value: impl std::fmt::Display, note: impl Into<String>) {
        let value = value.to_string();
        println!("figure: {name} {value}");
        self.0.push((name.to_owned(), value, note.into()));
    }

    /// A figure not measured in this run, with the reason.
    pub fn skip(&mut self, name: &str, why: impl Into<String>) {
        self.add(name, "skipped", why);
    }

    /// The Markdown table of every figure.
    pub fn table(&self) -> String {
        let w = self.0.iter().map(|f| f.0.len()).max().unwrap_or(4).max(6);
        let v = self.0.iter().map(|f| f.1.len()).max().unwrap_or(5).max(5);
        let mut s = String::new();
        let _ = writeln!(s, "| {:w$} | {:>v$} | notes", "figure", "value");
        let _ = writeln!(
            s,
            "|{:-<w2$}|{:->v2$}|------",
            "",
            "",
            w2 = w + 2,
            v2 = v + 2
        );
        for (n, val, note) in &self.0 {
            let _ = writeln!(s, "| {n:w$} | {val:>v$} | {note}");
        }
        s
    }
}

/// `x` with one decimal.
pub fn f1(x: f64) -> String {
    format!("{x:.1}")
}

/// `x` with three decimals.
pub fn f3(x: f64) -> String {
    format!("{x:.3}")
}

/// The `p`-th percentile (nearest rank) of `sorted`, NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
