//! The plan as `kiln plan` prints it: the experiment's settings, a table of its layers, the
//! totals, memory per device and per pipeline stage, the parameter groups, compression and what
//! crosses between devices each step. `kiln plan --format yaml` serialises the [`Plan`] itself.

use std::fmt::Write;

use super::{fmt_bytes, fmt_count};
use crate::ir::{DataPlacement, Device, OptimizerKind};
use crate::plan::compress::percent;
use crate::plan::groups::GroupRow;
use crate::plan::schedule::ScheduleRow;
use crate::plan::sharding::Sharding;
use crate::plan::splits::SplitRow;
use crate::plan::tensor::TensorPlan;
use crate::plan::{AttentionKernel, CompressionPlan, DataRow, DeviceNeed, Plan};
use crate::table::{
    self,
    Align::{Left, Right},
};

/// `activations 1.00 MiB`, or the evaluation's when they are larger (they are counted instead).
fn activations(d: &DeviceNeed) -> String {
    if d.eval_activation_bytes > d.activation_bytes {
        format!(
            "evaluation activations {} (training {})",
            fmt_bytes(d.eval_activation_bytes),
            fmt_bytes(d.activation_bytes)
        )
    } else {
        format!("activations {}", fmt_bytes(d.activation_bytes))
    }
}

/// What a device's total adds up: weights, gradients, optimizer state and activations (where
/// backward frees the activations as it makes the gradients, their peak together), and the
/// allocator's margin.
fn terms(d: &DeviceNeed) -> String {
    let margin = if d.allocator_margin_bytes > 0 {
        format!(
            " + allocator margin {}",
            fmt_bytes(d.allocator_margin_bytes)
        )
    } else {
        String::new()
    };
    format!("{}{margin}", tensor_terms(d))
}

/// The tensors' terms of a device's total.
fn tensor_terms(d: &DeviceNeed) -> String {
    let (w, g, o) = (
        fmt_bytes(d.weight_bytes),
        fmt_bytes(d.gradient_bytes),
        fmt_bytes(d.optimizer_bytes),
    );
    let Some(peak) = d.backward_peak_bytes else {
        return format!(
            "weights {w} + gradients {g} + optimizer {o} + {}",
            activations(d)
        );
    };
    if d.gradient_bytes.saturating_add(d.eval_activation_bytes) > peak {
        format!(
            "weights {w} + gradients {g} + optimizer {o} + evaluation activations {} (training {}; with the gradients {} at most at once)",
            fmt_bytes(d.eval_activation_bytes),
            fmt_bytes(d.activation_bytes),
            fmt_bytes(peak)
        )
    } else {
        format!(
            "weights {w} + optimizer {o} + gradients and activations {} at most at once (gradients {g}, activations {}: backward frees activations as it makes gradients)",
            fmt_bytes(peak),
            fmt_bytes(d.activation_bytes)
        )
    }
}

/// The units of `parallel fsdp` and what a rank holds of them.
/// How a tensor degree splits the layers, and what a rank keeps.
fn tensor(out: &mut String, t: &TensorPlan, sharded: bool) {
    let _ = writeln!(
        out,
        "\ntensor parallel over {} ranks (ranks d·{} .. d·{} + {} of data rank d), {} data {}{}",
        t.degree,
        t.degree,
        t.degree,
        t.degree - 1,
        t.data,
        if sharded { "rank" } else { "replica" },
        if t.data == 1 { "" } else { "s" }
    );
    let header = ["layer", "split"].map(String::from);
    let rows: Vec<Vec<String>> = t
        .splits
        .iter()
        .map(|s| vec![s.layer.clone(), s.how.clone()])
        .collect();
    *out += &table::render(&header, &rows, &[Left, Left], "  ");
    let _ = writeln!(
        out,
        "  a tensor rank's pieces: {} parameters (of the split layers, the rest whole){}; activations are counted whole on every rank",
        fmt_count(t.rank_params),
        if sharded {
            ", which fsdp shards over the data ranks"
        } else {
            ""
        }
    );
}

fn sharding(out: &mut String, s: &Sharding) {
    let _ = writeln!(out, "\nsharding over {} ranks", s.world_size);
    let header = ["unit", "params", "shard per rank"].map(String::from);
    let rows: Vec<Vec<String>> = s
        .units
        .iter()
        .map(|u| {
            vec![
                u.name.clone(),
                fmt_count(u.params),
                fmt_count(u.shard_params),
            ]
        })
        .collect();
    *out += &table::render(&header, &rows, &[Left, Right, Right], "  ");
    let gathered = if s.reshard_after_forward {
        "the root and the largest block"
    } else {
        "every unit, until backward ends"
    };
    let _ = writeln!(
        out,
        "  a rank holds shards of {} parameters; gathered at once: {} ({gathered}); gradients held whole before their reduction: {}; buffers of the collectives, kept for reuse: {} values for gathers and {} for reductions",
        fmt_count(s.shard_params),
        fmt_count(s.gathered_params),
        fmt_count(s.unreduced_gradients),
        fmt_count(s.gather_buffers),
        fmt_count(s.reduce_buffers)
    );
}

/// Renders a plan as a table for people.
pub fn to_text(p: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "experiment {}", p.experiment);
    if !p.trial.is_empty() {
        let t: Vec<String> = p.trial.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        let _ = writeln!(out, "trial      {}", t.join(", "));
    }
    let _ = writeln!(
        out,
        "input      {}  batch {} (micro-batch {})  {}  {}{}",
        p.input,
        p.batch,
        p.micro_batch,
        p.precision,
        p.optimizer,
        if p.optimizer_fused { " (fused)" } else { "" }
    );
    let _ = writeln!(out, "data       {}", data(&p.data));
    let _ = writeln!(out, "           {}", residence(&p.data));
    splits(&mut out, &p.splits);
    let _ = write!(out, "schedule   ");
    schedule(&mut out, &p.schedule, 11);
    let _ = writeln!(out, "parallel   {}\n", p.parallel);
    // Columns as wide as their widest cell: long names, shapes and counts stay aligned.
    let header = [
        "layer",
        "kind",
        "output",
        "params",
        "flops/sample",
        "kept",
        "device",
    ]
    .map(String::from);
    let rows: Vec<Vec<String>> = p
        .layers
        .iter()
        .map(|l| {
            vec![
                l.name.clone(),
                l.kind.clone(),
                l.output.to_string(),
                fmt_count(l.params),
                fmt_count(l.flops),
                fmt_bytes(l.activation_bytes),
                l.device.to_string(),
            ]
        })
        .collect();
    out += &table::render(
        &header,
        &rows,
        &[Left, Left, Left, Right, Right, Right, Left],
        "",
    );
    let _ = writeln!(
        out,
        "kept: the activations backward keeps that the layer made, per micro-batch of {}",
        p.micro_batch
    );
    let t = &p.totals;
    let _ = writeln!(out, "\nparameters        {}", fmt_count(t.params));
    let _ = writeln!(out, "weights           {}", fmt_bytes(t.weight_bytes));
    let _ = writeln!(out, "gradients         {}", fmt_bytes(t.gradient_bytes));
    let _ = writeln!(out, "optimizer state   {}", fmt_bytes(t.optimizer_bytes));
    let _ = writeln!(
        out,
        "activations       {} per batch of {}{}",
        fmt_bytes(t.activation_bytes),
        p.batch,
        t.activation_bytes_without_recompute
            .map_or_else(String::new, |w| format!(
                " (recompute; {} without)",
                fmt_bytes(w)
            ))
    );
    let _ = writeln!(
        out,
        "evaluation        {} per evaluation batch of {} (no gradients: the batch + the widest layer)",
        fmt_bytes(t.eval_activation_bytes),
        p.eval_batch
    );
    let _ = writeln!(
        out,
        "forward FLOPs     {} per sample",
        fmt_count(t.forward_flops_per_sample)
    );
    let _ = writeln!(
        out,
        "step FLOPs        {} (forward + backward, batch {})",
        fmt_count(t.step_flops),
        p.batch
    );
    let _ = writeln!(out, "\nmemory per device");
    for d in &p.devices {
        let each = if d.replicas > 1 {
            format!(" (each of {})", d.replicas)
        } else {
            String::new()
        };
        let cap = d
            .capacity_bytes
            .map_or(String::new(), |c| format!(" of {}", fmt_bytes(c)));
        let _ = writeln!(
            out,
            "  {:<8} {}{}{}  = {}{}",
            d.device.to_string(),
            fmt_bytes(d.total_bytes),
            cap,
            each,
            terms(d),
            if d.data_bytes > 0 {
                format!(" + data {}", fmt_bytes(d.data_bytes))
            } else {
                String::new()
            }
        );
    }
    if !p.stages.is_empty() {
        let _ = writeln!(out, "\nmemory per pipeline stage");
    }
    for s in &p.stages {
        let d = &s.memory;
        let _ = writeln!(
            out,
            "  stage {} ({} .. {}) on {}: {}  = weights {} + gradients {} + optimizer {} + {} + allocator margin {} ({} micro-batch{} in flight)",
            s.stage,
            s.first,
            s.last,
            d.device,
            fmt_bytes(d.total_bytes),
            fmt_bytes(d.weight_bytes),
            fmt_bytes(d.gradient_bytes),
            fmt_bytes(d.optimizer_bytes),
            activations(d),
            fmt_bytes(d.allocator_margin_bytes),
            s.in_flight,
            if s.in_flight == 1 { "" } else { "es" }
        );
    }
    assumed(&mut out, &p.attention_kernels);
    if let Some(sh) = &p.sharding {
        sharding(&mut out, sh);
    }
    if let Some(t) = &p.tensor {
        tensor(&mut out, t, p.sharding.is_some());
    }
    groups(&mut out, &p.groups);
    if let Some(c) = &p.compression {
        compression(&mut out, c);
    }
    let c = &p.communication;
    let sharded = p.sharding.as_ref().filter(|s| s.world_size > 1);
    if c.transfers.is_empty()
        && c.allreduce.is_none()
        && c.pipeline_bubble.is_none()
        && sharded.is_none()
        && p.tensor.is_none()
    {
        return out;
    }
    let _ = writeln!(out, "\ncommunication per step");
    for t in &c.transfers {
        let _ = writeln!(
            out,
            "  {} -> {}  {} -> {}  {} forward, as many bytes of gradients back",
            t.after,
            t.to_layer,
            t.from,
            t.to,
            fmt_bytes(t.bytes_per_step)
        );
    }
    if let Some(a) = &c.allreduce {
        let _ = writeln!(
            out,
            "  all-reduce of {} of gradients over {} replicas: each sends and receives {} (ring)",
            fmt_bytes(a.bytes),
            a.replicas,
            fmt_bytes(a.ring_bytes_per_replica)
        );
    }
    if let Some(sh) = sharded {
        let _ = writeln!(
            out,
            "  all-gather of {} of weights and reduce-scatter of {} of gradients over {} ranks: each sends and receives {} (ring)",
            fmt_bytes(sh.all_gather_bytes),
            fmt_bytes(sh.reduce_scatter_bytes),
            sh.world_size,
            fmt_bytes(sh.ring_bytes_per_rank)
        );
    }
    if let Some(t) = &p.tensor {
        let gathers = match t.gathers_per_step {
            0 => String::new(),
            n => format!(
                " and {} all-gathers of the head's outputs ({} gathered)",
                fmt_count(n),
                fmt_bytes(t.gather_bytes_per_step)
            ),
        };
        let _ = writeln!(
            out,
            "  {} all-reduces of activations and their gradients ({} summed){gathers} over {} tensor ranks: each rank sends and receives {} (ring)",
            fmt_count(t.sums_per_step),
            fmt_bytes(t.sum_bytes_per_step),
            t.degree,
            fmt_bytes(t.ring_bytes_per_rank)
        );
    }
    if let Some(b) = c.pipeline_bubble {
        let _ = writeln!(
            out,
            "  pipeline bubble: each stage idles {:.1}% of a step, (stages - 1) / (micro-batches + stages - 1)",
            100.0 * b
        );
    }
    out
}

/// `idx: 10,000 samples of [28, 28]`, or what is known of it.
fn data(row: &DataRow) -> String {
    let samples = match row.samples {
        Some(n) => format!("{} sample{}", fmt_count(n), if n == 1 { "" } else { "s" }),
        None if row.source == "synthetic" => String::new(),
        None => "samples not read (file not here or too large to count)".into(),
    };
    let read = match &row.sample {
        Some(dims) => {
            let d: Vec<String> = dims.iter().map(u64::to_string).collect();
            format!("{}: {samples} of [{}]", row.source, d.join(", "))
        }
        None => format!("{}: {samples}", row.source),
    };
    let Some(a) = row.augment else {
        return read;
    };
    let mut how = Vec::new();
    if a.crop > 0 {
        how.push(format!("random crop after padding {}", a.crop));
    }
    if a.flip {
        how.push("left-right flip".to_string());
    }
    format!("{read}; training batches augmented: {}", how.join(", "))
}

/// Where the loaded data lives while training, with its bytes and why.
fn residence(row: &DataRow) -> String {
    let bytes = row
        .bytes
        .map_or_else(|| "size unknown".to_string(), fmt_bytes);
    let device = row.device;
    if device == Device::Cpu {
        return format!(
            "loaded: {bytes} in memory, batches gathered there (the device is the CPU)"
        );
    }
    let why = match (row.placement, row.fits) {
        (DataPlacement::Device, _) => "placement device".to_string(),
        (DataPlacement::Host, _) => "placement host".to_string(),
        (DataPlacement::Auto, Some(true)) => {
            format!("placement auto: it fits beside the model in {device}'s declared memory")
        }
        (DataPlacement::Auto, Some(false)) => {
            format!(
                "placement auto: it does not fit beside the model in {device}'s declared memory"
            )
        }
        (DataPlacement::Auto, None) if row.bytes.is_some() => {
            return format!(
                "loaded: {bytes}, kept on {device} if it fits beside the model in the device's memory, read when the run starts (placement auto; a `memory` line or `--device-memory` decides here)"
            );
        }
        (DataPlacement::Auto, None) => {
            "placement auto: the size is unknown; `placement device` keeps it there".to_string()
        }
    };
    if row.on_device {
        format!("loaded: {bytes} on {device}, batches gathered there ({why})")
    } else {
        format!("loaded: {bytes} in host memory, each batch copied to {device} ({why})")
    }
}

/// `val        npy("val_x.npy", "val_y.npy")`, one line per split.
fn splits(out: &mut String, rows: &[SplitRow]) {
    for r in rows {
        let what = match r.samples {
            Some(n) => format!("{n} samples"),
            None => {
                let files: Vec<String> = r.files.iter().map(|f| format!("{f:?}")).collect();
                files.join(", ")
            }
        };
        let _ = writeln!(
            out,
            "{:<10} own source {}({what})",
            format!("{} split", r.split),
            r.source
        );
    }
}

/// `cosine(warmup: 500 steps, min_lr: 0, start_factor: 0.1)`; a sequence on
/// one line per schedule, indented by `indent`.
fn schedule(out: &mut String, r: &ScheduleRow, indent: usize) {
    if r.schedules.is_empty() {
        let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(out, "{}({})", r.name, params.join(", "));
        return;
    }
    let _ = writeln!(out, "sequence, milestones [{}]", r.milestones.join(", "));
    for (i, s) in r.schedules.iter().enumerate() {
        let from = match i {
            0 => "from the start".to_string(),
            _ => format!(
                "from {}",
                r.milestones.get(i - 1).map_or("?", String::as_str)
            ),
        };
        let _ = write!(out, "{:indent$}{i}. {from}: ", "");
        schedule(out, s, indent + 3);
    }
}

/// The settings of an algorithm besides the learning rate and weight decay, in words.
fn settings(kind: &OptimizerKind) -> String {
    match kind {
        OptimizerKind::Sgd {
            momentum,
            dampening,
            nesterov,
        } => format!("momentum {momentum}, dampening {dampening}, nesterov {nesterov}"),
        OptimizerKind::Adam {
            betas,
            eps,
            amsgrad,
        }
        | OptimizerKind::AdamW {
            betas,
            eps,
            amsgrad,
        } => format!(
            "betas [{}, {}], eps {eps:e}, amsgrad {amsgrad}",
            betas.0, betas.1
        ),
        OptimizerKind::RmsProp {
            alpha,
            eps,
            momentum,
            centered,
        } => format!("alpha {alpha}, eps {eps:e}, momentum {momentum}, centered {centered}"),
    }
}

/// The most tensor names a group's line lists in text; YAML lists them all.
const SHOWN: usize = 8;

/// Writes the groups as text, after the plan's totals.
fn groups(out: &mut String, rows: &[GroupRow]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nparameter groups");
    for r in rows {
        let what = if r.select.is_empty() {
            "in no group".to_string()
        } else {
            r.select.join(", ")
        };
        let n = r.tensors.len();
        let _ = writeln!(
            out,
            "  {what}: {} parameter{} in {n} tensor{}; lr {}, weight_decay {}, {}",
            fmt_count(r.params),
            if r.params == 1 { "" } else { "s" },
            if n == 1 { "" } else { "s" },
            r.lr,
            r.weight_decay,
            settings(&r.optimizer)
        );
        if n > 0 {
            let mut names = r.tensors[..n.min(SHOWN)].join(", ");
            if n > SHOWN {
                let _ = write!(names, ", ... ({n} in all)");
            }
            let _ = writeln!(out, "    {names}");
        }
    }
}

/// The compression section, after the parameter groups.
fn compression(out: &mut String, c: &CompressionPlan) {
    let _ = writeln!(out, "\ncompression (parameters' bytes before -> after)");
    // Columns as wide as their widest cell.
    let w = c
        .layers
        .iter()
        .map(|l| l.layer.chars().count())
        .max()
        .unwrap_or(5)
        .max(5);
    let b = c
        .layers
        .iter()
        .flat_map(|l| [l.bytes_before, l.bytes_after])
        .chain([c.model_bytes_before, c.model_bytes_after])
        .map(|n| fmt_bytes(n).len())
        .max()
        .unwrap_or(0);
    for l in &c.layers {
        let mut notes = Vec::new();
        if let Some(s) = l.sparsity {
            notes.push(format!("{} sparse, dense bytes unchanged", percent(s)));
        }
        if let Some(g) = &l.global {
            notes.push(format!(
                "{} sparse over its {} targets together, dense bytes unchanged",
                percent(g.sparsity),
                g.targets
            ));
        }
        if let Some(k) = &l.kept {
            notes.push(format!("keeps {} of {} {}", k.units, k.of, k.along));
        }
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!("  ({})", notes.join("; "))
        };
        let _ = writeln!(
            out,
            "  {:<w$}  {:>b$} -> {:>b$}  x{:.2}{notes}",
            l.layer,
            fmt_bytes(l.bytes_before),
            fmt_bytes(l.bytes_after),
            l.bytes_before as f64 / l.bytes_after.max(1) as f64,
        );
        for s in &l.steps {
            let _ = writeln!(out, "  {:<w$}    {s}", "");
        }
    }
    let _ = writeln!(
        out,
        "  {:<w$}  {:>b$} -> {:>b$}  x{:.2} smaller",
        "model",
        fmt_bytes(c.model_bytes_before),
        fmt_bytes(c.model_bytes_after),
        c.ratio
    );
}

/// What the memory figures assume: each attention's kernel, and tensors at their size.
fn assumed(out: &mut String, kernels: &[AttentionKernel]) {
    let _ = writeln!(out, "  assumed:");
    for k in kernels {
        let names = match k.layers.as_slice() {
            [one] => format!("`{one}`"),
            [first, .., last] => format!("{} layers, `{first}` to `{last}`", k.layers.len()),
            [] => String::new(),
        };
        let [h, s, _] = k.scores;
        let scores = format!("[{h}, {s}, {s}]");
        let more = fmt_bytes(k.math_bytes_per_sample);
        let _ = match (k.runs, k.kernel) {
            ("cuda", _) => writeln!(
                out,
                "    attention in {names}: flash or memory-efficient attention on CUDA, which keep no {scores} scores; libtorch's math kernel, its fallback for a head size or mask neither takes, would keep 3 of them in fp32, {more} more per sample"
            ),
            ("cpu", "fused") => writeln!(
                out,
                "    attention in {names}: libtorch's flash attention on the CPU (no dropout on the weights), which keeps no {scores} scores"
            ),
            ("cpu", _) => writeln!(
                out,
                "    attention in {names}: dropout on the attention weights runs the math path on the CPU, which keeps 3 {scores} fp32 tensors, {more} per sample"
            ),
            (_, "fused") => writeln!(
                out,
                "    attention in {names}: `device auto` counted as the CPU runs it, the larger: no {scores} scores kept"
            ),
            _ => writeln!(
                out,
                "    attention in {names}: `device auto` counted as the CPU runs it, the larger: 3 {scores} fp32 tensors kept, {more} per sample (flash or memory-efficient attention on CUDA would keep none)"
            ),
        };
    }
    let _ = writeln!(
        out,
        "    tensors at their size, and an allocator margin of the largest one (Kiln's host allocator on the CPU maps at most the most alive at once plus the largest block; CUDA's caching allocator, which rounds large blocks up to 2 MiB, is assumed to fit in it, unmeasured)"
    );
}
