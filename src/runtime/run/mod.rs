//! `kiln run`: checks the experiment, picks the trials and where each one's run directory is,
//! starts the ranks of a distributed run or the processes of a CPU sweep, trains every other
//! trial in this process ([`trial`]), and prints what each ran to. Every failure ends as a
//! diagnostic.

mod cores;
mod options;
mod print;
mod sweep;
mod trial;

use std::path::PathBuf;

use super::cancel::Cancel;
use super::dist::rank::{free_port, Rank};
use super::resume::{finished, Finished};
use kiln::check::{check_path, FsLoader, Options};
use kiln::diagnostic::render::to_text;
use kiln::diagnostic::Code;
use kiln::ir::{Experiment, Parallelism};
use print::{eprint, style};
use sweep::{on_cpu, run_concurrently, trial_label};
use trial::{run_trial, summary, Place};

pub use options::RunOptions;

/// Runs the command; returns the exit status.
pub fn main(opts: &RunOptions) -> i32 {
    let cancel = Cancel::default();
    let on_stop = cancel.clone();
    let _ = kiln::supervise::on_stop_signals(move |sig| on_stop.cancel(sig));
    kiln::supervise::ignore_file_size_signal();
    if let Some(n) = opts.threads {
        tch::set_num_threads(n as i32);
    }
    // Threads set by the command line or the environment (a launcher's ranks share the
    // machine on purpose) are left alone; libtorch's default is one per core.
    let chosen = ["OMP_NUM_THREADS", "RANK", "SLURM_PROCID"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if opts.threads.is_none() && !chosen {
        let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
        if let Some(note) = cores::oversubscribed(threads) {
            eprint(&format!("note: {note}\n"));
        }
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
    let distributed = trials.iter().find_map(|(_, e)| {
        match kiln::ir::ParallelPlan::new(&e.parallel, None).strategy {
            Parallelism::Ddp {
                world_size, span, ..
            } => Some((world_size as usize, span)),
            Parallelism::Local | Parallelism::Replicas { .. } | Parallelism::Pipeline { .. } => {
                None
            }
        }
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
                return super::launch::main(
                    opts.threads,
                    opts.quiet,
                    world,
                    span,
                    &checked.sources,
                    style,
                    &cancel,
                );
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
