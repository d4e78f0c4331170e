//! What a layer's forward keeps for backward, as a fact of its kind: which of its input and
//! output autograd saves, the tensors it makes and keeps besides, and what it holds for a moment
//! on the way, in the value types the run uses. This file holds the types and the helpers the
//! families share; each family's file states its kinds' facts following the libtorch calls of
//! `runtime/model/` one by one, [`crate::ir::LayerKind::keeps`] (in `facts.rs`) dispatches to
//! them, and the plan (`plan/activations.rs`) adds them up over a model, so the plan's
//! activation terms are sums of these facts and nothing else.
//!
//! Byte counts are per sample unless named per pass (a pass: one forward of one micro-batch).

use crate::ir::{Device, Precision};

/// How one value of a tensor is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// fp32.
    F32,
    /// bf16 or fp16.
    Half,
    /// A boolean mask.
    Bool,
    /// int64 (token ids, max pooling's indices).
    I64,
}

impl Value {
    /// Bytes per value.
    pub fn bytes(self) -> u64 {
        match self {
            Value::F32 => 4,
            Value::Half => 2,
            Value::Bool => 1,
            Value::I64 => 8,
        }
    }
}

/// Where a layer's kernels run, which decides some of what they keep: dropout's mask, and which
/// scaled-dot-product attention kernel libtorch picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// The CPU.
    Cpu,
    /// A CUDA device.
    Cuda,
    /// Unknown until the run starts (`device auto`): the larger of the two is counted.
    Either,
}

impl Runs {
    /// Where `device` runs.
    pub fn on(device: Device) -> Runs {
        match device {
            Device::Cpu => Runs::Cpu,
            Device::Cuda(_) => Runs::Cuda,
            Device::Auto => Runs::Either,
        }
    }
}

/// What a layer's forward runs with.
#[derive(Clone, Copy, Debug)]
pub struct Pass {
    /// The run's precision: matrix products in bf16 or fp16 under mixed precision.
    pub precision: Precision,
    /// Where the layer runs.
    pub runs: Runs,
    /// Training: dropout draws masks and autograd saves tensors for backward. An evaluation
    /// keeps nothing; what a layer makes is alive only while it runs.
    pub train: bool,
    /// Whether a padding mask flows beside the activations (after an `embedding` with a `pad`,
    /// while the sequence stays the second dimension), which attention turns into a mask
    /// tensor.
    pub padded: bool,
}

impl Pass {
    /// The value type of matrix products' inputs and outputs.
    pub fn compute(self) -> Value {
        match self.precision {
            Precision::Fp32 => Value::F32,
            Precision::Bf16 | Precision::Fp16 => Value::Half,
        }
    }

    /// Whether dropout of probability `p` draws a mask.
    pub fn drops(self, p: f64) -> bool {
        self.train && p > 0.0
    }
}

/// What one layer's forward keeps for backward and holds on the way.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Keeps {
    /// Whether backward reads the layer's input as it arrived (its storage stays alive).
    pub input: bool,
    /// The value type of the output, a new tensor; `None` when the output is a view of the
    /// input (the same storage).
    pub output: Option<Value>,
    /// Whether backward reads the layer's output (relu's, softmax's).
    pub output_saved: bool,
    /// Bytes per sample of the tensors it makes and keeps besides its output.
    pub inner: u64,
    /// Bytes per pass it makes and keeps whatever the batch (weights cast to bf16, masks).
    pub fixed: u64,
    /// Bytes per sample alive at its forward's widest moment beyond its input, what it keeps
    /// and its output.
    pub transient: u64,
    /// Bytes per sample alive at its backward's widest moment beyond what it keeps and the
    /// gradients of its output and input.
    pub backward: u64,
    /// Bytes per sample of the largest tensor it makes besides its output (which the plan sees
    /// itself): an allocator that keeps freed blocks may hold that much above the peak.
    pub largest: u64,
    /// Whether its backward makes its input's gradient even where the input needs none
    /// (prelu's kernel computes both gradients at once; where it reads a cast copy, the copy's
    /// gradient is in `backward`).
    pub input_gradient: bool,
}

impl Keeps {
    /// A layer that makes a new output of `value` and keeps its input.
    pub(super) fn input(value: Value) -> Keeps {
        Keeps {
            input: true,
            output: Some(value),
            ..Keeps::default()
        }
    }

    /// A layer that makes a new output of `value` and keeps it.
    pub(super) fn output(value: Value) -> Keeps {
        Keeps {
            output: Some(value),
            output_saved: true,
            ..Keeps::default()
        }
    }

    /// A layer that makes a new output of `value` and keeps nothing.
    pub(super) fn nothing(value: Value) -> Keeps {
        Keeps {
            output: Some(value),
            ..Keeps::default()
        }
    }

    /// A layer whose output is a view of its input.
    pub(super) fn view() -> Keeps {
        Keeps::default()
    }
}

/// The input of a matrix product (linear, convolution, attention's projections, prelu): cast to
/// the compute type when it differs, in which case the cast copy, not the input, is kept.
/// Returns whether the input itself is kept and the bytes of the copy.
pub(super) fn product_input(values: u64, given: Value, pass: Pass) -> (bool, u64) {
    let c = pass.compute();
    if given == c {
        (true, 0)
    } else {
        (false, values.saturating_mul(c.bytes()))
    }
}

/// The bytes of an fp32 copy of `values` values of type `given`: none when they are fp32
/// already (what runs in fp32, as under autocast, reads a bf16/fp16 input through such a copy).
pub(super) fn fp32_copy(values: u64, given: Value) -> u64 {
    if given == Value::F32 {
        0
    } else {
        values.saturating_mul(4)
    }
}

/// The weights of a matrix product as it uses them: under bf16 or fp16 a cast copy of each,
/// which backward keeps (bytes per pass).
pub(super) fn cast_weights(params: u64, pass: Pass) -> u64 {
    match pass.compute() {
        Value::Half => params.saturating_mul(2),
        _ => 0,
    }
}

/// Dropout's mask for `values` values of type `given`, in bytes: Kiln draws an fp32 mask on the
/// CPU for fp32 values; libtorch's CPU dropout multiplies by a mask of the input's type, its
/// CUDA kernel keeps a boolean one.
pub(super) fn dropout_mask(values: u64, given: Value, runs: Runs) -> u64 {
    let bytes = match runs {
        Runs::Cuda => 1,
        Runs::Cpu | Runs::Either => given.bytes().max(1),
    };
    values.saturating_mul(bytes)
}

/// A forward through parts in sequence, as a composite layer (attention, a transformer block)
/// runs them: which storages backward keeps, and the widest moment. Its [`Chain::keeps`] is the
/// composite's fact.
pub(super) struct Chain {
    /// Bytes per sample of each storage made so far, whether backward keeps it, and whether a
    /// binding holds it while later parts run (a residual's input); the first is the input.
    storages: Vec<(u64, bool, bool)>,
    /// The storage the next part reads.
    current: usize,
    /// Its value type.
    value: Value,
    /// The parts' own kept bytes per sample, and per pass.
    inner: u64,
    fixed: u64,
    /// The widest moment of the forward, and of the backward counted as if every part's kept
    /// storages were still alive (backward frees the later parts' first).
    peak: u64,
    backward: u64,
    /// The largest tensor a part made.
    largest: u64,
}

impl Chain {
    /// A chain whose input holds `values` values of type `given`.
    pub(super) fn new(values: u64, given: Value) -> Chain {
        Chain {
            storages: vec![(values.saturating_mul(given.bytes()), false, true)],
            current: 0,
            value: given,
            inner: 0,
            fixed: 0,
            peak: 0,
            backward: 0,
            largest: 0,
        }
    }

    /// The value type of what the next part reads.
    pub(super) fn value(&self) -> Value {
        self.value
    }

    /// Bytes per sample alive now: kept or held storages, the current one, the parts' own.
    fn alive(&self) -> u64 {
        let storages = self
            .storages
            .iter()
            .enumerate()
            .filter(|(i, (_, kept, held))| *kept || *held || *i == self.current)
            .fold(0u64, |n, (_, (b, _, _))| n.saturating_add(*b));
        storages.saturating_add(self.inner)
    }

    /// Adds bytes per pass that the composite keeps (its weights' cast copies).
    pub(super) fn fixed(&mut self, bytes: u64) {
        self.fixed = self.fixed.saturating_add(bytes);
    }

    /// Runs a part that keeps `k` and makes `values` output values.
    pub(super) fn part(&mut self, k: Keeps, values: u64) {
        let input = self.storages[self.current].0;
        if k.input {
            self.storages[self.current].1 = true;
        }
        let output = k.output.map_or(0, |v| values.saturating_mul(v.bytes()));
        let moment = self
            .alive()
            .saturating_add(k.inner)
            .saturating_add(k.transient)
            .saturating_add(output);
        self.peak = self.peak.max(moment);
        self.largest = self.largest.max(k.largest).max(output);
        self.inner = self.inner.saturating_add(k.inner);
        self.fixed = self.fixed.saturating_add(k.fixed);
        match k.output {
            Some(v) => {
                self.storages.push((output, k.output_saved, false));
                self.current = self.storages.len() - 1;
                self.value = v;
            }
            None if k.output_saved => self.storages[self.current].1 = true,
            None => {}
        }
        // When backward reaches this part, the later parts' kept storages are freed: it holds
        // what this part and those before it keep, its output's and input's gradients and what
        // its own backward makes.
        let moment = sum_kept(&self.storages)
            .saturating_add(self.inner)
            .saturating_add(k.backward)
            .saturating_add(input)
            .saturating_add(output);
        self.backward = self.backward.max(moment);
    }

    /// Marks the current storage as held until a later [`Chain::add`] reads it; returns it.
    pub(super) fn hold(&mut self) -> usize {
        self.storages[self.current].2 = true;
        self.current
    }

    /// `skip + current` in fp32, as a residual adds (an addition keeps nothing; an input that
    /// is not fp32 is cast first, alive while it adds).
    pub(super) fn add(&mut self, skip: usize) {
        let (bytes, value) = (self.storages[self.current].0, self.value);
        let values = bytes / value.bytes();
        let cast = fp32_copy(values, value);
        let output = values.saturating_mul(4);
        let moment = self.alive().saturating_add(cast).saturating_add(output);
        self.peak = self.peak.max(moment);
        self.storages[skip].2 = skip == 0;
        self.storages.push((output, false, false));
        self.current = self.storages.len() - 1;
        self.value = Value::F32;
    }

    /// The composite's fact: what it keeps (its input, what its parts keep, its output when a
    /// part keeps it) and its widest moments beyond them.
    pub(super) fn keeps(self) -> Keeps {
        let (input, output) = (self.storages[0], self.storages[self.current]);
        let kept = self.storages[1..]
            .iter()
            .enumerate()
            .filter(|(i, (_, kept, _))| *kept && i + 1 != self.current)
            .fold(0u64, |n, (_, (b, _, _))| n.saturating_add(*b))
            .saturating_add(self.inner);
        let end = input.0.saturating_add(kept).saturating_add(output.0);
        // What the plan adds at the composite's backward: all it keeps, and the gradients of
        // its output and input.
        let counted = sum_kept(&self.storages)
            .saturating_add(self.inner)
            .saturating_add(input.0)
            .saturating_add(output.0);
        Keeps {
            input: input.1,
            output: Some(self.value),
            output_saved: output.1,
            inner: kept,
            fixed: self.fixed,
            transient: self.peak.saturating_sub(end),
            backward: self.backward.saturating_sub(counted),
            largest: self.largest,
            input_gradient: false,
        }
    }
}

/// The bytes of the kept storages.
fn sum_kept(storages: &[(u64, bool, bool)]) -> u64 {
    storages
        .iter()
        .filter(|(_, kept, _)| *kept)
        .fold(0u64, |n, (b, _, _)| n.saturating_add(*b))
}

/// What an attention's memory assumes of the scaled-dot-product kernel libtorch picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scores {
    /// A fused kernel (flash or memory-efficient attention), which keeps no scores; otherwise
    /// a math path, which keeps three `[heads, S, S]` fp32 tensors per sample.
    pub fused: bool,
    /// `[heads, S, S]`.
    pub shape: [i64; 3],
    /// Bytes per sample of those three tensors.
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::LayerKind;

    fn pass(precision: Precision, train: bool) -> Pass {
        Pass {
            precision,
            runs: Runs::Cpu,
            train,
            padded: false,
        }
    }

    #[test]
    fn a_linear_keeps_its_input_or_its_cast_copy_under_bf16() {
        let l = LayerKind::Linear {
            inputs: 8,
            outputs: 4,
            bias: true,
        };
        let fp32 = l.keeps(&[8], &[4], Value::F32, pass(Precision::Fp32, true));
        assert_eq!(fp32, Keeps::input(Value::F32));
        let bf16 = l.keeps(&[8], &[4], Value::F32, pass(Precision::Bf16, true));
        assert!(!bf16.input);
        assert_eq!(bf16.inner, 16);
        assert_eq!(bf16.fixed, 36 * 2);
        assert_eq!(bf16.output, Some(Value::Half));
    }

    #[test]
    fn dropout_is_a_view_outside_training() {
        let d = LayerKind::Dropout { p: 0.5 };
        assert_eq!(
            d.keeps(&[10], &[10], Value::F32, pass(Precision::Fp32, false)),
            Keeps::view()
        );
        let t = d.keeps(&[10], &[10], Value::F32, pass(Precision::Fp32, true));
        assert_eq!(t.inner, 40);
        assert!(!t.input);
    }
}
