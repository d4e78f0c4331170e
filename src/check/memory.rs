//! The plan's memory per device against the capacities declared: a file's `memory` line the
//! plan exceeds is a warning (K0402), a capacity `--device-memory` gives is an error (K0228) that
//! says which changes would fit (more ranks, fsdp, resharding, `recompute`).

use super::cx::Cx;
use super::recompute;
use crate::diagnostic::problem::{Strategies, Warnings};
use crate::diagnostic::Problem;
use crate::ir::{Device, Experiment};
use crate::plan;
use crate::span::Span;

/// Compares the plan's memory per device with the capacities declared: a `memory` line of the
/// file that the plan exceeds is a warning (K0402); a capacity `--device-memory` gives is a
/// promise the configuration must keep, so exceeding it is an error (K0228) that says what
/// would fit.
pub(super) fn check(cx: &mut Cx, e: &Experiment, device_memory: &[(Device, u64)]) {
    let plan = plan::plan(e);
    for need in &plan.devices {
        let declared = device_memory
            .iter()
            .find(|(d, _)| *d == need.device)
            .map(|(_, b)| (*b, None))
            .or_else(|| {
                e.memory
                    .iter()
                    .find(|(d, _, _)| *d == need.device)
                    .map(|(_, b, s)| (*b, Some(*s)))
            });
        let Some((capacity, span)) = declared else {
            continue;
        };
        if need.total_bytes <= capacity {
            continue;
        }
        let bytes = [
            need.weight_bytes,
            need.gradient_bytes,
            need.optimizer_bytes,
            need.activation_bytes,
        ];
        let on = |p: &plan::Plan| {
            p.devices
                .iter()
                .find(|d| d.device == need.device)
                .map(|d| d.total_bytes)
        };
        let recompute = recomputed_need(e).and_then(|(blocks, p)| {
            let then = on(&p)?;
            (then < need.total_bytes).then_some((blocks, then))
        });
        if span.is_some() {
            cx.report(Problem::Warnings(Warnings::MemoryExceeded {
                span: span.unwrap_or(e.data.batch_span),
                device: need.device,
                need: bytes,
                total: need.total_bytes,
                capacity,
                batch: span.map(|_| (e.data.batch, e.data.batch_span)),
                recompute,
            }));
            continue;
        }
        let mut changes: Vec<(String, u64)> = sharding_changes(e, capacity)
            .into_iter()
            .filter_map(|(change, p)| Some((change, on(&p)?)))
            .filter(|(_, then)| *then < need.total_bytes)
            .collect();
        if let Some((blocks, then)) = recompute {
            let names: Vec<String> = blocks.iter().map(|b| format!("`{b}`")).collect();
            changes.push((
                format!("`recompute` after block {}", names.join(", ")),
                then,
            ));
        }
        changes.sort_by_key(|(_, then)| *then);
        let span = match e.parallel {
            crate::ir::Parallel::Distributed { span, .. } => span,
            crate::ir::Parallel::None
            | crate::ir::Parallel::Model
            | crate::ir::Parallel::Data { .. }
            | crate::ir::Parallel::Pipeline { .. } => e.data.batch_span,
        };
        cx.report(Problem::Strategies(Strategies::DoesNotFit {
            span,
            device: need.device,
            need: bytes,
            total: need.total_bytes,
            capacity,
            changes,
        }));
    }
}

/// The changes of a distributed strategy that lower each rank's memory, with their plans:
/// sharding a `ddp` run (`fsdp` at its world size), resharding after forward, and the fewest
/// ranks (up to 1,024, dividing the batch) at which the plan fits `capacity`. Under tensor
/// parallel the changes keep the tensor degree and shard or multiply its data ranks
/// (`mesh(tensor: T, fsdp: N)`).
fn sharding_changes(e: &Experiment, capacity: u64) -> Vec<(String, plan::Plan)> {
    let crate::ir::Parallel::Distributed {
        world_size,
        sharding,
        tensor,
        ..
    } = &e.parallel
    else {
        return Vec::new();
    };
    let tensor = (*tensor).max(1);
    let data = world_size / tensor;
    // The experiment with `ranks` data ranks sharding as `s`, its tensor degree kept.
    let with = |ranks: u64, s: crate::ir::Sharding| {
        let mut e = e.clone();
        let per_rank = ranks.saturating_mul(e.train.accumulate.max(1));
        if per_rank == 0 || !e.data.batch.is_multiple_of(per_rank) {
            return None;
        }
        e.train.micro_batch = e.data.batch / per_rank;
        if let crate::ir::Parallel::Distributed {
            world_size,
            sharding,
            ..
        } = &mut e.parallel
        {
            (*world_size, *sharding) = (ranks.saturating_mul(tensor), Some(s));
        }
        Some(plan::plan(&e))
    };
    // The change in words: `parallel fsdp` over N ranks, or the mesh with N fsdp ranks.
    let fsdp = |n: u64| match tensor {
        1 => format!("`parallel fsdp` over {n} ranks"),
        t => format!("`parallel mesh(tensor: {t}, fsdp: {n})`"),
    };
    let fits = |p: &plan::Plan| p.devices.iter().all(|d| d.total_bytes <= capacity);
    let mut out = Vec::new();
    let resharded = crate::ir::Sharding {
        reshard_after_forward: true,
    };
    match sharding {
        None => {
            if let Some(p) = with(data, resharded) {
                out.push((fsdp(data), p));
            }
        }
        Some(s) if !s.reshard_after_forward => {
            if let Some(p) = with(data, resharded) {
                out.push(("`reshard_after_forward: true`".to_string(), p));
            }
        }
        Some(_) => {}
    }
    let s = sharding.unwrap_or(resharded);
    if let Some((n, p)) = (data + 1..=1024)
        .filter_map(|n| Some((n, with(n, s)?)))
        .find(|(_, p)| fits(p))
    {
        let what = match (sharding.is_some(), tensor) {
            (true, 1) => format!("`world_size: {n}`"),
            (true, _) => format!("`fsdp: {n}`"),
            (false, _) => fsdp(n),
        };
        out.push((what, p));
    }
    out
}

/// The plan of `e` with `recompute` after every top-level block that may take it (not already
/// recomputed, holding no batch norm), with those blocks' names; `None` when there is none or
/// the experiment trains with quantization-aware training.
fn recomputed_need(e: &Experiment) -> Option<(Vec<String>, plan::Plan)> {
    if recompute::qat(&e.compression).is_some() {
        return None;
    }
    let mut e = e.clone();
    let mut blocks = Vec::new();
    for node in &mut e.model.nodes {
        if let crate::ir::Node::Block {
            name,
            nodes,
            span,
            recompute: recompute @ None,
        } = node
        {
            if !recompute::holds_batch_norm(nodes) {
                *recompute = Some(*span);
                blocks.push(name.clone());
            }
        }
    }
    (!blocks.is_empty()).then(|| (blocks, plan::plan(&e)))
}

/// The capacities `--device-memory` gives, in place of the file's `memory` lines.
pub(super) fn apply_overrides(e: &mut Experiment, device_memory: &[(Device, u64)]) {
    for (device, bytes) in device_memory {
        e.memory.retain(|(d, _, _)| d != device);
        e.memory.push((*device, *bytes, Span::default()));
    }
}
