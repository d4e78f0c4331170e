//! The options of `kiln run`.

use std::path::PathBuf;

/// Options of `kiln run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunOptions {
    /// The experiment file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Put every layer on this device (`cpu`, `cuda`, `cuda:N`, `auto`), overriding placements.
    #[arg(long, value_parser = parse_device)]
    pub device: Option<kiln::ir::Device>,
    /// No progress output.
    #[arg(long)]
    pub quiet: bool,
    /// Continue the run in this directory from its last checkpoint.
    #[arg(long, value_name = "RUN_DIR")]
    pub resume: Option<PathBuf>,
    /// Where run directories are created.
    #[arg(long, default_value = "runs")]
    pub runs_dir: PathBuf,
    /// Initial weights: a safetensors file with PyTorch `state_dict` names (`fc1.weight`).
    #[arg(long, value_name = "SAFETENSORS", value_parser = parse_init)]
    pub init: Option<PathBuf>,
    /// Run only this trial of a sweep (1-based).
    #[arg(
        long,
        value_name = "K",
        allow_negative_numbers = true,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..),
    )]
    pub trial: Option<usize>,
    /// Create the run in exactly this directory.
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// libtorch's intra-op threads, 1 to 1024 (libtorch starts them all; more threads than
    /// cores only slow training down).
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024),
    )]
    pub threads: Option<usize>,
    /// Stop after this many optimizer steps, at least 1 (a smoke test); the schedule keeps its
    /// length.
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub max_steps: Option<u64>,
}

/// Reads `--device`.
fn parse_device(text: &str) -> Result<kiln::ir::Device, String> {
    text.parse()
}

/// Reads `--init`: a path that exists must be a regular file, since reading a FIFO would wait
/// for a writer and a device may never end; a missing file is the run's diagnostic.
fn parse_init(text: &str) -> Result<PathBuf, String> {
    if text.is_empty() {
        return Err("an empty path".into());
    }
    match std::fs::metadata(text) {
        Ok(meta) if !meta.is_file() => Err("not a regular file: name a safetensors file".into()),
        _ => Ok(PathBuf::from(text)),
    }
}
