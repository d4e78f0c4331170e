//! The plan: what the typed experiment ([`crate::ir`]) costs — parameters, FLOPs, the memory
//! each device needs under the chosen placement and strategy, and what crosses between devices
//! each step (activations at a device boundary, gradients all-reduced, a pipeline's idle time).
//!
//! Conventions (documented in `docs/language.md`): a multiply-add counts as 2 FLOPs in linear,
//! convolution and attention layers (biases not counted); other layers count one FLOP per
//! output element (pooling: one per window element); flatten, reshape and embedding count 0.
//! A training step costs 3x the forward FLOPs (backward is twice the forward). Weights,
//! gradients and optimizer state are fp32 (autocast keeps fp32 master weights); activations are
//! stored for every layer output plus the input, at 4 bytes (fp32) or 2 (bf16, fp16).

mod activations;
pub mod communication;
pub mod compress;
mod eval;
pub mod groups;
pub mod schedule;
pub mod sharding;
pub mod shrink;
pub mod splits;
pub mod stored;
pub mod tensor;

use serde::Serialize;

pub use compress::{CompressedLayer, CompressionPlan, Global, Kept};

use crate::ir::{
    layers, Backend, DType, DataPlacement, Device, Experiment, Layer, Parallel, PipelineSchedule,
    Precision, Shape,
};

pub use activations::{attention_kernels, Activations, AttentionKernel, Bytes};
pub use communication::{AllReduce, Communication, Transfer};

/// One layer's row in the plan.
#[derive(Serialize, Debug)]
pub struct LayerRow {
    /// Qualified name.
    pub name: String,
    /// Layer kind.
    pub kind: String,
    /// Per-sample output shape.
    pub output: Shape,
    /// Trainable parameters.
    pub params: u64,
    /// Forward FLOPs per sample.
    pub flops: u64,
    /// Bytes of activations backward keeps that this layer made, for one micro-batch: its own
    /// saved tensors and its output when a later layer keeps it (see `docs/language.md`,
    /// "Memory").
    pub activation_bytes: u64,
    /// Device it runs on.
    pub device: Device,
}

/// Totals over the model.
#[derive(Serialize, Debug)]
pub struct Totals {
    /// Trainable parameters.
    pub params: u64,
    /// Bytes of weights.
    pub weight_bytes: u64,
    /// Bytes of gradients.
    pub gradient_bytes: u64,
    /// Bytes of optimizer state.
    pub optimizer_bytes: u64,
    /// Bytes of stored activations for one global batch.
    pub activation_bytes: u64,
    /// The same without `recompute`, when layers are recomputed; left out of YAML otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub activation_bytes_without_recompute: Option<u64>,
    /// Bytes an evaluation batch (`eval_batch`) keeps at once, without gradients (see
    /// `docs/language.md`, "Memory").
    pub eval_activation_bytes: u64,
    /// Forward FLOPs for one sample.
    pub forward_flops_per_sample: u64,
    /// Forward plus backward FLOPs for one optimizer step (the global batch).
    pub step_flops: u64,
}

/// What one device needs.
#[derive(Serialize, Debug)]
pub struct DeviceNeed {
    /// The device (for distributed runs, each process's device).
    pub device: Device,
    /// How many such devices or processes share this row.
    pub replicas: u64,
    /// Parameters held.
    pub params: u64,
    /// Bytes of weights.
    pub weight_bytes: u64,
    /// Bytes of gradients.
    pub gradient_bytes: u64,
    /// Bytes of optimizer state.
    pub optimizer_bytes: u64,
    /// Bytes of stored activations.
    pub activation_bytes: u64,
    /// Bytes an evaluation batch keeps at once on this device (no gradients).
    pub eval_activation_bytes: u64,
    /// Bytes of gradients and stored activations at once at their peak, where the gradients are
    /// unset between steps (one device, no strategy, no accumulation): backward makes the
    /// gradients as it frees the activations, so both are never whole at once. Left out of YAML
    /// elsewhere (gradients and activations then add up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backward_peak_bytes: Option<u64>,
    /// Weights and optimizer state, plus the larger of the training step's gradients and
    /// activations (their backward peak, or their sum) and the evaluation's activations with the
    /// gradients.
    pub total_bytes: u64,
    /// Declared capacity, when known.
    pub capacity_bytes: Option<u64>,
    /// The largest tensor a step makes here: an allocator that keeps freed blocks for reuse
    /// (Kiln's host allocator on the CPU, which maps no more than the most alive at once plus
    /// that; libtorch's caching allocator on CUDA) may hold that much above the tensors alive at
    /// once. Counted in the total.
    pub allocator_margin_bytes: u64,
    /// Bytes of the loaded data kept on this device (`placement`), counted in the total; left
    /// out of YAML when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub data_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What one pipeline stage holds on its device.
#[derive(Serialize, Debug)]
pub struct StageNeed {
    /// The stage's index, from 0.
    pub stage: u64,
    /// Its first layer.
    pub first: String,
    /// Its last layer.
    pub last: String,
    /// Micro-batches whose activations it keeps at once: all of them under GPipe, at most
    /// `stages - stage` under 1F1B.
    pub in_flight: u64,
    /// Its weights, gradients, optimizer state and activations.
    #[serde(flatten)]
    pub memory: DeviceNeed,
}

/// The static plan of one trial.
#[derive(Serialize, Debug)]
pub struct Plan {
    /// Experiment name.
    pub experiment: String,
    /// Sweep values of this trial, as `(name, value)`: a mapping in sweep order in YAML (left
    /// out without a sweep).
    #[serde(serialize_with = "as_mapping", skip_serializing_if = "Vec::is_empty")]
    pub trial: Vec<(String, String)>,
    /// Per-sample input shape.
    pub input: Shape,
    /// The data: its source and what is known of its samples.
    pub data: DataRow,
    /// A split's own source, for each split that `split(...)` gives one (left out of YAML
    /// when none does).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub splits: Vec<splits::SplitRow>,
    /// Global batch.
    pub batch: u64,
    /// Samples per evaluation batch.
    pub eval_batch: u64,
    /// Per-replica micro-batch.
    pub micro_batch: u64,
    /// Strategy, in words.
    pub parallel: String,
    /// Precision.
    pub precision: Precision,
    /// Optimizer name.
    pub optimizer: String,
    /// Whether the optimizer updates through ATen's fused kernels (`fused`, the default for
    /// `sgd`, `adam` and `adamw`) rather than the single-tensor rules.
    pub optimizer_fused: bool,
    /// The learning-rate schedule, its parameters resolved.
    pub schedule: schedule::ScheduleRow,
    /// The optimizer's parameter groups, then the parameters in none (left out of YAML without
    /// groups).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<groups::GroupRow>,
    /// Every layer.
    pub layers: Vec<LayerRow>,
    /// Totals.
    pub totals: Totals,
    /// Memory per device.
    pub devices: Vec<DeviceNeed>,
    /// Memory per pipeline stage (empty, and left out of YAML, unless the strategy is a
    /// pipeline).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageNeed>,
    /// `parallel fsdp`: its units and what a rank holds (left out of YAML otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sharding: Option<sharding::Sharding>,
    /// What crosses between devices each step.
    pub communication: Communication,
    /// Tensor parallel: how the layers are split, a rank's parameters and the sums per step
    /// (left out of YAML without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor: Option<tensor::TensorPlan>,
    /// Weights before and after compression (left out of YAML when nothing is compressed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<CompressionPlan>,
    /// The attention kernel the memory figures assume, which the checker cannot know for sure
    /// (left out of YAML without attention).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attention_kernels: Vec<AttentionKernel>,
}

/// `(name, value)` pairs as a mapping, in order.
fn as_mapping<S: serde::Serializer>(pairs: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(pairs.len()))?;
    for (k, v) in pairs {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

/// The data as the plan shows it.
#[derive(Serialize, Debug, PartialEq)]
pub struct DataRow {
    /// The source's kind (`synthetic`, `idx`, `csv`, ...).
    pub source: String,
    /// The number of samples: a synthetic `count`, or what `kiln check` read from the files'
    /// headers (left out when unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// The per-sample shape the files store (left out for synthetic data and unread files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample: Option<Vec<u64>>,
    /// Bytes of every sample once loaded (inputs and targets), when the count is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The `placement` setting.
    pub placement: DataPlacement,
    /// The device that receives the batches.
    pub device: Device,
    /// Whether the loaded data lives on that device while training (always false on the
    /// CPU, where host memory is the device's). With `auto` and no declared capacity (`fits`
    /// unknown) the run decides from the device's memory when it starts.
    pub on_device: bool,
    /// Whether the device's declared capacity holds the data beside the plan's peak there
    /// (unknown without a declared capacity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fits: Option<bool>,
    /// How training images are augmented each epoch (left out when they are not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub augment: Option<crate::ir::Augment>,
}

impl DataRow {
    /// The data's row, and where its loaded splits live: on `resident` (the device that
    /// receives the batches), whose row in `devices` then counts their bytes, or in host
    /// memory.
    fn of(e: &Experiment, resident: Device, devices: &mut [DeviceNeed]) -> DataRow {
        let d = &e.data;
        let source = d.source.kind_and_files().0;
        let bytes = d.bytes(&e.model.input.0, e.model.input_dtype == DType::Int);
        let need = devices.iter_mut().find(|n| n.device == resident);
        let fits = match (bytes, &need) {
            (Some(b), Some(n)) => n
                .capacity_bytes
                .map(|c| n.total_bytes.saturating_add(b) <= c),
            _ => None,
        };
        let on_device = matches!(resident, Device::Cuda(_)) && d.placement.on_device(fits);
        if let (true, Some(n), Some(b)) = (on_device, need, bytes) {
            n.data_bytes = b;
            n.total_bytes = n.total_bytes.saturating_add(b);
        }
        DataRow {
            source: source.to_string(),
            samples: d.samples(),
            sample: d.read.as_ref().map(|r| r.sample.clone()),
            bytes,
            placement: d.placement,
            device: resident,
            on_device,
            fits,
            augment: match &d.source {
                crate::ir::Source::Images { augment, .. } if augment.any() => Some(*augment),
                _ => None,
            },
        }
    }
}

/// Computes the plan of a checked experiment.
pub fn plan(e: &Experiment) -> Plan {
    let all = layers(&e.model.nodes);
    let state = e.optimizer.state_bytes_per_param();
    let params = sum(all.iter().map(|l| l.params));
    let forward = sum(all.iter().map(|l| l.flops));
    let acts = Activations::of(e);
    let n = all.len();
    let everywhere = |_: usize| true;
    let step = |samples: u64, without_recompute: bool| {
        let base = acts.input.at(samples);
        acts.peak(0..n, &everywhere, samples, base, None, without_recompute)
    };
    let totals = Totals {
        params,
        weight_bytes: 4u64.saturating_mul(params),
        gradient_bytes: 4u64.saturating_mul(params),
        optimizer_bytes: state.saturating_mul(params),
        activation_bytes: step(e.data.batch, false),
        activation_bytes_without_recompute: acts.recomputes().then(|| step(e.data.batch, true)),
        eval_activation_bytes: acts.eval_peak(&everywhere, e.data.eval_batch, true),
        forward_flops_per_sample: forward,
        step_flops: 3u64.saturating_mul(forward).saturating_mul(e.data.batch),
    };
    let micro = e.train.micro_batch;
    let margin = acts.largest.saturating_mul(micro.max(e.data.eval_batch));
    let need = |device: Device, replicas: u64, params: u64, acts: u64| {
        let (w, g, o) = (
            4u64.saturating_mul(params),
            4u64.saturating_mul(params),
            state.saturating_mul(params),
        );
        DeviceNeed {
            device,
            replicas,
            params,
            weight_bytes: w,
            gradient_bytes: g,
            optimizer_bytes: o,
            activation_bytes: acts,
            eval_activation_bytes: 0,
            backward_peak_bytes: None,
            total_bytes: sum([w, g, o, acts]),
            allocator_margin_bytes: margin,
            data_bytes: 0,
            capacity_bytes: e
                .memory
                .iter()
                .find(|(d, _, _)| *d == device)
                .map(|(_, b, _)| *b),
        }
    };
    let full_acts = step(micro, false);
    // Where each layer runs: its placement, or its pipeline stage's device.
    let mut layer_devices: Vec<Device> = all.iter().map(|l| l.device).collect();
    let mut stage_needs: Vec<StageNeed> = Vec::new();
    let devices = match &e.parallel {
        Parallel::Data { devices, .. } => {
            // Every replica holds the weights, their gradients and its slice's activations;
            // only replica 0 holds the optimizer's state. Replicas on one device add up.
            let mut out: Vec<DeviceNeed> = Vec::new();
            for (i, d) in devices.iter().enumerate() {
                let mut n = need(*d, 1, params, full_acts);
                if i > 0 {
                    n.total_bytes -= n.optimizer_bytes;
                    n.optimizer_bytes = 0;
                }
                add_need(&mut out, n);
            }
            out
        }
        Parallel::Distributed { world_size, .. } => match sharding::Sharding::of(e) {
            // A rank holds its shards, what it gathers and the gathers' buffers, whole gradients
            // until they are reduced and the reductions' buffers, and the optimizer's state of
            // its shards.
            Some(s) => {
                let (w, g, o) = (
                    4u64.saturating_mul(sum([s.shard_params, s.gathered_params, s.gather_buffers])),
                    4u64.saturating_mul(sum([
                        s.shard_params,
                        s.unreduced_gradients,
                        s.reduce_buffers,
                    ])),
                    state.saturating_mul(s.shard_params),
                );
                let mut n = need(e.device, *world_size, s.shard_params, full_acts);
                (n.weight_bytes, n.gradient_bytes, n.optimizer_bytes) = (w, g, o);
                n.total_bytes = sum([w, g, o, full_acts]);
                vec![n]
            }
            // Under tensor parallel a rank holds its pieces of the split layers and the rest
            // whole, with their gradients (summed over the data ranks in place) and state.
            None if e.parallel.tensor_degree() > 1 => {
                let rank = tensor::of(e).map_or(params, |t| t.rank_params);
                vec![need(e.device, *world_size, rank, full_acts)]
            }
            // A rank holds the whole model, its gradients and the Reducer's buckets (a copy of
            // every gradient, which the all-reduce runs on), and the optimizer's state.
            None => {
                let mut n = need(e.device, *world_size, params, full_acts);
                let buckets = n.gradient_bytes;
                n.gradient_bytes = n.gradient_bytes.saturating_add(buckets);
                n.total_bytes = n.total_bytes.saturating_add(buckets);
                vec![n]
            }
        },
        Parallel::Pipeline {
            stages,
            micro_batches,
            schedule,
            boundaries,
        } => {
            let samples = micro / micro_batches;
            let mut out: Vec<DeviceNeed> = Vec::new();
            for (k, start) in boundaries.iter().enumerate() {
                let in_flight = match schedule {
                    PipelineSchedule::GPipe => *micro_batches,
                    PipelineSchedule::OneFOneB => (*stages - k as u64).min(*micro_batches),
                };
                let end = boundaries
                    .get(k + 1)
                    .copied()
                    .unwrap_or(e.model.nodes.len());
                let stage = layers(&e.model.nodes[*start..end]);
                let device = stage_device(e, k as u32, &stage);
                let first = layers(&e.model.nodes[..*start]).len();
                for d in layer_devices.iter_mut().skip(first).take(stage.len()) {
                    *d = device;
                }
                let p = sum(stage.iter().map(|l| l.params));
                // A stage keeps, for each micro-batch in flight, what it received (the batch, or
                // the activation before it) and what its layers keep; the widest moment of one
                // micro-batch's pass comes on top of the others' kept.
                let received = first
                    .checked_sub(1)
                    .map_or(acts.input.per_sample, |b| acts.layers[b].output)
                    .saturating_mul(samples);
                let range = first..first + stage.len();
                let bytes = acts
                    .peak(range.clone(), &everywhere, samples, received, None, false)
                    .saturating_add(
                        acts.kept(range, samples)
                            .saturating_add(received)
                            .saturating_mul(in_flight.saturating_sub(1)),
                    );
                let n = need(device, 1, p, bytes);
                add_need(&mut out, need(device, 1, p, bytes));
                stage_needs.push(StageNeed {
                    stage: k as u64,
                    first: stage.first().map_or_else(String::new, |l| l.name.clone()),
                    last: stage.last().map_or_else(String::new, |l| l.name.clone()),
                    in_flight,
                    memory: n,
                });
            }
            out
        }
        Parallel::None | Parallel::Model => {
            let mut out: Vec<DeviceNeed> = Vec::new();
            let first = all.first().map(|l| l.device);
            for l in &all {
                if out.iter().any(|d| d.device == l.device) {
                    continue;
                }
                let device = l.device;
                let on = |i: usize| all[i].device == device;
                let base = if first == Some(device) {
                    acts.input.at(micro)
                } else {
                    0
                };
                let a = acts.peak(0..n, &on, micro, base, None, false);
                let p = sum(all.iter().filter(|l| l.device == device).map(|l| l.params));
                out.push(need(device, 1, p, a));
            }
            // Where a step's gradients are unset, backward makes them as it frees activations.
            let one_device = all.windows(2).all(|w| w[0].device == w[1].device);
            if let (true, [d]) = (one_device && micro == e.data.batch, out.as_mut_slice()) {
                let gradients: Vec<u64> =
                    all.iter().map(|l| 4u64.saturating_mul(l.params)).collect();
                let base = acts.input.at(micro);
                let p = acts.peak(0..n, &everywhere, micro, base, Some(&gradients), false);
                d.backward_peak_bytes =
                    Some(p.min(d.gradient_bytes.saturating_add(d.activation_bytes)));
            }
            out
        }
    };
    let mut devices = devices;
    let eval_bytes = |device: Device| eval::bytes_on(e, &acts, &layer_devices, device);
    for d in &mut devices {
        let bytes = eval_bytes(d.device);
        eval::add(d, bytes);
    }
    for s in &mut stage_needs {
        let bytes = eval_bytes(s.memory.device);
        eval::add(&mut s.memory, bytes);
    }
    let tensor = tensor::of(e);
    let gradient_bytes = tensor.as_ref().map_or(totals.gradient_bytes, |t| {
        4u64.saturating_mul(t.rank_params)
    });
    let communication = communication::communication(e, &all, &layer_devices, gradient_bytes);
    let resident = layer_devices.first().copied().unwrap_or(e.device);
    let data = DataRow::of(e, resident, &mut devices);
    Plan {
        experiment: e.name.clone(),
        trial: e.trial.clone(),
        input: e.model.input.clone(),
        data,
        splits: splits::rows(&e.data),
        batch: e.data.batch,
        eval_batch: e.data.eval_batch,
        micro_batch: micro,
        parallel: describe_parallel(&e.parallel),
        precision: e.train.precision,
        optimizer: e.optimizer.name().to_string(),
        optimizer_fused: e.optimizer.fused,
        schedule: schedule::row(&e.schedule),
        groups: groups::groups(e),
        layers: all
            .iter()
            .zip(&layer_devices)
            .zip(&acts.layers)
            .map(|((l, device), m)| LayerRow {
                name: l.name.clone(),
                kind: l.kind.kind().name().to_string(),
                output: l.output.clone(),
                params: l.params,
                flops: l.flops,
                activation_bytes: m.kept.at(micro),
                device: *device,
            })
            .collect(),
        totals,
        devices,
        stages: stage_needs,
        sharding: sharding::Sharding::of(e),
        communication,
        tensor,
        compression: compress::compression(&e.compression, &all, &e.model.nodes),
        attention_kernels: attention_kernels(e),
    }
}

/// The device a pipeline stage runs on: its layers' placement, else `cuda:k` for stage k (the
/// CPU when the experiment runs on the CPU).
fn stage_device(e: &Experiment, stage: u32, layers: &[&Layer]) -> Device {
    match layers.first().map(|l| l.device) {
        Some(d) if d != e.device => d,
        _ if e.device == Device::Cpu => Device::Cpu,
        _ => Device::Cuda(stage),
    }
}

/// A sum that saturates instead of overflowing (absurd sizes are reported, never wrapped).
fn sum(items: impl IntoIterator<Item = u64>) -> u64 {
    items.into_iter().fold(0u64, u64::saturating_add)
}

/// The number of values in a per-sample shape (saturating).
pub fn values(shape: &[i64]) -> u64 {
    shape.iter().fold(1u64, |n, d| n.saturating_mul(*d as u64))
}

fn add_need(out: &mut Vec<DeviceNeed>, n: DeviceNeed) {
    match out.iter_mut().find(|d| d.device == n.device) {
        Some(d) => {
            d.params = d.params.saturating_add(n.params);
            d.weight_bytes = d.weight_bytes.saturating_add(n.weight_bytes);
            d.gradient_bytes = d.gradient_bytes.saturating_add(n.gradient_bytes);
            d.optimizer_bytes = d.optimizer_bytes.saturating_add(n.optimizer_bytes);
            d.activation_bytes = d.activation_bytes.saturating_add(n.activation_bytes);
            d.total_bytes = d.total_bytes.saturating_add(n.total_bytes);
        }
        None => out.push(n),
    }
}

fn describe_parallel(p: &Parallel) -> String {
    match p {
        Parallel::None => "none".into(),
        Parallel::Model => "model (by placement)".into(),
        Parallel::Data { devices, .. } => {
            let d: Vec<String> = devices.iter().map(Device::to_string).collect();
            format!("data over {} replicas [{}]", devices.len(), d.join(", "))
        }
        Parallel::Pipeline {
            stages,
            micro_batches,
            schedule,
            ..
        } => {
            format!(
                "pipeline, {stages} stages, {micro_batches} micro-batches, {}",
                if *schedule == PipelineSchedule::GPipe {
                    "gpipe"
                } else {
                    "1f1b"
                }
            )
        }
        Parallel::Distributed {
            backend,
            world_size,
            sharding,
            tensor,
            ..
        } => {
            let backend = if *backend == Backend::Nccl {
                "nccl"
            } else {
                "gloo"
            };
            match sharding {
                None if *tensor > 1 => format!(
                    "tensor parallel over {tensor} ranks × {} data replicas, {world_size} processes, {backend}",
                    world_size / tensor
                ),
                None => {
                    format!("distributed data parallel, {world_size} processes, {backend}")
                }
                Some(s) => format!(
                    "fully sharded data parallel, {world_size} processes, {backend}, {}",
                    if s.reshard_after_forward {
                        "blocks resharded after forward"
                    } else {
                        "units kept gathered until backward ends"
                    }
                ),
            }
        }
    }
}
