//! A run's trained model for the commands that use it without training or evaluating it
//! (`kiln generate`, `kiln predict`): the run directory's own experiment, the trial it ran, and
//! the model `kiln eval RUN_DIR` evaluates (its final weights, or its newest checkpoint, checked
//! against the run's fingerprint, compressed as the experiment says).

use std::path::Path;

use super::compress::finalize::finalize;
use super::eval::{from_run, show, usage};
use super::model::Net;
use super::session::{run_experiment, Session};
use kiln::check::Checked;
use kiln::diagnostic::Diagnostic;
use kiln::ir::Experiment;

/// The checked experiment of the run in `dir` (or `file` instead of its own copy) and the index
/// of its trial (`trial`, else the one the run ran, else the first); on failure, the exit status
/// after the diagnostics or the usage error are printed.
pub fn open(
    dir: &Path,
    file: Option<&Path>,
    trial: Option<usize>,
) -> Result<(Checked, usize), i32> {
    if !dir.is_dir() {
        return Err(usage(&format!(
            "`{}` is not a run directory",
            dir.display()
        )));
    }
    let (checked, ran) = run_experiment(dir, file).map_err(|message| usage(&message))?;
    if checked.has_errors() {
        return Err(show(&checked, &checked.diagnostics, false, 1));
    }
    let index = trial.or(ran).unwrap_or(1).saturating_sub(1);
    if index >= checked.trials.len() {
        return Err(usage(&format!(
            "`--trial {}`: the experiment has {} trial(s)",
            index + 1,
            checked.trials.len()
        )));
    }
    Ok((checked, index))
}

/// The model of the run in `dir`, in eval mode's hands: loaded and compressed as `kiln eval
/// RUN_DIR` loads it.
pub fn model(exp: &Experiment, checked: &Checked, dir: &Path) -> Result<Net, Diagnostic> {
    let session = Session::new(exp, &checked.sources, None, None)?;
    let splits = session.data()?;
    let mut trained = session.build()?;
    let compresses = !exp.compression.is_empty();
    if compresses {
        let (_, timeline) = session.length(&splits, None)?;
        session.compress(&mut trained, timeline)?;
    }
    from_run(&session, &splits, &trained, dir, exp, compresses)?;
    if compresses {
        return Ok(finalize(exp, &session.nodes, &trained, session.model_device())?.net);
    }
    Ok(trained)
}
