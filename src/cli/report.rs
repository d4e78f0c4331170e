//! `kiln report` and `kiln compare`: read run directories (`report.yaml`, `metrics.jsonl`,
//! `experiment.exp`) and print them for people. No libtorch: these only read files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::EXIT_OK;

/// `report.yaml` as `kiln-runtime` writes it (see `runtime/summary.rs`); every field optional, so
/// reports of older or newer versions still read.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct Report {
    experiment: String,
    trial: Vec<Vec<serde_yaml::Value>>,
    kiln: String,
    torch: String,
    devices: Vec<String>,
    config_hash: String,
    params: Option<u64>,
    steps: Option<u64>,
    epochs: Option<u64>,
    train_loss: Option<f64>,
    val: Option<Eval>,
    test: Option<Eval>,
    samples_per_s: Option<f64>,
    wall_seconds: Option<f64>,
    data_wait_fraction: Option<f64>,
    stopped_early: bool,
    metrics: Vec<serde_json::Value>,
}

/// Evaluation metrics in `report.yaml`.
#[derive(Deserialize, Default, Debug, Clone, Copy)]
#[serde(default)]
struct Eval {
    loss: Option<f64>,
    accuracy: Option<f64>,
    top_k: Option<(u64, f64)>,
}

/// One run directory, read.
struct Run {
    dir: PathBuf,
    report: Report,
    epochs: Vec<EpochRow>,
    experiment: Option<String>,
}

/// One epoch: its training line and the last validation line of the epoch.
#[derive(Default, Debug, Clone)]
struct EpochRow {
    epoch: u64,
    step: Option<u64>,
    lr: Option<f64>,
    train_loss: Option<f64>,
    train_accuracy: Option<f64>,
    seconds: Option<f64>,
    samples_per_s: Option<f64>,
    val_loss: Option<f64>,
    val_accuracy: Option<f64>,
    top_k: Option<(u64, f64)>,
}

/// Epoch tables longer than this show their first and last rows only (unless `--all`).
const TABLE_ROWS: usize = 24;

/// `kiln report RUN_DIR`: a run's summary, or a sweep's trials ranked.
pub fn report(dir: &Path, all: bool) -> Result<i32, String> {
    let dir = run_dir(dir)?;
    let text = if dir.join("report.yaml").is_file() {
        let run = read_run(&dir)?;
        summary(&run, all)
    } else {
        let trials = trial_dirs(&dir);
        if trials.is_empty() {
            return Err(no_report(&dir));
        }
        sweep(&dir, &trials)?
    };
    print(&text);
    Ok(EXIT_OK)
}

/// `kiln compare RUN_A RUN_B`: two runs side by side, with their differences.
pub fn compare(a: &Path, b: &Path, all: bool) -> Result<i32, String> {
    let mut runs = Vec::new();
    for d in [a, b] {
        let d = run_dir(d)?;
        if !d.join("report.yaml").is_file() {
            let trials = trial_dirs(&d);
            if let Some(first) = trials.first() {
                return Err(format!(
                    "`{}` is a sweep of {} trials, and `kiln compare` takes two runs: compare two of its trials (as `{}`), or see them ranked with `kiln report {}`",
                    d.display(),
                    trials.len(),
                    first.display(),
                    d.display()
                ));
            }
            return Err(no_report(&d));
        }
        runs.push(read_run(&d)?);
    }
    print(&comparison(&runs[0], &runs[1], all));
    Ok(EXIT_OK)
}

fn print(text: &str) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Accepts a run directory, or its `report.yaml`.
fn run_dir(path: &Path) -> Result<PathBuf, String> {
    if path.is_file() && path.file_name().is_some_and(|n| n == "report.yaml") {
        return Ok(path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf));
    }
    if !path.exists() {
        return Err(format!("`{}` does not exist", path.display()));
    }
    if !path.is_dir() {
        return Err(format!(
            "`{}` is not a run directory: pass a directory under `runs/<experiment>/`",
            path.display()
        ));
    }
    Ok(path.to_path_buf())
}

/// The error for a directory without `report.yaml`, with a hint at what to pass instead.
fn no_report(dir: &Path) -> String {
    let mut runs: Vec<PathBuf> = subdirs(dir)
        .into_iter()
        .filter(|d| d.join("report.yaml").is_file() || !trial_dirs(d).is_empty())
        .collect();
    runs.sort();
    if let Some(latest) = runs.last() {
        return format!(
            "`{}` has no report.yaml: it holds {} run{}; pass one, as the latest: `{}`",
            dir.display(),
            runs.len(),
            if runs.len() == 1 { "" } else { "s" },
            latest.display()
        );
    }
    if dir.join("metrics.jsonl").is_file() {
        return format!(
            "`{}` has no report.yaml: the run did not finish (it failed, was interrupted, or is still running); its metrics so far are in `{}`",
            dir.display(),
            dir.join("metrics.jsonl").display()
        );
    }
    format!(
        "`{}` has no report.yaml: it is not a run directory (runs are written to `runs/<experiment>/<timestamp>/` by `kiln run`)",
        dir.display()
    )
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

/// The `trial-*` directories of a sweep, in order.
fn trial_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut trials: Vec<PathBuf> = subdirs(dir)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("trial-"))
        })
        .collect();
    trials.sort();
    trials
}

fn read_run(dir: &Path) -> Result<Run, String> {
    let path = dir.join("report.yaml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let report: Report = serde_yaml::from_str(&text)
        .map_err(|e| format!("`{}` is not a Kiln report: {e}", path.display()))?;
    let lines: Vec<serde_json::Value> = match std::fs::read_to_string(dir.join("metrics.jsonl")) {
        Ok(text) => text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect(),
        Err(_) => report.metrics.clone(),
    };
    let experiment = std::fs::read_to_string(dir.join("experiment.exp")).ok();
    Ok(Run {
        dir: dir.to_path_buf(),
        epochs: epoch_rows(&lines),
        report,
        experiment,
    })
}

/// Joins the training and validation lines of `metrics.jsonl` by epoch.
fn epoch_rows(lines: &[serde_json::Value]) -> Vec<EpochRow> {
    let mut rows: BTreeMap<u64, EpochRow> = BTreeMap::new();
    for v in lines {
        let Some(epoch) = v.get("epoch").and_then(serde_json::Value::as_u64) else {
            continue;
        };
        let num = |key: &str| v.get(key).and_then(serde_json::Value::as_f64);
        let row = rows.entry(epoch).or_insert_with(|| EpochRow {
            epoch,
            ..EpochRow::default()
        });
        match v.get("split").and_then(serde_json::Value::as_str) {
            Some("train") => {
                row.step = v.get("step").and_then(serde_json::Value::as_u64);
                row.lr = num("lr");
                row.train_loss = num("train_loss");
                row.train_accuracy = num("train_accuracy");
                row.seconds = num("seconds");
                row.samples_per_s = num("samples_per_s");
            }
            Some("val") => {
                row.val_loss = num("loss");
                row.val_accuracy = num("accuracy");
                if let Some(obj) = v.as_object() {
                    for (key, value) in obj {
                        let k = key
                            .strip_prefix("top_")
                            .and_then(|k| k.strip_suffix("_accuracy"))
                            .and_then(|k| k.parse().ok());
                        if let (Some(k), Some(a)) = (k, value.as_f64()) {
                            row.top_k = Some((k, a));
                        }
                    }
                }
                if row.step.is_none() {
                    row.step = v.get("step").and_then(serde_json::Value::as_u64);
                }
            }
            _ => {}
        }
    }
    rows.into_values().collect()
}

// ---------------------------------------------------------------------------------------------
// Formatting.

/// A loss with four decimals, or in scientific notation when that would show only zeros.
fn loss(x: Option<f64>) -> String {
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

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{:.2}%", 100.0 * x))
}

/// An integer with thousands separators.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A learning rate: four significant digits, in scientific notation when small.
fn significant(x: f64) -> String {
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

fn count(x: Option<u64>) -> String {
    x.map_or_else(|| "-".into(), grouped)
}

fn rate(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_finite() && x >= 0.0 => grouped(x.round() as u64),
        Some(x) => format!("{x}"),
        None => "-".into(),
    }
}

/// Seconds as `12.3s`, `2m 03s` or `1h 02m 03s`.
fn duration(x: Option<f64>) -> String {
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

fn trial(r: &Report) -> String {
    r.trial
        .iter()
        .map(|pair| {
            let parts: Vec<String> = pair.iter().map(scalar).collect();
            parts.join("=")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn scalar(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        other => serde_yaml::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

fn length(r: &Report) -> String {
    let mut s = format!(
        "{} steps, {} epoch{}",
        count(r.steps),
        count(r.epochs),
        if r.epochs == Some(1) { "" } else { "s" }
    );
    if r.stopped_early {
        s += " (stopped early)";
    }
    s
}

fn eval_line(e: &Eval) -> String {
    let mut s = format!("loss {}", loss(e.loss));
    if e.accuracy.is_some() {
        s += &format!("   accuracy {}", pct(e.accuracy));
    }
    if let Some((k, a)) = e.top_k {
        s += &format!("   top-{k} accuracy {}", pct(Some(a)));
    }
    s
}

/// Left-aligns the first column and right-aligns the others; a row of one cell is a note,
/// printed as it is.
fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows.iter().filter(|r| r.len() > 1) {
        for (i, cell) in row.iter().enumerate().take(cols) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate().take(cols) {
            if i > 0 {
                s += "  ";
            }
            let pad = widths[i].saturating_sub(cell.chars().count());
            if i == 0 {
                s += cell;
                s += &" ".repeat(pad);
            } else {
                s += &" ".repeat(pad);
                s += cell;
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header);
    for row in rows {
        match row.as_slice() {
            [note] => {
                out += note;
                out += "\n";
            }
            cells => out += &line(cells),
        }
    }
    out
}

/// Keeps the first and last rows of a long table, with a line saying how many were left out.
fn elide(rows: Vec<Vec<String>>, all: bool) -> Vec<Vec<String>> {
    if all || rows.len() <= TABLE_ROWS {
        return rows;
    }
    let keep = TABLE_ROWS / 2;
    let left_out = rows.len() - 2 * keep;
    let marker = vec![format!("… {left_out} more epochs (--all shows them)")];
    let mut out: Vec<Vec<String>> = rows[..keep].to_vec();
    out.push(marker);
    out.extend_from_slice(&rows[rows.len() - keep..]);
    out
}

fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in pairs {
        let _ = writeln!(out, "{k:<width$}  {v}");
    }
    out
}

// ---------------------------------------------------------------------------------------------
// `kiln report`.

fn summary(run: &Run, all: bool) -> String {
    let r = &run.report;
    let mut pairs: Vec<(&str, String)> = vec![
        ("run", run.dir.display().to_string()),
        ("experiment", r.experiment.clone()),
    ];
    let t = trial(r);
    if !t.is_empty() {
        pairs.push(("trial", t));
    }
    pairs.push(("devices", r.devices.join(", ")));
    pairs.push(("versions", format!("kiln {}, libtorch {}", r.kiln, r.torch)));
    if !r.config_hash.is_empty() {
        pairs.push(("config hash", r.config_hash.clone()));
    }
    pairs.push(("parameters", count(r.params)));
    pairs.push(("length", length(r)));
    pairs.push(("train loss", loss(r.train_loss)));
    if let Some(v) = &r.val {
        pairs.push(("validation", eval_line(v)));
    }
    if let Some(t) = &r.test {
        pairs.push(("test", eval_line(t)));
    }
    pairs.push(("speed", format!("{} samples/s", rate(r.samples_per_s))));
    pairs.push(("wall time", duration(r.wall_seconds)));
    pairs.push((
        "data wait",
        r.data_wait_fraction
            .map_or_else(|| "-".into(), |f| format!("{:.1}% of step time", 100.0 * f)),
    ));
    let plots: Vec<&str> = ["loss.png", "accuracy.png"]
        .into_iter()
        .filter(|p| run.dir.join(p).is_file())
        .collect();
    if !plots.is_empty() {
        pairs.push(("curves", plots.join(", ")));
    }
    let mut out = key_values(&pairs);
    if !run.epochs.is_empty() {
        out += "\n";
        out += &epoch_table(&run.epochs, all);
    }
    out
}

fn epoch_table(rows: &[EpochRow], all: bool) -> String {
    let train_acc = rows.iter().any(|r| r.train_accuracy.is_some());
    let val_loss = rows.iter().any(|r| r.val_loss.is_some());
    let val_acc = rows.iter().any(|r| r.val_accuracy.is_some());
    let top_k = rows.iter().find_map(|r| r.top_k.map(|(k, _)| k));
    let mut header: Vec<String> = ["epoch", "step", "lr", "train loss"]
        .map(String::from)
        .to_vec();
    if train_acc {
        header.push("train acc".into());
    }
    if val_loss {
        header.push("val loss".into());
    }
    if val_acc {
        header.push("val acc".into());
    }
    if let Some(k) = top_k {
        header.push(format!("val top-{k}"));
    }
    header.extend(["seconds", "samples/s"].map(String::from));
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                r.epoch.to_string(),
                count(r.step),
                r.lr.map_or_else(|| "-".into(), significant),
                loss(r.train_loss),
            ];
            if train_acc {
                row.push(pct(r.train_accuracy));
            }
            if val_loss {
                row.push(loss(r.val_loss));
            }
            if val_acc {
                row.push(pct(r.val_accuracy));
            }
            if top_k.is_some() {
                row.push(pct(r.top_k.map(|(_, a)| a)));
            }
            row.push(r.seconds.map_or_else(|| "-".into(), |s| format!("{s:.1}")));
            row.push(rate(r.samples_per_s));
            row
        })
        .collect();
    table(&header, &elide(body, all))
}

/// The sort key of a trial: higher validation accuracy first, else lower validation loss, else
/// lower training loss (as `kiln run` ranks a sweep).
fn rank_key(r: &Report) -> f64 {
    let key = match &r.val {
        Some(v) => v.accuracy.map(|a| -a).or(v.loss),
        None => r.train_loss,
    };
    key.filter(|k| !k.is_nan()).unwrap_or(f64::INFINITY)
}

fn sweep(dir: &Path, trials: &[PathBuf]) -> Result<String, String> {
    let mut done = Vec::new();
    let mut missing = Vec::new();
    for t in trials {
        if t.join("report.yaml").is_file() {
            done.push(read_run(t)?);
        } else {
            missing.push(t);
        }
    }
    if done.is_empty() {
        return Err(format!(
            "`{}` is a sweep of {} trials, and none has a report.yaml: no trial finished",
            dir.display(),
            trials.len()
        ));
    }
    done.sort_by(|a, b| rank_key(&a.report).total_cmp(&rank_key(&b.report)));
    let by = if done
        .iter()
        .all(|r| r.report.val.is_some_and(|v| v.accuracy.is_some()))
    {
        "validation accuracy"
    } else if done.iter().all(|r| r.report.val.is_some()) {
        "validation loss"
    } else {
        "validation accuracy or loss (train loss where there is no validation split)"
    };
    let experiment = &done[0].report.experiment;
    let mut out = format!(
        "sweep      {}\nexperiment {experiment}\ntrials     {} finished{}, ranked by {by}\n\n",
        dir.display(),
        done.len(),
        if missing.is_empty() {
            String::new()
        } else {
            format!(", {} without a report", missing.len())
        }
    );
    let any_acc = done
        .iter()
        .any(|r| r.report.val.is_some_and(|v| v.accuracy.is_some()));
    let mut header: Vec<String> = ["rank", "trial", "val loss"].map(String::from).to_vec();
    if any_acc {
        header.push("val acc".into());
    }
    header.extend(["train loss", "steps", "samples/s", "wall time", "directory"].map(String::from));
    let name = |p: &Path| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let mut rows = Vec::new();
    for (i, run) in done.iter().enumerate() {
        let r = &run.report;
        let mut row = vec![
            (i + 1).to_string(),
            trial(r),
            loss(r.val.and_then(|v| v.loss)),
        ];
        if any_acc {
            row.push(pct(r.val.and_then(|v| v.accuracy)));
        }
        row.extend([
            loss(r.train_loss),
            count(r.steps),
            rate(r.samples_per_s),
            duration(r.wall_seconds),
            name(&run.dir),
        ]);
        rows.push(row);
    }
    out += &ranked_table(&header, &rows);
    for t in &missing {
        let _ = writeln!(
            out,
            "      {}: no report.yaml (the trial failed, was interrupted or is still running)",
            name(t)
        );
    }
    let _ = writeln!(out, "\nbest: `kiln report {}`", done[0].dir.display());
    Ok(out)
}

/// A table whose first two columns (rank, trial) are left-aligned.
fn ranked_table(header: &[String], rows: &[Vec<String>]) -> String {
    let joined = |cells: &[String]| -> Vec<String> {
        let mut v = vec![format!("{:<4}  {}", cells[0], cells[1])];
        v.extend_from_slice(&cells[2..]);
        v
    };
    let header = joined(header);
    let rows: Vec<Vec<String>> = rows.iter().map(|r| joined(r)).collect();
    table(&header, &rows)
}

// ---------------------------------------------------------------------------------------------
// `kiln compare`.

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
                grouped(d.abs().round() as u64)
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

fn comparison(a: &Run, b: &Run, all: bool) -> String {
    let (ra, rb) = (&a.report, &b.report);
    let f = |x: Option<u64>| x.map(|v| v as f64);
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
        count(ra.params),
        count(rb.params),
        delta(f(ra.params), f(rb.params), 0),
    );
    num_row(
        "steps",
        count(ra.steps),
        count(rb.steps),
        delta(f(ra.steps), f(rb.steps), 0),
    );
    num_row(
        "epochs",
        count(ra.epochs),
        count(rb.epochs),
        delta(f(ra.epochs), f(rb.epochs), 0),
    );
    num_row(
        "stopped early",
        yes_no(ra.stopped_early),
        yes_no(rb.stopped_early),
        same(&yes_no(ra.stopped_early), &yes_no(rb.stopped_early)),
    );
    num_row(
        "train loss",
        loss(ra.train_loss),
        loss(rb.train_loss),
        delta(ra.train_loss, rb.train_loss, 4),
    );
    for (label, ea, eb) in [("val", ra.val, rb.val), ("test", ra.test, rb.test)] {
        if ea.is_none() && eb.is_none() {
            continue;
        }
        let (la, lb) = (ea.and_then(|e| e.loss), eb.and_then(|e| e.loss));
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
        if let Some(k) = ka.or(kb).map(|(k, _)| k) {
            let (ta, tb) = (ka.map(|t| t.1), kb.map(|t| t.1));
            num_row(
                &format!("{label} top-{k} accuracy"),
                pct(ta),
                pct(tb),
                delta_points(ta, tb),
            );
        }
    }
    num_row(
        "samples/s",
        rate(ra.samples_per_s),
        rate(rb.samples_per_s),
        delta(ra.samples_per_s, rb.samples_per_s, 0),
    );
    num_row(
        "wall time",
        duration(ra.wall_seconds),
        duration(rb.wall_seconds),
        delta_in(ra.wall_seconds, rb.wall_seconds, 1, "s"),
    );
    let wait = |x: Option<f64>| x.map_or_else(|| "-".into(), |f| format!("{:.1}%", 100.0 * f));
    num_row(
        "data wait",
        wait(ra.data_wait_fraction),
        wait(rb.data_wait_fraction),
        delta_points(ra.data_wait_fraction, rb.data_wait_fraction),
    );

    let mut out = format!("A  {}\nB  {}\n\n", a.dir.display(), b.dir.display());
    let header = ["", "A", "B", "B - A"].map(String::from);
    out += &table(&header, &rows);

    out += "\n";
    match (&a.experiment, &b.experiment) {
        (Some(x), Some(y)) => out += &exp_diff(x, y),
        (None, None) => out += "experiment.exp: in neither run directory\n",
        (None, Some(_)) => out += "experiment.exp: only in B\n",
        (Some(_), None) => out += "experiment.exp: only in A\n",
    }

    if !a.epochs.is_empty() || !b.epochs.is_empty() {
        out += "\n";
        out += &epoch_comparison(&a.epochs, &b.epochs, all);
    }
    out
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// Per-epoch losses (and accuracies) of both runs side by side.
fn epoch_comparison(a: &[EpochRow], b: &[EpochRow], all: bool) -> String {
    let mut epochs: BTreeMap<u64, (Option<&EpochRow>, Option<&EpochRow>)> = BTreeMap::new();
    for r in a {
        epochs.entry(r.epoch).or_default().0 = Some(r);
    }
    for r in b {
        epochs.entry(r.epoch).or_default().1 = Some(r);
    }
    let any = |f: &dyn Fn(&EpochRow) -> bool| a.iter().chain(b).any(f);
    let val = any(&|r| r.val_loss.is_some());
    let acc = any(&|r| r.val_accuracy.is_some());
    let mut header: Vec<String> = ["epoch", "A train loss", "B train loss"]
        .map(String::from)
        .to_vec();
    if val {
        header.extend(["A val loss", "B val loss"].map(String::from));
    }
    if acc {
        header.extend(["A val acc", "B val acc"].map(String::from));
    }
    let rows: Vec<Vec<String>> = epochs
        .iter()
        .map(|(e, (x, y))| {
            let mut row = vec![
                e.to_string(),
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

/// Files longer than this (in lines, product of both) are not diffed line by line.
const DIFF_CELLS: usize = 4_000_000;
/// Changed lines shown at most.
const DIFF_LINES: usize = 80;

/// The lines of the experiment that differ, as `-` (A, with A's line number) and `+` (B).
fn exp_diff(a: &str, b: &str) -> String {
    if a == b {
        return "experiment.exp: identical\n".into();
    }
    let (x, y): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    if x == y {
        return "experiment.exp: identical but for line endings\n".into();
    }
    let (n, m) = (x.len(), y.len());
    if n.saturating_mul(m) > DIFF_CELLS {
        return "experiment.exp: differs (too long to compare line by line)\n".into();
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
        "experiment.exp differs ({} changed line{}; - A, + B):\n",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_changed_lines() {
        let a = "a\nb: adam(lr: 0.01)\nc\n";
        let b = "a\nb: adam(lr: 0.001)\nc\nd\n";
        let d = exp_diff(a, b);
        assert!(d.contains("2 - b: adam(lr: 0.01)"), "{d}");
        assert!(d.contains("2 + b: adam(lr: 0.001)"), "{d}");
        assert!(d.contains("4 + d"), "{d}");
        assert!(!d.contains(" a\n"), "{d}");
        assert_eq!(exp_diff(a, a), "experiment.exp: identical\n");
    }

    #[test]
    fn formats() {
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(12), "12");
        assert_eq!(duration(Some(12.34)), "12.3s");
        assert_eq!(duration(Some(123.4)), "2m 03s");
        assert_eq!(duration(Some(3723.0)), "1h 02m 03s");
        assert_eq!(delta(Some(0.5), Some(0.4), 4), "-0.1000 (-20.0%)");
        assert_eq!(delta(Some(1000.0), Some(9000.0), 0), "+8,000 (+800.0%)");
        assert_eq!(delta_points(Some(0.9), Some(0.95)), "+5.00 pts");
        assert_eq!(significant(0.001), "0.001");
        assert_eq!(significant(0.000_731_5), "7.32e-4");
        assert_eq!(significant(0.012_345_6), "0.01235");
        assert_eq!(significant(3.0), "3");
    }
}
