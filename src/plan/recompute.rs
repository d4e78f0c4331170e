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

    /// Bytes of gradients (fp32) and stored activations (`value_bytes` a per-sample value) at
    /// once at their peak in a step whose gradients are unset on entry: before backward, every
    /// kept output and no gradient; as backward reaches layer `i` (from the last), the outputs
    /// kept before it (a recomputed group's inner outputs too, made again when backward enters
    /// the group) and the gradients of layer `i` and every layer after it.
    pub fn backward_peak(&self, all: &[&Layer], input: u64, value_bytes: u64) -> u64 {
        let out = |i: usize| all.get(i).map_or(0, |l| values(&l.output));
        let bytes = |v: u64| v.saturating_mul(value_bytes);
        // The outputs kept before each layer, and what each layer's group makes again.
        let mut kept_before = vec![input];
        for i in 0..all.len() {
            let kept = if self.kept(i) { out(i) } else { 0 };
            kept_before.push(kept_before[i].saturating_add(kept));
        }
        let mut again = vec![0u64; all.len()];
        for g in &self.groups {
            let inner = super::sum((g.start..g.end.saturating_sub(1)).map(out));
            for a in again.iter_mut().take(g.end).skip(g.start) {
                *a = inner;
            }
        }
        let mut peak = bytes(kept_before[all.len()]);
        let mut gradients = 0u64;
        for i in (0..all.len()).rev() {
            gradients = gradients.saturating_add(4u64.saturating_mul(all[i].params));
            let held = kept_before[i].saturating_add(again[i]);
            peak = peak.max(bytes(held).saturating_add(gradients));
        }
        peak
    }
}
