//! A quantized linear read back from the pieces `kiln export` stores (see
//! [`QLinear::tensors`]): int8 weight-only (`weight_int8`), int8 through `_int_mm`
//! (`weight_int8_t`, dynamic or with a fixed `activation_scale`) and cast weights (`weight` in
//! bf16 or fp16). The kernel is built from the stored integers and scales themselves, so it
//! computes what the run's compressed model computed.

use kiln::diagnostic::problem::Mismatch;
use tch::{Device, Kind, TchError, Tensor};

use super::qlinear::Weights;
use super::QLinear;

/// What an export stores for one linear layer.
pub enum Stored {
    /// Its plain fp32 `weight`: the layer is not quantized.
    Plain,
    /// A quantized layer, ready to run.
    Kernel(QLinear),
    /// A layer stored in a form that cannot be read back (int4's packing belongs to the kernel
    /// of the machine that packed it; fp8 needs a GPU): the tensor that says so.
    Unsupported(String),
}

/// The pieces under `layer.` in `tensors`, looked up by their local names.
struct Pieces<'a> {
    layer: &'a str,
    tensors: &'a [(String, Tensor)],
    describe: &'a dyn Fn(&Tensor) -> String,
    wrong: Vec<Mismatch>,
}

impl Pieces<'_> {
    fn find(&self, local: &str) -> Option<&Tensor> {
        let name = format!("{}.{local}", self.layer);
        self.tensors
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t)
    }

    /// The piece `local`, which must be of `kind` with `dims` dimensions satisfying `fits`;
    /// otherwise it is recorded as wrong (`expected` in PyTorch's words) and `None` returned.
    fn need(
        &mut self,
        local: &str,
        kinds: &[Kind],
        fits: impl Fn(&[i64]) -> bool,
        expected: String,
    ) -> Option<Tensor> {
        let found = self.find(local);
        match found {
            Some(t) if kinds.contains(&t.kind()) && fits(&t.size()) => Some(t.shallow_clone()),
            _ => {
                let found = found.map(|t| (self.describe)(t));
                self.wrong.push(Mismatch {
                    name: format!("{}.{local}", self.layer),
                    found,
                    expected,
                });
                None
            }
        }
    }
}

/// The stored form of the linear `layer` of `n` outputs and `k` inputs (with a bias when
/// `bias`), from an export's `tensors`, on `device`. Pieces that are missing or of another
/// shape or dtype are returned as mismatches, each named (the inner error); `describe` words a
/// tensor found.
pub fn from_stored(
    layer: &str,
    (n, k, bias): (i64, i64, bool),
    tensors: &[(String, Tensor)],
    device: Device,
    describe: &dyn Fn(&Tensor) -> String,
) -> Result<Result<Stored, Vec<Mismatch>>, TchError> {
    let mut p = Pieces {
        layer,
        tensors,
        describe,
        wrong: Vec::new(),
    };
    for unsupported in ["weight_int4_packed", "weight_fp8"] {
        if p.find(unsupported).is_some() {
            return Ok(Ok(Stored::Unsupported(format!("{layer}.{unsupported}"))));
        }
    }
    let vector = |len: i64| move |s: &[i64]| s == [len];
    let cast = p
        .find("weight")
        .is_some_and(|w| matches!(w.kind(), Kind::BFloat16 | Kind::Half));
    let weights = if p.find("weight_int8").is_some() {
        let q = p.need(
            "weight_int8",
            &[Kind::Int8],
            |s| s.len() == 2 && s[0] == n && s[1] >= k && s[1] % 16 == 0,
            format!("[{n}, K ≥ {k}, a multiple of 16] int8"),
        );
        let scale = p.need(
            "weight_scale",
            &[Kind::BFloat16, Kind::Half, Kind::Float],
            vector(n),
            format!("[{n}] bfloat16, float16 or float32"),
        );
        let zero_point = zero_point(&mut p, n);
        match (q, scale, zero_point) {
            (Some(q), Some(scale), Some(zero_point)) => Some(Weights::Int8Pack {
                q,
                activations: scale.kind(),
                scale,
                zero_point,
            }),
            _ => None,
        }
    } else if p.find("weight_int8_t").is_some() {
        let qt = p.need(
            "weight_int8_t",
            &[Kind::Int8],
            |s| s.len() == 2 && s[0] >= k && s[1] >= n,
            format!("[K ≥ {k}, N ≥ {n}] int8"),
        );
        let scale = p.need(
            "weight_scale",
            &[Kind::Float],
            vector(n),
            format!("[{n}] float32"),
        );
        let zero_point = zero_point(&mut p, n);
        let activation_scale = match p.find("activation_scale") {
            None => Some(None),
            Some(_) => p
                .need(
                    "activation_scale",
                    &[Kind::Float],
                    |s| s == [1],
                    "[1] float32".into(),
                )
                .and_then(|t| t.f_double_value(&[0]).ok())
                .map(Some),
        };
        match (qt, scale, zero_point, activation_scale) {
            (Some(qt), Some(scale), Some(zero_point), Some(activation_scale)) => {
                Some(Weights::IntMm {
                    qt,
                    scale,
                    zero_point,
                    activation_scale,
                })
            }
            _ => None,
        }
    } else if cast {
        p.need(
            "weight",
            &[Kind::BFloat16, Kind::Half],
            |s| s == [n, k],
            format!("[{n}, {k}] bfloat16 or float16"),
        )
        .map(|w| Weights::Cast { w })
    } else {
        return Ok(Ok(Stored::Plain));
    };
    let bias = if bias {
        p.need("bias", &[Kind::Float], vector(n), format!("[{n}] float32"))
            .map(Some)
    } else {
        Some(None)
    };
    let (Some(weights), Some(bias), true) = (weights, bias, p.wrong.is_empty()) else {
        return Ok(Err(p.wrong));
    };
    let bias = bias.map(|b| to(&b, device)).transpose()?;
    let weights = on(weights, device)?;
    Ok(Ok(Stored::Kernel(QLinear::from_parts(n, k, bias, weights))))
}

/// The optional int32 zero points `[n]` of an affine layer: `Some(None)` when there are none,
/// `None` when they are wrong (and recorded).
fn zero_point(p: &mut Pieces, n: i64) -> Option<Option<Tensor>> {
    if p.find("weight_zero_point").is_none() {
        return Some(None);
    }
    p.need(
        "weight_zero_point",
        &[Kind::Int],
        |s| s == [n],
        format!("[{n}] int32"),
    )
    .map(Some)
}

/// The stored weights moved to `device`, laid out as the kernels are given them when they are
/// built: fresh contiguous tensors, and on the CPU the `_int_mm` weight `[Kp, Np]` as the
/// transposed view of a row-major `[Np, Kp]`.
fn on(weights: Weights, device: Device) -> Result<Weights, TchError> {
    let zp = |z: Option<Tensor>| z.map(|z| to(&z, device)).transpose();
    Ok(match weights {
        Weights::Int8Pack {
            q,
            scale,
            zero_point,
            activations,
        } => Weights::Int8Pack {
            q: to(&q, device)?,
            scale: to(&scale, device)?,
            zero_point: zp(zero_point)?,
            activations,
        },
        Weights::IntMm {
            qt,
            scale,
            zero_point,
            activation_scale,
        } => Weights::IntMm {
            qt: if device == Device::Cpu {
                qt.f_tr()?.f_contiguous()?.f_tr()?
            } else {
                to(&qt, device)?
            },
            scale: to(&scale, device)?,
            zero_point: zp(zero_point)?,
            activation_scale,
        },
        Weights::Cast { w } => Weights::Cast { w: to(&w, device)? },
        other => other,
    })
}

/// `t` on `device`, contiguous.
fn to(t: &Tensor, device: Device) -> Result<Tensor, TchError> {
    t.f_to_device(device)?.f_contiguous()
}
