//! `kiln report` and `kiln compare`: read run directories (`report.yaml`, `metrics.jsonl`,
//! `experiment.exp`, through `kiln::rundir`) and print them for people. No libtorch: these only
//! read files.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use kiln::rundir::{self, MetricLine, PhaseTag, Report};

use super::EXIT_OK;

mod compare;
mod summary;
mod text;

/// One run directory, read.
pub(super) struct Run {
    pub(super) dir: PathBuf,
    pub(super) report: Report,
    /// Its metric lines, one row per step.
    pub(super) rows: Vec<Row>,
    /// The last version of the experiment that ran, as `(file name, text)`.
    pub(super) experiment: Option<(String, String)>,
}

/// One point of a run's metrics: the end of an epoch (its training line), an evaluation, or both
/// when they were written at the same step. Every value in it was computed at `step`.
#[derive(Default, Debug, Clone)]
pub(super) struct Row {
    /// The epoch in progress at `step`, or the one that ended there (1-based).
    pub(super) epoch: u64,
    /// Its phase, outside the written training.
    pub(super) phase: Option<PhaseTag>,
    pub(super) step: u64,
    pub(super) lr: Option<f64>,
    pub(super) train_loss: Option<f64>,
    pub(super) train_accuracy: Option<f64>,
    pub(super) seconds: Option<f64>,
    pub(super) samples_per_s: Option<f64>,
    pub(super) val_loss: Option<f64>,
    pub(super) val_accuracy: Option<f64>,
    pub(super) top_k: Option<kiln::rundir::TopK>,
    /// The validation's regression metrics by name (`mae`, `rmse`, `r2`).
    pub(super) val_regression: Vec<(&'static str, f64)>,
}

/// `kiln report RUN_DIR`: a run's summary, or a sweep's trials ranked.
pub fn report(dir: &Path, all: bool) -> Result<i32, String> {
    let dir = run_dir(dir)?;
    let text = if dir.join("report.yaml").is_file() {
        let run = read_run(&dir)?;
        summary::summary(&run, all)
    } else {
        let trials = trial_dirs(&dir);
        if trials.is_empty() {
            return Err(no_report(&dir));
        }
        summary::sweep(&dir, &trials)?
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
    print(&compare::comparison(&runs[0], &runs[1], all));
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
pub(super) fn trial_dirs(dir: &Path) -> Vec<PathBuf> {
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

pub(super) fn read_run(dir: &Path) -> Result<Run, String> {
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
        rows: rows(&lines),
        report,
        experiment,
    })
}

/// The training and validation lines of `metrics.jsonl`, one row per step at which any was
/// written: an evaluation within an epoch is a row of its own, never joined to the epoch's end.
fn rows(lines: &[MetricLine]) -> Vec<Row> {
    let mut rows: BTreeMap<u64, Row> = BTreeMap::new();
    for line in lines {
        let step = line.step();
        let row = rows.entry(step).or_insert_with(|| Row {
            epoch: line.epoch(),
            step,
            ..Row::default()
        });
        match line {
            MetricLine::Train(r) => {
                row.phase = r.phase.or(row.phase);
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
                row.top_k = r.top_k;
                row.val_regression = r.eval().regression();
            }
        }
    }
    rows.into_values().collect()
}
