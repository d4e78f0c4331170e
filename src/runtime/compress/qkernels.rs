//! The kernels behind [`super::QLinear`]: weights quantized, padded and packed for each
//! libtorch kernel, and the forward passes that call them.

use kiln::ir::Granularity;
use tch::{Device, Kind, TchError, Tensor};

use super::qlinear::Weights;
use super::{QDtype, QParams, EPS};

/// `n` rounded up to a multiple of `m`.
pub(super) fn round_up(n: i64, m: i64) -> i64 {
    (n + m - 1) / m * m
}

/// `t` (2-D) zero-padded to `[rows, cols]` in `kind`, in a freshly allocated contiguous tensor.
pub(super) fn padded(t: &Tensor, rows: i64, cols: i64, kind: Kind) -> Result<Tensor, TchError> {
    let (r, c) = t.size2()?;
    let out = Tensor::f_zeros([rows, cols], (kind, t.device()))?;
    out.f_narrow(0, 0, r)?.f_narrow(1, 0, c)?.f_copy_(t)?;
    Ok(out)
}

/// An error for arguments no kernel takes.
pub(super) fn unsupported(what: String) -> TchError {
    TchError::Torch(what)
}

/// The int32 zero points `[N]` of affine parameters, or none when they are symmetric.
pub(super) fn affine_zero_points(p: &QParams, n: i64) -> Result<Option<Tensor>, TchError> {
    if p.config.symmetric {
        return Ok(None);
    }
    Ok(Some(
        p.zero_point
            .f_expand([n], false)?
            .f_to_kind(Kind::Int)?
            .f_contiguous()?,
    ))
}

/// Weights for `_int_mm`: transposed int8 `[Kp, Np]`, padded to multiples of 8 on CUDA. On the
/// CPU it is the transposed view of the row-major `[Np, Kp]` weight: libtorch's CPU `_int_mm`
/// runs 10 to 15 times faster on that layout than on a contiguous `[Kp, Np]` (measured on an
/// AVX2 machine, batches 1 and 256, 4096 x 4096).
pub(super) fn int_mm_weights(
    w: &Tensor,
    p: &QParams,
    activation_scale: Option<f64>,
) -> Result<Weights, TchError> {
    if p.config.dtype != QDtype::QInt8 {
        return Err(unsupported("_int_mm takes qint8 weights".to_string()));
    }
    let (n, k) = w.size2()?;
    let align = if w.device() == Device::Cpu { 1 } else { 8 };
    let q = padded(
        &p.quantize(w)?,
        round_up(n, align),
        round_up(k, align),
        Kind::Int8,
    )?;
    Ok(Weights::IntMm {
        qt: if w.device() == Device::Cpu {
            q.f_tr()?
        } else {
            q.f_tr()?.f_contiguous()?
        },
        scale: p.scale.f_expand([n], false)?.f_contiguous()?,
        zero_point: affine_zero_points(p, n)?,
        activation_scale,
    })
}

/// `_int_mm` of `x` quantized (per row, or with the fixed scale) against `qt`, rescaled to fp32.
pub(super) fn int_mm_forward(
    x: &Tensor,
    qt: &Tensor,
    scale: &Tensor,
    zero_point: Option<&Tensor>,
    activation_scale: Option<f64>,
    n: i64,
    cuda: bool,
) -> Result<Tensor, TchError> {
    let x = x.f_to_kind(Kind::Float)?;
    let m = x.size()[0];
    let (xq, sx) = match activation_scale {
        Some(s) => (
            x.f_quantize_per_tensor(s, 0, Kind::QInt8)?.f_int_repr()?,
            Tensor::from_slice(&[s as f32]).f_to_device(x.device())?,
        ),
        None => {
            let sx = x
                .f_abs()?
                .f_amax([1], true)?
                .f_div_scalar(127.5)?
                .f_clamp_min(EPS)?;
            let xq = x
                .f_div(&sx)?
                .f_round()?
                .f_clamp(-128, 127)?
                .f_to_kind(Kind::Int8)?;
            (xq, sx)
        }
    };
    // cuBLAS's int8 product wants more than 16 rows.
    let rows = if cuda { m.max(17) } else { m };
    let xp = padded(&xq, rows, qt.size()[0], Kind::Int8)?;
    let mut acc = xp
        .f_internal_int_mm(qt)?
        .f_narrow(0, 0, m)?
        .f_narrow(1, 0, n)?;
    if let Some(zp) = zero_point {
        let rowsum = xq.f_sum_dim_intlist(1, true, Kind::Int)?;
        acc = acc.f_sub(&rowsum.f_mul(&zp.f_unsqueeze(0)?)?)?;
    }
    acc.f_to_kind(Kind::Float)?
        .f_mul(&sx)?
        .f_mul(&scale.f_unsqueeze(0)?)
}

/// int4 weights, torchao's way: per group of `group_size` inputs, `scale = max(max - min, 1e-6)
/// / 15` and `zero = min + 8·scale` (rounded to the activations' dtype), `q = clamp(round((w -
/// (zero - 8·scale)) / scale), 0, 15)`; the kernel computes `w = (q - 8)·scale + zero`.
pub(super) fn int4_weights(
    w: &Tensor,
    group_size: i64,
    activations: Kind,
) -> Result<Weights, TchError> {
    if ![32, 64, 128, 256].contains(&group_size) {
        return Err(unsupported(format!(
            "int4 groups hold 32, 64, 128 or 256 inputs, not {group_size}"
        )));
    }
    let cuda = w.device() != Device::Cpu;
    if cuda && activations != Kind::BFloat16 {
        return Err(unsupported(
            "the CUDA int4 kernel takes bf16 activations only".to_string(),
        ));
    }
    let (n, k) = w.size2()?;
    let (np, kp) = (round_up(n, 16), round_up(k, group_size));
    let groups = padded(w, np, kp, Kind::Float)?.f_reshape([np, kp / group_size, group_size])?;
    let (min, max) = groups.f_aminmax(2, true)?;
    let round = |t: Tensor| t.f_to_kind(activations)?.f_to_kind(Kind::Float);
    let scale = round(max.f_sub(&min)?.f_clamp_min(1e-6)?.f_div_scalar(15.0)?)?;
    let zero = round(min.f_add(&scale.f_mul_scalar(8.0)?)?)?;
    let low = zero.f_sub(&scale.f_mul_scalar(8.0)?)?;
    let q = groups
        .f_sub(&low)?
        .f_div(&scale)?
        .f_round()?
        .f_clamp(0, 15)?
        .f_to_kind(Kind::Int)?
        .f_reshape([np, kp])?;
    let packed = if cuda {
        let even = q.f_slice(1, 0, kp, 2)?;
        let odd = q.f_slice(1, 1, kp, 2)?;
        even.f_bitwise_left_shift_tensor_scalar(4)?
            .f_bitwise_or_tensor(&odd)?
            .f_to_kind(Kind::Uint8)?
            .f_internal_convert_weight_to_int4pack(2)?
    } else {
        q.f_contiguous()?
            .f_internal_convert_weight_to_int4pack_for_cpu(1)?
    };
    let scales_and_zeros = Tensor::f_cat(&[scale, zero], 2)?
        .f_transpose(0, 1)?
        .f_to_kind(activations)?
        .f_contiguous()?;
    Ok(Weights::Int4 {
        packed,
        scales_and_zeros,
        group_size,
        activations,
    })
}

/// The int4 kernel of the device: `x` `[M, Kp]` times the packed weight, `[M, Np]`.
pub(super) fn int4_mm(
    x: &Tensor,
    packed: &Tensor,
    group_size: i64,
    scales_and_zeros: &Tensor,
    cuda: bool,
) -> Result<Tensor, TchError> {
    if cuda {
        x.f_internal_weight_int4pack_mm(packed, group_size, scales_and_zeros)
    } else {
        x.f_internal_weight_int4pack_mm_for_cpu(packed, group_size, scales_and_zeros)
    }
}

/// The e4m3 maximum.
const FP8_MAX: f64 = 448.0;

/// `t / scale` in e4m3, with `scale = max(amax / 448, 1e-12)` over the tensor or per row.
pub(super) fn to_fp8(t: &Tensor, per_row: bool) -> Result<(Tensor, Tensor), TchError> {
    let amax = if per_row {
        t.f_abs()?.f_amax([1], true)?
    } else {
        t.f_abs()?.f_max()?
    };
    let scale = amax.f_div_scalar(FP8_MAX)?.f_clamp_min(1e-12)?;
    let q = t
        .f_div(&scale)?
        .f_clamp(-FP8_MAX, FP8_MAX)?
        .f_to_kind(Kind::Float8e4m3fn)?;
    Ok((q, scale))
}

/// e4m3 weights `[Np, Kp]` (multiples of 16, as `_scaled_mm` wants).
pub(super) fn fp8_weights(w: &Tensor, granularity: Granularity) -> Result<Weights, TchError> {
    let (n, k) = w.size2()?;
    let per_row = granularity == Granularity::PerChannel;
    let (w, scale) = to_fp8(
        &padded(w, round_up(n, 16), round_up(k, 16), Kind::Float)?,
        per_row,
    )?;
    Ok(Weights::Fp8 { w, scale, per_row })
}

/// `_scaled_mm` of `x` in e4m3 against the e4m3 weight. Row-wise scales on CPU (which takes
/// only per-tensor ones) are applied to the fp32 product afterwards.
pub(super) fn fp8_forward(
    x: &Tensor,
    w: &Tensor,
    scale: &Tensor,
    per_row: bool,
    n: i64,
    cuda: bool,
) -> Result<Tensor, TchError> {
    let m = x.size()[0];
    let (xq, sx) = to_fp8(&padded(x, m, w.size()[1], Kind::Float)?, per_row)?;
    let wt = w.f_tr()?;
    let y = if !per_row {
        xq.f_internal_scaled_mm(&wt, &sx, scale, None::<Tensor>, None, Kind::Float, false)?
    } else if cuda {
        xq.f_internal_scaled_mm(
            &wt,
            &sx,
            &scale.f_tr()?,
            None::<Tensor>,
            None,
            Kind::BFloat16,
            false,
        )?
        .f_to_kind(Kind::Float)?
    } else {
        let one = Tensor::from(1.0f32);
        xq.f_internal_scaled_mm(&wt, &one, &one, None::<Tensor>, None, Kind::Float, false)?
            .f_mul(&sx)?
            .f_mul(&scale.f_tr()?)?
    };
    y.f_narrow(1, 0, n)
}
