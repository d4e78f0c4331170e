//! One trial of `kiln run`: its run directory created or resumed, the session prepared, the
//! strategy applied, the model trained and compressed, and the report written.

use std::path::{Path, PathBuf};

use super::options::RunOptions;
use super::print::{eprint, warn};
use crate::runtime::cancel::Cancel;
use crate::runtime::compress::compare::compare;
use crate::runtime::compress::measure::cpu_notes;
use crate::runtime::dist::rank::Rank;
use crate::runtime::host_alloc;
use crate::runtime::host_memory::HostMemory;
use crate::runtime::output::{Output, RunOutput, Silent};
use crate::runtime::parallel::{self, ddp::Member};
use crate::runtime::report::{Progress, RunWriter};
use crate::runtime::resume::{follow, resume_point, Ended, Reach};
use crate::runtime::session::Session;
use crate::runtime::train::{standard_hooks, Outcome, Trainer};
use kiln::check::Checked;
use kiln::diagnostic::problem::{RunStage, Running};
use kiln::diagnostic::{Code, Diagnostic, Problem};
use kiln::ir::Experiment;
use kiln::rundir::Segment;

/// Where a trial's run directory is.
pub enum Place {
    /// A new run in exactly this directory (it must not hold files).
    At(PathBuf),
    /// A new run in a new directory under this one, named by the time it starts.
    Unique(PathBuf),
    /// The run in this directory, resumed; extended when it had finished.
    Resume(PathBuf, Option<Ended>),
}

/// Trains one trial; `rank` is this process's place in a distributed run, whose rank 0 alone
/// writes the run directory.
pub fn run_trial(
    exp: &Experiment,
    checked: &Checked,
    place: &Place,
    opts: &RunOptions,
    cancel: &Cancel,
    rank: Option<&Rank>,
) -> Result<(Outcome, PathBuf), Diagnostic> {
    let session = Session::new(exp, &checked.sources, opts.device, rank)?;
    let writes = session.writes();
    for note in session.notes.iter().filter(|_| writes) {
        eprint(&format!("note: {note}\n"));
    }
    // A resume takes the run's lock before the slow work, so a second process is refused at once.
    let resumed = match place {
        Place::Resume(dir, _) if writes => Some(reopen(exp, dir, checked)?),
        Place::At(_) | Place::Unique(_) | Place::Resume(..) => None,
    };
    // Every part of the language is applied; the report's notes stay for what a future
    // version may not apply.
    let notes: Vec<String> = Vec::new();
    tch::manual_seed(exp.seed as i64);
    let mut memory = HostMemory::start();
    let mut net = session.build()?;
    if let Some(path) = &opts.init {
        net.load(path, exp.optimizer.span)?;
    }
    let device = net.input_device();
    let splits = HostMemory::outside_plan(&mut memory, || session.data())?;
    let (budget, timeline) = session.length(&splits, opts.max_steps)?;
    let pruner = session.compress(&mut net, timeline)?;
    let print = session.fingerprint(&splits)?;
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
            let writer = create(exp, checked, place, opts)?;
            // A text's characters, so that generation decodes as the run encoded.
            if let Some(vocab) = &splits.vocab {
                let chars: Vec<String> = vocab.iter().map(char::to_string).collect();
                let json = serde_json::to_vec(&chars).unwrap_or_default();
                writer.write_file(kiln::rundir::VOCAB, &json)?;
            }
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
    let member = session.rank.as_ref().map(|(r, backend)| Member {
        rank: r,
        backend: *backend,
        file: opts.file.display().to_string(),
        fingerprint: &print,
        resume_step: resume.as_ref().map(|(side, _)| side.position.step),
    });
    if device == tch::Device::Cpu {
        host_alloc::map_large_blocks();
    }
    let (strategy, stop) =
        parallel::apply(exp, &session.plan, &mut net, session.over, member, cancel)?;
    if let Some(m) = &mut memory {
        m.restart();
    }
    let mut run_out;
    let mut silent;
    let out: &mut dyn Output = match writer.as_mut() {
        Some(w) => {
            // A sweep's trial is resumed with its number.
            let trial = number(exp, checked).map_or_else(String::new, |k| format!(" --trial {k}"));
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
        strategy,
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
    if let Some(m) = &memory {
        trainer.hooks.push(m.watch());
    }
    let mut outcome = trainer
        .run(resume)
        .map_err(|f| out_of_memory_at_batch(f, exp))?;
    if let Some(m) = &memory {
        let plan = kiln::plan::plan(exp);
        let (total, margin) = plan
            .devices
            .first()
            .map_or((0, 0), |d| (d.total_bytes, d.allocator_margin_bytes));
        m.report(session.plan.ranks.rank, total, margin);
    }
    let compressed = if exp.compression.is_empty() {
        None
    } else {
        let over = session.model_device();
        let (fin, report) = compare(&trainer, &session.nodes, &net, over, &mut outcome, writes)?;
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
    let ran = crate::runtime::summary::Ran {
        devices: parallel::devices(&session.plan, &net, session.over),
        wall: before + started.elapsed().as_secs_f64(),
        notes: &notes,
        history: &history,
        compressed,
    };
    crate::runtime::summary::write_report(&writer, exp, checked, &outcome, &ran)?;
    crate::runtime::plot::write_curves(writer.dir(), exp.data.source_span)?;
    Ok((outcome, writer.dir().to_path_buf()))
}

/// The run directory of a resumed run, reopened and locked; the warnings of reopening it
/// printed, and what an interrupted write left behind named.
fn reopen(exp: &Experiment, dir: &Path, checked: &Checked) -> Result<RunWriter, Diagnostic> {
    let (writer, warnings) = RunWriter::resume(dir.to_path_buf(), exp.span)?;
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
    Ok(writer)
}

/// The run directory of a new run, created with its experiment, plan and source recorded.
fn create(
    exp: &Experiment,
    checked: &Checked,
    place: &Place,
    opts: &RunOptions,
) -> Result<RunWriter, Diagnostic> {
    let dir = match place {
        Place::Unique(parent) => kiln::rundir::create_unique(parent, &kiln::rundir::timestamp())
            .map_err(|e| run_io(&e, exp))?,
        Place::At(dir) | Place::Resume(dir, _) => dir.clone(),
    };
    let writer = RunWriter::create(dir, exp.span)?;
    kiln::supervise::record_run_dir(writer.dir());
    let text = &checked.sources.get(kiln::span::FileId(0)).text;
    writer.write_file(kiln::rundir::EXPERIMENT, text.as_bytes())?;
    writer.write_yaml(kiln::rundir::PLAN, &kiln::plan::plan(exp))?;
    let file = std::fs::canonicalize(&opts.file).unwrap_or_else(|_| opts.file.clone());
    let trial = number(exp, checked);
    writer.write_yaml(kiln::rundir::SOURCE, &kiln::rundir::Source { file, trial })?;
    Ok(writer)
}

/// The trial's number (1-based) when the experiment is a sweep.
fn number(exp: &Experiment, checked: &Checked) -> Option<usize> {
    (checked.trials.len() > 1)
        .then(|| checked.trials.iter().position(|t| std::ptr::eq(t, exp)))
        .flatten()
        .map(|i| i + 1)
}

/// A K0509 failure to create the run directory.
fn run_io(e: &kiln::rundir::Error, exp: &Experiment) -> Diagnostic {
    Problem::Running(Running::RunIo {
        span: exp.span,
        action: e.op.verb().to_string(),
        path: Some(e.path.clone()),
        error: e.detail.clone(),
        stage: RunStage::Record,
    })
    .diagnostic()
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
    Problem::Running(Running::OutOfMemory {
        span: exp.data.batch_span,
        detail,
        plan: Some((exp.data.batch, estimate.join(", "))),
        ran_out: (at != exp.data.batch_span).then_some(at),
    })
    .diagnostic()
}

/// The trial's one line once it ran, and its run directory.
pub fn summary(exp: &Experiment, o: &Outcome, dir: &Path, quiet: bool) {
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
    if let Some(busy) = o.compute.as_ref().and_then(|c| c.gpu_busy) {
        line += &format!(", GPU busy {:.0}%", 100.0 * busy);
    }
    if o.stopped_early {
        line += ", stopped early";
    }
    eprint(&format!("{line}\nrun directory: {}\n", dir.display()));
}
