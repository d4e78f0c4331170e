//! `kiln compare`: two runs side by side, with their differences.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use kiln::present::fmt_count;
use kiln::rundir::Eval;

use super::summary::resumed;
use super::text::*;
use super::{Row, Run};

/// `b - a` with the relative change.
fn delta(a: Option<f64>, b: Option<f64>, decimals: usize) -> String {
    delta_in(a, b, decimals, "")
}

/// `b - a` in `unit`, with the relative change.
fn delta_in(a: Option<f64>, b: Option<f64>, decimals: usize, unit: &str) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a.is_finite() && b.is_finite() => {
            if a == b {
                return "same".into();
            }
            let d = b - a;
            let abs = if decimals == 0 {
                fmt_count(d.abs().round() as u64)
            } else {
                format!("{:.decimals$}", d.abs())
            };
            let sign = if d < 0.0 { '-' } else { '+' };
            if a != 0.0 {
                format!("{sign}{abs}{unit} ({:+.1}%)", 100.0 * d / a.abs())
            } else {
                format!("{sign}{abs}{unit}")
            }
        }
        _ => String::new(),
    }
}

/// Accuracy difference in percentage points.
fn delta_points(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a.is_finite() && b.is_finite() => {
            if a == b {
                "same".into()
            } else {
                format!("{:+.2} pts", 100.0 * (b - a))
            }
        }
        _ => String::new(),
    }
}

fn same(a: &str, b: &str) -> String {
    if a == b {
        "same".into()
    } else {
        "differs".into()
    }
}

/// Two runs side by side: results, settings, the experiment and the metrics step by step.
pub(super) fn comparison(a: &Run, b: &Run, all: bool) -> String {
    let (ra, rb) = (&a.report, &b.report);
    let f = |x: u64| Some(x as f64);
    let (oa, ob) = (&ra.outcome, &rb.outcome);
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut text_row = |name: &str, x: String, y: String| {
        let d = same(&x, &y);
        rows.push(vec![name.into(), x, y, d]);
    };
    text_row("experiment", ra.experiment.clone(), rb.experiment.clone());
    if !ra.trial.is_empty() || !rb.trial.is_empty() {
        text_row("trial", trial(ra), trial(rb));
    }
    text_row("devices", ra.devices.join(", "), rb.devices.join(", "));
    text_row("kiln", ra.kiln.clone(), rb.kiln.clone());
    text_row("libtorch", ra.torch.clone(), rb.torch.clone());
    text_row(
        "config hash",
        ra.config_hash.clone(),
        rb.config_hash.clone(),
    );
    let mut num_row = |name: &str, x: String, y: String, d: String| {
        rows.push(vec![name.into(), x, y, d]);
    };
    num_row(
        "parameters",
        count(Some(ra.params)),
        count(Some(rb.params)),
        delta(f(ra.params), f(rb.params), 0),
    );
    num_row(
        "steps",
        count(Some(oa.steps)),
        count(Some(ob.steps)),
        delta(f(oa.steps), f(ob.steps), 0),
    );
    num_row(
        "epochs",
        count(Some(oa.epochs)),
        count(Some(ob.epochs)),
        delta(f(oa.epochs), f(ob.epochs), 0),
    );
    num_row(
        "stopped early",
        yes_no(oa.stopped_early),
        yes_no(ob.stopped_early),
        same(&yes_no(oa.stopped_early), &yes_no(ob.stopped_early)),
    );
    num_row(
        "train loss",
        loss(Some(oa.train_loss)),
        loss(Some(ob.train_loss)),
        delta(Some(oa.train_loss), Some(ob.train_loss), 4),
    );
    for (label, ea, eb) in [("val", oa.val, ob.val), ("test", oa.test, ob.test)] {
        if ea.is_none() && eb.is_none() {
            continue;
        }
        let (la, lb) = (ea.map(|e| e.loss), eb.map(|e| e.loss));
        num_row(
            &format!("{label} loss"),
            loss(la),
            loss(lb),
            delta(la, lb, 4),
        );
        let (aa, ab) = (ea.and_then(|e| e.accuracy), eb.and_then(|e| e.accuracy));
        if aa.is_some() || ab.is_some() {
            num_row(
                &format!("{label} accuracy"),
                pct(aa),
                pct(ab),
                delta_points(aa, ab),
            );
        }
        let (ka, kb) = (ea.and_then(|e| e.top_k), eb.and_then(|e| e.top_k));
        if let Some(k) = ka.or(kb).map(|t| t.k) {
            let (ta, tb) = (ka.map(|t| t.accuracy), kb.map(|t| t.accuracy));
            num_row(
                &format!("{label} top-{k} accuracy"),
                pct(ta),
                pct(tb),
                delta_points(ta, tb),
            );
        }
        for m in ["mae", "rmse", "r2"] {
            let named = |e: Option<Eval>| {
                e.and_then(|e| e.regression().into_iter().find(|(n, _)| *n == m))
                    .map(|(_, x)| x)
            };
            let (xa, xb) = (named(ea), named(eb));
            if xa.is_some() || xb.is_some() {
                num_row(
                    &format!("{label} {m}"),
                    loss(xa),
                    loss(xb),
                    delta(xa, xb, 4),
                );
            }
        }
    }
    num_row(
        "samples/s",
        rate(Some(oa.samples_per_s)),
        rate(Some(ob.samples_per_s)),
        delta(Some(oa.samples_per_s), Some(ob.samples_per_s), 0),
    );
    num_row(
        "wall time",
        duration(Some(ra.wall_seconds)),
        duration(Some(rb.wall_seconds)),
        delta_in(Some(ra.wall_seconds), Some(rb.wall_seconds), 1, "s"),
    );
    let wait = |x: f64| format!("{:.1}%", 100.0 * x);
    num_row(
        "data wait",
        wait(oa.data_wait),
        wait(ob.data_wait),
        delta_points(Some(oa.data_wait), Some(ob.data_wait)),
    );

    let mut out = format!("A  {}\nB  {}\n\n", a.dir.display(), b.dir.display());
    let header = ["", "A", "B", "B - A"].map(String::from);
    out += &table(&header, &rows);

    out += "\n";
    for (name, run) in [("A", a), ("B", b)] {
        for (how, line) in resumed(&run.report) {
            let _ = writeln!(out, "{name} was {how} {line}");
        }
    }
    // The settings as both runs ran them (`extends` resolved, sweeps substituted); the text of
    // their experiment files only for reports of older versions, which do not record them.
    let (sa, sb) = (&ra.settings, &rb.settings);
    match (&a.experiment, &b.experiment) {
        _ if !sa.is_empty() && !sb.is_empty() => out += &settings_diff(sa, sb),
        (Some((na, x)), Some((nb, y))) => {
            let names = if na == nb {
                na.clone()
            } else {
                format!("{na} (A) and {nb} (B)")
            };
            out += &exp_diff(&names, x, y);
        }
        (None, None) => out += "experiment.exp: in neither run directory\n",
        (None, Some(_)) => out += "experiment.exp: only in B\n",
        (Some(_), None) => out += "experiment.exp: only in A\n",
    }

    if !a.rows.is_empty() || !b.rows.is_empty() {
        out += "\n";
        out += &steps_comparison(&a.rows, &b.rows, all);
    }
    out
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// The metric lines of both runs side by side, a row per step at which either wrote one: values
/// computed at different steps never share a row.
fn steps_comparison(a: &[Row], b: &[Row], all: bool) -> String {
    let mut steps: BTreeMap<u64, (Option<&Row>, Option<&Row>)> = BTreeMap::new();
    for r in a {
        steps.entry(r.step).or_default().0 = Some(r);
    }
    for r in b {
        steps.entry(r.step).or_default().1 = Some(r);
    }
    let any = |f: &dyn Fn(&Row) -> bool| a.iter().chain(b).any(f);
    let val = any(&|r| r.val_loss.is_some());
    let acc = any(&|r| r.val_accuracy.is_some());
    let mut header: Vec<String> = ["step", "epoch", "A train loss", "B train loss"]
        .map(String::from)
        .to_vec();
    if val {
        header.extend(["A val loss", "B val loss"].map(String::from));
    }
    if acc {
        header.extend(["A val acc", "B val acc"].map(String::from));
    }
    let rows: Vec<Vec<String>> = steps
        .iter()
        .map(|(step, (x, y))| {
            // The epoch each run was in: one number when they agree, `A / B` when not.
            let epoch = match (x.map(|r| r.epoch), y.map(|r| r.epoch)) {
                (Some(p), Some(q)) if p != q => format!("{p} / {q}"),
                (p, q) => p.or(q).map_or_else(|| "-".into(), |e| e.to_string()),
            };
            let mut row = vec![
                fmt_count(*step),
                epoch,
                loss(x.and_then(|r| r.train_loss)),
                loss(y.and_then(|r| r.train_loss)),
            ];
            if val {
                row.push(loss(x.and_then(|r| r.val_loss)));
                row.push(loss(y.and_then(|r| r.val_loss)));
            }
            if acc {
                row.push(pct(x.and_then(|r| r.val_accuracy)));
                row.push(pct(y.and_then(|r| r.val_accuracy)));
            }
            row
        })
        .collect();
    table(&header, &elide(rows, all))
}

/// The settings whose values differ between A and B, as a table (`-`: not set in that run).
fn settings_diff(a: &[(String, String)], b: &[(String, String)]) -> String {
    let (ma, mb): (HashMap<&str, &str>, HashMap<&str, &str>) = (
        a.iter().map(|(p, v)| (p.as_str(), v.as_str())).collect(),
        b.iter().map(|(p, v)| (p.as_str(), v.as_str())).collect(),
    );
    let value = |m: &HashMap<&str, &str>, k: &str| m.get(k).unwrap_or(&"-").to_string();
    // A's settings in A's order, then those only B has.
    let mut paths: Vec<&str> = a.iter().map(|(p, _)| p.as_str()).collect();
    paths.extend(
        b.iter()
            .map(|(p, _)| p.as_str())
            .filter(|p| !ma.contains_key(p)),
    );
    let rows: Vec<Vec<String>> = paths
        .iter()
        .map(|p| vec![p.to_string(), value(&ma, p), value(&mb, p)])
        .filter(|r| r[1] != r[2])
        .collect();
    if rows.is_empty() {
        return format!(
            "settings: identical ({} settings, `extends` resolved)\n",
            paths.len()
        );
    }
    let header = ["setting", "A", "B"].map(String::from);
    format!(
        "settings that differ ({} of {}, `extends` resolved; - not set):\n{}",
        rows.len(),
        paths.len(),
        kiln::table::render(
            &header,
            &rows,
            &[Align::Left, Align::Left, Align::Left],
            "  "
        )
    )
}

/// Files longer than this (in lines, product of both) are not diffed line by line.
const DIFF_CELLS: usize = 4_000_000;
/// Changed lines shown at most.
const DIFF_LINES: usize = 80;

/// The lines of the experiments that differ, as `-` (A, with A's line number) and `+` (B);
/// `names` names the files (the last version of each run's experiment).
fn exp_diff(names: &str, a: &str, b: &str) -> String {
    if a == b {
        return format!("{names}: identical\n");
    }
    let (x, y): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    if x == y {
        return format!("{names}: identical but for line endings\n");
    }
    let (n, m) = (x.len(), y.len());
    if n.saturating_mul(m) > DIFF_CELLS {
        return format!(
            "{names}: {} (too long to compare line by line)\n",
            differ(names)
        );
    }
    // Longest common subsequence, from the end, so the walk below goes forwards.
    let mut lcs = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[at(i, j)] = if x[i] == y[j] {
                lcs[at(i + 1, j + 1)] + 1
            } else {
                lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
            };
        }
    }
    let mut changes = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && x[i] == y[j] {
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
            changes.push(format!("  {:>4} - {}", i + 1, x[i]));
            i += 1;
        } else {
            changes.push(format!("  {:>4} + {}", j + 1, y[j]));
            j += 1;
        }
    }
    let mut out = format!(
        "{names} {} ({} changed line{}; - A, + B):\n",
        differ(names),
        changes.len(),
        if changes.len() == 1 { "" } else { "s" }
    );
    for c in changes.iter().take(DIFF_LINES) {
        out += c;
        out += "\n";
    }
    if changes.len() > DIFF_LINES {
        let _ = writeln!(out, "  … {} more", changes.len() - DIFF_LINES);
    }
    out
}

/// `differs` after one file name, `differ` after two.
fn differ(names: &str) -> &'static str {
    if names.contains(" and ") {
        "differ"
    } else {
        "differs"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_changed_lines() {
        let a = "a\nb: adam(lr: 0.01)\nc\n";
        let b = "a\nb: adam(lr: 0.001)\nc\nd\n";
        let d = exp_diff("experiment.exp", a, b);
        assert!(d.contains("2 - b: adam(lr: 0.01)"), "{d}");
        assert!(d.contains("2 + b: adam(lr: 0.001)"), "{d}");
        assert!(d.contains("4 + d"), "{d}");
        assert!(!d.contains(" a\n"), "{d}");
        assert_eq!(
            exp_diff("experiment.exp", a, a),
            "experiment.exp: identical\n"
        );
    }

    #[test]
    fn deltas() {
        assert_eq!(delta(Some(0.5), Some(0.4), 4), "-0.1000 (-20.0%)");
        assert_eq!(delta(Some(1000.0), Some(9000.0), 0), "+8,000 (+800.0%)");
        assert_eq!(delta_points(Some(0.9), Some(0.95)), "+5.00 pts");
    }
}
