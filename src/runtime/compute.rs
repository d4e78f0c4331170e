//! What a run achieves of its device, measured while it trains ([`Watch`]) and written into
//! `report.yaml`'s `compute`: FLOP/s against the plan's FLOPs on every device and, on CUDA, the
//! GPU's busy fraction (NVML, from the sixth step on) and the caching allocator's peak beside
//! the plan's memory estimate.

use tch::Device;

use super::cuda_memory;
use super::gpu_busy::Sampler;
use kiln::ir::Experiment;
use kiln::rundir::Compute;

/// The measurements of one training, started with it.
pub struct Watch {
    device: Device,
    /// The step after which the busy fraction is sampled (the steady state).
    from: u64,
    sampler: Option<Sampler>,
    notes: Vec<String>,
}

impl Watch {
    /// Steps before the busy fraction is sampled: the first ones set up cuBLAS and the caches.
    const WARM_UP: u64 = 5;

    /// Starts watching a training on `device` that begins after step `step` (a resumed run's).
    pub fn new(device: Device, step: u64) -> Watch {
        let mut notes = Vec::new();
        if let Device::Cuda(i) = device {
            if !cuda_memory::reset_peak(i) {
                notes.push("the caching allocator's peak could not be read".to_string());
            }
        }
        Watch {
            device,
            from: step + Self::WARM_UP,
            sampler: None,
            notes,
        }
    }

    /// After step `step`: starts sampling the GPU once the warm-up steps are taken.
    pub fn stepped(&mut self, step: u64) {
        let Device::Cuda(i) = self.device else {
            return;
        };
        if step == self.from && self.sampler.is_none() {
            match Sampler::start(i) {
                Ok(s) => self.sampler = Some(s),
                Err(why) => self.notes.push(format!("no busy fraction: {why}")),
            }
        }
    }

    /// The figures of a training of `exp` that ran at `samples_per_s`.
    pub fn finish(mut self, exp: &Experiment, samples_per_s: f64) -> Compute {
        let plan = kiln::plan::plan(exp);
        let per_sample = 3.0 * plan.totals.forward_flops_per_sample as f64;
        let device = match self.device {
            Device::Cuda(i) => format!("cuda:{i}"),
            _ => "cpu".to_string(),
        };
        let plan_memory_bytes = match plan.devices.as_slice() {
            [one] => Some(one.total_bytes),
            rows => rows
                .iter()
                .find(|r| r.device.to_string() == device)
                .map(|r| r.total_bytes),
        };
        let (mut gpu_busy, mut gpu_busy_samples, mut peak_memory_bytes) = (None, None, None);
        if let Device::Cuda(i) = self.device {
            match self.sampler.take().and_then(Sampler::finish) {
                Some(b) => {
                    gpu_busy = Some(b.fraction);
                    gpu_busy_samples = Some(b.samples);
                }
                None if !self.notes.iter().any(|n| n.starts_with("no busy")) => {
                    self.notes.push(format!(
                        "no busy fraction: the run ended before {} steps and 100 ms of sampling",
                        Self::WARM_UP
                    ))
                }
                None => {}
            }
            peak_memory_bytes = cuda_memory::peak_bytes(i);
        }
        Compute {
            device,
            step_flops: plan.totals.step_flops,
            tflop_per_s: per_sample * samples_per_s / 1e12,
            gpu_busy,
            gpu_busy_samples,
            peak_memory_bytes,
            plan_memory_bytes,
            note: (!self.notes.is_empty()).then(|| self.notes.join("; ")),
        }
    }
}
