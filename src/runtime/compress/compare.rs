//! The end of a compressing run: the compressed model is made from the trained one, evaluated
//! on the validation and test splits, and timed against it; the run's outcome becomes the
//! compressed model's.

use tch::Device;

use super::super::model::Net;
use super::super::step::Objective;
use super::super::train::{evaluate, Outcome, Trainer};
use super::finalize::{finalize, plain_copy, Final};
use super::measure::latencies;
use kiln::diagnostic::Diagnostic;
use kiln::ir::Node;
use kiln::rundir::{BeforeAfter, Compressed};

/// Compresses the trained `net` (built from `nodes` on the devices `over` gives) and measures
/// the compressed model against it: its final validation and test metrics replace the
/// outcome's. `latency`: time both models (one process does, when several train together).
pub fn compare(
    t: &Trainer,
    nodes: &[Node],
    net: &Net,
    over: Option<Device>,
    outcome: &mut Outcome,
    latency: bool,
) -> Result<(Final, Compressed), Diagnostic> {
    let fin = finalize(t.exp, nodes, net, over)?;
    let objective = Objective::new(t.exp);
    let eval = |data| {
        evaluate(
            t.exp,
            &fin.net,
            t.strategy.as_ref(),
            t.device,
            &objective,
            data,
        )
    };
    let after_val = t.splits.val.as_ref().map(eval).transpose()?;
    let after_test = t.splits.test.as_ref().map(eval).transpose()?;
    let (before_step, before_val, before_test) =
        t.uncompressed
            .unwrap_or((outcome.steps, outcome.val, outcome.test));
    let pair = |b, a| match (b, a) {
        (Some(before), Some(after)) => Some(BeforeAfter { before, after }),
        _ => None,
    };
    let report = Compressed {
        layers: fin.layers.clone(),
        bytes_before: fin.bytes_before,
        bytes_after: fin.bytes_after,
        val: pair(before_val, after_val),
        test: pair(before_test, after_test),
        steps: Some(BeforeAfter {
            before: before_step,
            after: outcome.steps,
        }),
        latency: if latency {
            let plain = plain_copy(t.exp, nodes, net, over)?;
            latencies(t.exp, &plain, &fin.net)?
        } else {
            Vec::new()
        },
    };
    outcome.val = after_val;
    outcome.test = after_test;
    Ok((fin, report))
}
