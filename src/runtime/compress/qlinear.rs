//! [`QLinear`]: a linear layer whose weight is stored quantized, with the libtorch kernel that
//! multiplies by it.
//!
//! Every forward takes an fp32 `x` of shape `[M, K]` (a caller with more leading dimensions
//! flattens them first) and returns fp32 `[M, N]`. The bias is kept in fp32 and added last.
//! Where a kernel needs a dimension to be a multiple of something, the weight is zero-padded once
//! when the layer is built and `x` on every call; the output is sliced back to `N`.
//!
//! The kernels' hazards are guarded here: `_weight_int8pack_mm` with bf16 `x` reads 16 values at
//! a time from 32-byte aligned rows and has no tail, so `K` is padded to a multiple of 16 and `x`
//! is always copied into a freshly allocated contiguous tensor; int4 packing needs `N % 16 == 0`
//! and the int4 matmul `K % group_size == 0`.

use kiln::ir::Granularity;
use tch::{Device, Kind, TchError, Tensor};

use super::qkernels::{
    affine_zero_points, fp8_forward, fp8_weights, int4_mm, int4_weights, int_mm_forward,
    int_mm_weights, padded, round_up,
};
use super::{qparams, QConfig, QParams};

/// How a [`QLinear`] stores its weight and multiplies by it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QuantMethod {
    /// int8 weights (qint8, from the min/max observer) through `_weight_int8pack_mm`, with `x`
    /// cast to `activations` (bf16 is the vectorized kernel; fp32 computes exactly in fp32).
    Int8WeightOnly {
        /// One scale per output channel or one for the weight.
        granularity: Granularity,
        /// Zero points 0, or affine ranges (handled as `x·(q·s)ᵀ - rowsum(x)·(zp·s)ᵀ`).
        symmetric: bool,
        /// `BFloat16`, `Half` or `Float`.
        activations: Kind,
    },
    /// int8 weights and int8 activations, quantized per row at run time (symmetric,
    /// `amax / 127.5`), multiplied in integers by `_int_mm`.
    Int8Dynamic {
        /// Weight scale granularity.
        granularity: Granularity,
        /// Symmetric or affine weights (an affine zero point is subtracted in integers).
        symmetric: bool,
    },
    /// int4 weights in groups of `group_size` input features (asymmetric min/max per group,
    /// torchao's convention), through the int4-pack kernels.
    Int4 {
        /// 32, 64, 128 or 256.
        group_size: i64,
        /// The dtype `x` is cast to: `BFloat16` (the only one on CUDA), `Half` or `Float`.
        activations: Kind,
    },
    /// e4m3 weights and activations with `amax / 448` scales, through `_scaled_mm`.
    Fp8 {
        /// One scale per tensor, or one per row of the weight and of `x`.
        granularity: Granularity,
    },
    /// Weights stored in `BFloat16` or `Half`; `x` is cast to it.
    Cast {
        /// `BFloat16` or `Half`.
        kind: Kind,
    },
}

/// The stored weight of a [`QLinear`].
#[derive(Debug)]
pub(super) enum Weights {
    /// `q` is int8 `[N, Kp]`; `scale` `[N]` in the activations' dtype; `zero_point` `[N]` int32.
    Int8Pack {
        q: Tensor,
        scale: Tensor,
        zero_point: Option<Tensor>,
        activations: Kind,
    },
    /// `qt` is the transposed int8 weight `[Kp, Np]`; `scale` `[N]` fp32; `zero_point` `[N]`
    /// int32; a fixed activation scale, or none for per-row dynamic scales.
    IntMm {
        qt: Tensor,
        scale: Tensor,
        zero_point: Option<Tensor>,
        activation_scale: Option<f64>,
    },
    /// The kernel's opaque packing of `[Np, Kp]` and `[Kp / group_size, Np, 2]` scales and zeros.
    Int4 {
        packed: Tensor,
        scales_and_zeros: Tensor,
        group_size: i64,
        activations: Kind,
    },
    /// e4m3 `[Np, Kp]` and an fp32 scale (0-d, or `[Np, 1]` per row).
    Fp8 {
        w: Tensor,
        scale: Tensor,
        per_row: bool,
    },
    /// The weight in bf16 or fp16.
    Cast { w: Tensor },
}

/// A quantized linear layer: `y = x · dequantized(W)ᵀ + b`, computed by the method's kernel.
#[derive(Debug)]
pub struct QLinear {
    out_features: i64,
    in_features: i64,
    bias: Option<Tensor>,
    weights: Weights,
}

/// Checks that `kind` is one of the float dtypes the packed kernels take.
fn activation_kind(kind: Kind) -> Result<Kind, TchError> {
    match kind {
        Kind::BFloat16 | Kind::Half | Kind::Float => Ok(kind),
        other => Err(TchError::Kind(format!(
            "quantized kernels take bf16, fp16 or fp32 activations, not {other:?}"
        ))),
    }
}

impl QLinear {
    /// Quantizes an fp32 `weight` `[N, K]` (and keeps `bias` `[N]` in fp32) for `method`.
    pub fn new(
        weight: &Tensor,
        bias: Option<&Tensor>,
        method: QuantMethod,
    ) -> Result<Self, TchError> {
        let (w, bias) = float_parameters(weight, bias)?;
        let (n, k) = w.size2()?;
        let config = |symmetric| QConfig {
            symmetric,
            ..QConfig::INT8_SYMMETRIC
        };
        let weights = match method {
            QuantMethod::Int8WeightOnly {
                granularity,
                symmetric,
                activations,
            } => {
                let activations = activation_kind(activations)?;
                let p = qparams(&w, granularity, config(symmetric))?;
                let q = padded(&p.quantize(&w)?, n, round_up(k, 16), Kind::Int8)?;
                Weights::Int8Pack {
                    q,
                    scale: p
                        .scale
                        .f_expand([n], false)?
                        .f_to_kind(activations)?
                        .f_contiguous()?,
                    zero_point: affine_zero_points(&p, n)?,
                    activations,
                }
            }
            QuantMethod::Int8Dynamic {
                granularity,
                symmetric,
            } => int_mm_weights(&w, &qparams(&w, granularity, config(symmetric))?, None)?,
            QuantMethod::Int4 {
                group_size,
                activations,
            } => int4_weights(&w, group_size, activation_kind(activations)?)?,
            QuantMethod::Fp8 { granularity } => fp8_weights(&w, granularity)?,
            QuantMethod::Cast { kind } => match kind {
                Kind::BFloat16 | Kind::Half => Weights::Cast {
                    w: w.f_to_kind(kind)?,
                },
                other => {
                    return Err(TchError::Kind(format!(
                        "weights are cast to bf16 or fp16, not {other:?}"
                    )))
                }
            },
        };
        Ok(QLinear {
            out_features: n,
            in_features: k,
            bias,
            weights,
        })
    }

    /// The QAT conversion: int8 weights from the weight observer's `params` (qint8, per channel
    /// or per tensor, as fake quantization used them) and the activation observer's per-tensor
    /// symmetric `activation_scale`.
    pub fn int8_static(
        weight: &Tensor,
        bias: Option<&Tensor>,
        params: &QParams,
        activation_scale: f64,
    ) -> Result<Self, TchError> {
        let (w, bias) = float_parameters(weight, bias)?;
        let (n, k) = w.size2()?;
        Ok(QLinear {
            out_features: n,
            in_features: k,
            bias,
            weights: int_mm_weights(&w, params, Some(activation_scale))?,
        })
    }

    /// A layer of `out_features` × `in_features` from weights stored as a kernel keeps them (an
    /// export read back) and an fp32 bias `[N]`.
    pub(super) fn from_parts(
        out_features: i64,
        in_features: i64,
        bias: Option<Tensor>,
        weights: Weights,
    ) -> Self {
        QLinear {
            out_features,
            in_features,
            bias,
            weights,
        }
    }

    /// `N`.
    #[cfg(test)]
    pub fn out_features(&self) -> i64 {
        self.out_features
    }

    /// `K`.
    #[cfg(test)]
    pub fn in_features(&self) -> i64 {
        self.in_features
    }

    /// `x` `[M, K]` (fp32, any strides or storage offset) times the weight, plus the bias:
    /// fp32 `[M, N]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let (m, k) = x.size2()?;
        if k != self.in_features {
            return Err(TchError::Shape(format!(
                "an input of {k} features for a layer of {}",
                self.in_features
            )));
        }
        let (n, cuda) = (self.out_features, x.device() != Device::Cpu);
        let y = match &self.weights {
            Weights::Int8Pack {
                q,
                scale,
                zero_point,
                activations,
            } => {
                let xp = padded(x, m, q.size()[1], *activations)?;
                let y = xp
                    .f_internal_weight_int8pack_mm(q, scale)?
                    .f_to_kind(Kind::Float)?;
                match zero_point {
                    None => y,
                    Some(zp) => {
                        let zs = zp
                            .f_to_kind(Kind::Float)?
                            .f_mul(&scale.f_to_kind(Kind::Float)?)?;
                        let rowsum = xp.f_sum_dim_intlist(1, true, Kind::Float)?;
                        y.f_sub(&rowsum.f_mul(&zs.f_unsqueeze(0)?)?)?
                    }
                }
            }
            Weights::IntMm {
                qt,
                scale,
                zero_point,
                activation_scale,
            } => int_mm_forward(
                x,
                qt,
                scale,
                zero_point.as_ref(),
                *activation_scale,
                n,
                cuda,
            )?,
            Weights::Int4 {
                packed,
                scales_and_zeros,
                group_size,
                activations,
            } => {
                let kp = scales_and_zeros.size()[0] * group_size;
                let xp = padded(x, m, kp, *activations)?;
                int4_mm(&xp, packed, *group_size, scales_and_zeros, cuda)?
                    .f_narrow(1, 0, n)?
                    .f_to_kind(Kind::Float)?
            }
            Weights::Fp8 { w, scale, per_row } => fp8_forward(x, w, scale, *per_row, n, cuda)?,
            Weights::Cast { w } => x
                .f_to_kind(w.kind())?
                .f_matmul(&w.f_tr()?)?
                .f_to_kind(Kind::Float)?,
        };
        match &self.bias {
            Some(b) => y.f_add(b),
            None => Ok(y),
        }
    }

    /// The fp32 weight `[N, K]` the kernel multiplies by. For int4 the packing is opaque, so
    /// the values come from the kernel itself, as the identity matrix times the weight (`K² N`
    /// multiply-adds: meant for tests and export, not for every step); on CPU they are exact,
    /// on CUDA rounded to bf16.
    #[cfg(test)]
    pub fn dequantized(&self) -> Result<Tensor, TchError> {
        let (n, k) = (self.out_features, self.in_features);
        let w = match &self.weights {
            Weights::Int8Pack {
                q,
                scale,
                zero_point,
                ..
            } => {
                let q = q.f_narrow(1, 0, k)?.f_to_kind(Kind::Float)?;
                let q = match zero_point {
                    Some(zp) => q.f_sub(&zp.f_to_kind(Kind::Float)?.f_unsqueeze(1)?)?,
                    None => q,
                };
                q.f_mul(&scale.f_to_kind(Kind::Float)?.f_unsqueeze(1)?)?
            }
            Weights::IntMm {
                qt,
                scale,
                zero_point,
                ..
            } => {
                let q = qt
                    .f_tr()?
                    .f_narrow(0, 0, n)?
                    .f_narrow(1, 0, k)?
                    .f_to_kind(Kind::Float)?;
                let q = match zero_point {
                    Some(zp) => q.f_sub(&zp.f_to_kind(Kind::Float)?.f_unsqueeze(1)?)?,
                    None => q,
                };
                q.f_mul(&scale.f_unsqueeze(1)?)?
            }
            Weights::Int4 {
                packed,
                scales_and_zeros,
                group_size,
                ..
            } => {
                // The CPU kernel takes fp32 `x` with the same packing, which makes the values
                // exact; the CUDA kernel takes bf16 only.
                let cuda = packed.device() != Device::Cpu;
                let kind = if cuda { Kind::BFloat16 } else { Kind::Float };
                let kp = scales_and_zeros.size()[0] * group_size;
                let eye = Tensor::f_eye_m(k, kp, (kind, packed.device()))?;
                let sz = scales_and_zeros.f_to_kind(kind)?;
                int4_mm(&eye, packed, *group_size, &sz, cuda)?
                    .f_narrow(1, 0, n)?
                    .f_tr()?
                    .f_to_kind(Kind::Float)?
            }
            Weights::Fp8 { w, scale, .. } => w
                .f_to_kind(Kind::Float)?
                .f_mul(scale)?
                .f_narrow(0, 0, n)?
                .f_narrow(1, 0, k)?,
            Weights::Cast { w } => w.f_to_kind(Kind::Float)?,
        };
        w.f_contiguous()
    }

    /// Everything stored, by name, as it is stored (padded where a kernel needs it):
    /// `weight_int8` `[N, Kp]` (weight-only), `weight_int8_t` `[Kp, Np]` (`_int_mm`),
    /// `weight_int4_packed` and `weight_scales_and_zeros` `[Kp/group, Np, 2]` (int4),
    /// `weight_fp8` `[Np, Kp]`, `weight` (cast), with `weight_scale`, `weight_zero_point`
    /// (affine only), `activation_scale` (static only) and `bias`.
    pub fn tensors(&self) -> Vec<(String, Tensor)> {
        let mut out: Vec<(&str, &Tensor)> = Vec::new();
        match &self.weights {
            Weights::Int8Pack {
                q,
                scale,
                zero_point,
                ..
            } => {
                out.push(("weight_int8", q));
                out.push(("weight_scale", scale));
                if let Some(zp) = zero_point {
                    out.push(("weight_zero_point", zp));
                }
            }
            Weights::IntMm {
                qt,
                scale,
                zero_point,
                ..
            } => {
                out.push(("weight_int8_t", qt));
                out.push(("weight_scale", scale));
                if let Some(zp) = zero_point {
                    out.push(("weight_zero_point", zp));
                }
            }
            Weights::Int4 {
                packed,
                scales_and_zeros,
                ..
            } => {
                out.push(("weight_int4_packed", packed));
                out.push(("weight_scales_and_zeros", scales_and_zeros));
            }
            Weights::Fp8 { w, scale, .. } => {
                out.push(("weight_fp8", w));
                out.push(("weight_scale", scale));
            }
            Weights::Cast { w } => out.push(("weight", w)),
        }
        let mut out: Vec<(String, Tensor)> = out
            .into_iter()
            .map(|(name, t)| (name.to_string(), t.shallow_clone()))
            .collect();
        if let Weights::IntMm {
            activation_scale: Some(s),
            ..
        } = &self.weights
        {
            out.push((
                "activation_scale".to_string(),
                Tensor::from_slice(&[*s as f32]),
            ));
        }
        if let Some(b) = &self.bias {
            out.push(("bias".to_string(), b.shallow_clone()));
        }
        out
    }

    /// The bytes of everything [`QLinear::tensors`] lists.
    pub fn bytes(&self) -> i64 {
        self.tensors()
            .iter()
            .map(|(_, t)| t.numel() as i64 * t.kind().elt_size_in_bytes() as i64)
            .sum()
    }
}

/// The fp32 weight `[N, K]` and bias `[N]` (checked against it), detached.
fn float_parameters(
    weight: &Tensor,
    bias: Option<&Tensor>,
) -> Result<(Tensor, Option<Tensor>), TchError> {
    let w = weight.f_detach()?.f_to_kind(Kind::Float)?;
    let (n, _) = w.size2()?;
    let bias = match bias {
        Some(b) if b.size() != [n] => {
            return Err(TchError::Shape(format!(
                "a bias of shape {:?} for {n} output features",
                b.size()
            )))
        }
        Some(b) => Some(b.f_detach()?.f_to_kind(Kind::Float)?.f_contiguous()?),
        None => None,
    };
    Ok((w, bias))
}
