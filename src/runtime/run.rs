//! `kiln run`: checks the experiment, resolves devices, loads the data, builds the model, trains
//! every sweep trial in its own run directory, and reports. Every failure ends as a diagnostic.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use super::budget::Budget;
use super::compress::compare::compare;
use super::compress::measure::cpu_notes;
use super::compress::pruner::Pruner;
use super::compress::qat;
use super::compress::timeline::Timeline;
use super::data;
use super::dist::preflight::Announce;
use super::dist::rank::{free_port, Rank};
use super::failure::At;
use super::hooks::Cancel;
use super::model::{self, tch_device};
use super::output::{RunOutput, Silent};
use super::parallel::ddp;
use super::report::{Progress, RunWriter};
use super::resume::{finished, follow, resume_point, Ended, Finished, Reach};
use super::state::{data_digest, fingerprint};
use super::train::{standard_hooks, Outcome, Trainer};
use kiln::check::{check_path, Checked, FsLoader, Options};
use kiln::diagnostic::problem::{RunStage, Unavailable};
use kiln::diagnostic::render::{to_text, Style};
use kiln::diagnostic::{Code, Diagnostic, Problem};
use kiln::ir::{Experiment, Precision};
use kiln::rundir::Segment;
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

/// Runs the command; returns the exit status.
pub fn main(opts: &RunOptions) -> i32 {
    let cancel = Cancel::default();
    let on_stop = cancel.clone();
    let _ = kiln::supervise::on_stop_signals(move |sig| on_stop.cancel(sig));
    kiln::supervise::ignore_file_size_signal();
    if let Some(n) = opts.threads {
        tch::set_num_threads(n as i32);
    }
    // The report records each trial's settings as it ran, for `kiln compare`.
    let options = Options {
        effective_settings: true,
        ..Options::default()
    };
    let checked = check_path(&opts.file, &FsLoader, &options);
    let style = style();
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
    // A distributed experiment runs as one rank of a process group: started by a launcher
    // (torchrun, SLURM), or as this command's own ranks on this machine.
    let distributed = trials.iter().find_map(|(_, e)| match &e.parallel {
        kiln::ir::Parallel::Distributed {
            world_size, span, ..
        } => Some((*world_size as usize, *span)),
        _ => None,
    });
    let mut rank = None;
    if let Some((world, span)) = distributed {
        if trials.len() > 1 {
            eprint(
                "error: a distributed sweep runs one trial at a time; pick one with `--trial K`\n",
            );
            return 2;
        }
        match Rank::from_env() {
            Err(detail) => {
                eprint(&format!("error: {detail}\n"));
                return 2;
            }
            Ok(Some(r)) => rank = Some(r),
            Ok(None) if world > 1 => {
                return super::launch::main(opts, world, span, &checked.sources, style, &cancel);
            }
            Ok(None) => match free_port() {
                Ok(port) => rank = Some(Rank::alone(port)),
                Err(e) => {
                    eprint(&format!(
                        "error: no free port on 127.0.0.1 for the store: {e}\n"
                    ));
                    return 2;
                }
            },
        }
    }
    // A finished run is complete at its length, and extended by another one.
    let mut extend = None;
    if let (Some(dir), Some((_, exp))) = (&opts.resume, trials.first()) {
        if kiln::rundir::is_finished(dir) {
            match finished(dir, exp) {
                Finished::Complete(note) => {
                    if rank.as_ref().is_none_or(|r| r.rank == 0) {
                        eprint(&to_text(&note, &checked.sources, style));
                    }
                    return 0;
                }
                Finished::Extend(ended) => extend = Some(ended),
            }
        }
    }
    let sweep = checked.trials.len() > 1;
    let sweep_dir = match (&opts.resume, &opts.run_dir) {
        (None, None) if sweep => {
            let parent = opts.runs_dir.join(&checked.trials[0].name);
            match kiln::rundir::create_unique(&parent, &kiln::rundir::timestamp()) {
                Ok(dir) => Some(dir),
                Err(e) => {
                    eprint(&format!("error: {e}\n"));
                    return 2;
                }
            }
        }
        _ => None,
    };
    let place = |i: usize, exp: &Experiment| match (&opts.resume, &opts.run_dir, &sweep_dir) {
        (Some(d), _, _) => Place::Resume(d.clone(), extend),
        (None, Some(d), _) => Place::At(d.clone()),
        (None, None, Some(s)) => Place::At(s.join(format!("trial-{i:03}"))),
        (None, None, None) => Place::Unique(opts.runs_dir.join(&exp.name)),
    };
    let places: Vec<(usize, &Experiment, Place)> =
        trials.iter().map(|(i, e)| (*i, *e, place(*i, e))).collect();
    let dirs: Vec<(usize, &Experiment, PathBuf)> = places
        .iter()
        .filter_map(|(i, e, p)| match p {
            Place::At(d) => Some((*i, *e, d.clone())),
            _ => None,
        })
        .collect();
    if dirs.len() > 1 && dirs.iter().all(|(_, e, _)| on_cpu(e, opts)) {
        return run_concurrently(opts, &dirs);
    }
    let writes = rank.as_ref().is_none_or(|r| r.rank == 0);
    let mut status = 0;
    for (i, exp, place) in &places {
        if sweep && !opts.quiet {
            eprint(&format!(
                "trial {i} of {}: {}\n",
                checked.trials.len(),
                trial_label(exp)
            ));
        }
        match run_trial(exp, &checked, place, opts, &cancel, rank.as_ref()) {
            Ok((outcome, dir)) => summary(exp, &outcome, &dir, opts.quiet || !writes),
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

/// Where a trial's run directory is.
enum Place {
    /// A new run in exactly this directory (it must not hold files).
    At(PathBuf),
    /// A new run in a new directory under this one, named by the time it starts.
    Unique(PathBuf),
    /// The run in this directory, resumed; extended when it had finished.
    Resume(PathBuf, Option<Ended>),
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
pub(super) fn resolve_devices(
    exp: &Experiment,
    nodes: &[kiln::ir::Node],
    device: Option<kiln::ir::Device>,
) -> Result<Option<tch::Device>, Diagnostic> {
    if let Some(d) = device {
        let d = tch_device(d);
        check_device(d, exp.device_span, "--device")?;
        if exp.train.precision == Precision::Fp16 && d == tch::Device::Cpu {
            return Err(fp16_on_cpu(exp));
        }
        return Ok(Some(d));
    }
    // Data parallel: the model lives on the replicas' devices, whatever the placement.
    if let kiln::ir::Parallel::Data { devices, span } = &exp.parallel {
        for d in devices {
            check_device(tch_device(*d), *span, &d.to_string())?;
        }
        if exp.train.precision == Precision::Fp16
            && devices.iter().any(|d| tch_device(*d) == tch::Device::Cpu)
        {
            return Err(fp16_on_cpu(exp));
        }
        return Ok(None);
    }
    let layers = kiln::ir::layers(nodes);
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

/// Trains one trial; `rank` is this process's place in a distributed run, whose rank 0 alone
/// writes the run directory.
fn run_trial(
    exp: &Experiment,
    checked: &Checked,
    place: &Place,
    opts: &RunOptions,
    cancel: &Cancel,
    rank: Option<&Rank>,
) -> Result<(Outcome, PathBuf), Diagnostic> {
    let nodes = super::parallel::placed(exp);
    let mut over = resolve_devices(exp, &nodes, opts.device)?;
    let writes = rank.is_none_or(|r| r.rank == 0);
    let mut backend = ddp::Backend::Gloo;
    if let Some(r) = rank {
        let (chosen, device) = ddp::check_rank(exp, r, over)?;
        if writes && nccl(exp) && chosen == ddp::Backend::Gloo {
            eprint(
                "note: `--device cpu`: NCCL needs CUDA devices, so the ranks reduce with Gloo\n",
            );
        }
        backend = chosen;
        over = device.or(over);
    }
    // A resume takes the run's lock before the slow work, so a second process is refused at once.
    let resumed = match place {
        Place::Resume(dir, _) if writes => {
            let (writer, warnings) = RunWriter::resume(dir.clone(), exp.span)?;
            kiln::supervise::record_run_dir(dir);
            for w in &warnings {
                warn(exp, w, checked);
            }
            for path in writer.removed() {
                eprint(&format!(
                    "note: removed `{}`, left by an interrupted write\n",
                    path.display()
                ));
            }
            Some(writer)
        }
        Place::At(_) | Place::Unique(_) | Place::Resume(..) => None,
    };
    // Every part of the language is applied; the report's notes stay for what a future
    // version may not apply.
    let notes: Vec<String> = Vec::new();
    tch::manual_seed(exp.seed as i64);
    let mut net = model::build(
        &nodes,
        exp.train.precision,
        super::parallel::model_device(exp, over),
    )?;
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
    let mut budget = Budget::new(
        &exp.train,
        &exp.data,
        splits.train.len().max(0) as u64,
        opts.max_steps,
    )?;
    let timeline = Timeline::new(exp, &budget);
    budget.stop = opts
        .max_steps
        .map_or(timeline.end(), |m| m.min(timeline.end()));
    qat::install(exp, &mut net)?;
    let pruner = if exp
        .compression
        .iter()
        .any(|c| matches!(c, kiln::ir::Compression::Prune { .. }))
    {
        Some(Pruner::new(exp, &nodes, &mut net, timeline)?)
    } else {
        None
    };
    let digest = data_digest(&splits).at(exp.data.source_span)?;
    let print = fingerprint(exp, &digest);
    let text = &checked.sources.get(kiln::span::FileId(0)).text;
    let ended = match place {
        Place::Resume(_, ended) => *ended,
        Place::At(_) | Place::Unique(_) => None,
    };
    let reach = Reach {
        total: budget.total,
        end: timeline.end(),
        max_steps: opts.max_steps,
    };
    let (mut writer, resume, history) = match resumed {
        Some(writer) => {
            let mut warned = |w: &Diagnostic| warn(exp, w, checked);
            let (saved, history) =
                resume_point(exp, &writer, &print, text, ended, reach, &mut warned)?;
            (Some(writer), Some(saved), history)
        }
        // Another rank resumes from the checkpoint rank 0 resumes from, reading it only.
        None if !writes => {
            let saved = match place {
                Place::Resume(dir, _) => Some(follow(exp, dir, &print, ended, reach)?),
                Place::At(_) | Place::Unique(_) => None,
            };
            (None, saved, Vec::new())
        }
        None => {
            let dir = match place {
                Place::Unique(parent) => {
                    kiln::rundir::create_unique(parent, &kiln::rundir::timestamp())
                        .map_err(|e| run_io(&e, exp))?
                }
                Place::At(dir) | Place::Resume(dir, _) => dir.clone(),
            };
            let writer = RunWriter::create(dir, exp.span)?;
            kiln::supervise::record_run_dir(writer.dir());
            writer.write_file(kiln::rundir::EXPERIMENT, text.as_bytes())?;
            writer.write_yaml(kiln::rundir::PLAN, &kiln::plan::plan(exp))?;
            let file = std::fs::canonicalize(&opts.file).unwrap_or_else(|_| opts.file.clone());
            let trial = (checked.trials.len() > 1)
                .then(|| checked.trials.iter().position(|t| std::ptr::eq(t, exp)))
                .flatten()
                .map(|i| i + 1);
            writer.write_yaml(kiln::rundir::SOURCE, &kiln::rundir::Source { file, trial })?;
            let first = Segment {
                from_step: 0,
                experiment: kiln::rundir::EXPERIMENT.into(),
                changes: Vec::new(),
                extended: false,
            };
            (Some(writer), None, vec![first])
        }
    };
    let started = std::time::Instant::now();
    let before = resume
        .as_ref()
        .map_or(0.0, |(side, _)| side.position.seconds);
    // A sweep's trial is resumed with its number.
    let trial = (checked.trials.len() > 1)
        .then(|| checked.trials.iter().position(|t| std::ptr::eq(t, exp)))
        .flatten()
        .map_or_else(String::new, |i| format!(" --trial {}", i + 1));
    let (backprop, stop): (Box<dyn super::step::Backprop>, Cancel) = match rank {
        Some(r) => {
            let announce = Announce {
                file: opts.file.display().to_string(),
                world: r.world,
                fingerprint: print.clone(),
                shapes: net
                    .params
                    .iter()
                    .map(|p| (p.name.clone(), p.tensor.size()))
                    .collect(),
                resume_step: resume.as_ref().map(|(side, _)| side.position.step),
                host: Announce::hostname(),
                pid: std::process::id(),
            };
            let (strategy, stop) = ddp::Ddp::start(ddp::Start {
                exp,
                rank: r.clone(),
                announce,
                model: &net,
                signals: cancel.clone(),
                backend,
            })?;
            (Box::new(strategy), stop)
        }
        None => (super::parallel::backprop(exp, &net, over)?, cancel.clone()),
    };
    let mut run_out;
    let mut silent;
    let out: &mut dyn super::output::Output = match writer.as_mut() {
        Some(w) => {
            let command = format!(
                "kiln run {}{trial} --resume {}",
                opts.file.display(),
                w.dir().display()
            );
            run_out = RunOutput {
                writer: w,
                progress: Progress::new(opts.quiet, budget.epochs),
                resume: command,
            };
            &mut run_out
        }
        None => {
            silent = Silent {
                progress: Progress::new(true, None),
            };
            &mut silent
        }
    };
    let mut trainer = Trainer {
        exp,
        model: &net,
        backprop,
        splits,
        device,
        budget,
        out,
        cancel: stop,
        hooks: standard_hooks(exp, timeline),
        fingerprint: print,
        history: history.clone(),
        pruner,
        timeline,
        uncompressed: None,
    };
    let mut outcome = trainer
        .run(resume)
        .map_err(|f| out_of_memory_at_batch(f, exp))?;
    let compressed = if exp.compression.is_empty() {
        None
    } else {
        let over = super::parallel::model_device(exp, over);
        let (fin, report) = compare(&trainer, &nodes, &net, over, &mut outcome, writes)?;
        for note in cpu_notes(exp, fin.net.input_device())
            .iter()
            .filter(|_| writes)
        {
            eprint(&format!("note: {note}\n"));
        }
        Some(report)
    };
    drop(trainer);
    let Some(writer) = writer else {
        return Ok((outcome, PathBuf::new()));
    };
    let ran = super::summary::Ran {
        devices: super::parallel::devices(exp, &net, over),
        wall: before + started.elapsed().as_secs_f64(),
        notes: &notes,
        history: &history,
        compressed,
    };
    super::summary::write_report(&writer, exp, checked, &outcome, &ran)?;
    super::plot::write_curves(writer.dir(), exp.data.source_span)?;
    Ok((outcome, writer.dir().to_path_buf()))
}

/// Whether `exp` asks for the NCCL backend.
fn nccl(exp: &Experiment) -> bool {
    matches!(
        exp.parallel,
        kiln::ir::Parallel::Distributed {
            backend: kiln::ir::Backend::Nccl,
            ..
        }
    )
}

/// A K0509 failure to create the run directory.
fn run_io(e: &kiln::rundir::Error, exp: &Experiment) -> Diagnostic {
    Problem::RunIo {
        span: exp.span,
        action: e.op.verb().to_string(),
        path: Some(e.path.clone()),
        error: e.detail.clone(),
        stage: RunStage::Record,
    }
    .diagnostic()
}

/// Prints a warning of the run unless the experiment allows it (`allow`).
fn warn(exp: &Experiment, w: &Diagnostic, checked: &Checked) {
    if !exp.allow.iter().any(|code| code == w.code.code()) {
        eprint(&to_text(w, &checked.sources, style()));
    }
}

fn style() -> Style {
    Style {
        color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        width: 100,
    }
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
                kiln::present::fmt_bytes(d.total_bytes),
                kiln::present::fmt_bytes(d.activation_bytes)
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
