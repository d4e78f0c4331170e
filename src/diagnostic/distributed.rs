//! Wording of the failures of a distributed run (K0514 to K0517).

use super::problem::Problem;
use super::Diagnostic;
use crate::diagnostic::problem::Running;
use crate::span::Span;

/// Distributed problems in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    let new = |span: Span, message: String| Diagnostic::new(code, span, message);
    let who = |rank: Option<usize>| rank.map_or_else(String::new, |r| format!("rank {r}: "));
    match problem {
        Problem::Running(Running::RankFailed {
            span,
            rank,
            stopped,
            detail,
        }) => {
            let what = stopped.map_or_else(
                || "a peer rank closed the connection".to_string(),
                |s| format!("rank {s} stopped"),
            );
            new(span, format!("{}{what} ({detail})", who(rank)))
                .label("every rank of this run stops")
                .help("see the first rank that failed for the cause; a run that kept checkpoints resumes with `--resume RUN_DIR` at the same world size")
        }
        Problem::Running(Running::RendezvousFailed {
            span,
            rank,
            missing,
            address,
            timeout_s,
            detail,
        }) => {
            let message = if missing.is_empty() {
                format!(
                    "rank {rank}: the rendezvous at {address} failed within {timeout_s}s ({})",
                    detail.unwrap_or_default()
                )
            } else {
                let names: Vec<String> = missing.iter().map(usize::to_string).collect();
                format!(
                    "rank {rank}: rank{} {} never arrived at {address} within {timeout_s}s",
                    if missing.len() > 1 { "s" } else { "" },
                    names.join(", ")
                )
            };
            new(span, message)
                .label("waits for every rank")
                .help("start every rank (torchrun or SLURM with the same MASTER_ADDR and MASTER_PORT), check that the address is reachable from each machine, or raise `timeout`")
        }
        Problem::Running(Running::RanksDiffer {
            span,
            rank,
            other,
            differences,
        }) => new(
            span,
            match other {
                Some(other) => format!(
                    "rank {rank} and rank {other} run different experiments: {}",
                    differences.join("; ")
                ),
                None => format!(
                    "rank {rank} was started otherwise than the experiment says: {}",
                    differences.join("; ")
                ),
            },
        )
        .label("every rank must run the same experiment")
        .help("start every rank from the same experiment file, data and world size"),
        Problem::Running(Running::BackendUnavailable {
            span,
            backend,
            detail,
        }) => new(
            span,
            format!("the `{backend}` backend cannot run here: {detail}"),
        )
        .label(format!("asks for `{backend}`"))
        .help("use `backend: gloo`, which runs on the CPU and on CUDA devices"),
        _ => unreachable!("only distributed problems are passed to distributed::words"),
    }
}
