//! `report.yaml`: what a finished run did, for `kiln report`, `kiln compare` and people; and the
//! ranked table of a sweep's trials printed at its end.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::report::RunWriter;
use super::train::Outcome;
use kiln::check::Checked;
use kiln::diagnostic::Diagnostic;
use kiln::ir::Experiment;
use kiln::rundir::{Compressed, Report, Segment};

fn fnv1a(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// How a run went, besides its outcome: for `report.yaml`.
pub struct Ran<'a> {
    /// The devices the model ran on.
    pub devices: Vec<tch::Device>,
    /// Wall seconds over every part of the run.
    pub wall: f64,
    /// What this version does not apply yet.
    pub notes: &'a [String],
    /// The parts of the run, the first one first.
    pub history: &'a [Segment],
    /// What compression did.
    pub compressed: Option<Compressed>,
}

/// Writes `report.yaml` into the run directory.
pub fn write_report(
    writer: &RunWriter,
    exp: &Experiment,
    checked: &Checked,
    o: &Outcome,
    ran: &Ran,
) -> Result<(), Diagnostic> {
    let files: Vec<&str> = (0..checked.sources.len() as u32)
        .map(|i| checked.sources.get(kiln::span::FileId(i)).text.as_str())
        .collect();
    let trial: Vec<String> = exp.trial.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut parts = files.clone();
    parts.extend(trial.iter().map(String::as_str));
    let report = Report {
        experiment: exp.name.clone(),
        trial: exp.trial.clone(),
        kiln: env!("CARGO_PKG_VERSION").into(),
        torch: env!("KILN_LIBTORCH_VERSION").into(),
        devices: ran
            .devices
            .iter()
            .map(|d| format!("{d:?}").to_lowercase())
            .collect(),
        config_hash: fnv1a(&parts),
        params: kiln::plan::plan(exp).totals.params,
        outcome: o.clone(),
        wall_seconds: ran.wall,
        notes: ran.notes.to_vec(),
        resumed: ran.history.iter().skip(1).cloned().collect(),
        metrics: writer.metrics()?,
        compression: ran.compressed.clone(),
        settings: exp.settings.clone(),
    };
    writer.write_report(&report)
}

/// A trial's final figures from its `report.yaml`.
pub fn short_result(dir: &Path) -> String {
    let Ok(r) = kiln::rundir::read_report(dir) else {
        return "no report".into();
    };
    let o = &r.outcome;
    let mut out = format!("train loss {:.4}", o.train_loss);
    if let Some(v) = &o.val {
        out += &format!(", val loss {:.4}", v.loss);
        if let Some(a) = v.accuracy {
            out += &format!(", val accuracy {:.2}%", 100.0 * a);
        }
        for (name, x) in v.regression() {
            out += &format!(", val {name} {x:.4}");
        }
    }
    out
}

/// Prints a sweep's trials ranked by [`kiln::rundir::rank`] (trials without a report last), in
/// columns as wide as their values.
pub fn sweep_table(dirs: &[(usize, &Experiment, PathBuf)]) {
    use kiln::table::{render, Align};
    let fmt = |x: Option<f64>, pct: bool| {
        x.map_or("-".to_string(), |x| {
            if pct {
                format!("{:.2}%", 100.0 * x)
            } else {
                format!("{x:.4}")
            }
        })
    };
    let mut rows: Vec<(Option<Report>, Vec<String>)> = Vec::new();
    for (i, exp, dir) in dirs {
        let report = kiln::rundir::read_report(dir).ok();
        let o = report.as_ref().map(|r| &r.outcome);
        let val = o.and_then(|o| o.val);
        let t: Vec<String> = exp.trial.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let cells = vec![
            i.to_string(),
            t.join(" "),
            fmt(o.map(|o| o.train_loss), false),
            fmt(val.map(|v| v.loss), false),
            fmt(val.and_then(|v| v.accuracy), true),
            dir.display().to_string(),
        ];
        rows.push((report, cells));
    }
    kiln::rundir::rank(&mut rows, |(r, _)| r.as_ref().map(|r| &r.outcome));
    let header = [
        "rank",
        "trial",
        "values",
        "train loss",
        "val loss",
        "val acc",
        "run directory",
    ]
    .map(String::from);
    let body: Vec<Vec<String>> = rows
        .into_iter()
        .enumerate()
        .map(|(rank, (_, cells))| {
            let mut row = vec![(rank + 1).to_string()];
            row.extend(cells);
            row
        })
        .collect();
    let align = [
        Align::Left,
        Align::Left,
        Align::Left,
        Align::Right,
        Align::Right,
        Align::Right,
        Align::Left,
    ];
    let out = format!("\n{}", render(&header, &body, &align, ""));
    let _ = write!(std::io::stdout(), "{out}");
}
