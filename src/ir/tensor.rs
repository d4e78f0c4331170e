//! The tensor dimension of a mesh: which layers a tensor degree `T` splits over its ranks, and
//! how, as Megatron-LM splits them (PyTorch's `ColwiseParallel` and `RowwiseParallel`):
//!
//! - a `linear` followed by its partner, with only elementwise layers (activations, dropout)
//!   between them in the same sequence, is split by its outputs (columns: rank `r` computes
//!   outputs `[r·n/T, (r+1)·n/T)`), and the partner by its inputs (rows: each rank's partial
//!   product, summed over the ranks, then the bias): one sum in forward (after the partner) and
//!   one in backward (the input gradient of the first);
//! - `attention` is split by heads: rank `r` computes heads `[r·h/T, (r+1)·h/T)` (q, k and v by
//!   columns), and the output projection by rows;
//! - `transformer_block`: its attention as above and its MLP (`linear1` by columns, `linear2` by
//!   rows): two sums in forward and two in backward;
//! - `embedding` is split by vocabulary: rank `r` keeps rows `[r·v/T, (r+1)·v/T)` of the table,
//!   looks up the ids in its range (zeros for the others) and the ranks' lookups are summed: one
//!   sum in forward, none in backward;
//! - the model's last layer, when it is a `linear` without a partner (a vocabulary head), is
//!   split by its outputs and its outputs gathered from the ranks (one all-gather in forward, the
//!   input gradient summed in backward), so the loss sees whole logits;
//! - every other layer is replicated: each rank computes it whole, on the same input.
//!
//! The checker refuses heads or a block's hidden width that the degree does not divide; the plan
//! says which layers are split and how (`kiln plan`), and the runtime applies exactly these
//! splits. Memory: a split layer's weights, gradients and optimizer state are `1/T` on each rank,
//! and so are its activations inside the split (the partner's input, attention's heads).

use super::{layers, Layer, LayerKind, Node};

/// How a tensor degree splits a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// A `linear` split by its outputs; its partner (the next linear) by its inputs.
    Columns,
    /// A `linear` split by its inputs, after its partner split by columns: the ranks' partial
    /// products summed, then the bias.
    Rows,
    /// `attention` split by heads; its output projection by rows.
    Heads,
    /// `transformer_block`: attention by heads, the MLP by columns then rows.
    Block,
    /// `embedding` split by vocabulary rows, the ranks' lookups summed.
    Vocab,
    /// The model's last `linear` split by its outputs, which are gathered from the ranks.
    Gathered,
    /// An elementwise layer between a column split and its partner: it runs on this rank's
    /// outputs of the first (a dropout draws the whole mask and keeps this rank's part of it,
    /// so the ranks drop what one process drops).
    Between,
    /// Whole on every rank, for the reason given.
    Replicated(Whole),
}

/// How a split layer's parameter is cut over the tensor ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Whole on every rank (a row split's bias, added after the sum; norms; replicated layers).
    Whole,
    /// Along dimension `dim`, which holds `chunks` equal blocks (q, k and v: 3), each cut into
    /// `T` equal pieces: rank `r` keeps the `r`-th piece of every block, in block order.
    Along {
        /// The dimension cut.
        dim: usize,
        /// The blocks it holds.
        chunks: i64,
    },
}

impl Cut {
    /// The cut of a split layer's parameter, by its local name (`weight`,
    /// `self_attn.in_proj_weight`), as `nn.Linear`, `nn.MultiheadAttention` and
    /// `nn.TransformerEncoderLayer` name them.
    pub fn of(split: Split, local: &str) -> Cut {
        let rows = Cut::Along { dim: 0, chunks: 1 };
        let columns = Cut::Along { dim: 1, chunks: 1 };
        let qkv = Cut::Along { dim: 0, chunks: 3 };
        match (split, local) {
            (Split::Columns | Split::Gathered, "weight" | "bias") => rows,
            (Split::Vocab, "weight") => rows,
            (Split::Rows, "weight") => columns,
            (Split::Heads, "in_proj_weight" | "in_proj_bias") => qkv,
            (Split::Heads, "out_proj.weight") => columns,
            (Split::Block, "self_attn.in_proj_weight" | "self_attn.in_proj_bias") => qkv,
            (Split::Block, "self_attn.out_proj.weight" | "linear2.weight") => columns,
            (Split::Block, "linear1.weight" | "linear1.bias") => rows,
            _ => Cut::Whole,
        }
    }
}

/// Why a layer is whole on every tensor rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whole {
    /// A layer without parameters, or whose parameters tensor parallel does not split (norms,
    /// embeddings, convolutions, positions).
    Kind,
    /// A `linear` with no partner: the next layer of its sequence that is not elementwise is not
    /// a `linear` (or there is none).
    NoPartner,
    /// A `linear` whose outputs (or an `embedding` whose vocabulary) the degree does not divide.
    Indivisible,
}

impl Split {
    /// In words, for `kiln plan`.
    pub fn words(self) -> &'static str {
        match self {
            Split::Columns => "columns (outputs)",
            Split::Rows => "rows (inputs), summed",
            Split::Heads => "heads; output projection by rows, summed",
            Split::Block => "heads, MLP by columns then rows; 2 sums",
            Split::Between => "on the split outputs",
            Split::Vocab => "vocabulary rows, lookups summed",
            Split::Gathered => "columns (outputs), gathered",
            Split::Replicated(Whole::Kind) => "replicated",
            Split::Replicated(Whole::NoPartner) => "replicated (no linear partner follows)",
            Split::Replicated(Whole::Indivisible) => "replicated (not divisible by the degree)",
        }
    }

    /// Whether the layer's parameters are cut over the ranks.
    pub fn splits(self) -> bool {
        !matches!(self, Split::Replicated(_) | Split::Between)
    }

    /// The sums over the tensor ranks of one forward pass through the layer (as many in
    /// backward): after a row split, and after each of a block's two.
    pub fn sums(self) -> u64 {
        match self {
            Split::Rows | Split::Heads | Split::Vocab => 1,
            Split::Block => 2,
            Split::Columns | Split::Gathered | Split::Between | Split::Replicated(_) => 0,
        }
    }
}

/// The values a tensor rank keeps of each trainable tensor of `nodes`, by its `state_dict` name,
/// in the model's order: its piece of a cut tensor, the others whole.
pub fn rank_tensors(nodes: &[Node], degree: u64) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (layer, split) in splits(nodes, degree) {
        for t in super::tensors(layer) {
            let local = &t.name[layer.name.len() + 1..];
            let count = match Cut::of(split, local) {
                Cut::Whole => t.count,
                Cut::Along { .. } => t.count / degree.max(1),
            };
            out.push((t.name, count));
        }
    }
    out
}

/// A layer's dimension that a tensor degree must divide, where it does not.
#[derive(Clone, Debug)]
pub struct Indivisible<'a> {
    /// The layer.
    pub layer: &'a Layer,
    /// What must be divided: `heads` or `hidden`.
    pub what: &'static str,
    /// Its size.
    pub size: i64,
}

/// How `degree` splits each layer of `nodes`, in the model's order.
pub fn splits(nodes: &[Node], degree: u64) -> Vec<(&Layer, Split)> {
    let t = degree.max(1) as i64;
    let mut out = Vec::new();
    walk(nodes, t, &mut out);
    // The model's last layer, a linear without a partner: a head, its outputs gathered.
    if let Some((layer, split)) = out.last_mut() {
        if let (LayerKind::Linear { outputs, .. }, Split::Replicated(Whole::NoPartner)) =
            (&layer.kind, *split)
        {
            if outputs % t == 0 {
                *split = Split::Gathered;
            }
        }
    }
    out
}

/// The heads and hidden widths of `nodes` that `degree` does not divide.
pub fn indivisible(nodes: &[Node], degree: u64) -> Vec<Indivisible<'_>> {
    let t = degree.max(1) as i64;
    let mut out = Vec::new();
    for layer in layers(nodes) {
        let (heads, hidden) = match &layer.kind {
            LayerKind::Attention { heads, .. } => (*heads, None),
            LayerKind::TransformerBlock { heads, hidden, .. } => (*heads, Some(*hidden)),
            _ => continue,
        };
        if heads % t != 0 {
            out.push(Indivisible {
                layer,
                what: "heads",
                size: heads,
            });
        }
        if let Some(h) = hidden.filter(|h| h % t != 0) {
            out.push(Indivisible {
                layer,
                what: "hidden",
                size: h,
            });
        }
    }
    out
}

/// The splits of one sequence of nodes (the model's, a block's, a residual's), each nested
/// sequence in turn: a partner is looked for within the sequence only.
fn walk<'a>(nodes: &'a [Node], t: i64, out: &mut Vec<(&'a Layer, Split)>) {
    let mut partner: Option<usize> = None;
    for (i, node) in nodes.iter().enumerate() {
        let layer = match node {
            Node::Layer(l) => l,
            Node::Block { nodes, .. } | Node::Residual { nodes, .. } => {
                walk(nodes, t, out);
                continue;
            }
        };
        let split = match &layer.kind {
            _ if t == 1 => Split::Replicated(Whole::Kind),
            LayerKind::Linear { .. } if partner == Some(i) => Split::Rows,
            _ if partner.is_some_and(|j| i < j) => Split::Between,
            LayerKind::Linear { outputs, .. } => match next_linear(&nodes[i + 1..]) {
                Some(j) if outputs % t == 0 => {
                    partner = Some(i + 1 + j);
                    Split::Columns
                }
                Some(_) => Split::Replicated(Whole::Indivisible),
                None => Split::Replicated(Whole::NoPartner),
            },
            LayerKind::Attention { .. } => Split::Heads,
            LayerKind::Embedding { vocab, .. } if vocab % t == 0 => Split::Vocab,
            LayerKind::Embedding { .. } => Split::Replicated(Whole::Indivisible),
            LayerKind::TransformerBlock { .. } => Split::Block,
            _ => Split::Replicated(Whole::Kind),
        };
        out.push((layer, split));
    }
}

/// The index in `rest` of the next `linear`, when only elementwise layers stand before it.
fn next_linear(rest: &[Node]) -> Option<usize> {
    for (j, node) in rest.iter().enumerate() {
        let Node::Layer(l) = node else { return None };
        match &l.kind {
            LayerKind::Linear { .. } => return Some(j),
            LayerKind::Elementwise(_)
            | LayerKind::Dropout { .. }
            | LayerKind::LeakyRelu { .. }
            | LayerKind::Elu { .. } => {}
            _ => return None,
        }
    }
    None
}
