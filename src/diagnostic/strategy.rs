//! Wording of strategy, sweep and warning problems (K0201 to K0211, K0401 to K0407, K0410).

use super::counted;
use super::problem::{Ignored, Inconsistent, Problem, Sweep};
use super::{Code, Diagnostic};
use crate::diagnostic::problem::{Strategies, Warnings};
use crate::present::{fmt_bytes, fmt_count};
use crate::span::Span;

fn s(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Strategy and warning problems in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    let new = |span: Span, message: String| Diagnostic::new(code, span, message);
    match problem {
        Problem::Strategies(Strategies::PipelineOneStage { span, stages }) => new(
            span,
            format!("a pipeline of {stages} stage runs nothing in parallel"),
        )
        .label("needs at least 2 stages")
        .help("use 2 or more stages, or `parallel none`"),
        Problem::Strategies(Strategies::DdpWithoutWorldSize { span }) => new(span, "distributed data parallel needs a world size".into())
            .label("`world_size` missing")
            .help("add `world_size: N`, the number of processes (as torchrun's --nproc-per-node x nodes)"),
        Problem::Strategies(Strategies::Fp8OnCpu {
            span,
            layer,
            layer_span,
        }) => new(
            span,
            format!("FP8 quantization of `{layer}`, which runs on the CPU"),
        )
        .label("FP8 needs a CUDA device")
        .with(layer_span, "runs on cpu")
        .help("place the layer on a CUDA device, or use `int8`"),
        Problem::Strategies(Strategies::Int4NonLinear {
            span,
            layer,
            layer_span,
        }) => new(
            span,
            format!("INT4 quantization of `{layer}`, which is not linear"),
        )
        .label("INT4 applies to linear layers")
        .with(layer_span, "this layer is not linear")
        .help("quantize this layer with `int8`, or target linear layers only"),
        Problem::Strategies(Strategies::BatchArithmetic {
            span,
            batch,
            accumulate: (accumulate, accumulate_span),
            replicas: (dp, dp_span),
            micro: None,
        }) => {
            let per_step = accumulate * dp;
            let mut d = new(
                span,
                format!(
                    "batch {batch} does not split into {accumulate} accumulation step{} x {dp} replica{}",
                    s(accumulate),
                    s(dp)
                ),
            )
            .label(format!("{batch} is not a multiple of {per_step}"));
            if let Some(at) = accumulate_span {
                d = d.with(at, format!("{accumulate} accumulation steps"));
            }
            if let Some(at) = dp_span {
                d = d.with(at, counted(dp, "replica"));
            }
            d.help(format!("choose a batch that is a multiple of {per_step}"))
        }
        Problem::Strategies(Strategies::BatchArithmetic {
            span,
            batch,
            accumulate: (accumulate, _),
            replicas: (dp, dp_span),
            micro: Some((declared, batch_span)),
        }) => {
            let per_step = accumulate * dp;
            let mut d = new(
                span,
                format!(
                    "micro-batch {declared} x {accumulate} accumulation x {} = {}, not the batch {batch}",
                    counted(dp, "replica"),
                    declared * per_step
                ),
            )
            .label(format!(
                "the batch gives micro-batches of {}",
                batch / per_step.max(1)
            ))
            .with(batch_span, format!("global batch {batch}"));
            if let Some(at) = dp_span {
                d = d.with(at, counted(dp, "replica"));
            }
            d.help("global batch = micro-batch x accumulation x data-parallel size")
        }
        Problem::Strategies(Strategies::MicroBatches {
            span,
            micro_batches,
            per_step,
            batch: (batch, batch_span),
            accumulate,
        }) => {
            let mut d = new(
                span,
                format!("{micro_batches} micro-batches do not divide the batch of {per_step}"),
            )
            .label(format!("{per_step} is not a multiple of {micro_batches}"))
            .with(batch_span, format!("batch {batch}"));
            if let Some((n, at)) = accumulate {
                d = d.with(
                    at,
                    format!("{n} accumulation steps leave {per_step} per step"),
                );
            }
            d.help(format!("choose micro-batches that divide {per_step}"))
        }
        Problem::Strategies(Strategies::TooManyStages {
            span,
            stages,
            layers,
        }) => new(
            span,
            format!("{stages} pipeline stages but the model has {layers} top-level layers"),
        )
        .label(format!("at most {layers}"))
        .help("use fewer stages, or group fewer layers into blocks"),
        Problem::Strategies(Strategies::MeshNotRun { span, what, other }) => {
            let d = new(span, format!("this version of Kiln does not run {what}"))
                .label("not run together with the rest of the mesh");
            match other {
                Some(o) => d.with(o, "the other dimension"),
                None => d,
            }
            .help("today a mesh runs data replication or fsdp, each alone or with tensor parallel; drop one of the two, or set its degree to 1")
        }
        Problem::Strategies(Strategies::TensorIndivisible {
            span,
            layer,
            what,
            size,
            degree,
            degree_span,
        }) => {
            let (words, fix) = match what {
                "heads" => ("heads", "a head count"),
                _ => ("hidden units", "a hidden width"),
            };
            new(
                span,
                format!("`{layer}` has {size} {words}, which {degree} tensor ranks cannot share equally"),
            )
            .label(format!("{size} {words}"))
            .with(degree_span, format!("tensor degree {degree}"))
            .help(format!("use {fix} that {degree} divides, or a tensor degree that divides {size}"))
        }
        Problem::Strategies(Strategies::PlacementConflict {
            span,
            name,
            device,
            first: (first, first_name, first_device),
        }) => new(span, format!("`{name}` is placed twice"))
            .label(format!("placed on {device} here"))
            .with(first, format!("`{first_name}` placed on {first_device} here"))
            .help("place each layer or block once, inline (`on`) or with `place`"),
        Problem::Strategies(Strategies::Inconsistent { span, situation }) => inconsistent(code, span, situation),
        Problem::Strategies(Strategies::BadSweep { span, situation }) => {
            let (message, help) = match situation {
                Sweep::Nested => ("a sweep inside a sweep".to_string(), "sweep each setting once; the grid combines them"),
                Sweep::Arguments => (
                    "expected `range(start, stop, step)` or `logspace(low, high, count)`".to_string(),
                    "give plain numbers, positionally",
                ),
                Sweep::EmptyRange => (
                    "an empty range".to_string(),
                    "ranges go from start up to (not including) stop, by a positive step",
                ),
                Sweep::Logspace => (
                    "a logspace needs positive bounds and a count of 2 or more".to_string(),
                    "write `logspace(1e-4, 1e-2, 3)`",
                ),
                Sweep::NotAList => (
                    "a sweep takes a list, `range(...)` or `logspace(...)`".to_string(),
                    "write `sweep [1e-3, 3e-4]`",
                ),
                Sweep::Empty => ("a sweep with no values".to_string(), "list at least one value"),
                Sweep::TooManyTrials { trials, max } => {
                    return new(
                        span,
                        format!(
                            "the sweeps make {} trials, more than {}",
                            fmt_count(trials),
                            fmt_count(max)
                        ),
                    )
                    .label("this sweep and the others multiply")
                    .help("sweep fewer values, or split the study into several files")
                }
            };
            new(span, message.clone()).label(message).help(help)
        }
        Problem::Warnings(Warnings::DataParallelOneDevice { span }) => new(span, "data parallel over one device".into())
            .label("one replica")
            .help("list two or more devices, or drop `parallel data`"),
        Problem::Warnings(Warnings::MemoryExceeded {
            span,
            device,
            need: [weights, gradients, optimizer, activations],
            total,
            capacity,
            batch,
            recompute,
        }) => {
            let recompute = recompute.map_or_else(String::new, |(blocks, then)| {
                let names: Vec<String> = blocks.iter().map(|b| format!("`{b}`")).collect();
                format!(
                    "; `recompute` after block {} would need {}{}",
                    names.join(", "),
                    fmt_bytes(then),
                    if then <= capacity { ", which fits" } else { "" }
                )
            });
            let d = new(
                span,
                format!(
                    "{device} needs {} but has {}",
                    fmt_bytes(total),
                    fmt_bytes(capacity)
                ),
            )
            .label(format!("{} available", fmt_bytes(capacity)))
            .help(format!(
                "weights {} + gradients {} + optimizer state {} + activations {}: lower the batch, use bf16, or spread the model over more devices{recompute}",
                fmt_bytes(weights),
                fmt_bytes(gradients),
                fmt_bytes(optimizer),
                fmt_bytes(activations)
            ));
            match batch {
                Some((b, at)) => d.with(at, format!("batch {b}")),
                None => d,
            }
        }
        Problem::Warnings(Warnings::ModelParallelOneDevice { span, device }) => new(span, format!("model parallel, but every layer runs on {device}"))
            .label("no layer is placed elsewhere")
            .help("place layers or blocks on other devices with `place fc2 on cuda:1`, or drop `parallel model`"),
        Problem::Warnings(Warnings::DoubleSoftmax { span, loss }) => new(
            span,
            "the model ends in softmax but `cross_entropy` applies its own".into(),
        )
        .label("softmax applied twice")
        .with(loss, "expects raw logits")
        .help("remove the final softmax; `cross_entropy` takes logits"),
        Problem::Warnings(Warnings::IgnoredSetting { span, situation }) => {
            let (message, label, help): (String, String, &str) = match situation {
                Ignored::EvalWithoutValidation => (
                    "`eval_every` has no effect without a validation split".into(),
                    "nothing to evaluate on".into(),
                    "add `split(train: 0.8, val: 0.2)` to the data, or drop `eval_every`",
                ),
                Ignored::CheckpointAfterEnd => (
                    "the checkpoint interval is longer than the training".into(),
                    "no checkpoint would be written before the end".into(),
                    "checkpoint more often than the training length",
                ),
                Ignored::AccuracyOnValues => (
                    "accuracy is not measured on real-valued targets".into(),
                    "ignored with a regression loss".into(),
                    "drop accuracy metrics, or train a classifier",
                ),
                Ignored::RegressionMetrics { metrics, loss } => {
                    let names: Vec<String> = metrics.iter().map(|m| format!("`{m}`")).collect();
                    let (names, are) = match names.as_slice() {
                        [one] => (one.clone(), "is"),
                        [init @ .., last] => (format!("{} and {last}", init.join(", ")), "are"),
                        [] => (String::new(), "are"),
                    };
                    (
                        format!("{names} {are} measured only with a regression loss, not with `{loss}`"),
                        format!("ignored with `{loss}`"),
                        "drop them, or train with `mse`, `l1`, `huber` or `smooth_l1`",
                    )
                }
                Ignored::WindowCoversSequence => (
                    "the attention `window` covers the whole sequence".into(),
                    "every key is within the window: nothing is masked".into(),
                    "give a window shorter than the sequence, or drop `window`",
                ),
            };
            new(span, message).label(label).help(help)
        }
        Problem::Warnings(Warnings::PlacementIgnored { span, parallel }) => new(
            span,
            "per-layer placement is ignored under data parallel".into(),
        )
        .label("ignored")
        .with(parallel, "every replica holds the whole model")
        .help("remove the placement, or use `parallel model` or `pipeline`"),
        Problem::Strategies(Strategies::DoesNotFit {
            span,
            device,
            need: [weights, gradients, optimizer, activations],
            total,
            capacity,
            changes,
        }) => {
            let mut terms = [
                ("optimizer state", optimizer),
                ("weights", weights),
                ("gradients", gradients),
                ("activations", activations),
            ];
            terms.sort_by_key(|t| std::cmp::Reverse(t.1));
            let largest = format!(
                "largest: {} {}, {} {}",
                terms[0].0,
                fmt_bytes(terms[0].1),
                terms[1].0,
                fmt_bytes(terms[1].1)
            );
            let fitting: Vec<String> = changes
                .iter()
                .filter(|(_, then)| *then <= capacity)
                .map(|(change, then)| format!("{change} ({})", fmt_bytes(*then)))
                .collect();
            let advice = match (fitting.is_empty(), changes.first()) {
                (false, _) => format!("it fits with {}", fitting.join("; or ")),
                (true, Some((change, then))) => format!(
                    "{change} would lower it to {}, still too much: lower the batch, use bf16, or add devices",
                    fmt_bytes(*then)
                ),
                (true, None) => "lower the batch, use bf16, or spread the model over more devices".into(),
            };
            new(
                span,
                format!(
                    "{device} needs {}, more than the {} `--device-memory` gives it",
                    fmt_bytes(total),
                    fmt_bytes(capacity)
                ),
            )
            .label(format!("does not fit in {}", fmt_bytes(capacity)))
            .help(format!("{largest}; {advice}"))
        }
        Problem::Warnings(Warnings::TensorSplitsNothing { span, degree }) => new(
            span,
            format!("tensor parallel over {degree} ranks splits no layer of this model"),
        )
        .label("every tensor rank computes the same thing")
        .help("tensor parallel splits attention, transformer blocks, pairs of linear layers with only activations between them, embeddings and a final linear head; use `data` ranks instead"),
        Problem::Warnings(Warnings::FsdpOneUnit { span }) => new(
            span,
            "the model has no top-level block, so fsdp shards it as one unit".into(),
        )
        .label("the whole model is gathered at every step")
        .help("group the layers into top-level blocks (`block b0 { ... }`): each is gathered only while it runs"),
        Problem::Warnings(Warnings::PipelineBatchNorm {
            span,
            layer,
            parallel,
            samples,
        }) => new(
            span,
            format!("batch norm `{layer}` in a pipeline normalises each micro-batch on its own"),
        )
        .label(format!(
            "statistics over {samples} sample{} at a time, not the batch",
            s(samples)
        ))
        .with(parallel, "the batch is cut into micro-batches here")
        .help("use `layernorm` or `groupnorm`, or fewer, larger micro-batches"),
        Problem::Warnings(Warnings::DropoutSharedGenerator {
            span,
            parallel,
            device,
            replicas,
        }) => new(
            span,
            format!("dropout on {replicas} replicas that share `{device}` is not reproducible"),
        )
        .label("its masks come from one generator, in whatever order the replicas' threads run")
        .with(parallel, "replicas share a device here")
        .help("give each replica its own device, or accept that runs with the same seed differ"),
        _ => unreachable!("only strategy and warning problems are worded here"),
    }
}

/// K0210 in words.
fn inconsistent(code: Code, span: Span, situation: Inconsistent) -> Diagnostic {
    let with_message = |message: String| Diagnostic::new(code, span, message);
    match situation {
        Inconsistent::Nesterov {
            momentum,
            dampening,
        } => with_message("Nesterov momentum needs momentum above 0 and no dampening".into())
            .label(format!("momentum is {momentum}, dampening {dampening}"))
            .help("add `momentum: 0.9`, or drop `nesterov`"),
        Inconsistent::EpochsAndSteps { epochs } => {
            with_message("training length is given both in epochs and in steps".into())
                .label("steps given here")
                .with(epochs, "epochs given here")
                .help("keep either `epochs` or `steps`")
        }
        Inconsistent::DevicesAndReplicas { devices } => {
            with_message("data parallel is given both devices and a replica count".into())
                .label("replicas given here")
                .with(devices, "devices given here")
                .help("give either `devices: [...]` or `replicas: N`")
        }
        Inconsistent::EarlyStopWithoutValidation { metric, source } => with_message(format!(
            "early stopping watches `{metric}` but the data has no validation split"
        ))
        .label("nothing to watch")
        .with(source, "all samples go to training")
        .help("add `split(train: 0.8, val: 0.2)` to the data, or watch `train_loss`"),
        Inconsistent::NcclOnCpu => with_message(
            "the NCCL backend needs CUDA devices, but the experiment runs on the CPU".into(),
        )
        .label("NCCL is CUDA-only")
        .help("use `backend: gloo` on the CPU, or `device cuda`"),
        Inconsistent::QatReplicated { strategy, parallel } => with_message(format!(
            "quantization-aware training cannot run under `parallel {strategy}`"
        ))
        .label("its observers follow one model's weights and inputs")
        .with(parallel, "this strategy trains copies or parts of the model")
        .help("train `qat` without a parallel strategy (or with model parallel), or quantize after training with `int8`"),
        Inconsistent::PruneSharded { parallel } => {
            with_message("pruning cannot run under `parallel fsdp`".into())
                .label("its masks cover whole tensors")
                .with(parallel, "each rank holds a shard of every tensor")
                .help("prune under `parallel ddp` or without a strategy")
        }
        Inconsistent::TwoLengthenings { first } => {
            with_message("two pruning schedules lengthen training".into())
                .label("this one adds training after the written length")
                .with(first, "and so does this one")
                .help("fine-tune (`after(finetune: ...)`) or run rounds (`iterative`) in one statement only")
        }
        Inconsistent::Fp16OnCpu { cpu } => {
            with_message("fp16 training needs CUDA, but the model runs on the CPU".into())
                .label("fp16 trains on CUDA only")
                .with(cpu, "the CPU is chosen here")
                .help("use `precision bf16`, which the CPU runs, or run on `device cuda`")
                .fix(span, "bf16")
        }
        Inconsistent::RecomputeUpdatesState { layer, at } => with_message(format!(
            "the batch norm `{layer}` is in a group whose forward runs twice a step (`recompute`)"
        ))
        .label("its activations are recomputed in backward")
        .with(at, "this layer would update its running statistics twice")
        .help("recompute the layers before or after the batch norm instead, or use `layernorm`, which keeps no statistics"),
        Inconsistent::RecomputeSharedGenerator { strategy, parallel } => with_message(format!(
            "a recomputed group with dropout cannot run under this `parallel {strategy}`"
        ))
        .label("its dropout masks are drawn again in backward")
        .with(parallel, "threads here share libtorch's generator for those masks")
        .help("train in fp32 on the CPU (Kiln then draws each thread's masks from a stream of its own), give each replica its own device, or leave out `recompute` where there is dropout"),
        Inconsistent::RecomputeQat { recompute } => with_message(
            "quantization-aware training cannot run with recomputed layers".into(),
        )
        .label("its observers update in every forward")
        .with(recompute, "this group's forward runs twice a step")
        .help("leave out `recompute`, or quantize after training with `int8`"),
        Inconsistent::TwoTrainingSources { source } => {
            with_message("the training samples are given twice: by `source` and by `split`".into())
                .label("a training source here")
                .with(source, "and another here")
                .help("keep `source` and give `split` fractions, or remove `source` and give each split its own source")
        }
        Inconsistent::FractionWithoutSource { split, train } => with_message(format!(
            "`{split}` is a fraction of `source`, but there is no `source`"
        ))
        .label("a fraction of nothing")
        .with(train, "training has its own source")
        .help(format!("give `{split}` its own source too, for example `{split}: npy(inputs: \"x.npy\", targets: \"y.npy\")`")),
        Inconsistent::SplitSourcesDiffer { split, what, train } => with_message(format!(
            "the `{split}` source declares other `{what}` than the training source"
        ))
        .label(format!("other `{what}`"))
        .with(train, "the training source")
        .help(format!("every split feeds the same model: give the same `{what}`, or leave it out of the `{split}` source")),
        Inconsistent::DeviceNotReplica { device, replicas } => with_message(format!(
            "the experiment's device `{device}` is none of the data-parallel replicas' devices"
        ))
        .label("no replica runs here")
        .with(replicas, "under data parallel the model runs on these devices")
        .help("remove `device`, or make it one of the replicas' devices"),
    }
}
