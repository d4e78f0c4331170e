//! `kiln report`: one run's summary, or a sweep's trials ranked.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use kiln::present::{fmt_bytes, fmt_count};
use kiln::rundir::{self, Compute, Report};

use super::text::*;
use super::{read_run, Row, Run};

/// A run's summary: its key figures, compression and epochs.
pub(super) fn summary(run: &Run, all: bool) -> String {
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
    // Each figure says which weights it measured: the final ones, at the run's last step, and
    // the training loss the mean over the last epoch's steps.
    let end = format!("at step {}", fmt_count(r.outcome.steps));
    pairs.push((
        "train loss",
        format!(
            "{}   {}",
            loss(Some(r.outcome.train_loss)),
            last_epoch(&run.rows).unwrap_or_else(|| end.clone())
        ),
    ));
    if let Some(v) = &r.outcome.val {
        pairs.push(("validation", format!("{}   {end}", eval_line(v))));
    }
    if let Some(t) = &r.outcome.test {
        pairs.push(("test", format!("{}   {end}", eval_line(t))));
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
    if let Some(c) = &r.outcome.compute {
        pairs.extend(compute(c));
    }
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
    if !run.rows.is_empty() {
        out += "\n";
        out += &metrics_table(&run.rows, all);
    }
    out
}

/// The device figures of a run: achieved FLOP/s against the plan's FLOPs, and on CUDA the GPU's
/// busy fraction and peak memory beside the plan's estimate.
fn compute(c: &Compute) -> Vec<(&'static str, String)> {
    let mut pairs = vec![(
        "compute",
        format!(
            "{:.3} TFLOP/s on {} ({} FLOPs per step in the plan)",
            c.tflop_per_s,
            c.device,
            fmt_count(c.step_flops)
        ),
    )];
    if let (Some(busy), Some(n)) = (c.gpu_busy, c.gpu_busy_samples) {
        pairs.push((
            "GPU busy",
            format!(
                "{:.1}% (NVML, {n} samples after the warm-up steps)",
                100.0 * busy
            ),
        ));
    }
    if let Some(peak) = c.peak_memory_bytes {
        let plan = c
            .plan_memory_bytes
            .map_or_else(String::new, |p| format!(", plan {}", fmt_bytes(p)));
        pairs.push(("peak memory", format!("{}{plan}", fmt_bytes(peak))));
    }
    if let Some(note) = &c.note {
        pairs.push(("device note", note.clone()));
    }
    pairs
}

/// Which steps the final training loss averages: `mean of epoch 2, steps 51 to 100`, from the
/// last two epochs' rows; `None` without them.
fn last_epoch(rows: &[Row]) -> Option<String> {
    let mut ends = rows.iter().rev().filter(|r| r.train_loss.is_some());
    let last = ends.next()?;
    let first = ends.next().map_or(1, |r| r.step + 1);
    Some(format!(
        "mean of epoch {}, steps {} to {}",
        last.epoch,
        fmt_count(first),
        fmt_count(last.step)
    ))
}

/// The compression section: each layer's sparsity and bytes, the totals, the metrics and the
/// latency before and after, saying plainly where the compressed model is slower.
fn compression(c: &kiln::rundir::Compressed) -> String {
    let bytes = kiln::present::fmt_bytes;
    let mut out = String::from("compression\n");
    let header = ["layer", "method", "sparsity", "bytes before", "bytes after"].map(String::from);
    let rows: Vec<Vec<String>> = c
        .layers
        .iter()
        .map(|l| {
            vec![
                l.name.clone(),
                l.method.clone(),
                format!("{:.1}%", 100.0 * l.sparsity),
                bytes(l.bytes_before),
                bytes(l.bytes_after),
            ]
        })
        .collect();
    out += &kiln::table::render(&header, &rows, &[Align::Left, Align::Left], "  ");
    out += &format!(
        "  weights: {} -> {} ({:.2}x smaller)\n",
        bytes(c.bytes_before),
        bytes(c.bytes_after),
        c.bytes_before as f64 / c.bytes_after.max(1) as f64
    );
    // The uncompressed model is measured where training ended, the compressed one at the end
    // of the run (after any fine-tuning).
    let at =
        |step: Option<u64>| step.map_or_else(String::new, |s| format!(" (step {})", fmt_count(s)));
    let (before, after) = (at(c.steps.map(|s| s.before)), at(c.steps.map(|s| s.after)));
    for (split, ba) in [("validation", &c.val), ("test", &c.test)] {
        if let Some(ba) = ba {
            out += &format!(
                "  {split}: {}{before} -> {}{after}\n",
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
pub(super) fn resumed(r: &Report) -> Vec<(&'static str, String)> {
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

/// The metric lines of a run, a row per step with every value computed there.
fn metrics_table(rows: &[Row], all: bool) -> String {
    let train_acc = rows.iter().any(|r| r.train_accuracy.is_some());
    let val_loss = rows.iter().any(|r| r.val_loss.is_some());
    let val_acc = rows.iter().any(|r| r.val_accuracy.is_some());
    let top_k = rows.iter().find_map(|r| r.top_k.map(|t| t.k));
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
                count(Some(r.step)),
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
                row.push(pct(r.top_k.map(|t| t.accuracy)));
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

/// A sweep's finished trials, ranked.
pub(super) fn sweep(dir: &Path, trials: &[PathBuf]) -> Result<String, String> {
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

/// A table whose text columns (rank, trial, directory) are left-aligned, its numbers right.
fn ranked_table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut align = vec![Align::Right; header.len()];
    for i in [0, 1, header.len() - 1] {
        align[i] = Align::Left;
    }
    kiln::table::render(header, rows, &align, "")
}
