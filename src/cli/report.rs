//! `kiln report` and `kiln compare`: read run directories (`report.yaml`, `metrics.jsonl`,
//! `experiment.exp`, through `kiln::rundir`) and print them for people. No libtorch: these only
//! read files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use kiln::rundir::{self, Eval, MetricLine, PhaseTag, Report};

use super::EXIT_OK;

/// One run directory, read.
struct Run {
    dir: PathBuf,
    report: Report,
    epochs: Vec<EpochRow>,
    /// The last version of the experiment that ran, as `(file name, text)`.
    experiment: Option<(String, String)>,
}

/// One epoch: its training line and the last validation line of the epoch.
#[derive(Default, Debug, Clone)]
struct EpochRow {
    epoch: u64,
    /// Its phase, outside the written training.
    phase: Option<PhaseTag>,
    step: Option<u64>,
    lr: Option<f64>,
    train_loss: Option<f64>,
    train_accuracy: Option<f64>,
    seconds: Option<f64>,
    samples_per_s: Option<f64>,
    val_loss: Option<f64>,
    val_accuracy: Option<f64>,
    top_k: Option<(u64, f64)>,
    /// The validation's regression metrics by name (`mae`, `rmse`, `r2`).
    val_regression: Vec<(&'static str, f64)>,
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
    let report = rundir::read_report(dir).map_err(|e| match e.op {
        rundir::Op::Parse => format!("`{}` is not a Kiln report: {}", e.path.display(), e.detail),
        _ => e.to_string(),
    })?;
    let lines = match rundir::read_metrics(dir) {
        Ok(Some(lines)) => lines,
        Ok(None) | Err(_) => report.metrics.clone(),
    };
    let experiment = rundir::versions(dir).pop().and_then(|name| {
        let text = std::fs::read_to_string(dir.join(&name)).ok()?;
        Some((name, text))
    });
    Ok(Run {
        dir: dir.to_path_buf(),
        epochs: epoch_rows(&lines),
        report,
        experiment,
    })
}

/// Joins the training and validation lines of `metrics.jsonl` by epoch.
fn epoch_rows(lines: &[MetricLine]) -> Vec<EpochRow> {
    let mut rows: BTreeMap<u64, EpochRow> = BTreeMap::new();
    for line in lines {
        let epoch = line.epoch();
        let row = rows.entry(epoch).or_insert_with(|| EpochRow {
            epoch,
            ..EpochRow::default()
        });
        match line {
            MetricLine::Train(r) => {
                row.phase = r.phase.or(row.phase);
                row.step = Some(r.step);
                row.lr = Some(r.lr);
                row.train_loss = Some(r.train_loss);
                row.train_accuracy = r.train_accuracy;
                row.seconds = Some(r.seconds);
                row.samples_per_s = Some(r.samples_per_s);
            }
            MetricLine::Val(r) => {
                row.phase = row.phase.or(r.phase);
                row.val_loss = Some(r.loss);
                row.val_accuracy = r.accuracy;
                if r.top_k.is_some() {
                    row.top_k = r.top_k;
                }
                row.val_regression = r.eval().regression();
                if row.step.is_none() {
                    row.step = Some(r.step);
                }
            }
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
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
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
    r.trial_label(" ")
}

fn length(r: &Report) -> String {
    let mut s = format!(
        "{} steps, {} epoch{}",
        count(Some(r.outcome.steps)),
        count(Some(r.outcome.epochs)),
        if r.outcome.epochs == 1 { "" } else { "s" }
    );
    if r.outcome.stopped_early {
        s += " (stopped early)";
    }
    s
}

/// The phases as they ran: `train steps 0-150 (stopped early), finetune 150-250`.
fn phases(r: &Report) -> String {
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

fn eval_line(e: &Eval) -> String {
    let mut s = format!("loss {}", loss(Some(e.loss)));
    if e.accuracy.is_some() {
        s += &format!("   accuracy {}", pct(e.accuracy));
    }
    if let Some((k, a)) = e.top_k {
        s += &format!("   top-{k} accuracy {}", pct(Some(a)));
    }
    for (name, x) in e.regression() {
        s += &format!("   {name} {}", loss(Some(x)));
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
    pairs.push(("parameters", count(Some(r.params))));
    pairs.push(("length", length(r)));
    if !r.outcome.phases.is_empty() {
        pairs.push(("phases", phases(r)));
    }
    pairs.push(("train loss", loss(Some(r.outcome.train_loss))));
    if let Some(v) = &r.outcome.val {
        pairs.push(("validation", eval_line(v)));
    }
    if let Some(t) = &r.outcome.test {
        pairs.push(("test", eval_line(t)));
    }
    pairs.push((
        "speed",
        format!("{} samples/s", rate(Some(r.outcome.samples_per_s))),
    ));
    pairs.push(("wall time", duration(Some(r.wall_seconds))));
    pairs.push((
        "data wait",
        format!("{:.1}% of step time", 100.0 * r.outcome.data_wait),
    ));
    let plots: Vec<&str> = ["loss.png", "accuracy.png"]
        .into_iter()
        .filter(|p| run.dir.join(p).is_file())
        .collect();
    if !plots.is_empty() {
        pairs.push(("curves", plots.join(", ")));
    }
    pairs.extend(resumed(r));
    let mut out = key_values(&pairs);
    if let Some(c) = &r.compression {
        out += "\n";
        out += &compression(c);
    }
    if !run.epochs.is_empty() {
        out += "\n";
        out += &epoch_table(&run.epochs, all);
    }
    out
}

/// The compression section: each layer's sparsity and bytes, the totals, the metrics and the
/// latency before and after, saying plainly where the compressed model is slower.
fn compression(c: &kiln::rundir::Compressed) -> String {
    let bytes = kiln::plan::fmt_bytes;
    let mut out = String::from("compression\n");
    out += &format!(
        "  {:<20} {:<28} {:>9} {:>12} {:>12}\n",
        "layer", "method", "sparsity", "bytes before", "bytes after"
    );
    for l in &c.layers {
        out += &format!(
            "  {:<20} {:<28} {:>8.1}% {:>12} {:>12}\n",
            l.name,
            l.method,
            100.0 * l.sparsity,
            bytes(l.bytes_before),
            bytes(l.bytes_after)
        );
    }
    out += &format!(
        "  weights: {} -> {} ({:.2}x smaller)\n",
        bytes(c.bytes_before),
        bytes(c.bytes_after),
        c.bytes_before as f64 / c.bytes_after.max(1) as f64
    );
    for (split, ba) in [("validation", &c.val), ("test", &c.test)] {
        if let Some(ba) = ba {
            out += &format!(
                "  {split}: {} -> {}\n",
                eval_line(&ba.before),
                eval_line(&ba.after)
            );
        }
    }
    for l in &c.latency {
        let speed = l.speedup();
        let verdict = if speed >= 1.0 {
            format!("{speed:.2}x faster")
        } else {
            format!("{:.2}x slower", 1.0 / speed.max(1e-12))
        };
        out += &format!(
            "  latency at batch {}: {:.3} ms -> {:.3} ms ({verdict})\n",
            l.batch, l.before_ms, l.after_ms
        );
    }
    out
}

/// Each resume of a run, `resumed` or (of a finished run, to a longer length) `extended`, with
/// `at step 98 with experiment-2.exp: learning rate: 0.003 → 0.001`.
fn resumed(r: &Report) -> Vec<(&'static str, String)> {
    r.resumed
        .iter()
        .map(|s| {
            let changes = if s.changes.is_empty() {
                "no settings changed".to_string()
            } else {
                s.changes.join("; ")
            };
            let how = if s.extended { "extended" } else { "resumed" };
            let line = format!("at step {} with {}: {changes}", s.from_step, s.experiment);
            (how, line)
        })
        .collect()
}

fn epoch_table(rows: &[EpochRow], all: bool) -> String {
    let train_acc = rows.iter().any(|r| r.train_accuracy.is_some());
    let val_loss = rows.iter().any(|r| r.val_loss.is_some());
    let val_acc = rows.iter().any(|r| r.val_accuracy.is_some());
    let top_k = rows.iter().find_map(|r| r.top_k.map(|(k, _)| k));
    let regression: Vec<&str> = ["mae", "rmse", "r2"]
        .into_iter()
        .filter(|m| {
            rows.iter()
                .any(|r| r.val_regression.iter().any(|(n, _)| n == m))
        })
        .collect();
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
    header.extend(regression.iter().map(|m| format!("val {m}")));
    header.extend(["seconds", "samples/s"].map(String::from));
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                r.phase
                    .map_or_else(|| r.epoch.to_string(), |p| p.to_string()),
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
            for m in &regression {
                let x = r.val_regression.iter().find(|(n, _)| n == m);
                row.push(loss(x.map(|(_, x)| *x)));
            }
            row.push(r.seconds.map_or_else(|| "-".into(), |s| format!("{s:.1}")));
            row.push(rate(r.samples_per_s));
            row
        })
        .collect();
    table(&header, &elide(body, all))
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
    rundir::rank(&mut done, |r| Some(&r.report.outcome));
    let by = if done
        .iter()
        .all(|r| r.report.outcome.val.is_some_and(|v| v.accuracy.is_some()))
    {
        "validation accuracy"
    } else if done.iter().all(|r| r.report.outcome.val.is_some()) {
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
        .any(|r| r.report.outcome.val.is_some_and(|v| v.accuracy.is_some()));
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
            loss(r.outcome.val.map(|v| v.loss)),
        ];
        if any_acc {
            row.push(pct(r.outcome.val.and_then(|v| v.accuracy)));
        }
        row.extend([
            loss(Some(r.outcome.train_loss)),
            count(Some(r.outcome.steps)),
            rate(Some(r.outcome.samples_per_s)),
            duration(Some(r.wall_seconds)),
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
        if let Some(k) = ka.or(kb).map(|(k, _)| k) {
            let (ta, tb) = (ka.map(|t| t.1), kb.map(|t| t.1));
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
    match (&a.experiment, &b.experiment) {
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
