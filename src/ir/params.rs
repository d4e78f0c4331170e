//! The trainable tensors of each layer, named as the runtime creates them (PyTorch's
//! `state_dict` names), with their sizes and classes: what the optimizer's parameter groups select
//! and `kiln plan` lists. Their shapes are each family's fact ([`super::LayerKind::weights`]).

use super::{numel, Layer};

/// The classes of parameters a group can select, with what each holds.
pub const CLASSES: &[(&str, &str)] = &[
    (
        "biases",
        "every bias: of linear, convolution, norm and attention layers",
    ),
    (
        "norms",
        "every parameter of batchnorm, layernorm, rmsnorm and groupnorm layers and of the norms inside transformer blocks",
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
    layer
        .kind
        .weights()
        .into_iter()
        .map(|w| Tensor {
            name: format!("{}.{}", layer.name, w.local),
            layer: layer.name.clone(),
            count: numel(&w.shape).max(0) as u64,
            classes: [w.is_bias(), w.norm, w.embedding],
        })
        .collect()
}
