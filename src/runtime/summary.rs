//! `report.yaml`: what a finished run did, for `kiln report`, `kiln compare` and people.

use serde::Serialize;

use super::report::RunWriter;
use super::train::Outcome;
use kiln::check::Checked;
use kiln::diagnostic::Diagnostic;
use kiln::ir::Experiment;

/// The report of one run.
#[derive(Serialize)]
pub struct Report {
    /// Experiment name.
    pub experiment: String,
    /// Sweep values of the trial.
    pub trial: Vec<(String, String)>,
    /// Kiln's version.
    pub kiln: String,
    /// libtorch's version.
    pub torch: String,
    /// Devices the model ran on.
    pub devices: Vec<String>,
    /// FNV-1a hash of the experiment's source files, to tell configurations apart.
    pub config_hash: String,
    /// Parameters.
    pub params: u64,
    /// Steps, epochs, final losses and metrics, throughput, data wait, early stopping.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Wall seconds of the run.
    pub wall_seconds: f64,
    /// Parts of the experiment this version does not apply yet.
    pub notes: Vec<String>,
    /// Per-epoch metrics (the lines of `metrics.jsonl`).
    pub metrics: Vec<serde_json::Value>,
}

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

/// Writes `report.yaml` into the run directory.
pub fn write_report(
    writer: &RunWriter,
    exp: &Experiment,
    checked: &Checked,
    o: &Outcome,
    devices: &[tch::Device],
    wall: f64,
    notes: &[String],
) -> Result<(), Diagnostic> {
    let metrics = std::fs::read_to_string(writer.dir().join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
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
        devices: devices
            .iter()
            .map(|d| format!("{d:?}").to_lowercase())
            .collect(),
        config_hash: fnv1a(&parts),
        params: kiln::plan::plan(exp).totals.params,
        outcome: o.clone(),
        wall_seconds: wall,
        notes: notes.to_vec(),
        metrics,
    };
    let yaml = serde_yaml::to_string(&report).unwrap_or_default();
    writer.write_file("report.yaml", yaml.as_bytes())
}
