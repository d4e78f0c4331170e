//! Wording of out-of-range problems (K0121).

use super::counted;
use super::problem::{OutOfRange, Producer, Range};
use super::{Code, Diagnostic};
use crate::span::Span;

/// How a range reads in a sentence.
fn describe(range: Range) -> &'static str {
    match range {
        Range::Positive => "greater than 0",
        Range::NonNegative => "0 or more",
        Range::UnitOpen => "in [0, 1)",
        Range::Unit => "in [0, 1]",
        Range::UnitPositive => "in (0, 1]",
        Range::Any => "finite",
    }
}

/// The secondary label naming what flows into a layer.
fn produces(p: &Producer) -> (Span, String) {
    (p.span, format!("{} produces {}", p.name, p.shape))
}

/// K0121 in words.
pub(super) fn words(code: Code, span: Span, situation: OutOfRange) -> Diagnostic {
    let new = |message: String| Diagnostic::new(code, span, message);
    match situation {
        OutOfRange::Number { what, range, value } => {
            let r = describe(range);
            new(format!("{what} must be {r}, got {value}"))
                .label(format!("must be {r}"))
                .help(format!("choose {what} {r}"))
        }
        OutOfRange::NotUnsigned { value } => {
            new(format!("expected a non-negative integer, got {value}"))
                .label("out of range")
                .help("write an integer from 0 to 9e15")
        }
        OutOfRange::Below { what, min, value } => {
            new(format!("{what} must be at least {min}, got {value}"))
                .label(format!("must be at least {min}"))
                .help(format!("choose {what} of {min} or more"))
        }
        OutOfRange::BatchOverSamples {
            batch,
            train,
            count,
            source,
        } => new(format!(
            "batch {batch} is larger than the {train} training samples"
        ))
        .label("larger than the training split")
        .with(source, counted(count, "sample"))
        .help("use a smaller batch or more samples"),
        OutOfRange::UniformBounds { low, high } => {
            new(format!("`high` {high} is not above `low` {low}"))
                .label("must be above `low`")
                .help("uniform samples lie in [low, high)")
        }
        OutOfRange::ImageSize { size } => new(format!(
            "an image source's `size` is [channels, height, width] with 1 or 3 channels, not {size:?}"
        ))
        .label("not [1 or 3, height, width]")
        .help("write `size: [1, H, W]` for grayscale images or `size: [3, H, W]` for RGB; images are converted as PIL's `convert(\"L\")` or `convert(\"RGB\")` does"),
        OutOfRange::HeldOutAugment { split } => new(format!(
            "the {split} split is never augmented, so its source takes no `crop` or `flip`"
        ))
        .label("augmentation of a held-out split")
        .help("declare `crop` and `flip` on the training source; evaluation reads the images as they are"),
        OutOfRange::SplitSum { sum } => new(format!("the split fractions add up to {sum}"))
            .label("more than 1")
            .help("the fractions of train, val and test must add up to at most 1"),
        OutOfRange::EpochSteps {
            epochs,
            per_epoch,
            samples,
            batch,
        } => new(format!(
            "{epochs} epochs of {per_epoch} steps are more optimizer steps than a run can count"
        ))
        .label(format!(
            "{samples} training samples in batches of {batch} make {per_epoch} steps an epoch"
        ))
        .help(format!(
            "train for at most {} epochs, or give the length in `steps`",
            u64::MAX / per_epoch.max(1)
        )),
        OutOfRange::EmptyTrainSplit => new("the training split is empty".into())
            .label("no training samples")
            .help("give `train` a fraction above 0"),
        OutOfRange::NoDevices => new("data parallel over no devices".into())
            .label("empty list")
            .help("list the devices to replicate the model on"),
        OutOfRange::TooManyReplicas { replicas, max } => new(format!(
            "{replicas} replicas is more than Kiln places on one machine ({max})"
        ))
        .label(format!("at most {max}"))
        .help("for more replicas, run several processes with `parallel ddp(world_size: N)`"),
        OutOfRange::PruneDim { dim } => new(format!("structured pruning along dimension {dim}"))
            .label("must be 0 (output units) or 1 (input features)")
            .help("use `dim: 0` to remove whole output units"),
        OutOfRange::GradualOrder { start, end } => new(format!(
            "gradual pruning ends at step {end}, not after its start {start}"
        ))
        .label("must come after `start`")
        .help("make `end` later than `start`"),
        OutOfRange::GradualInitial { initial, amount } => new(format!(
            "gradual pruning starts at sparsity {initial}, not below its final amount {amount}"
        ))
        .label(format!("must be in [0, {amount})"))
        .help("start below the final amount, or prune once with `before` or `after()`"),
        OutOfRange::RewindTooLate { rewind, length } => new(format!(
            "iterative pruning rewinds to step {rewind}, but training lasts at most {length} steps"
        ))
        .label(format!("must be below {length}"))
        .help(format!(
            "rewind to a step below {length}, early in training (within the first epoch)"
        )),
        OutOfRange::TooManyParameters { params } => new(format!(
            "the model has {params} parameters, more than Kiln plans for (2^48)"
        ))
        .label("the largest layer")
        .help("check the layer sizes: no real model is this large"),
        OutOfRange::BatchTooLarge {
            batch,
            values,
            flops,
        } => new(format!(
            "a batch of {batch} would hold {values} activation values and cost {flops} FLOPs"
        ))
        .label("far too large")
        .help("lower the batch or the layer sizes: this is beyond any machine"),
        OutOfRange::TopK { k, classes } => new(format!(
            "top-{k} accuracy over {}",
            counted(classes, "class")
        ))
        .label(format!("k must be at most {classes}"))
        .help(format!("choose k of {classes} or less")),
        OutOfRange::InputTooLarge { shape } => new(format!(
            "an input of {shape} holds more than 2^40 values per sample"
        ))
        .label("far too large")
        .help("check the input shape: it is per sample, without the batch"),
        OutOfRange::OutputTooLarge { kind, shape } => new(format!(
            "`{kind}` makes {shape} per sample, more than 2^40 values"
        ))
        .label("far too large")
        .help("check the layer's sizes: no real model holds this many values per sample"),
        OutOfRange::PoolPadding { padding, kernel } => new(format!(
            "padding {padding} is more than half the kernel size {kernel}"
        ))
        .label("too much padding")
        .help("pooling padding must be at most half the kernel size"),
        OutOfRange::ReshapeDim { dim } => new(format!("dimension {dim} is not allowed"))
            .label("must be positive, or -1 once")
            .help("dimensions are positive; -1 stands for what is left"),
        OutOfRange::ReshapeInferred => new("more than one -1 in a reshape".into())
            .label("only one dimension can be inferred")
            .help("write every dimension but one"),
        OutOfRange::ConvGroups {
            groups,
            inputs,
            outputs,
        } => new(format!(
            "{groups} groups do not divide {inputs} input and {outputs} output channels"
        ))
        .label("must divide both channel counts")
        .help("choose groups that divide the input and output channels"),
        OutOfRange::NormGroups { groups, channels } => {
            new(format!("{groups} groups do not divide {channels} channels"))
                .label("must divide the channel count")
                .help(format!("choose a divisor of {channels}"))
        }
        OutOfRange::DimOutside { dim, producer } => {
            let rank = producer.shape.len() as i64;
            let (at, text) = produces(&producer);
            new(format!(
                "dimension {dim} is outside a {rank}-D sample {}",
                producer.shape
            ))
            .label(format!("valid: {} to {}", -rank, rank - 1))
            .with(at, text)
            .help("dimensions count per sample, from 0, without the batch")
        }
        OutOfRange::TokenIds {
            vocab,
            bound,
            producer,
        } => new(format!(
            "token ids go up to {} but the embedding has {}",
            bound.saturating_sub(1),
            counted(vocab, "row")
        ))
        .label(counted(vocab, "row"))
        .with(producer.span, format!("ids below {bound}"))
        .help(format!("use at least {bound} embeddings")),
        OutOfRange::PadId { pad, vocab } => new(format!(
            "padding id {pad} is not a row of an embedding with {}",
            counted(vocab, "row")
        ))
        .label(format!("must be below {vocab}"))
        .help(format!(
            "choose a padding id from 0 to {}",
            vocab.saturating_sub(1)
        )),
        OutOfRange::Positions {
            max_len,
            length,
            producer,
        } => {
            let (at, text) = produces(&producer);
            new(format!(
                "sequences of {length} tokens need {length} positions, the table has {max_len}"
            ))
            .label(format!("{max_len} positions"))
            .with(at, text)
            .help(format!("use `max_len` of at least {length}"))
        }
        OutOfRange::OddWidth { width, producer } => {
            let (at, text) = produces(&producer);
            new(format!(
                "sinusoidal positions pair a sine with a cosine, so the width must be even, got {width}"
            ))
            .label("needs an even width")
            .with(at, text)
            .help("give the layer before it an even width")
        }
    }
}
