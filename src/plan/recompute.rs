//! Activations under `recompute` (activation checkpointing). The plan counts, per sample, the
//! model's input and each layer's output as kept for backward. A group marked `recompute` keeps
//! only its input (the output before it) and its output: the outputs of its other layers are
//! made again in backward, one group at a time, so the largest group's inner outputs are
//! counted once more, as the peak of that recomputation. A layer's own inner values (a
//! transformer block's attention and MLP) are not in the count, recomputed or not.

use std::ops::Range;

use super::values;
use crate::ir::{Layer, Node};

/// Which layers' outputs are kept, in the order of [`crate::ir::layers`], and the recomputed
/// groups as ranges of that order.
pub struct Kept {
    kept: Vec<bool>,
    groups: Vec<Range<usize>>,
}

impl Kept {
    /// The kept outputs and recomputed groups of `nodes`.
    pub fn of(nodes: &[Node]) -> Kept {
        let mut k = Kept {
            kept: Vec::new(),
            groups: Vec::new(),
        };
        k.walk(nodes, false);
        k
    }

    fn walk(&mut self, nodes: &[Node], inside: bool) {
        for node in nodes {
            let start = self.kept.len();
            let (marked, inner) = match node {
                Node::Layer(l) => {
                    self.kept.push(true);
                    (l.recompute.is_some(), None)
                }
                Node::Block {
                    nodes, recompute, ..
                }
                | Node::Residual {
                    nodes, recompute, ..
                } => (recompute.is_some(), Some(nodes)),
            };
            if let Some(inner) = inner {
                self.walk(inner, inside || marked);
            }
            if marked && !inside {
                let end = self.kept.len();
                for k in &mut self.kept[start..end.saturating_sub(1)] {
                    *k = false;
                }
                self.groups.push(start..end);
            }
        }
    }

    /// Whether any group is recomputed.
    pub fn any(&self) -> bool {
        !self.groups.is_empty()
    }

    /// Per-sample values that the layers `range` of `all` keep for backward, with the peak of
    /// the largest recomputed group among them.
    pub fn stored(&self, all: &[&Layer], range: Range<usize>) -> u64 {
        let out = |i: usize| all.get(i).map_or(0, |l| values(&l.output));
        let kept = super::sum(
            range
                .clone()
                .filter(|&i| self.kept.get(i).copied().unwrap_or(true))
                .map(out),
        );
        kept.saturating_add(self.peak(all, range).map_or(0, |(_, v)| v))
    }

    /// The recomputed group within `range` whose inner outputs are largest: its first layer
    /// and their per-sample values.
    pub fn peak(&self, all: &[&Layer], range: Range<usize>) -> Option<(usize, u64)> {
        self.groups
            .iter()
            .filter(|g| g.start >= range.start && g.end <= range.end)
            .map(|g| {
                let inner = (g.start..g.end.saturating_sub(1))
                    .map(|i| all.get(i).map_or(0, |l| values(&l.output)));
                (g.start, super::sum(inner))
            })
            .max_by_key(|(_, v)| *v)
    }

    /// Whether the output of layer `i` is kept for backward.
    pub fn kept(&self, i: usize) -> bool {
        self.kept.get(i).copied().unwrap_or(true)
    }
}
