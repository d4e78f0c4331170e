//! The facts every layer kind has, dispatched to its family's file: its trainable tensors
//! ([`LayerKind::weights`], the one list of the kinds without parameters), their count, its
//! FLOPs, what its forward keeps for backward ([`LayerKind::keeps`]; attention's kernel,
//! [`LayerKind::scores`]), and how its sizes follow an input whose units structured pruning
//! removed.

use super::memory::{Keeps, Pass, Scores, Value};
use super::{activation, attention, conv, embedding, linear, norm, pool, positional, shape};
use crate::ir::{numel, LayerKind};

/// One trainable tensor of a layer, as the runtime creates it.
#[derive(Clone, Debug, PartialEq)]
pub struct Weight {
    /// Its name within the layer (`weight`, `self_attn.in_proj_weight`).
    pub local: String,
    /// Its shape.
    pub shape: Vec<i64>,
    /// Whether it belongs to a norm (the `norms` class of parameter groups).
    pub norm: bool,
    /// Whether it is an embedding table (the `embeddings` class).
    pub embedding: bool,
    /// Whether pruning applies to it: the layer's `weight` and `bias` of linear and
    /// convolution layers, an embedding's table.
    pub prunable: bool,
}

impl Weight {
    pub(super) fn plain(local: String, shape: Vec<i64>) -> Weight {
        Weight {
            local,
            shape,
            norm: false,
            embedding: false,
            prunable: false,
        }
    }

    pub(super) fn prunable(local: String, shape: Vec<i64>) -> Weight {
        Weight {
            prunable: true,
            ..Weight::plain(local, shape)
        }
    }

    pub(super) fn norm(local: String, shape: Vec<i64>) -> Weight {
        Weight {
            norm: true,
            ..Weight::plain(local, shape)
        }
    }

    /// Whether it is a bias (the `biases` class).
    pub fn is_bias(&self) -> bool {
        let l = &self.local;
        l == "bias" || l.ends_with(".bias") || l.ends_with("_bias")
    }
}

/// A parameter or FLOP count from a product of sizes. Counts are computed in f64, exact below
/// 2^53, so that absurd sizes saturate instead of overflowing.
pub(super) fn count(x: f64) -> u64 {
    x as u64
}

impl LayerKind {
    /// The layer's trainable tensors, in the order the runtime creates them. Every kind without
    /// parameters is listed here, and only here.
    pub fn weights(&self) -> Vec<Weight> {
        let mut out = Vec::new();
        match self {
            LayerKind::Linear {
                inputs,
                outputs,
                bias,
            } => linear::weights(&mut out, "", *inputs, *outputs, *bias),
            LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => {
                conv::weights(&mut out, conv)
            }
            LayerKind::BatchNorm1d { norm } | LayerKind::BatchNorm2d { norm } => {
                if norm.affine {
                    norm::affine(&mut out, "", &[norm.features], true);
                }
            }
            LayerKind::LayerNorm { norm } => norm::layer(&mut out, norm),
            LayerKind::GroupNorm { channels, .. } => norm::affine(&mut out, "", &[*channels], true),
            LayerKind::Prelu { parameters, .. } => activation::prelu(&mut out, *parameters),
            LayerKind::Embedding { vocab, dim, .. } => embedding::weights(&mut out, *vocab, *dim),
            LayerKind::Positional {
                max_len,
                width,
                learned,
            } => positional::weights(&mut out, *max_len, *width, *learned),
            LayerKind::Attention { width, .. } => attention::attention(&mut out, "", *width, true),
            LayerKind::TransformerBlock {
                width,
                hidden,
                block,
                ..
            } => attention::block(&mut out, *width, *hidden, block),
            LayerKind::MaxPool1d { .. }
            | LayerKind::MaxPool2d { .. }
            | LayerKind::AvgPool1d { .. }
            | LayerKind::AvgPool2d { .. }
            | LayerKind::AdaptiveAvgPool1d { .. }
            | LayerKind::AdaptiveAvgPool2d { .. }
            | LayerKind::Dropout { .. }
            | LayerKind::Elementwise(_)
            | LayerKind::LeakyRelu { .. }
            | LayerKind::Elu { .. }
            | LayerKind::Softmax { .. }
            | LayerKind::LogSoftmax { .. }
            | LayerKind::Flatten
            | LayerKind::Reshape { .. }
            | LayerKind::Mean { .. } => {}
        }
        out
    }

    /// The number of trainable parameters: the values of [`LayerKind::weights`].
    pub fn params(&self) -> u64 {
        let values = |w: &Weight| w.shape.iter().map(|d| *d as f64).product::<f64>();
        count(self.weights().iter().map(values).sum())
    }

    /// Forward FLOPs for one sample whose shape is `input`, giving `output`.
    pub fn flops(&self, input: &[i64], output: &[i64]) -> u64 {
        let values = numel(input).max(0) as u64;
        match self {
            LayerKind::Linear {
                inputs, outputs, ..
            } => linear::flops(input, *inputs, *outputs),
            LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => conv::flops(conv, output),
            LayerKind::MaxPool1d { pool }
            | LayerKind::MaxPool2d { pool }
            | LayerKind::AvgPool1d { pool }
            | LayerKind::AvgPool2d { pool } => pool::flops(pool, output),
            LayerKind::Positional { .. } => count(input.iter().map(|d| *d as f64).product::<f64>()),
            LayerKind::Attention { .. } => attention::flops(input, None),
            LayerKind::TransformerBlock { hidden, .. } => attention::flops(input, Some(*hidden)),
            LayerKind::Flatten | LayerKind::Reshape { .. } | LayerKind::Embedding { .. } => 0,
            LayerKind::AdaptiveAvgPool1d { .. }
            | LayerKind::AdaptiveAvgPool2d { .. }
            | LayerKind::BatchNorm1d { .. }
            | LayerKind::BatchNorm2d { .. }
            | LayerKind::LayerNorm { .. }
            | LayerKind::GroupNorm { .. }
            | LayerKind::Dropout { .. }
            | LayerKind::Elementwise(_)
            | LayerKind::LeakyRelu { .. }
            | LayerKind::Elu { .. }
            | LayerKind::Prelu { .. }
            | LayerKind::Softmax { .. }
            | LayerKind::LogSoftmax { .. }
            | LayerKind::Mean { .. } => values,
        }
    }

    /// Follows an input `input` whose units changed under structured pruning (the layer's
    /// output was `before`): the sizes read from the input are read again, a producer's output
    /// units become `units` when given, and the new output shape is returned. Layers that the
    /// units cannot reach (reshapes, embeddings, attention) keep `before`.
    pub fn resize(&mut self, input: &[i64], units: Option<i64>, before: &[i64]) -> Vec<i64> {
        let first = input.first().copied().unwrap_or(0);
        let channels = |c: i64| {
            let mut y = before.to_vec();
            if let Some(d) = y.first_mut() {
                *d = c;
            }
            y
        };
        match self {
            LayerKind::Linear {
                inputs, outputs, ..
            } => {
                *inputs = input.last().copied().unwrap_or(0);
                *outputs = units.unwrap_or(*outputs);
                linear::output(input, *outputs)
            }
            LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => {
                conv.inputs = first;
                conv.outputs = units.unwrap_or(conv.outputs);
                channels(conv.outputs)
            }
            LayerKind::BatchNorm1d { norm } | LayerKind::BatchNorm2d { norm } => {
                norm.features = first;
                input.to_vec()
            }
            LayerKind::LayerNorm { norm } => {
                norm.shape = norm::trailing(input, &norm.shape);
                input.to_vec()
            }
            LayerKind::GroupNorm { channels, .. } => {
                *channels = first;
                input.to_vec()
            }
            LayerKind::Prelu { parameters, .. } => {
                if *parameters > 1 {
                    *parameters = first;
                }
                input.to_vec()
            }
            LayerKind::MaxPool1d { .. }
            | LayerKind::MaxPool2d { .. }
            | LayerKind::AvgPool1d { .. }
            | LayerKind::AvgPool2d { .. }
            | LayerKind::AdaptiveAvgPool1d { .. }
            | LayerKind::AdaptiveAvgPool2d { .. } => channels(first),
            LayerKind::Flatten => vec![numel(input)],
            LayerKind::Mean { dim } => shape::mean(input, *dim),
            LayerKind::Dropout { .. }
            | LayerKind::Elementwise(_)
            | LayerKind::LeakyRelu { .. }
            | LayerKind::Elu { .. }
            | LayerKind::Softmax { .. }
            | LayerKind::LogSoftmax { .. } => input.to_vec(),
            LayerKind::Reshape { .. }
            | LayerKind::Embedding { .. }
            | LayerKind::Positional { .. }
            | LayerKind::Attention { .. }
            | LayerKind::TransformerBlock { .. } => before.to_vec(),
        }
    }
}

impl LayerKind {
    /// For `attention` and `transformer_block`, the kernel their memory assumes in a pass of
    /// `input` (`[S, E]`).
    pub fn scores(&self, input: &[i64], pass: Pass) -> Option<Scores> {
        match self {
            LayerKind::Attention {
                heads,
                dropout,
                causal,
                window,
                ..
            }
            | LayerKind::TransformerBlock {
                heads,
                dropout,
                causal,
                window,
                ..
            } => Some(attention::assumed(
                input,
                &attention::Heads {
                    heads: *heads,
                    dropout: *dropout,
                    causal: *causal,
                    window: *window,
                },
                pass,
            )),
            _ => None,
        }
    }

    /// What the layer's forward keeps and holds, for a per-sample `input` shape of value type
    /// `given` giving `output`.
    pub fn keeps(&self, input: &[i64], output: &[i64], given: Value, pass: Pass) -> Keeps {
        let n_in = numel(input).max(0) as u64;
        let n_out = numel(output).max(0) as u64;
        match self {
            LayerKind::Linear { .. } => linear::keeps(n_in, self.params(), given, pass),
            LayerKind::Conv1d { .. } | LayerKind::Conv2d { .. } => {
                conv::keeps(n_in, n_out, self.params(), given, pass)
            }
            LayerKind::MaxPool1d { .. } | LayerKind::MaxPool2d { .. } => {
                pool::keeps_max(n_out, given)
            }
            LayerKind::AvgPool1d { .. }
            | LayerKind::AvgPool2d { .. }
            | LayerKind::AdaptiveAvgPool1d { .. }
            | LayerKind::AdaptiveAvgPool2d { .. } => Keeps::input(given),
            LayerKind::BatchNorm1d { norm } | LayerKind::BatchNorm2d { norm } => {
                norm::keeps_batch(n_in, norm.features, given)
            }
            LayerKind::LayerNorm { norm } => norm::keeps_layer(n_in, norm, given),
            LayerKind::GroupNorm { groups, .. } => norm::keeps_group(n_in, *groups, given),
            LayerKind::Dropout { p } => activation::keeps_dropout(n_in, *p, given, pass),
            LayerKind::Elementwise(e) => activation::keeps_elementwise(*e, given),
            LayerKind::LeakyRelu { .. } => activation::keeps_leaky(n_in, given),
            LayerKind::Elu { .. } => activation::keeps_elu(n_in, given),
            LayerKind::Prelu { .. } => activation::keeps_prelu(n_in, self.params(), given, pass),
            LayerKind::Softmax { .. } | LayerKind::LogSoftmax { .. } => {
                activation::keeps_softmax(n_in, given)
            }
            LayerKind::Flatten | LayerKind::Reshape { .. } => shape::keeps_view(),
            LayerKind::Mean { .. } => shape::keeps_mean(given),
            LayerKind::Embedding { pad, .. } => embedding::keeps(n_in, pad.is_some()),
            LayerKind::Positional { .. } => positional::keeps(n_in, given),
            LayerKind::Attention {
                heads,
                dropout,
                causal,
                window,
                ..
            } => attention::keeps(
                input,
                attention::Heads {
                    heads: *heads,
                    dropout: *dropout,
                    causal: *causal,
                    window: *window,
                },
                self.params(),
                given,
                pass,
            ),
            LayerKind::TransformerBlock {
                heads,
                hidden,
                dropout,
                causal,
                window,
                block,
                ..
            } => attention::keeps_block(
                input,
                attention::Heads {
                    heads: *heads,
                    dropout: *dropout,
                    causal: *causal,
                    window: *window,
                },
                *hidden,
                block,
                self.params(),
                given,
                pass,
            ),
        }
    }
}
