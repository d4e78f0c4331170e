//! Inference latency of the uncompressed and the compressed model, measured side by side: the
//! two forwards alternate (which one goes first alternates too), so both see the same machine
//! load, and each figure is the median of its rounds.

use std::time::Instant;

use tch::{Device, Kind, Tensor};

use super::super::failure::At;
use super::super::model::Net;
use kiln::diagnostic::Diagnostic;
use kiln::ir::{Compression, DType, Experiment, QuantScheme};
use kiln::rundir::Latency;

/// The batch sizes the report measures.
pub const BATCHES: [i64; 2] = [1, 256];

/// At least this many rounds, and more while both forwards together took under
/// [`ROUND_SECONDS`], up to [`MAX_ROUNDS`].
const MIN_ROUNDS: usize = 7;
const MAX_ROUNDS: usize = 101;
const ROUND_SECONDS: f64 = 1.5;

/// The latency of `before` and `after` in evaluation mode on random inputs of the model's
/// input shape, at each of [`BATCHES`].
pub fn latencies(exp: &Experiment, before: &Net, after: &Net) -> Result<Vec<Latency>, Diagnostic> {
    BATCHES
        .iter()
        .map(|&b| side_by_side(exp, before, after, b))
        .collect()
}

fn side_by_side(
    exp: &Experiment,
    before: &Net,
    after: &Net,
    batch: i64,
) -> Result<Latency, Diagnostic> {
    let span = exp.span;
    let device = before.input_device();
    let mut shape = vec![batch];
    shape.extend(&exp.model.input.0);
    let x = tch::no_grad(|| match exp.model.input_dtype {
        DType::Float => Tensor::f_randn(shape.as_slice(), (Kind::Float, device)),
        DType::Int => Tensor::f_zeros(shape.as_slice(), (Kind::Int64, device)),
    })
    .at(span)?;
    let time = |net: &Net| -> Result<f64, Diagnostic> {
        let start = Instant::now();
        let y = tch::no_grad(|| net.forward(&x, false))?;
        sync(device);
        drop(y);
        Ok(start.elapsed().as_secs_f64())
    };
    // Warm-up: allocator, caches, kernel selection.
    for _ in 0..2 {
        time(before)?;
        time(after)?;
    }
    let (mut b, mut a) = (Vec::new(), Vec::new());
    let started = Instant::now();
    while b.len() < MAX_ROUNDS
        && (b.len() < MIN_ROUNDS || started.elapsed().as_secs_f64() < ROUND_SECONDS)
    {
        if b.len() % 2 == 0 {
            b.push(time(before)?);
            a.push(time(after)?);
        } else {
            a.push(time(after)?);
            b.push(time(before)?);
        }
    }
    Ok(Latency {
        batch: batch as u64,
        before_ms: 1e3 * median(&mut b),
        after_ms: 1e3 * median(&mut a),
    })
}

/// Notes on quantized kernels that run libtorch's slow paths on this CPU: int8 products
/// (`_int_mm`: dynamic int8 and converted QAT layers) without VNNI or AMX, and bf16 products
/// (bf16 weights; the int8 and int4 weight-only kernels take bf16 inputs) without AVX512-BF16 or
/// AMX. Empty off the CPU, or where `/proc/cpuinfo` cannot be read.
pub fn cpu_notes(exp: &Experiment, device: Device) -> Vec<String> {
    if device != Device::Cpu {
        return Vec::new();
    }
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return Vec::new();
    };
    let flags: Vec<&str> = info
        .lines()
        .find(|l| l.starts_with("flags"))
        .map_or_else(Vec::new, |l| l.split_whitespace().collect());
    let has = |any: &[&str]| any.iter().any(|f| flags.contains(f));
    let (mut int8, mut bf16) = (false, false);
    for c in &exp.compression {
        if let Compression::Quantize { scheme, .. } = c {
            match scheme {
                QuantScheme::Int8 { dynamic: true, .. } | QuantScheme::Qat { .. } => int8 = true,
                QuantScheme::Int8 { dynamic: false, .. }
                | QuantScheme::Int4 { .. }
                | QuantScheme::Cast { .. } => bf16 = true,
                QuantScheme::Fp8 { .. } => {}
            }
        }
    }
    let mut notes = Vec::new();
    if int8 && !has(&["avx512_vnni", "avx_vnni", "amx_int8"]) {
        notes.push(
            "this CPU has no VNNI or AMX: libtorch's int8 matrix products (`_int_mm`) run a slow \
             path here, so dynamic int8 and converted QAT layers may be much slower than fp32; \
             the report's latency shows by how much"
                .to_string(),
        );
    }
    if bf16 && !has(&["avx512_bf16", "amx_bf16"]) {
        notes.push(
            "this CPU has no AVX512-BF16 or AMX: the bf16 products of weight-only int8/int4 and \
             bf16/fp16 weights are emulated, so they gain less than on CPUs that have it"
                .to_string(),
        );
    }
    notes
}

fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_rounds() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }
}
