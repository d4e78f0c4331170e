//! Normalisation: `batchnorm1d`, `batchnorm2d`, `layernorm`, `groupnorm`.

use super::{count, given, inferred, numel, required, Checked, Flow, LayerCheck, Spec};
use crate::check::cx::Range;
use crate::diagnostic::problem::{Declared, OutOfRange};
use crate::diagnostic::Problem;
use crate::ir::{BatchNorm, LayerKind};
use crate::syntax::ast::ValueKind;

const BATCHNORM: &[super::Param] = &[
    inferred("num_features"),
    given("eps", "1e-5"),
    given("momentum", "0.1"),
    given("affine", "true"),
    given("track_running_stats", "true"),
];

/// `batchnorm1d(num_features, eps, momentum, affine, track_running_stats)`.
pub static BATCHNORM1D: Spec = Spec {
    params: BATCHNORM,
    note: None,
    shapes: "`[C]` or `[C, L]`, unchanged",
};

/// `batchnorm2d(num_features, eps, momentum, affine, track_running_stats)`.
pub static BATCHNORM2D: Spec = Spec {
    params: BATCHNORM,
    note: None,
    shapes: "`[C, H, W]`, unchanged",
};

/// `layernorm(normalized_shape, eps)`.
pub static LAYERNORM: Spec = Spec {
    params: &[
        given("normalized_shape", "the last dimension"),
        given("eps", "1e-5"),
    ],
    note: None,
    shapes: "unchanged",
};

/// `groupnorm(num_groups, num_channels, eps)`.
pub static GROUPNORM: Spec = Spec {
    params: &[
        required("num_groups"),
        inferred("num_channels"),
        given("eps", "1e-5"),
    ],
    note: None,
    shapes: "`[C, ...]`, unchanged",
};

/// Checks a batch normalisation over `[C, H, W]` (`two_d`) or `[C]`/`[C, L]`.
pub(super) fn check_batch(lc: &mut LayerCheck, flow: &Flow, two_d: bool) -> Option<Checked> {
    let declared = lc
        .opt_uint("num_features", 1)?
        .map(|f| (f, lc.at("num_features")));
    let eps = lc.num_or("eps", 1e-5, Range::Positive)?;
    let momentum = lc.num_or("momentum", 0.1, Range::Unit)?;
    let affine = lc.bool_or("affine", true)?;
    let track_running_stats = lc.bool_or("track_running_stats", true)?;
    let shape = lc.input(flow)?;
    let (ok, want) = if two_d {
        (shape.len() == 3, "[channels, height, width]")
    } else {
        (
            shape.len() == 1 || shape.len() == 2,
            "[features] or [channels, length]",
        )
    };
    lc.rank(&shape, flow, want, ok)?;
    let features = shape[0];
    if let Some((d, at)) = declared {
        if d != features {
            let declared = Declared::Size {
                what: "features",
                declared: d,
                received: features,
            };
            lc.mismatch(at, flow, &shape, declared);
            return None;
        }
    }
    let n = numel(&shape).max(0) as u64;
    let norm = BatchNorm {
        features,
        eps,
        momentum,
        affine,
        track_running_stats,
    };
    let kind = if two_d {
        LayerKind::BatchNorm2d { norm }
    } else {
        LayerKind::BatchNorm1d { norm }
    };
    let params = if affine { 2 * features as u64 } else { 0 };
    Some(Checked::new(kind, shape, params, n))
}

pub(super) fn check_layer(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let declared = match lc.bound.get("normalized_shape") {
        None => None,
        Some(v) if matches!(v.kind, ValueKind::List(_)) => Some((lc.cx.shape(v)?, v.span)),
        Some(v) => Some((
            vec![lc.cx.uint_min(v, "`normalized_shape`", 1)? as i64],
            v.span,
        )),
    };
    let eps = lc.num_or("eps", 1e-5, Range::Positive)?;
    let shape = lc.input(flow)?;
    lc.rank(&shape, flow, "at least 1-D", !shape.is_empty())?;
    let norm = match declared {
        Some((d, at)) => {
            if d.len() > shape.len() || shape[shape.len() - d.len()..] != d[..] {
                let declared = Declared::Trailing {
                    shape: d.as_slice().into(),
                };
                lc.mismatch(at, flow, &shape, declared);
                return None;
            }
            d
        }
        None => vec![*shape.last()?],
    };
    let n = numel(&shape).max(0) as u64;
    let params = count(2.0 * numel(&norm) as f64);
    Some(Checked::new(
        LayerKind::LayerNorm { shape: norm, eps },
        shape,
        params,
        n,
    ))
}

pub(super) fn check_group(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let (groups, groups_span) = lc.required_uint("num_groups", 1)?;
    let channels = lc.opt_uint("num_channels", 1)?;
    let eps = lc.num_or("eps", 1e-5, Range::Positive)?;
    let shape = lc.input(flow)?;
    lc.rank(&shape, flow, "[channels, ...]", shape.len() >= 2)?;
    let c = shape[0];
    if let Some(d) = channels {
        if d != c {
            let at = lc.at("num_channels");
            let declared = Declared::Size {
                what: "channels",
                declared: d,
                received: c,
            };
            lc.mismatch(at, flow, &shape, declared);
            return None;
        }
    }
    if c % groups != 0 {
        lc.cx.report(Problem::OutOfRange {
            span: groups_span,
            situation: OutOfRange::NormGroups {
                groups,
                channels: c,
            },
        });
        return None;
    }
    let n = numel(&shape).max(0) as u64;
    let kind = LayerKind::GroupNorm {
        groups,
        channels: c,
        eps,
    };
    Some(Checked::new(kind, shape, 2 * c as u64, n))
}
