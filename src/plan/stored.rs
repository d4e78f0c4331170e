//! How a quantized linear layer is stored once compressed: the tensors `kiln export` writes and
//! the run's report counts, with their bytes. `kiln plan` costs a layer with this list, and the
//! runtime's kernels are tested against it, so the plan's bytes and the report's are the same
//! number.
//!
//! For a layer of N outputs and K inputs (`Np`, `Kp`: rounded up to the multiple a kernel needs,
//! the padding stored as zeros):
//!
//! | scheme | tensors |
//! |---|---|
//! | `int8` weight-only | `weight_int8` int8 `[N, Kp]` (Kp: a multiple of 16), `weight_scale` bf16 `[N]` (one per output even `per_tensor`), `weight_zero_point` int32 `[N]` when affine |
//! | `int8` dynamic | `weight_int8_t` int8 `[Kp, Np]` (multiples of 8 on CUDA, none on the CPU), `weight_scale` fp32 `[N]`, `weight_zero_point` int32 `[N]` when affine |
//! | `qat` | as dynamic `int8` (symmetric), and `activation_scale` fp32 `[1]` |
//! | `int4` | `weight_int4_packed` `Np·Kp/2` bytes (Np: a multiple of 16, Kp: of the group size), `weight_scales_and_zeros` bf16 `[Kp/group, Np, 2]` |
//! | `fp8` | `weight_fp8` e4m3 `[Np, Kp]` (multiples of 16), `weight_scale` fp32: one, or `[Np, 1]` per row |
//! | `bf16`, `fp16` | `weight` `[N, K]` in 2 bytes a value |
//!
//! and, when the layer has one, its `bias` in fp32 `[N]`.

use crate::ir::{Device, Granularity, QuantScheme};

/// One stored tensor of a quantized layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its name under the layer's (`weight_int8` is stored as `fc1.weight_int8`).
    pub name: &'static str,
    /// Its bytes.
    pub bytes: u64,
}

/// `n` rounded up to a multiple of `m`.
fn round_up(n: u64, m: u64) -> u64 {
    n.div_ceil(m.max(1)).saturating_mul(m.max(1))
}

/// The tensors a linear layer of `outputs` x `inputs` (with a bias when `bias`) is stored as
/// once quantized by `scheme` on `device` (`auto` is costed as the CPU).
pub fn stored(
    scheme: &QuantScheme,
    outputs: u64,
    inputs: u64,
    bias: bool,
    device: Device,
) -> Vec<Stored> {
    let (n, k) = (outputs, inputs);
    let cuda = matches!(device, Device::Cuda(_));
    let t = |name, bytes| Stored { name, bytes };
    let int_mm = |symmetric: bool| {
        let align = if cuda { 8 } else { 1 };
        let mut out = vec![
            t("weight_int8_t", round_up(k, align) * round_up(n, align)),
            t("weight_scale", 4 * n),
        ];
        if !symmetric {
            out.push(t("weight_zero_point", 4 * n));
        }
        out
    };
    let mut out = match scheme {
        QuantScheme::Int8 {
            symmetric,
            dynamic: false,
            ..
        } => {
            let mut out = vec![
                t("weight_int8", n * round_up(k, 16)),
                t("weight_scale", 2 * n),
            ];
            if !symmetric {
                out.push(t("weight_zero_point", 4 * n));
            }
            out
        }
        QuantScheme::Int8 {
            symmetric,
            dynamic: true,
            ..
        } => int_mm(*symmetric),
        QuantScheme::Qat { .. } => {
            let mut out = int_mm(true);
            out.push(t("activation_scale", 4));
            out
        }
        QuantScheme::Int4 { group_size } => {
            let group = (*group_size).max(1);
            let (np, kp) = (round_up(n, 16), round_up(k, group));
            vec![
                t("weight_int4_packed", np * kp / 2),
                t("weight_scales_and_zeros", (kp / group) * np * 2 * 2),
            ]
        }
        QuantScheme::Fp8 { granularity } => {
            let (np, kp) = (round_up(n, 16), round_up(k, 16));
            let scales = match granularity {
                Granularity::PerTensor => 1,
                Granularity::PerChannel => np,
            };
            vec![t("weight_fp8", np * kp), t("weight_scale", 4 * scales)]
        }
        QuantScheme::Cast { .. } => vec![t("weight", 2 * n * k)],
    };
    if bias {
        out.push(t("bias", 4 * n));
    }
    out
}

/// The bytes of [`stored`]'s tensors together.
pub fn stored_bytes(
    scheme: &QuantScheme,
    outputs: u64,
    inputs: u64,
    bias: bool,
    device: Device,
) -> u64 {
    stored(scheme, outputs, inputs, bias, device)
        .iter()
        .map(|s| s.bytes)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_and_scales_count() {
        let int8 = QuantScheme::Int8 {
            granularity: Granularity::PerTensor,
            symmetric: true,
            dynamic: false,
        };
        // 10 x 20: inputs padded to 32, a bf16 scale per output even per tensor, fp32 bias.
        assert_eq!(
            stored_bytes(&int8, 10, 20, true, Device::Cpu),
            10 * 32 + 2 * 10 + 4 * 10
        );
        let int4 = QuantScheme::Int4 { group_size: 32 };
        // 10 x 40: outputs padded to 16, inputs to 64 (two groups).
        assert_eq!(
            stored_bytes(&int4, 10, 40, false, Device::Cpu),
            16 * 64 / 2 + 2 * 16 * 4
        );
        let dynamic = QuantScheme::Int8 {
            granularity: Granularity::PerChannel,
            symmetric: false,
            dynamic: true,
        };
        assert_eq!(stored_bytes(&dynamic, 10, 20, false, Device::Cpu), 200 + 80);
        assert_eq!(
            stored_bytes(&dynamic, 10, 20, false, Device::Cuda(0)),
            24 * 16 + 80
        );
    }
}
