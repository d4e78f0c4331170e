//! Compression problems (K0212, K0213, K0215, K0217, K0411): their facts and their wording.

use super::problem::Problem;
use super::Diagnostic;
use crate::diagnostic::problem::{Strategies, Warnings};
use crate::present::fmt_count;
use crate::span::Span;

/// The group sizes the INT4 kernels take.
pub const INT4_GROUP_SIZES: [u64; 4] = [32, 64, 128, 256];

/// What a compression step needs of its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetNeed {
    /// A weight to prune or cast (`linear`, `conv1d`, `conv2d`, `embedding`).
    Weight,
    /// A bias to prune.
    Bias,
    /// A linear layer to quantize.
    Linear,
    /// A layer's weight, not its bias, to quantize or cast.
    NotBias,
}

/// A layer whose input features an INT4 group size does not divide.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupedLayer {
    /// The layer's name.
    pub name: String,
    /// Where the layer is defined.
    pub span: Span,
    /// Its input features.
    pub inputs: u64,
}

/// The weight-only scheme that will not speed a layer up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightOnly {
    /// `int8` without dynamic activations.
    Int8,
    /// `int4`.
    Int4,
}

/// Why a weight-only quantization will not speed a layer up on the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoSpeedup {
    /// The batch is 64 or more: the product is compute-bound.
    LargeBatch,
    /// The layer has fewer than 250,000 weights: the casts cost more than the kernel saves.
    SmallLayer,
}

/// Fewer weights than this and a weight-only kernel gains nothing on the CPU, casts counted.
pub const SMALL_LAYER_WEIGHTS: u64 = 250_000;

/// From this batch on, weight-only kernels give no gain on the CPU.
pub const LARGE_BATCH: u64 = 64;

fn need_words(need: TargetNeed) -> (&'static str, &'static str) {
    match need {
        TargetNeed::Weight => (
            "has no weight",
            "linear, conv1d, conv2d and embedding layers have one",
        ),
        TargetNeed::Bias => (
            "has no prunable bias",
            "linear and convolution layers declared with a bias have one",
        ),
        TargetNeed::Linear => ("is not linear", "this step quantizes linear layers only"),
        TargetNeed::NotBias => ("names its bias", "quantization applies to a layer's weight"),
    }
}

/// Compression problems in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    let new = |span: Span, message: String| Diagnostic::new(code, span, message);
    match problem {
        Problem::Strategies(Strategies::CompressTargetKind {
            span,
            step,
            target,
            kind,
            layer_span,
            need,
        }) => {
            let (lacks, why) = need_words(need);
            match kind {
                Some(kind) => new(
                    span,
                    format!(
                        "{step} of `{target}`, a `{}` layer, which {lacks}",
                        kind.name()
                    ),
                )
                .label(lacks)
                .with(layer_span, why),
                None => new(
                    span,
                    format!("{step} of block `{target}`, which holds no layer it applies to"),
                )
                .label("no layer this step applies to")
                .with(layer_span, format!("every layer of this block {lacks}")),
            }
            .help(match need {
                TargetNeed::Linear => "target linear layers, or a block that holds some",
                TargetNeed::Weight => "target layers with weights, or a block that holds some",
                TargetNeed::Bias => "prune `.weight`, or declare the layer with `bias: true`",
                TargetNeed::NotBias => "name the layer itself: its weight is quantized",
            })
        }
        Problem::Strategies(Strategies::Int4GroupSize {
            span,
            group_size,
            layer: None,
        }) => new(
            span,
            format!("INT4 group size {group_size} is not one the kernels take"),
        )
        .label("must be 32, 64, 128 or 256")
        .help("use `group_size: 128`, or 32, 64 or 256"),
        Problem::Strategies(Strategies::Int4GroupSize {
            span,
            group_size,
            layer: Some(l),
        }) => {
            let dividing: Vec<String> = INT4_GROUP_SIZES
                .iter()
                .filter(|g| l.inputs.is_multiple_of(**g))
                .map(u64::to_string)
                .collect();
            let help = if dividing.is_empty() {
                let padded = l.inputs.div_ceil(group_size) * group_size;
                format!(
                    "no INT4 group size divides {}: the layer would need {} zero input features \
                     ({padded} in all); quantize it with `int8` instead",
                    l.inputs,
                    padded - l.inputs
                )
            } else {
                format!(
                    "use `group_size: {}`, which divides {}",
                    dividing.join("` or `group_size: "),
                    l.inputs
                )
            };
            new(
                span,
                format!(
                    "INT4 groups of {group_size} do not divide the {} input features of `{}`",
                    l.inputs, l.name
                ),
            )
            .label(format!("{} is not a multiple of {group_size}", l.inputs))
            .with(l.span, format!("{} input features", l.inputs))
            .help(help)
        }
        Problem::Strategies(Strategies::QatFp16 { span, precision }) => new(
            span,
            "quantization-aware training under fp16 precision".into(),
        )
        .label("fake-quantizes in fp32")
        .with(precision, "fp16 autocast")
        .help("train with `precision bf16` or `fp32`, or quantize after training with `int8`"),
        Problem::Strategies(Strategies::CompressConflict {
            span,
            layer,
            first,
            same_statement,
        }) => new(
            span,
            if same_statement {
                format!("`{layer}` is named twice in one compression step")
            } else {
                format!("`{layer}` is quantized by two statements")
            },
        )
        .label(format!("`{layer}` again"))
        .with(first, "first here")
        .help(if same_statement {
            "name each layer once per statement"
        } else {
            "a layer has one number format: quantize it in one statement"
        }),
        Problem::Warnings(Warnings::QuantNoSpeedup {
            span,
            layer,
            layer_span,
            inputs,
            outputs,
            batch,
            scheme,
            why,
        }) => {
            let word = match scheme {
                WeightOnly::Int8 => "int8",
                WeightOnly::Int4 => "int4",
            };
            let size = format!("{outputs}x{inputs}");
            let (reason, help) = match why {
                NoSpeedup::LargeBatch => (
                    format!("at batch {batch} the product is compute-bound"),
                    "on CPUs with AVX512-VNNI or AMX, `int8(activations: dynamic)` is faster at \
                     this batch (and `bf16` with AVX512-BF16); elsewhere both are slower; the \
                     weights still shrink as declared"
                        .to_string(),
                ),
                NoSpeedup::SmallLayer => (
                    format!(
                        "{} weights are too few: the casts cost what the kernel saves",
                        fmt_count(inputs.saturating_mul(outputs))
                    ),
                    "weight-only kernels pay off on the CPU for layers of 250,000 weights or more \
                     at batches under 64; the weights still shrink as declared"
                        .to_string(),
                ),
            };
            new(
                span,
                format!(
                    "weight-only {word} will not make `{layer}` ({size}) faster on the CPU at batch {batch}"
                ),
            )
            .label(reason)
            .with(layer_span, format!("{size}, on cpu"))
            .help(help)
        }
        _ => unreachable!("only compression problems are worded here"),
    }
}
