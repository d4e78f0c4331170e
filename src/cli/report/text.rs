//! How `kiln report` and `kiln compare` write numbers, durations and tables.

use std::fmt::Write as _;

use kiln::present::fmt_count;
use kiln::rundir::{Eval, Report};
pub(super) use kiln::table::Align;

/// Metric tables longer than this show their first and last rows only (unless `--all`).
const TABLE_ROWS: usize = 24;

/// A loss with four decimals, or in scientific notation when that would show only zeros.
pub(super) fn loss(x: Option<f64>) -> String {
    x.map_or_else(
        || "-".into(),
        |x| {
            if x != 0.0 && x.abs() < 1e-3 {
                format!("{x:.3e}")
            } else {
                format!("{x:.4}")
            }
        },
    )
}

pub(super) fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{:.2}%", 100.0 * x))
}

/// A learning rate: four significant digits, in scientific notation when small.
pub(super) fn significant(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    if x.abs() < 1e-3 {
        return format!("{x:.2e}");
    }
    let decimals = (3 - x.abs().log10().floor() as i64).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

pub(super) fn count(x: Option<u64>) -> String {
    x.map_or_else(|| "-".into(), fmt_count)
}

pub(super) fn rate(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_finite() && x >= 0.0 => fmt_count(x.round() as u64),
        Some(x) => format!("{x}"),
        None => "-".into(),
    }
}

/// Seconds as `12.3s`, `2m 03s` or `1h 02m 03s`.
pub(super) fn duration(x: Option<f64>) -> String {
    let Some(s) = x else {
        return "-".into();
    };
    if !s.is_finite() || s < 0.0 {
        return format!("{s}s");
    }
    if s < 60.0 {
        return format!("{s:.1}s");
    }
    let whole = s.round() as u64;
    let (h, m, sec) = (whole / 3600, whole % 3600 / 60, whole % 60);
    if h > 0 {
        format!("{h}h {m:02}m {sec:02}s")
    } else {
        format!("{m}m {sec:02}s")
    }
}

pub(super) fn trial(r: &Report) -> String {
    r.trial_label(" ")
}

pub(super) fn length(r: &Report) -> String {
    let mut s = format!(
        "{} steps, {} epoch{}",
        count(Some(r.outcome.steps)),
        count(Some(r.outcome.epochs)),
        if r.outcome.epochs == 1 { "" } else { "s" }
    );
    if r.outcome.stopped_early {
        s += " (stopped early)";
    }
    if r.outcome.max_steps_reached {
        s += " (stopped by --max-steps before its length)";
    }
    s
}

pub(super) fn eval_line(e: &Eval) -> String {
    let mut s = format!("loss {}", loss(Some(e.loss)));
    if e.accuracy.is_some() {
        s += &format!("   accuracy {}", pct(e.accuracy));
    }
    if let Some(t) = e.top_k {
        s += &format!("   top-{} accuracy {}", t.k, pct(Some(t.accuracy)));
    }
    for (name, x) in e.regression() {
        s += &format!("   {name} {}", loss(Some(x)));
    }
    s
}

/// The phases as they ran: `train steps 0-150 (stopped early), finetune 150-250`.
pub(super) fn phases(r: &Report) -> String {
    r.outcome
        .phases
        .iter()
        .map(|p| {
            let round = p.round.map_or(String::new(), |n| format!(" {n}"));
            let stopped = if p.stopped_early {
                " (stopped early)"
            } else {
                ""
            };
            format!(
                "{}{round} steps {}-{}{stopped}",
                p.name.word(),
                p.from_step,
                p.to_step
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Left-aligns the first column and right-aligns the others; a row of one cell is a note,
/// printed as it is.
pub(super) fn table(header: &[String], rows: &[Vec<String>]) -> String {
    kiln::table::render(header, rows, &[Align::Left], "")
}

/// Keeps the first and last rows of a long table, with a line saying how many were left out.
pub(super) fn elide(rows: Vec<Vec<String>>, all: bool) -> Vec<Vec<String>> {
    if all || rows.len() <= TABLE_ROWS {
        return rows;
    }
    let keep = TABLE_ROWS / 2;
    let left_out = rows.len() - 2 * keep;
    let marker = vec![format!("… {left_out} more rows (--all shows them)")];
    let mut out: Vec<Vec<String>> = rows[..keep].to_vec();
    out.push(marker);
    out.extend_from_slice(&rows[rows.len() - keep..]);
    out
}

pub(super) fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in pairs {
        let _ = writeln!(out, "{k:<width$}  {v}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(duration(Some(12.34)), "12.3s");
        assert_eq!(duration(Some(123.4)), "2m 03s");
        assert_eq!(duration(Some(3723.0)), "1h 02m 03s");
        assert_eq!(significant(0.001), "0.001");
        assert_eq!(significant(0.000_731_5), "7.32e-4");
        assert_eq!(significant(0.012_345_6), "0.01235");
        assert_eq!(significant(3.0), "3");
    }
}
