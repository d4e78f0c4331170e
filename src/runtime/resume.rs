//! Where a resumed run starts: the newest intact checkpoint of an interrupted run, or the
//! checkpoint of the end of a finished run that a longer length extends. What a resume may
//! change, which length it may ask for, and the part it adds to the run's history.

use std::path::Path;

use super::checkpoint::{self, Saved};
use super::fingerprint::{differences, fingerprint, words};
use super::report::RunWriter;
use kiln::diagnostic::problem::{Extension, Lengths, Resume, Running};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{Compression, Experiment, PruneSchedule};
use kiln::rundir::{Fingerprint, Outcome, Segment, Sidecar};

/// How a finished run that `--resume` names ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The steps it took.
    pub trained: u64,
    /// Whether early stopping ended it.
    pub stopped_early: bool,
}

/// What `--resume` does with a finished run.
pub enum Finished {
    /// Nothing: the experiment gives the length the run already has (K0525, a warning).
    Complete(Diagnostic),
    /// Extends it: the experiment gives another length.
    Extend(Ended),
}

/// What `--resume` does with the finished run in `dir` for `exp`: a run that `--max-steps`
/// stopped before its length goes on, and a length (as written) other than the one the run last
/// ran with extends it; the same length, or a run whose length cannot be read (an older Kiln
/// wrote neither final weights nor checkpoints), leaves it complete.
pub fn finished(dir: &Path, exp: &Experiment) -> Finished {
    let report = kiln::rundir::read_report(dir).ok();
    let now = length_of(&fingerprint(exp, ""));
    let was = recorded(dir).and_then(|side| length_of(&side.fingerprint));
    match (report, was) {
        (Some(r), Some(was)) if r.outcome.max_steps_reached || Some(&was) != now.as_ref() => {
            Finished::Extend(Ended {
                trained: r.outcome.steps,
                stopped_early: r.outcome.stopped_early,
            })
        }
        (r, _) => Finished::Complete(
            Problem::Running(Running::RunComplete {
                span: exp.train.length_span,
                dir: dir.to_path_buf(),
                detail: r.map_or_else(String::new, |r| detail(&r.outcome)),
            })
            .diagnostic(),
        ),
    }
}

/// The length a fingerprint records, as written (`400 steps`).
fn length_of(print: &Fingerprint) -> Option<String> {
    print
        .settings
        .iter()
        .find(|(what, _)| what == "length")
        .map(|(_, v)| v.clone())
}

/// The sidecar of the state the run in `dir` last reached: its newest final weights, or else its
/// newest checkpoint (only read, not verified: it gives the settings the run ran with).
fn recorded(dir: &Path) -> Option<Sidecar> {
    let weights = kiln::rundir::weights::versions(dir)
        .into_iter()
        .rev()
        .map(|name| dir.join(name).with_extension("yaml"));
    let checkpoints = kiln::rundir::checkpoint::list(&dir.join(kiln::rundir::CHECKPOINTS))
        .into_iter()
        .rev();
    weights
        .chain(checkpoints)
        .find_map(|meta| kiln::rundir::read_yaml::<Sidecar>(&meta).ok())
}

/// How a run ended, as `after 40 steps, train loss 0.1234, val loss 0.5678`.
fn detail(o: &Outcome) -> String {
    let mut d = format!("after {} steps, train loss {:.4}", o.steps, o.train_loss);
    if let Some(v) = &o.val {
        d += &format!(", val loss {:.4}", v.loss);
    }
    if o.stopped_early {
        d += ", stopped early";
    }
    d
}

/// Where the loop of a resumed run would stop.
#[derive(Debug, Clone, Copy)]
pub struct Reach {
    /// The experiment's length in steps (what the schedule spans).
    pub total: u64,
    /// The run's last step, compression's fine-tuning or rounds included.
    pub end: u64,
    /// `--max-steps`.
    pub max_steps: Option<u64>,
}

/// The checkpoint a resume by the writer of the run starts from, with the run's history with
/// this part added. An interrupted run resumes from its newest intact checkpoint (each damaged
/// newer one is passed to `warn`); a finished run (`ended`) is extended from the checkpoint of
/// its end. Refused when the experiment changes what the run computes (K0507), when its length
/// ends before the steps already taken (K0523; for an extension, when it does not go past them),
/// and when a finished run cannot be extended (K0524). Once accepted, a changed experiment is kept
/// as a new version and an extended run's report is set aside.
pub fn resume_point(
    exp: &Experiment,
    writer: &RunWriter,
    print: &Fingerprint,
    text: &str,
    ended: Option<Ended>,
    reach: Reach,
    warn: &mut dyn FnMut(&Diagnostic),
) -> Result<(Saved, Vec<Segment>), Diagnostic> {
    let (found, damaged) = checkpoint::latest(&writer.checkpoint_dir());
    let at = found.as_ref().map(|(side, _)| side.position.step);
    if let Some(ended) = ended {
        extendable(exp, writer.dir(), ended, at)?;
    }
    for d in damaged {
        warn(
            &Problem::Running(Running::CheckpointDamaged {
                span: exp.span,
                sidecar: d.sidecar,
                reason: d.reason,
                using: at,
            })
            .diagnostic(),
        );
    }
    let Some((side, tensors)) = found else {
        return Err(no_checkpoint(exp, writer.dir()));
    };
    let (refused, changes) = differences(exp, &side.fingerprint, print);
    if !refused.is_empty() {
        return Err(changed(exp, refused));
    }
    long_enough(
        exp,
        writer.dir(),
        side.position.step,
        reach,
        ended.is_some(),
    )?;
    let version = writer.record_version(text)?;
    if ended.is_some() {
        writer.set_aside_report()?;
    }
    let mut history = side.history.clone();
    history.push(Segment {
        from_step: side.position.step,
        experiment: version,
        changes,
        extended: ended.is_some(),
    });
    Ok(((side, tensors), history))
}

/// Refuses (K0524) to extend the finished run in `dir` when it cannot go on from its end:
/// early stopping ended it, it pruned after training, or its newest intact checkpoint (of step
/// `at`) is not of its end.
fn extendable(
    exp: &Experiment,
    dir: &Path,
    ended: Ended,
    at: Option<u64>,
) -> Result<(), Diagnostic> {
    let refuse = |span, situation| {
        let weights = kiln::rundir::weights::versions(dir)
            .pop()
            .unwrap_or_else(|| kiln::rundir::weights::WEIGHTS.to_string());
        Problem::Running(Running::NotExtendable {
            span,
            dir: dir.to_path_buf(),
            weights: dir.join(weights),
            trained: ended.trained,
            situation,
        })
        .diagnostic()
    };
    let length = exp.train.length_span;
    if ended.stopped_early {
        return Err(refuse(length, Extension::StoppedEarly));
    }
    let after = exp.compression.iter().find_map(|c| match c {
        Compression::Prune {
            schedule: s @ (PruneSchedule::After { .. } | PruneSchedule::Iterative { .. }),
            span,
            ..
        } => Some((*span, words(s))),
        _ => None,
    });
    if let Some((span, schedule)) = after {
        return Err(refuse(span, Extension::PrunedAfterTraining { schedule }));
    }
    if at != Some(ended.trained) {
        return Err(refuse(length, Extension::NoFinalCheckpoint { newest: at }));
    }
    Ok(())
}

/// Refuses (K0523) a resume from step `trained` whose loop would stop before it, or, for an
/// extension (`finished`), not after it.
fn long_enough(
    exp: &Experiment,
    dir: &Path,
    trained: u64,
    reach: Reach,
    finished: bool,
) -> Result<(), Diagnostic> {
    let stop = reach.max_steps.map_or(reach.end, |m| m.min(reach.end));
    let short = if finished {
        stop <= trained
    } else {
        stop < trained
    };
    if !short {
        return Ok(());
    }
    Err(Problem::Running(Running::ShorterThanTrained {
        span: exp.train.length_span,
        lengths: Lengths {
            dir: dir.to_path_buf(),
            trained,
            length: words(&exp.train.length),
            total: reach.total,
            max_steps: reach.max_steps.filter(|m| *m < reach.end),
            finished,
        },
    })
    .diagnostic())
}

/// K0507: the run directory `dir` holds no intact checkpoint.
fn no_checkpoint(exp: &Experiment, dir: &Path) -> Diagnostic {
    Problem::Running(Running::ResumeIncompatible {
        span: exp.span,
        situation: Resume::NoCheckpoint {
            dir: dir.to_path_buf(),
        },
    })
    .diagnostic()
}

/// K0507: the experiment computes something else than the run did.
fn changed(exp: &Experiment, changes: Vec<kiln::diagnostic::problem::Change>) -> Diagnostic {
    Problem::Running(Running::ResumeIncompatible {
        span: exp.span,
        situation: Resume::Changed { changes },
    })
    .diagnostic()
}

/// Where a rank other than 0 of a distributed run resumes from: the newest intact checkpoint
/// of the run in `dir`, refused as rank 0 refuses it (without its warnings), so that every rank
/// stops at once when rank 0 does.
pub fn follow(
    exp: &Experiment,
    dir: &Path,
    print: &Fingerprint,
    ended: Option<Ended>,
    reach: Reach,
) -> Result<Saved, Diagnostic> {
    if let Some(ended) = ended {
        let at = kiln::rundir::checkpoint::latest(&dir.join(kiln::rundir::CHECKPOINTS))
            .map(|(side, _)| side.position.step);
        extendable(exp, dir, ended, at)?;
    }
    let saved = intact_checkpoint(exp, dir, print)?;
    long_enough(exp, dir, saved.0.position.step, reach, ended.is_some())?;
    Ok(saved)
}

/// The newest intact checkpoint in the run directory `dir`, read only: where another rank than
/// 0 resumes from (rank 0 reports damaged ones and holds the lock), and what `kiln eval` and
/// `kiln export` restore. Refused, as a resume is, when `exp` (whose data has the fingerprint
/// `print`) computes something else than the run did.
pub fn intact_checkpoint(
    exp: &Experiment,
    dir: &Path,
    print: &Fingerprint,
) -> Result<Saved, Diagnostic> {
    let (found, _) = checkpoint::latest(&dir.join(kiln::rundir::CHECKPOINTS));
    let Some((side, tensors)) = found else {
        return Err(no_checkpoint(exp, dir));
    };
    let (refused, _) = differences(exp, &side.fingerprint, print);
    if !refused.is_empty() {
        return Err(changed(exp, refused));
    }
    Ok((side, tensors))
}
