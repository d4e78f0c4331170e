//! `kiln run`: checks the experiment, resolves devices, loads the data, builds the model, trains
//! every sweep trial in its own run directory, and reports. Every failure ends as a diagnostic.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use super::budget::Budget;
use super::checkpoint;
use super::data;
use super::hooks::Cancel;
use super::model::{self, tch_device};
use super::output::RunOutput;
use super::report::{Progress, RunWriter};
use super::state::fingerprint;
use super::train::{standard_hooks, Outcome, Trainer};
use kiln::check::{check_path, Checked, FsLoader, Options};
use kiln::diagnostic::problem::{Resume, Unavailable};
use kiln::diagnostic::render::{to_text, Style};
use kiln::diagnostic::{Code, Diagnostic, Problem};
use kiln::ir::{Experiment, Precision};
use kiln::span::Sources;

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
    #[arg(long, value_name = "SAFETENSORS")]
    pub init: Option<PathBuf>,
    /// Run only this trial of a sweep (1-based).
    #[arg(long, value_name = "K")]
    pub trial: Option<usize>,
    /// Create the run in exactly this directory.
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// libtorch's intra-op threads.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Stop after this many optimizer steps (a smoke test); the schedule keeps its length.
    #[arg(long, value_name = "N")]
    pub max_steps: Option<u64>,
}

/// Reads `--device`.
fn parse_device(text: &str) -> Result<kiln::ir::Device, String> {
    text.parse()
}

/// Runs the command; returns the exit status.
pub fn main(opts: &RunOptions) -> i32 {
    let cancel = Cancel::default();
    let on_stop = cancel.clone();
    let _ = kiln::supervise::on_stop_signals(move |sig| on_stop.cancel(sig));
    kiln::supervise::ignore_file_size_signal();
    if let Some(n) = opts.threads {
        tch::set_num_threads(n as i32);
    }
    let checked = check_path(&opts.file, &FsLoader, &Options::default());
    let style = Style {
        color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        width: 100,
    };
    for d in &checked.diagnostics {
        eprint(&to_text(d, &checked.sources, style));
    }
    if checked.has_errors() {
        return if checked.diagnostics.iter().any(|d| d.code == Code::Io) {
            2
        } else {
            1
        };
    }
    let mut trials: Vec<(usize, &Experiment)> = checked
        .trials
        .iter()
        .enumerate()
        .map(|(i, e)| (i + 1, e))
        .collect();
    if let Some(k) = opts.trial {
        if k == 0 || k > trials.len() {
            eprint(&format!(
                "error: `--trial {k}`: the experiment has {} trial(s)\n",
                trials.len()
            ));
            return 2;
        }
        trials = vec![trials[k - 1]];
    }
    if (opts.resume.is_some() || opts.run_dir.is_some()) && trials.len() > 1 {
        eprint("error: `--resume` and `--run-dir` take one trial; pick one with `--trial K`\n");
        return 2;
    }
    let stamp = timestamp();
    let sweep = checked.trials.len() > 1;
    let dir_of = |i: usize, exp: &Experiment| match (&opts.resume, &opts.run_dir) {
        (Some(d), _) | (None, Some(d)) => d.clone(),
        (None, None) if sweep => opts
            .runs_dir
            .join(&exp.name)
            .join(&stamp)
            .join(format!("trial-{i:03}")),
        (None, None) => opts.runs_dir.join(&exp.name).join(&stamp),
    };
    let dirs: Vec<(usize, &Experiment, PathBuf)> = trials
        .iter()
        .map(|(i, e)| (*i, *e, dir_of(*i, e)))
        .collect();
    if dirs.len() > 1 && dirs.iter().all(|(_, e, _)| on_cpu(e, opts)) {
        return run_concurrently(opts, &dirs);
    }
    let mut status = 0;
    for (i, exp, dir) in &dirs {
        if sweep && !opts.quiet {
            eprint(&format!(
                "trial {i} of {}: {}\n",
                checked.trials.len(),
                trial_label(exp)
            ));
        }
        match run_trial(exp, &checked, dir, opts, &cancel) {
            Ok(outcome) => summary(exp, &outcome, dir, opts.quiet),
            Err(f) => {
                eprint(&to_text(&f, &checked.sources, style));
                status = 1;
                if f.code == Code::Interrupted {
                    break;
                }
            }
        }
    }
    if dirs.len() > 1 {
        super::summary::sweep_table(&dirs);
    }
    status
}

fn trial_label(exp: &Experiment) -> String {
    exp.trial
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether every layer of the trial runs on the CPU here.
fn on_cpu(exp: &Experiment, opts: &RunOptions) -> bool {
    match opts.device {
        Some(d) => tch_device(d) == tch::Device::Cpu,
        None => kiln::ir::layers(&exp.model.nodes)
            .iter()
            .all(|l| tch_device(l.device) == tch::Device::Cpu),
    }
}

/// Runs CPU trials side by side, each in its own `kiln-runtime` process (so each has its own
/// random generators and a crash stays contained), as many at once as there are cores, and
/// splits the cores between them.
fn run_concurrently(opts: &RunOptions, dirs: &[(usize, &Experiment, PathBuf)]) -> i32 {
    use rayon::prelude::*;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = cores.min(dirs.len()).max(1);
    let threads = (cores / jobs).max(1);
    let Ok(exe) = std::env::current_exe() else {
        eprint("error: cannot locate kiln-runtime to start the trials\n");
        return 2;
    };
    let Ok(pool) = rayon::ThreadPoolBuilder::new().num_threads(jobs).build() else {
        eprint("error: cannot start the trial pool\n");
        return 2;
    };
    if !opts.quiet {
        eprint(&format!(
            "running {} trials, {jobs} at a time, {threads} thread(s) each\n",
            dirs.len()
        ));
    }
    let total = dirs.len();
    let failed: usize = pool.install(|| {
        dirs.par_iter()
            .map(|(i, exp, dir)| {
                let mut cmd = std::process::Command::new(&exe);
                cmd.arg("run")
                    .arg(&opts.file)
                    .args([
                        "--quiet",
                        "--trial",
                        &i.to_string(),
                        "--threads",
                        &threads.to_string(),
                    ])
                    .arg("--run-dir")
                    .arg(dir);
                if let Some(d) = opts.device {
                    cmd.args(["--device", &d.to_string()]);
                }
                if let Some(init) = &opts.init {
                    cmd.arg("--init").arg(init);
                }
                if let Some(m) = opts.max_steps {
                    cmd.args(["--max-steps", &m.to_string()]);
                }
                let ok = kiln::supervise::spawn(&mut cmd)
                    .and_then(kiln::supervise::Supervised::wait)
                    .is_ok_and(|e| e.code == Some(0));
                if !opts.quiet {
                    let result = if ok {
                        super::summary::short_result(dir)
                    } else {
                        "failed".to_string()
                    };
                    eprint(&format!(
                        "trial {i} of {total} ({}): {result}\n",
                        trial_label(exp)
                    ));
                }
                usize::from(!ok)
            })
            .sum()
    });
    super::summary::sweep_table(dirs);
    i32::from(failed > 0)
}

fn eprint(text: &str) {
    let _ = write!(std::io::stderr(), "{text}");
}

/// Resolves where the model runs, checking that the devices exist here.
fn resolve_devices(exp: &Experiment, opts: &RunOptions) -> Result<Option<tch::Device>, Diagnostic> {
    if let Some(d) = opts.device {
        let d = tch_device(d);
        check_device(d, exp.device_span, "--device")?;
        if exp.train.precision == Precision::Fp16 && d == tch::Device::Cpu {
            return Err(fp16_on_cpu(exp));
        }
        return Ok(Some(d));
    }
    let layers = kiln::ir::layers(&exp.model.nodes);
    for l in &layers {
        let span = if l.device == exp.device {
            exp.device_span
        } else {
            l.span
        };
        check_device(tch_device(l.device), span, &l.device.to_string())?;
    }
    if exp.train.precision == Precision::Fp16
        && layers
            .iter()
            .any(|l| tch_device(l.device) == tch::Device::Cpu)
    {
        return Err(fp16_on_cpu(exp));
    }
    Ok(None)
}

fn fp16_on_cpu(exp: &Experiment) -> Diagnostic {
    Problem::DeviceUnavailable {
        span: exp.device_span,
        situation: Unavailable::Fp16OnCpu,
    }
    .diagnostic()
}

fn check_device(d: tch::Device, span: kiln::span::Span, named: &str) -> Result<(), Diagnostic> {
    if let tch::Device::Cuda(i) = d {
        let count = if tch::Cuda::is_available() {
            tch::Cuda::device_count() as usize
        } else {
            0
        };
        if i >= count {
            return Err(Problem::DeviceUnavailable {
                span,
                situation: Unavailable::Missing {
                    named: named.to_string(),
                    index: i,
                    count,
                },
            }
            .diagnostic());
        }
    }
    Ok(())
}

fn run_trial(
    exp: &Experiment,
    checked: &Checked,
    dir: &Path,
    opts: &RunOptions,
    cancel: &Cancel,
) -> Result<Outcome, Diagnostic> {
    let over = resolve_devices(exp, opts)?;
    let notes = not_applied(exp);
    for n in &notes {
        eprint(&format!("note: {n}\n"));
    }
    tch::manual_seed(exp.seed as i64);
    let net = model::build(&exp.model.nodes, exp.train.precision, over)?;
    if let Some(path) = &opts.init {
        net.load(path, exp.optimizer.span)?;
    }
    let device = net.input_device();
    let base = source_dir(&checked.sources, exp.data.source_span.file);
    let splits = data::load(
        &exp.data,
        &exp.model.input,
        exp.model.input_dtype,
        &base,
        exp.seed,
    )?;
    let budget = Budget::new(
        &exp.train,
        splits.train.len().max(0) as u64,
        exp.data.batch,
        opts.max_steps,
    )?;
    let mut writer = RunWriter::open(dir.to_path_buf(), exp.data.source_span)?;
    kiln::supervise::record_run_dir(dir);
    let resume = match &opts.resume {
        Some(_) => {
            let found = checkpoint::latest(&writer.checkpoint_dir(), exp.optimizer.span)?;
            let Some((side, tensors)) = found else {
                return Err(Problem::ResumeIncompatible {
                    span: exp.optimizer.span,
                    situation: Resume::NoCheckpoint {
                        dir: dir.to_path_buf(),
                    },
                }
                .diagnostic());
            };
            compare(exp, &side.fingerprint)?;
            Some((side, tensors))
        }
        None => {
            let text = checked.sources.get(kiln::span::FileId(0)).text.clone();
            writer.write_file(kiln::rundir::EXPERIMENT, text.as_bytes())?;
            writer.write_yaml(kiln::rundir::PLAN, &kiln::plan::plan(exp))?;
            None
        }
    };
    let started = std::time::Instant::now();
    let mut out = RunOutput {
        writer: &mut writer,
        progress: Progress::new(opts.quiet, budget.epochs),
    };
    let mut trainer = Trainer {
        exp,
        model: &net,
        splits,
        device,
        budget,
        out: &mut out,
        cancel: cancel.clone(),
        hooks: standard_hooks(exp),
    };
    let outcome = trainer
        .run(resume)
        .map_err(|f| out_of_memory_at_batch(f, exp))?;
    let devices = net.devices();
    super::summary::write_report(
        &writer,
        exp,
        checked,
        &outcome,
        &devices,
        started.elapsed().as_secs_f64(),
        &notes,
    )?;
    super::plot::write_curves(writer.dir(), exp.data.source_span)?;
    Ok(outcome)
}

/// What this version checks and plans but does not carry out yet, said plainly so that a run is
/// never mistaken for one that did.
fn not_applied(exp: &Experiment) -> Vec<String> {
    use kiln::ir::Parallel;
    let mut notes = Vec::new();
    match &exp.parallel {
        Parallel::Data { devices } => notes.push(format!(
            "`parallel data` over {} devices is not applied yet: the model trains on one device with the same global batch (the same gradients, without the speed-up)",
            devices.len()
        )),
        Parallel::Distributed { world_size, .. } => notes.push(format!(
            "`parallel ddp` over {world_size} processes is not applied yet: one process trains with the same global batch"
        )),
        Parallel::Pipeline { .. } => notes.push(
            "`parallel pipeline` runs as model parallel by placement: micro-batches are not scheduled yet".to_string(),
        ),
        Parallel::None | Parallel::Model => {}
    }
    if !exp.compression.is_empty() {
        notes.push("`compress` (pruning, quantization) is checked and planned but not applied yet: the model trains uncompressed".to_string());
    }
    notes
}

/// Points an out-of-memory failure at the batch size, with the plan's estimate, keeping where
/// memory ran out as a second label.
fn out_of_memory_at_batch(f: Diagnostic, exp: &Experiment) -> Diagnostic {
    if f.code != Code::OutOfMemory {
        return f;
    }
    let plan = kiln::plan::plan(exp);
    let estimate: Vec<String> = plan
        .devices
        .iter()
        .map(|d| {
            format!(
                "{} {} (activations {})",
                d.device,
                kiln::plan::fmt_bytes(d.total_bytes),
                kiln::plan::fmt_bytes(d.activation_bytes)
            )
        })
        .collect();
    let at = f.primary.span;
    // The failure reaches here worded; libtorch's line follows the message's own prefix.
    let detail = f
        .message
        .split_once(": ")
        .map_or_else(|| f.message.clone(), |(_, d)| d.to_string());
    Problem::OutOfMemory {
        span: exp.data.batch_span,
        detail,
        plan: Some((exp.data.batch, estimate.join(", "))),
        ran_out: (at != exp.data.batch_span).then_some(at),
    }
    .diagnostic()
}

/// The directory of the file that declares the data source: relative data paths start there.
fn source_dir(sources: &Sources, file: kiln::span::FileId) -> PathBuf {
    sources
        .get(file)
        .path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Refuses to resume when the plan differs from the checkpoint's, naming what changed.
fn compare(exp: &Experiment, old: &checkpoint::Fingerprint) -> Result<(), Diagnostic> {
    let new = fingerprint(exp);
    let layers = kiln::ir::layers(&exp.model.nodes);
    if new.layers != old.layers {
        let i = new
            .layers
            .iter()
            .zip(&old.layers)
            .position(|(a, b)| a != b)
            .unwrap_or(new.layers.len().min(old.layers.len()));
        let span = layers.get(i).map_or(exp.optimizer.span, |l| l.span);
        return Err(Problem::ResumeIncompatible {
            span,
            situation: Resume::Layer {
                index: i,
                was: old.layers.get(i).map(ToString::to_string),
                now: new.layers.get(i).map(ToString::to_string),
            },
        }
        .diagnostic());
    }
    let situation = if new.optimizer != old.optimizer {
        Resume::Optimizer {
            was: old.optimizer.clone(),
            now: new.optimizer,
        }
    } else if new.world_size != old.world_size {
        Resume::WorldSize {
            was: old.world_size,
            now: new.world_size,
        }
    } else {
        return Ok(());
    };
    Err(Problem::ResumeIncompatible {
        span: exp.optimizer.span,
        situation,
    }
    .diagnostic())
}

fn summary(exp: &Experiment, o: &Outcome, dir: &Path, quiet: bool) {
    if quiet {
        return;
    }
    let mut line = format!(
        "{}: {} steps, train loss {:.4}",
        exp.name, o.steps, o.train_loss
    );
    if let Some(v) = &o.val {
        line += &format!(", val loss {:.4}", v.loss);
        if let Some(a) = v.accuracy {
            line += &format!(", val accuracy {:.2}%", 100.0 * a);
        }
    }
    line += &format!(
        ", {:.0} samples/s, data wait {:.1}%",
        o.samples_per_s,
        100.0 * o.data_wait
    );
    if o.stopped_early {
        line += ", stopped early";
    }
    eprint(&format!("{line}\nrun directory: {}\n", dir.display()));
}

/// The current UTC time as `YYYYmmdd-HHMMSS`.
pub fn timestamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
