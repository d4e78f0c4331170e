//! Activation memory: what a training step and an evaluation hold at once, as the sum of each
//! layer kind's facts ([`crate::ir::LayerKind::keeps`]) over the model.
//!
//! The walk follows the storages a forward makes: the batch, each layer's new output (a view
//! shares its input's), the tensors a layer makes and keeps. A storage is kept for backward when
//! any layer saves it; a layer's row counts what it made and is kept. Autograd records no layer
//! whose input needs no gradient and which has no parameters: such a layer keeps nothing. A group
//! marked `recompute` keeps only its input (which the checkpoint saves) and its output: what its
//! layers would keep is made again when backward reaches the group, one group at a time.
//!
//! The step's widest moment is the largest of: a layer's forward (everything kept before it,
//! its own, and what it holds while it runs), the end of the forward (everything kept, the
//! output and what the loss keeps, and the gradient of the output), and a layer's backward
//! (everything kept up to it less what only later layers kept, which backward has freed; a
//! recomputed group's layers again; the gradient reaching it, the one it makes for its input,
//! and what its backward makes). An evaluation keeps nothing: its widest moment is one layer's
//! input, output and what the layer makes while it runs, beside the batch. The largest tensor a
//! step makes is the plan's allocator margin (`DeviceNeed::allocator_margin_bytes`).

use std::ops::Range;

use serde::Serialize;

use super::sum;
use crate::ir::{numel, DType, Device, Experiment, Keeps, Layer, Loss, Node, Pass, Runs, Value};

/// Bytes that grow with the samples of a pass, and bytes a pass has whatever its samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Bytes {
    /// Bytes per sample.
    pub per_sample: u64,
    /// Bytes per pass.
    pub per_pass: u64,
}

impl Bytes {
    /// The bytes of a pass of `samples` samples.
    pub fn at(self, samples: u64) -> u64 {
        self.per_sample
            .saturating_mul(samples)
            .saturating_add(self.per_pass)
    }

    fn sample(per_sample: u64) -> Bytes {
        Bytes {
            per_sample,
            per_pass: 0,
        }
    }

    fn plus(self, other: Bytes) -> Bytes {
        Bytes {
            per_sample: self.per_sample.saturating_add(other.per_sample),
            per_pass: self.per_pass.saturating_add(other.per_pass),
        }
    }
}

/// One layer's activation memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct LayerMemory {
    /// What backward keeps that the layer made: its own tensors, its output when a later layer
    /// or the loss keeps it (inside a recomputed group, only the group's output).
    pub kept: Bytes,
    /// What it would keep without `recompute` (equal to `kept` outside recomputed groups).
    pub kept_without_recompute: Bytes,
    /// Held besides everything kept up to it while its forward runs: its input and output when
    /// nothing keeps them, a residual's input, what it makes for a moment.
    pub forward: Bytes,
    /// Held besides everything kept up to it while its backward runs: the gradients of its
    /// output and input (and of a residual's input), what its backward makes.
    pub backward: Bytes,
    /// What an evaluation holds while it runs: its input (unless the batch), its output, what
    /// it makes.
    pub eval: Bytes,
    /// Bytes per sample of what it gives the next layer (a pipeline stage receives this).
    pub output: u64,
    /// What it and the layers before it made that only later layers keep: freed by the time
    /// backward reaches it.
    pub released: Bytes,
    /// Its input, when nothing keeps it: held while it runs (in `forward`), and what a pipeline
    /// stage that starts with it received (its base already).
    pub input_held: u64,
}

/// Activation memory over a model.
pub struct Activations {
    /// Every layer, in the order of [`crate::ir::layers`].
    pub layers: Vec<LayerMemory>,
    /// The batch (inputs, in their stored type).
    pub input: Bytes,
    /// At the end of the forward: the output, what the loss keeps, the loss's gradient.
    pub loss: Bytes,
    /// Bytes per sample of the largest tensor a step makes.
    pub largest: u64,
    /// The recomputed groups, as ranges of layers.
    groups: Vec<Range<usize>>,
}

/// A storage the forward made.
struct Storage {
    bytes: u64,
    /// The layer that made it (`None`: the batch).
    maker: Option<usize>,
    kept: bool,
    device: Device,
    value: Value,
    /// Whether it requires grad: autograd records nothing for a layer whose input does not and
    /// which has no parameters (the batch does not).
    grad: bool,
    /// The earliest layer that keeps it: backward has freed it by the time it reaches a layer
    /// before that one.
    saver: Option<usize>,
}

impl Storage {
    /// Marks it kept by layer `by`.
    fn keep(&mut self, by: usize) {
        self.kept = true;
        self.saver = Some(self.saver.map_or(by, |s| s.min(by)));
    }
}

struct Walk<'e> {
    e: &'e Experiment,
    train: bool,
    storages: Vec<Storage>,
    current: usize,
    value: Value,
    padded: bool,
    layers: Vec<LayerMemory>,
    /// Per layer: its facts' own kept bytes (per sample, per pass).
    own: Vec<Bytes>,
    /// Per layer: the storage it read and the one it gave.
    flow: Vec<(usize, usize)>,
    /// Residual inputs held while their branch runs (storages).
    held: Vec<usize>,
    /// Recomputed groups, as layer ranges.
    groups: Vec<Range<usize>>,
    /// Per layer: the bytes of the gradient its backward makes for its input, whether it passes
    /// its output's gradient on instead (views), and whether autograd records it.
    gradients: Vec<(u64, bool, bool)>,
    /// Bytes per sample of the largest tensor made so far.
    largest: u64,
}

impl Activations {
    /// The activation memory of `e`'s model.
    pub fn of(e: &Experiment) -> Activations {
        let input = numel(&e.model.input).max(0) as u64;
        let value = if e.model.input_dtype == DType::Int {
            Value::I64
        } else {
            Value::F32
        };
        let first = crate::ir::layers(&e.model.nodes)
            .first()
            .map_or(e.device, |l| l.device);
        let mut train = Walk::new(e, true, input, value, first);
        train.nodes(&e.model.nodes, false);
        let mut eval = Walk::new(e, false, input, value, first);
        eval.nodes(&e.model.nodes, false);
        let out = train.storages[train.current].bytes;
        let out_values = numel(&e.model.output).max(0) as u64;
        let mut layers = train.finish(out);
        for (l, ev) in layers.iter_mut().zip(eval.layers) {
            l.eval = ev.eval;
        }
        // The loss reads an fp32 copy of a bf16/fp16 output (kept by the losses that keep their
        // input); cross-entropy keeps its log-softmax.
        let f32_copy = if train.value == Value::F32 {
            0
        } else {
            4 * out_values
        };
        let loss_keeps = match e.train.loss {
            Loss::CrossEntropy { .. } => 4 * out_values,
            _ => 0,
        };
        let output_held = if train.storages[train.current].kept {
            0
        } else {
            out
        };
        Activations {
            layers,
            input: Bytes::sample(input.saturating_mul(value.bytes())),
            loss: Bytes::sample(sum([output_held, loss_keeps, f32_copy, 4 * out_values])),
            largest: train.largest,
            groups: train.groups,
        }
    }

    /// Whether any group is recomputed.
    pub fn recomputes(&self) -> bool {
        !self.groups.is_empty()
    }

    /// The widest moment of a training pass of `samples` samples through the layers `range`,
    /// counting what they keep on the device `here` selects the layers of, with `base` bytes held
    /// throughout (the batch, or what a pipeline stage received). With `gradients`, each
    /// layer's parameter gradients (bytes) are made as backward reaches it, on top.
    pub fn peak(
        &self,
        range: Range<usize>,
        here: &dyn Fn(usize) -> bool,
        samples: u64,
        base: u64,
        gradients: Option<&[u64]>,
        without_recompute: bool,
    ) -> u64 {
        let kept = |i: usize| {
            let l = &self.layers[i];
            let k = if without_recompute {
                l.kept_without_recompute
            } else {
                l.kept
            };
            if here(i) {
                k.at(samples)
            } else {
                0
            }
        };
        let mut before = base;
        let mut peak = base;
        let mut kept_up_to = vec![0u64; range.len()];
        for (n, i) in range.clone().enumerate() {
            before = before.saturating_add(kept(i));
            kept_up_to[n] = before;
            if here(i) {
                let mut forward = self.layers[i].forward.at(samples);
                if i == range.start && i > 0 {
                    // What a stage received is its base.
                    forward =
                        forward.saturating_sub(self.layers[i].input_held.saturating_mul(samples));
                }
                peak = peak.max(before.saturating_add(forward));
            }
        }
        let ends_model = range.end == self.layers.len() && range.end > range.start;
        if ends_model && here(range.end - 1) {
            peak = peak.max(before.saturating_add(self.loss.at(samples)));
        }
        let group_of = group_of(&self.groups, self.layers.len());
        // What each recomputed group makes again when backward reaches it.
        let again: Vec<u64> = self
            .groups
            .iter()
            .map(|g| {
                sum(g
                    .clone()
                    .map(|j| self.layers[j].kept_without_recompute.at(samples)))
            })
            .collect();
        let mut made = 0u64;
        for (n, i) in range.clone().enumerate().rev() {
            if let Some(g) = gradients {
                made = made.saturating_add(g.get(i).copied().unwrap_or(0));
            }
            if !here(i) {
                continue;
            }
            let again = match group_of[i] {
                Some(g) if !without_recompute => again[g],
                _ => 0,
            };
            let released = if without_recompute || group_of[i].is_none() {
                self.layers[i].released.at(samples)
            } else {
                0
            };
            let moment = sum([
                kept_up_to[n].saturating_sub(released),
                again,
                self.layers[i].backward.at(samples),
                made,
            ]);
            peak = peak.max(moment);
        }
        peak
    }

    /// What the layers `range` keep for backward, for `samples` samples (a pipeline stage's
    /// micro-batches in flight each keep this).
    pub fn kept(&self, range: Range<usize>, samples: u64) -> u64 {
        sum(range.map(|i| self.layers[i].kept.at(samples)))
    }

    /// The widest moment of an evaluation of `samples` samples over the layers `on` selects,
    /// the batch held beside them where `holds_input`.
    pub fn eval_peak(&self, on: &dyn Fn(usize) -> bool, samples: u64, holds_input: bool) -> u64 {
        let base = if holds_input {
            self.input.at(samples)
        } else {
            0
        };
        self.layers
            .iter()
            .enumerate()
            .filter(|(i, _)| on(*i))
            .map(|(_, l)| base.saturating_add(l.eval.at(samples)))
            .max()
            .unwrap_or(0)
    }
}

impl<'e> Walk<'e> {
    fn new(e: &'e Experiment, train: bool, input: u64, value: Value, device: Device) -> Walk<'e> {
        Walk {
            e,
            train,
            storages: vec![Storage {
                bytes: input.saturating_mul(value.bytes()),
                maker: None,
                kept: false,
                device,
                value,
                grad: false,
                saver: None,
            }],
            current: 0,
            value,
            padded: false,
            layers: Vec::new(),
            own: Vec::new(),
            flow: Vec::new(),
            held: Vec::new(),
            groups: Vec::new(),
            gradients: Vec::new(),
            largest: input.saturating_mul(value.bytes()),
        }
    }

    fn nodes(&mut self, nodes: &[Node], inside: bool) {
        for node in nodes {
            let start = self.layers.len();
            let group_input = self.current;
            let marked = match node {
                Node::Layer(l) => {
                    self.layer(l);
                    l.recompute.is_some()
                }
                Node::Block {
                    nodes, recompute, ..
                } => {
                    self.nodes(nodes, inside || recompute.is_some());
                    recompute.is_some()
                }
                Node::Residual {
                    nodes, recompute, ..
                } => {
                    self.residual(nodes, inside || recompute.is_some());
                    recompute.is_some()
                }
            };
            if marked && !inside && self.train {
                self.storages[group_input].keep(start);
                self.groups.push(start..self.layers.len());
            }
        }
    }

    fn residual(&mut self, nodes: &[Node], inside: bool) {
        let skip = self.current;
        let start = self.layers.len();
        self.held.push(skip);
        self.nodes(nodes, inside);
        self.held.pop();
        let skip_bytes = self.storages[skip].bytes;
        // While the branch runs backward, the sum's gradient waits for the skip as well.
        for l in &mut self.layers[start..] {
            l.backward = l.backward.plus(Bytes::sample(skip_bytes));
        }
        let Some(last) = self.layers.len().checked_sub(1).filter(|l| *l >= start) else {
            return;
        };
        // `x + f(x)`: f(x) cast to x's type when they differ, a new storage of x's size.
        let value = self.storages[skip].value;
        let cast = if self.value == value { 0 } else { skip_bytes };
        let l = &mut self.layers[last];
        l.forward = l
            .forward
            .plus(Bytes::sample(cast.saturating_add(skip_bytes)));
        l.eval = l.eval.plus(Bytes::sample(cast.saturating_add(skip_bytes)));
        self.storages.push(Storage {
            bytes: skip_bytes,
            maker: Some(last),
            kept: false,
            device: self.storages[skip].device,
            value,
            grad: self.storages[skip].grad || self.storages[self.current].grad,
            saver: None,
        });
        self.current = self.storages.len() - 1;
        self.value = value;
        self.layers[last].output = skip_bytes;
    }

    fn layer(&mut self, l: &Layer) {
        let i = self.layers.len();
        if self.storages[self.current].device != l.device {
            // Moved to the layer's device: a copy there.
            self.storages.push(Storage {
                bytes: self.storages[self.current].bytes,
                maker: Some(i),
                kept: false,
                device: l.device,
                value: self.value,
                grad: self.storages[self.current].grad,
                saver: None,
            });
            self.current = self.storages.len() - 1;
        }
        let pass = Pass {
            precision: self.e.train.precision,
            runs: Runs::on(l.device),
            train: self.train,
            padded: self.padded,
        };
        let facts: Keeps = l.kind.keeps(&l.input, &l.output, self.value, pass);
        let input = self.current;
        // Autograd records the layer only where its input requires grad or it has parameters;
        // otherwise what it makes is alive only while it runs.
        let records = self.train && (self.storages[input].grad || l.params > 0);
        let k = if records || !self.train {
            facts
        } else {
            Keeps {
                input: false,
                output_saved: false,
                inner: 0,
                fixed: 0,
                transient: facts.transient.saturating_add(facts.inner),
                backward: 0,
                ..facts
            }
        };
        let input_bytes = self.storages[input].bytes;
        let out_values = numel(&l.output).max(0) as u64;
        let output_bytes = k.output.map_or(0, |v| out_values.saturating_mul(v.bytes()));
        self.largest = self.largest.max(output_bytes).max(facts.largest);
        if k.input && self.train {
            self.storages[input].keep(i);
        }
        let held = sum(self
            .held
            .iter()
            .filter(|s| **s != input)
            .map(|s| self.storages[*s].bytes));
        // The gradient its backward makes for its input: none for the batch, which needs none,
        // nor for a view's, whose input gradient is a view of the output's.
        let passes = k.output.is_none();
        let gradient_in = if !(self.storages[input].grad || k.input_gradient) || passes {
            0
        } else {
            input_bytes
        };
        self.gradients.push((gradient_in, passes, records));
        let batch = if input == 0 { 0 } else { input_bytes };
        let mut memory = LayerMemory {
            eval: Bytes {
                per_sample: sum([batch, output_bytes, k.inner, k.transient, held]),
                per_pass: k.fixed,
            },
            backward: Bytes::sample(k.backward),
            ..LayerMemory::default()
        };
        memory.forward = Bytes {
            per_sample: sum([k.transient, held]),
            per_pass: if records { 0 } else { facts.fixed },
        };
        self.layers.push(memory);
        self.own.push(Bytes {
            per_sample: k.inner,
            per_pass: k.fixed,
        });
        if let Some(v) = k.output {
            self.storages.push(Storage {
                bytes: output_bytes,
                maker: Some(i),
                kept: false,
                device: l.device,
                value: v,
                grad: records,
                saver: None,
            });
            self.current = self.storages.len() - 1;
            self.value = v;
        }
        if k.output_saved && self.train {
            self.storages[self.current].keep(i);
        }
        self.flow.push((input, self.current));
        self.layers[i].output = self.storages[self.current].bytes;
        self.padded = match l.kind {
            crate::ir::LayerKind::Embedding { pad, .. } => pad.is_some(),
            _ => self.padded && l.output.len() >= 2 && l.output.first() == l.input.first(),
        };
    }

    /// Each layer's memory once every storage's keeping is known; `last` is the bytes of the
    /// loss's gradient, which reaches the last layer.
    fn finish(&self, last: u64) -> Vec<LayerMemory> {
        let mut layers = self.layers.clone();
        // Backward holds the gradient that reaches a layer beside the one it makes.
        let mut arriving = last;
        for (l, (made, passes, records)) in layers.iter_mut().zip(&self.gradients).rev() {
            if !records {
                continue;
            }
            l.backward = l
                .backward
                .plus(Bytes::sample(arriving.saturating_add(*made)));
            if !passes {
                arriving = *made;
            }
        }
        let n = layers.len();
        let group_of = group_of(&self.groups, n);
        // What each layer made and is kept, and what only later layers keep, as a difference
        // over the layers from its maker to its first keeper, on its device: O(layers).
        let mut made = vec![0u64; n];
        let mut released: Vec<(Device, Vec<i128>)> = Vec::new();
        for st in self.storages.iter().filter(|st| st.kept) {
            let Some(m) = st.maker else { continue };
            made[m] = made[m].saturating_add(st.bytes);
            if let (Some(by), None) = (st.saver.filter(|by| *by > m), group_of[m]) {
                let at = match released.iter().position(|(d, _)| *d == st.device) {
                    Some(at) => at,
                    None => {
                        released.push((st.device, vec![0i128; n + 1]));
                        released.len() - 1
                    }
                };
                released[at].1[m] += i128::from(st.bytes);
                released[at].1[by] -= i128::from(st.bytes);
            }
        }
        for (_, diff) in &mut released {
            for i in 1..=n {
                diff[i] += diff[i - 1];
            }
        }
        for (i, l) in layers.iter_mut().enumerate() {
            let (input, output) = self.flow[i];
            let own = self.own[i].plus(Bytes::sample(made[i]));
            l.kept_without_recompute = own;
            l.kept = match group_of[i].map(|g| &self.groups[g]) {
                // Inside a recomputed group only the group's output is kept.
                Some(g) if i + 1 == g.end => Bytes::sample(
                    self.storages[output].bytes * u64::from(self.storages[output].kept),
                ),
                Some(_) => Bytes::default(),
                None => own,
            };
            let unkept = |s: usize| {
                if self.storages[s].kept {
                    0
                } else {
                    self.storages[s].bytes
                }
            };
            // The batch is held throughout; a copy moved to this layer's device is its own.
            let moved = self.storages[input].maker == Some(i);
            let input_held = if moved || input == 0 {
                0
            } else {
                unkept(input)
            };
            let output_held = if output == input { 0 } else { unkept(output) };
            l.forward = l
                .forward
                .plus(Bytes::sample(input_held.saturating_add(output_held)));
            l.input_held = input_held;
            let device = self.storages[output].device;
            l.released = Bytes::sample(
                released
                    .iter()
                    .find(|(d, _)| *d == device)
                    .map_or(0, |(_, diff)| diff[i].max(0) as u64),
            );
        }
        layers
    }
}

/// The recomputed group of each of `n` layers, from the groups' ranges.
fn group_of(groups: &[Range<usize>], n: usize) -> Vec<Option<usize>> {
    let mut out = vec![None; n];
    for (g, range) in groups.iter().enumerate() {
        for slot in out.iter_mut().take(range.end).skip(range.start) {
            *slot = Some(g);
        }
    }
    out
}

/// The scaled-dot-product kernel the plan assumes for attention layers of one kind of device and
/// one shape of scores.
#[derive(Serialize, Debug, PartialEq)]
pub struct AttentionKernel {
    /// The layers.
    pub layers: Vec<String>,
    /// Where they run: `cpu`, `cuda`, or `auto` (counted as the CPU runs them, the larger).
    pub runs: &'static str,
    /// `fused` (flash or memory-efficient attention, which keep no scores) or `math` (dropout on
    /// the attention weights on the CPU), which keeps three fp32 score tensors.
    pub kernel: &'static str,
    /// The scores' shape per sample, `[heads, S, S]`.
    pub scores: [i64; 3],
    /// Bytes per sample of the three fp32 score tensors a math path keeps (what the fused
    /// kernels save, or what libtorch's fallback to its math kernel would add on CUDA).
    pub math_bytes_per_sample: u64,
}

/// The kernel each attention layer's memory assumes, grouped by device and shape.
pub fn attention_kernels(e: &Experiment) -> Vec<AttentionKernel> {
    let mut out: Vec<AttentionKernel> = Vec::new();
    for l in crate::ir::layers(&e.model.nodes) {
        let runs = Runs::on(l.device);
        let pass = Pass {
            precision: e.train.precision,
            runs,
            train: true,
            padded: false,
        };
        let Some(s) = l.kind.scores(&l.input, pass) else {
            continue;
        };
        let (runs, kernel) = (
            match runs {
                Runs::Cpu => "cpu",
                Runs::Cuda => "cuda",
                Runs::Either => "auto",
            },
            if s.fused { "fused" } else { "math" },
        );
        match out
            .iter_mut()
            .find(|k| (k.runs, k.kernel, k.scores) == (runs, kernel, s.shape))
        {
            Some(k) => k.layers.push(l.name.clone()),
            None => out.push(AttentionKernel {
                layers: vec![l.name.clone()],
                runs,
                kernel,
                scores: s.shape,
                math_bytes_per_sample: s.bytes,
            }),
        }
    }
    out
}
