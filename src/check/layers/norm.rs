//! Normalisation: `batchnorm1d`, `batchnorm2d`, `layernorm`, `groupnorm`.

use super::{Check, Checked, Flow, LayerCheck};
use crate::check::cx::Range;
use crate::diagnostic::problem::{Declared, Names, OutOfRange};
use crate::diagnostic::Problem;
use crate::ir::Kind;
use crate::ir::{BatchNorm, LayerKind, LayerNorm};
use crate::syntax::ast::ValueKind;

/// The check of `kind` when it is a normalisation.
pub(super) fn checker(kind: Kind) -> Option<Check> {
    Some(match kind {
        Kind::BatchNorm1d => {
            Box::new(|lc: &mut LayerCheck, flow: &Flow| check_batch(lc, flow, false))
        }
        Kind::BatchNorm2d => {
            Box::new(|lc: &mut LayerCheck, flow: &Flow| check_batch(lc, flow, true))
        }
        Kind::LayerNorm => {
            Box::new(|lc: &mut LayerCheck, flow: &Flow| check_layer(lc, flow, false))
        }
        Kind::RmsNorm => Box::new(|lc: &mut LayerCheck, flow: &Flow| check_layer(lc, flow, true)),
        Kind::GroupNorm => Box::new(|lc: &mut LayerCheck, flow: &Flow| check_group(lc, flow)),
        _ => return None,
    })
}

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
    Some(Checked::new(kind, &shape, shape.clone()))
}

/// Checks a layer norm, or an RMS norm when `rms`.
pub(super) fn check_layer(lc: &mut LayerCheck, flow: &Flow, rms: bool) -> Option<Checked> {
    let declared = match lc.bound.get("normalized_shape") {
        None => None,
        Some(v) if matches!(v.kind, ValueKind::List(_)) => Some((lc.cx.shape(v)?, v.span)),
        Some(v) => Some((
            vec![lc.cx.uint_min(v, "`normalized_shape`", 1)? as i64],
            v.span,
        )),
    };
    let eps = lc.num_or("eps", LayerNorm::default_eps(rms), Range::Positive)?;
    let shape = lc.input(flow)?;
    lc.rank(&shape, flow, "at least 1-D", !shape.is_empty())?;
    let shape_norm = match declared {
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
    let norm = LayerNorm {
        shape: shape_norm,
        eps,
        rms,
    };
    let kind = LayerKind::LayerNorm { norm };
    Some(Checked::new(kind, &shape, shape.clone()))
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
        lc.cx.report(Problem::Names(Names::OutOfRange {
            span: groups_span,
            situation: OutOfRange::NormGroups {
                groups,
                channels: c,
            },
        }));
        return None;
    }
    let kind = LayerKind::GroupNorm {
        groups,
        channels: c,
        eps,
    };
    Some(Checked::new(kind, &shape, shape.clone()))
}
