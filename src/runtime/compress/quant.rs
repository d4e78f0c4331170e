//! Quantized weights and the linears that use them.
//!
//! This file holds PyTorch's min/max observers and the quantizers built on them; `qlinear.rs`
//! holds [`QLinear`], the quantized linear layer, and `qkernels.rs` the kernels it calls.
//!
//! The observers follow `torch.ao.quantization`'s `MinMaxObserver` and `PerChannelMinMaxObserver`
//! (channel axis 0) formula for formula, in fp32: with `mn = min(min(x), 0)` and
//! `mx = max(max(x), 0)`, a symmetric scale is `max(max(-mn, mx) / ((qmax - qmin) / 2), eps)`
//! with zero point 0 (128 for quint8), an affine scale is `max((mx - mn) / (qmax - qmin), eps)`
//! with zero point `clamp(qmin - round_half_even(mn / scale), qmin, qmax)`, and eps is 2^-23.
//! Quantizing goes through libtorch's own `quantize_per_channel` / `quantize_per_tensor` and
//! fake quantization through `fake_quantize_per_*_affine`, so the integers and the values are
//! PyTorch's.

use kiln::ir::Granularity;
use tch::{Kind, TchError, Tensor};

#[path = "qkernels.rs"]
mod qkernels;
#[path = "qlinear.rs"]
mod qlinear;
pub use qlinear::{QLinear, QuantMethod};
#[path = "qstored.rs"]
mod qstored;
pub use qstored::{from_stored, Stored};

#[cfg(test)]
#[path = "qlinear_tests.rs"]
mod qlinear_tests;
#[cfg(test)]
#[path = "quant_tests.rs"]
mod tests;

/// PyTorch's observer eps: the fp32 machine epsilon, 2^-23.
pub const EPS: f64 = f32::EPSILON as f64;

/// PyTorch's default `averaging_constant` of the moving-average observers.
pub const AVERAGING_CONSTANT: f64 = 0.01;

/// The 8-bit integer type that quantized values are stored in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QDtype {
    /// Signed, -128..=127 (`torch.qint8`).
    QInt8,
    /// Unsigned, 0..=255 (`torch.quint8`).
    QUInt8,
}

/// How an observer maps a float range to integers: PyTorch's `dtype`, `qscheme` and
/// `reduce_range` arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QConfig {
    /// The integer type.
    pub dtype: QDtype,
    /// Symmetric (`per_*_symmetric`: a zero point in the middle) or affine (`per_*_affine`).
    pub symmetric: bool,
    /// Use one bit less of range (PyTorch's `reduce_range`).
    pub reduce_range: bool,
}

impl QConfig {
    /// PyTorch's default weight configuration: qint8, symmetric, full range.
    pub const INT8_SYMMETRIC: QConfig = QConfig {
        dtype: QDtype::QInt8,
        symmetric: true,
        reduce_range: false,
    };

    /// The observer's `(quant_min, quant_max)`.
    pub fn range(&self) -> (i64, i64) {
        match (self.dtype, self.reduce_range) {
            (QDtype::QInt8, false) => (-128, 127),
            (QDtype::QInt8, true) => (-64, 63),
            (QDtype::QUInt8, false) => (0, 255),
            (QDtype::QUInt8, true) => (0, 127),
        }
    }

    /// The libtorch quantized kind (`QInt8` or `QUInt8`).
    pub fn kind(&self) -> Kind {
        match self.dtype {
            QDtype::QInt8 => Kind::QInt8,
            QDtype::QUInt8 => Kind::QUInt8,
        }
    }
}

/// Scales and zero points, as an observer's `calculate_qparams` returns them: `scale` is fp32
/// and `zero_point` int64 (symmetric) or int32 (affine), both 1-D: one per channel, or one
/// element for a whole tensor.
#[derive(Debug)]
pub struct QParams {
    /// fp32 scales, `[channels]` or `[1]`.
    pub scale: Tensor,
    /// Integer zero points, the same shape.
    pub zero_point: Tensor,
    /// The channel axis (0), or `None` for one scale per tensor.
    pub axis: Option<i64>,
    /// The configuration they were computed for.
    pub config: QConfig,
}

impl Clone for QParams {
    fn clone(&self) -> Self {
        QParams {
            scale: self.scale.copy(),
            zero_point: self.zero_point.copy(),
            axis: self.axis,
            config: self.config,
        }
    }
}

/// `_calculate_qparams` from per-channel (or 0-d, per-tensor) minima and maxima. Like PyTorch,
/// it refuses `reduce_range` with symmetric quint8.
pub fn qparams_from_min_max(
    min: &Tensor,
    max: &Tensor,
    config: QConfig,
    axis: Option<i64>,
) -> Result<QParams, TchError> {
    if config.symmetric && config.reduce_range && config.dtype == QDtype::QUInt8 {
        return Err(TchError::Torch(
            "symmetric quint8 cannot reduce its range (as in PyTorch)".to_string(),
        ));
    }
    let (qmin, qmax) = config.range();
    let mn = min.f_to_kind(Kind::Float)?.f_clamp_max(0.0)?;
    let mx = max.f_to_kind(Kind::Float)?.f_clamp_min(0.0)?;
    let (scale, zero_point) = if config.symmetric {
        let amax = mn.f_neg()?.f_maximum(&mx)?;
        let scale = amax
            .f_div_scalar((qmax - qmin) as f64 / 2.0)?
            .f_clamp_min(EPS)?;
        // PyTorch puts quint8's symmetric zero point at 128 unless the range is customized,
        // which `reduce_range` is not.
        let zp = match config.dtype {
            QDtype::QInt8 => 0,
            QDtype::QUInt8 => 128,
        };
        (scale, mn.f_full_like(zp)?.f_to_kind(Kind::Int64)?)
    } else {
        let scale = mx
            .f_sub(&mn)?
            .f_div_scalar((qmax - qmin) as f64)?
            .f_clamp_min(EPS)?;
        let zp = mn
            .f_div(&scale)?
            .f_round()?
            .f_to_kind(Kind::Int)?
            .f_neg()?
            .f_add_scalar(qmin)?
            .f_clamp(qmin, qmax)?;
        (scale, zp)
    };
    Ok(QParams {
        scale: scale.f_reshape([-1])?,
        zero_point: zero_point.f_reshape([-1])?,
        axis,
        config,
    })
}

/// The minima and maxima an observer records: per row of a 2-D (or higher) tensor along axis
/// 0, or over the whole tensor.
fn min_max(x: &Tensor, granularity: Granularity) -> Result<(Tensor, Tensor), TchError> {
    let x = x.f_detach()?.f_to_kind(Kind::Float)?;
    match granularity {
        Granularity::PerChannel => x.f_flatten(1, -1)?.f_aminmax(1, false),
        Granularity::PerTensor => x.f_aminmax(None::<i64>, false),
    }
}

/// The axis of a granularity: 0 per channel, none per tensor.
fn axis_of(granularity: Granularity) -> Option<i64> {
    match granularity {
        Granularity::PerChannel => Some(0),
        Granularity::PerTensor => None,
    }
}

/// `PerChannelMinMaxObserver` (axis 0) or `MinMaxObserver` after observing `x` once.
pub fn qparams(x: &Tensor, granularity: Granularity, config: QConfig) -> Result<QParams, TchError> {
    let (min, max) = min_max(x, granularity)?;
    qparams_from_min_max(&min, &max, config, axis_of(granularity))
}

impl QParams {
    /// The channel axis and the scales as libtorch's quantizers take them (f64 and int64).
    fn per_channel(&self) -> Result<(Tensor, Tensor), TchError> {
        Ok((
            self.scale.f_to_kind(Kind::Double)?,
            self.zero_point.f_to_kind(Kind::Int64)?,
        ))
    }

    /// The per-tensor scale and zero point as numbers.
    fn per_tensor(&self) -> Result<(f64, i64), TchError> {
        Ok((
            self.scale.f_double_value(&[0])?,
            self.zero_point.f_int64_value(&[0])?,
        ))
    }

    /// `torch.quantize_per_channel` / `torch.quantize_per_tensor` then `int_repr()`: int8
    /// (qint8) or uint8 (quint8) values, `clamp(round_half_even(x * (1/scale)) + zp)` over the
    /// type's full range.
    pub fn quantize(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let x = x.f_detach()?.f_to_kind(Kind::Float)?;
        let q = match self.axis {
            Some(axis) => {
                let (scale, zp) = self.per_channel()?;
                x.f_quantize_per_channel(&scale, &zp, axis, self.config.kind())?
            }
            None => {
                let (scale, zp) = self.per_tensor()?;
                x.f_quantize_per_tensor(scale, zp, self.config.kind())?
            }
        };
        q.f_int_repr()
    }

    /// The fp32 values of integers from [`QParams::quantize`]: `(q - zp) * scale`.
    #[cfg(test)]
    pub fn dequantize(&self, q: &Tensor) -> Result<Tensor, TchError> {
        let (scale, zp) = match self.axis {
            Some(axis) => {
                let shape = broadcast_shape(q.dim(), axis);
                (
                    self.scale.f_reshape(&shape)?,
                    self.zero_point.f_reshape(&shape)?,
                )
            }
            None => (self.scale.shallow_clone(), self.zero_point.shallow_clone()),
        };
        q.f_to_kind(Kind::Float)?
            .f_sub(&zp.f_to_kind(Kind::Float)?)?
            .f_mul(&scale)
    }

    /// `torch.fake_quantize_per_channel_affine` / `fake_quantize_per_tensor_affine` over the
    /// configuration's range: `(clamp(round_half_even(x * (1/scale)) + zp, qmin, qmax) - zp) *
    /// scale`. Differentiable: the gradient passes straight through inside the range.
    pub fn fake_quantize(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let (qmin, qmax) = self.config.range();
        match self.axis {
            Some(axis) => {
                let zp = self.zero_point.f_to_kind(Kind::Int)?;
                x.f_fake_quantize_per_channel_affine(&self.scale, &zp, axis, qmin, qmax)
            }
            None => {
                let (scale, zp) = self.per_tensor()?;
                x.f_fake_quantize_per_tensor_affine(scale, zp, qmin, qmax)
            }
        }
    }
}

/// `[1, .., -1, .., 1]`: a shape that broadcasts a 1-D tensor along `axis` of a `dim`-D one.
#[cfg(test)]
fn broadcast_shape(dim: usize, axis: i64) -> Vec<i64> {
    (0..dim as i64)
        .map(|d| if d == axis { -1 } else { 1 })
        .collect()
}

/// `MovingAverageMinMaxObserver` (per tensor) or `MovingAveragePerChannelMinMaxObserver`
/// (axis 0), for quantization-aware training: the first observation's minima and maxima are
/// taken as they are, every later one moves them by `averaging_constant` of the difference.
/// The running minima and maxima live in two fp32 tensors that the observer updates in place
/// (a model's buffers, so that checkpoints keep them): `+inf` and `-inf` until the first
/// observation.
#[derive(Debug)]
pub struct MovingAverageObserver {
    config: QConfig,
    granularity: Granularity,
    averaging_constant: f64,
    min: Tensor,
    max: Tensor,
}

impl MovingAverageObserver {
    /// The running minima and maxima of an observer that has seen nothing: `[channels]` (per
    /// channel) or 0-d (per tensor), on `device`.
    pub fn empty(channels: Option<i64>, device: tch::Device) -> Result<(Tensor, Tensor), TchError> {
        let shape: Vec<i64> = channels.into_iter().collect();
        Ok((
            Tensor::f_full(shape.as_slice(), f64::INFINITY, (Kind::Float, device))?,
            Tensor::f_full(shape.as_slice(), f64::NEG_INFINITY, (Kind::Float, device))?,
        ))
    }

    /// An observer over the running `min` and `max` (see [`MovingAverageObserver::empty`]),
    /// with PyTorch's averaging constant 0.01.
    pub fn new(config: QConfig, granularity: Granularity, min: Tensor, max: Tensor) -> Self {
        MovingAverageObserver {
            config,
            granularity,
            averaging_constant: AVERAGING_CONSTANT,
            min,
            max,
        }
    }

    /// Whether it has observed a tensor.
    pub fn seen(&self) -> Result<bool, TchError> {
        Ok(self.min.f_isinf()?.f_any()?.f_int64_value(&[])? == 0)
    }

    /// Records the minima and maxima of `x` (detached; no gradient flows).
    pub fn observe(&self, x: &Tensor) -> Result<(), TchError> {
        let (cur_min, cur_max) = min_max(x, self.granularity)?;
        let c = self.averaging_constant;
        tch::no_grad(|| {
            for (run, cur) in [(&self.min, cur_min), (&self.max, cur_max)] {
                let cur = cur.f_reshape(run.size())?;
                let moved = run.f_add(&cur.f_sub(run)?.f_mul_scalar(c)?)?;
                let next = cur.f_where_self(&run.f_isinf()?, &moved)?;
                run.shallow_clone().f_copy_(&next)?;
            }
            Ok(())
        })
    }

    /// The scales and zero points of the running minima and maxima; an error before the first
    /// observation.
    pub fn qparams(&self) -> Result<QParams, TchError> {
        if !self.seen()? {
            return Err(TchError::Torch(
                "the observer has not seen a tensor yet".to_string(),
            ));
        }
        qparams_from_min_max(&self.min, &self.max, self.config, axis_of(self.granularity))
    }
}
