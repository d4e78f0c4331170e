//! The loss's shapes: a one-unit output squeezed against one target per sample, every other
//! mismatch refused with both shapes named (never broadcast), and Huber and smooth L1 against
//! their formulas.

use tch::{Kind, Tensor};

use super::*;
use kiln::diagnostic::Code;

fn objective(loss: Loss) -> Objective {
    Objective {
        loss,
        span: Span::default(),
    }
}

fn floats(values: &[f32], shape: &[i64]) -> Tensor {
    Tensor::from_slice(values).reshape(shape)
}

fn value(t: &Tensor) -> f64 {
    t.double_value(&[])
}

#[test]
fn a_one_unit_output_is_squeezed_against_one_target_per_sample() {
    let out = floats(&[1.0, 2.0, 3.0, 4.0], &[4, 1]);
    let y = floats(&[1.5, 2.0, 2.0, 6.0], &[4]);
    // (0.25 + 0 + 1 + 4) / 4, not the mean over a [4, 4] broadcast.
    let mse = objective(Loss::Mse).loss(&out, &y).expect("mse");
    assert!((value(&mse) - 5.25 / 4.0).abs() < 1e-7, "{mse}");
    let l1 = objective(Loss::L1).loss(&out, &y).expect("l1");
    assert!((value(&l1) - 3.5 / 4.0).abs() < 1e-7, "{l1}");
    // Whole-number targets (a CSV column of counts) are values too.
    let counts = Tensor::from_slice(&[1i64, 2, 3, 4]);
    let exact = objective(Loss::Mse).loss(&out, &counts).expect("mse");
    assert_eq!(value(&exact), 0.0);
}

#[test]
fn huber_and_smooth_l1_follow_their_formulas() {
    let out = floats(&[0.2, 1.0, -3.0], &[3]);
    let y = Tensor::zeros([3], (Kind::Float, tch::Device::Cpu));
    // Huber, delta 0.5: 0.5 e² within delta, delta (|e| - delta / 2) beyond.
    let huber = objective(Loss::Huber { delta: 0.5 })
        .loss(&out, &y)
        .expect("huber");
    let want = (0.5 * 0.04 + 0.5 * (1.0 - 0.25) + 0.5 * (3.0 - 0.25)) / 3.0;
    assert!(
        (value(&huber) - want).abs() < 1e-6,
        "{huber} against {want}"
    );
    // Smooth L1, beta 0.5: 0.5 e² / beta within beta, |e| - beta / 2 beyond: Huber / beta.
    let smooth = objective(Loss::SmoothL1 { beta: 0.5 })
        .loss(&out, &y)
        .expect("smooth");
    assert!((value(&smooth) - want / 0.5).abs() < 1e-6, "{smooth}");
    // Beta 0 is l1.
    let zero = objective(Loss::SmoothL1 { beta: 0.0 })
        .loss(&out, &y)
        .expect("beta 0");
    assert!((value(&zero) - 4.2 / 3.0).abs() < 1e-6, "{zero}");
}

/// The message of the K0508 that `loss` gives for an output of shape `out` against targets of
/// shape `y`.
fn refused(loss: Loss, out: &[i64], y: Tensor) -> String {
    let out = Tensor::zeros(out, (Kind::Float, tch::Device::Cpu));
    let d = objective(loss)
        .loss(&out, &y)
        .expect_err("the shapes do not fit");
    assert_eq!(d.code, Code::TorchError, "{}", d.message);
    assert!(
        d.help.as_deref().is_some_and(|h| h.contains("kiln check")),
        "{:?}",
        d.help
    );
    d.message
}

#[test]
fn any_other_mismatch_is_refused_naming_both_shapes() {
    let values = |shape: &[i64]| Tensor::zeros(shape, (Kind::Float, tch::Device::Cpu));
    let classes = |shape: &[i64]| Tensor::zeros(shape, (Kind::Int64, tch::Device::Cpu));
    for loss in [
        Loss::Mse,
        Loss::L1,
        Loss::Huber { delta: 1.0 },
        Loss::SmoothL1 { beta: 1.0 },
        Loss::BceWithLogits { pos_weight: None },
    ] {
        let name = loss.name();
        let m = refused(loss.clone(), &[4, 2], values(&[4]));
        assert!(
            m.contains("output [4, 2]") && m.contains("targets [4]") && m.contains(name),
            "{m}"
        );
        let m = refused(loss.clone(), &[4], values(&[4, 1]));
        assert!(
            m.contains("output [4]") && m.contains("targets [4, 1]"),
            "{m}"
        );
        // The same number of values in another shape is not reshaped.
        let m = refused(loss, &[4, 6], values(&[4, 2, 3]));
        assert!(m.contains("[4, 6]") && m.contains("[4, 2, 3]"), "{m}");
    }
    let ce = || Loss::CrossEntropy {
        label_smoothing: 0.0,
        weight: None,
        ignore_index: -100,
    };
    let m = refused(ce(), &[4, 5], classes(&[4, 5]));
    assert!(
        m.contains("output [4, 5]") && m.contains("`cross_entropy`"),
        "{m}"
    );
    let m = refused(ce(), &[4, 3, 5], classes(&[4, 2]));
    assert!(m.contains("[4, 3, 5]") && m.contains("[4, 2]"), "{m}");
    let nll = Loss::Nll {
        weight: None,
        ignore_index: -100,
    };
    refused(nll, &[4], classes(&[4]));
    // What the checker promises passes: scores per class, and per token.
    let fits = [
        (ce(), values(&[4, 5]), classes(&[4])),
        (ce(), values(&[4, 3, 5]), classes(&[4, 3])),
        (
            Loss::BceWithLogits { pos_weight: None },
            values(&[4, 1]),
            classes(&[4]),
        ),
    ];
    for (loss, out, y) in fits {
        let l = objective(loss).loss(&out, &y).expect("shapes that fit");
        assert!(value(&l).is_finite(), "{l}");
    }
}
