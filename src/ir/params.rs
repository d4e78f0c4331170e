//! The trainable tensors of each layer, named as the runtime creates them (PyTorch's
//! `state_dict` names), with their sizes and classes: what the optimizer's parameter groups select
//! and `kiln plan` lists.

use super::{Layer, LayerKind};

/// The classes of parameters a group can select, with what each holds.
pub const CLASSES: &[(&str, &str)] = &[
    (
        "biases",
        "every bias: of linear, convolution, norm and attention layers",
    ),
    (
        "norms",
        "every parameter of batchnorm, layernorm and groupnorm layers and of the norms inside transformer blocks",
    ),
    ("embeddings", "the tables of embedding and learned positional layers"),
];

/// One trainable tensor of the model, as the runtime creates it.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Its `state_dict` name (`encoder.layer1.norm1.weight`).
    pub name: String,
    /// The layer that holds it.
    pub layer: String,
    /// Its number of scalars.
    pub count: u64,
    /// Whether it is in each of [`CLASSES`], in order.
    pub classes: [bool; 3],
}

/// The trainable tensors of `layer`, in the order the runtime creates them.
pub fn tensors(layer: &Layer) -> Vec<Tensor> {
    let mut out = Vec::new();
    let mut add = |local: &str, count: i64, norm: bool, embedding: bool| {
        let bias = local == "bias" || local.ends_with(".bias") || local.ends_with("_bias");
        out.push(Tensor {
            name: format!("{}.{local}", layer.name),
            layer: layer.name.clone(),
            count: count.max(0) as u64,
            classes: [bias, norm, embedding],
        });
    };
    match &layer.kind {
        LayerKind::Linear {
            inputs,
            outputs,
            bias,
        } => {
            add("weight", inputs * outputs, false, false);
            if *bias {
                add("bias", *outputs, false, false);
            }
        }
        LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => {
            let kernel: i64 = conv.kernel.iter().product();
            let per_group = conv.inputs / conv.groups.max(1);
            add("weight", conv.outputs * per_group * kernel, false, false);
            if conv.bias {
                add("bias", conv.outputs, false, false);
            }
        }
        LayerKind::BatchNorm1d { norm } | LayerKind::BatchNorm2d { norm } => {
            if layer.params > 0 {
                add("weight", norm.features, true, false);
                add("bias", norm.features, true, false);
            }
        }
        LayerKind::LayerNorm { shape, .. } => {
            let n: i64 = shape.iter().product();
            add("weight", n, true, false);
            add("bias", n, true, false);
        }
        LayerKind::GroupNorm { channels, .. } => {
            add("weight", *channels, true, false);
            add("bias", *channels, true, false);
        }
        LayerKind::Prelu { parameters, .. } => add("weight", *parameters, false, false),
        LayerKind::Embedding { vocab, dim, .. } => add("weight", vocab * dim, false, true),
        // A learned position table is an embedding (`embeddings` selects it, as GPT-2's `wpe`
        // is usually kept out of weight decay); the sinusoidal one has no parameters.
        LayerKind::Positional {
            max_len,
            width,
            learned: true,
        } => add("weight", max_len * width, false, true),
        LayerKind::Positional { learned: false, .. } => {}
        LayerKind::Attention { width, .. } => attention(&mut add, "", *width, true),
        LayerKind::TransformerBlock {
            width,
            hidden,
            block,
            ..
        } => {
            let (w, h) = (*width, *hidden);
            attention(&mut add, "self_attn.", w, block.bias);
            add("linear1.weight", w * h, false, false);
            if block.bias {
                add("linear1.bias", h, false, false);
            }
            add("linear2.weight", h * w, false, false);
            if block.bias {
                add("linear2.bias", w, false, false);
            }
            for norm in ["norm1", "norm2"] {
                add(&format!("{norm}.weight"), w, true, false);
                if block.bias {
                    add(&format!("{norm}.bias"), w, true, false);
                }
            }
        }
        LayerKind::MaxPool1d { .. }
        | LayerKind::MaxPool2d { .. }
        | LayerKind::AvgPool1d { .. }
        | LayerKind::AvgPool2d { .. }
        | LayerKind::AdaptiveAvgPool1d { .. }
        | LayerKind::AdaptiveAvgPool2d { .. }
        | LayerKind::Dropout { .. }
        | LayerKind::Relu
        | LayerKind::LeakyRelu { .. }
        | LayerKind::Elu { .. }
        | LayerKind::Gelu
        | LayerKind::Silu
        | LayerKind::Tanh
        | LayerKind::Sigmoid
        | LayerKind::Softmax { .. }
        | LayerKind::LogSoftmax { .. }
        | LayerKind::Flatten
        | LayerKind::Reshape { .. }
        | LayerKind::Mean { .. } => {}
    }
    out
}

/// `nn.MultiheadAttention`'s parameters under `prefix`, with or without its biases.
fn attention(add: &mut impl FnMut(&str, i64, bool, bool), prefix: &str, width: i64, bias: bool) {
    add(
        &format!("{prefix}in_proj_weight"),
        3 * width * width,
        false,
        false,
    );
    if bias {
        add(&format!("{prefix}in_proj_bias"), 3 * width, false, false);
    }
    add(
        &format!("{prefix}out_proj.weight"),
        width * width,
        false,
        false,
    );
    if bias {
        add(&format!("{prefix}out_proj.bias"), width, false, false);
    }
}
