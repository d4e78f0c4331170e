//! Observers, quantizers and quantized linears against PyTorch (the virtualenv's torch, through
//! `quant_reference.py`) and against their own dequantized references.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::toolkit::{python_command, scratch};
use kiln::ir::Granularity;
use tch::{Device, Kind, Tensor};

use super::*;

/// The bf16 tolerance on the relative L2 error. Both sides round `x` to bf16; the kernels then
/// round twice more at most (their bf16 output, and either the product before scaling or the
/// dequantized int4 weight), each time by at most 2^-9 of the value, so every element is within
/// 2^-8 (3.9e-3) of the reference. The affine int8 correction subtracts after that rounding and
/// can only be bounded statistically; it measures 1.2e-3 to 1.4e-3 here. A wrong result is off
/// by the order of the values themselves.
const BF16_RTOL: f64 = 4e-3;

/// The fp32 tolerance: the same products summed in another order.
const FP32_RTOL: f64 = 1e-5;

/// The observer configurations of `quant_reference.py`, by name.
fn configs() -> Vec<(String, QConfig)> {
    let mut out = Vec::new();
    for (d, dtype) in [("qint8", QDtype::QInt8), ("quint8", QDtype::QUInt8)] {
        for symmetric in [true, false] {
            for reduce_range in [false, true] {
                let name = format!(
                    "{d}_{}{}",
                    if symmetric { "sym" } else { "aff" },
                    if reduce_range { "_rr" } else { "" }
                );
                let config = QConfig {
                    dtype,
                    symmetric,
                    reduce_range,
                };
                out.push((name, config));
            }
        }
    }
    out
}

/// The inputs and PyTorch's results, computed once (one Python process) for every test here.
fn reference() -> (HashMap<String, Tensor>, HashMap<String, Tensor>) {
    static FILES: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    let (inputs, outputs) = FILES.get_or_init(|| {
        let dir = scratch("quant");
        // Rows scaled differently, one all zero, one positive, one negative.
        let w = Tensor::randn([30, 40], (Kind::Float, tch::Device::Cpu))
            * Tensor::rand([30, 1], (Kind::Float, tch::Device::Cpu))
            * 3.0;
        let _ = w.get(0).fill_(0.0);
        let _ = w.get(1).abs_();
        let _ = w.get(2).abs_().neg_();
        let mut tensors = vec![
            ("w".to_string(), w),
            (
                "w4".to_string(),
                Tensor::randn([20, 256], tch::kind::FLOAT_CPU),
            ),
        ];
        for i in 0..5 {
            let x = Tensor::randn([30, 40], tch::kind::FLOAT_CPU) * (i + 1) as f64 + i as f64;
            tensors.push((format!("obs.{i}"), x));
        }
        let (inputs, outputs) = (
            dir.join("inputs.safetensors"),
            dir.join("outputs.safetensors"),
        );
        Tensor::write_safetensors(&tensors, &inputs).expect("write the inputs");
        let script = dir.join("quant_reference.py");
        std::fs::write(&script, include_str!("quant_reference.py")).expect("write the script");
        let out = python_command("the quantization tests")
            .args(["-W", "ignore"])
            .arg(&script)
            .arg(&inputs)
            .arg(&outputs)
            .output()
            .expect("python starts");
        assert!(
            out.status.success(),
            "quant_reference.py failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (inputs, outputs)
    });
    let read = |p: &PathBuf| -> HashMap<String, Tensor> {
        Tensor::read_safetensors(p)
            .expect("read safetensors")
            .into_iter()
            .collect()
    };
    (read(inputs), read(outputs))
}

/// Same kind, same shape, same bits (NaN-free inputs). PyTorch runs in another process, yet
/// bit equality holds on any CPU: both sides are the same libtorch on the same machine, and what
/// is compared is made of operations that are exactly rounded whatever the kernel (minimum,
/// maximum, the four operations, rounding, clamping) or of the very same libtorch operators
/// (`fake_quantize_per_*_affine`) on the same bytes, in the same order as PyTorch's observers.
fn assert_identical(what: &str, ours: &Tensor, theirs: &Tensor) {
    assert_eq!(ours.kind(), theirs.kind(), "{what}: dtype");
    assert_eq!(ours.size(), theirs.size(), "{what}: shape");
    assert!(
        ours.equal(theirs),
        "{what}: values differ, largest difference {}",
        (ours.to_kind(Kind::Double) - theirs.to_kind(Kind::Double))
            .abs()
            .max()
            .double_value(&[])
    );
}

/// `|a - b|_2 / |b|_2`, in f64.
fn rel_l2(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    let (a, b) = (a.to_kind(Kind::Double), b.to_kind(Kind::Double));
    let diff = (&a - &b).norm().double_value(&[]);
    diff / b.norm().double_value(&[])
}

/// `x · wᵀ (+ b)` in f64, from the values of `x` after rounding to `kind`.
fn reference_linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, kind: Kind) -> Tensor {
    let x = x.to_kind(kind).to_kind(Kind::Double);
    let y = x.matmul(&w.to_kind(Kind::Double).tr());
    match b {
        Some(b) => y + b.to_kind(Kind::Double),
        None => y,
    }
}

#[test]
fn observers_quantizers_and_fake_quantization_equal_pytorch() {
    let (inputs, theirs) = reference();
    let w = &inputs["w"];
    for (name, config) in configs() {
        for (g, granularity) in [
            ("channel", Granularity::PerChannel),
            ("tensor", Granularity::PerTensor),
        ] {
            let key = format!("{g}_{name}");
            let Some(scale) = theirs.get(&format!("{key}.scale")) else {
                assert!(
                    qparams(w, granularity, config).is_err(),
                    "{key}: PyTorch refuses it, so must we"
                );
                continue;
            };
            let p = qparams(w, granularity, config).expect("qparams");
            assert_identical(&format!("{key} scale"), &p.scale, scale);
            let zp = &theirs[&format!("{key}.zero_point")];
            assert_identical(&format!("{key} zero point"), &p.zero_point, zp);
            let q = p.quantize(w).expect("quantize");
            assert_identical(&format!("{key} integers"), &q, &theirs[&format!("{key}.q")]);
            let fq = p.fake_quantize(w).expect("fake quantize");
            assert_identical(
                &format!("{key} fake quant"),
                &fq,
                &theirs[&format!("{key}.fq")],
            );
            // Dequantizing the integers gives the fake-quantized values, except where
            // `reduce_range` clamps fake quantization to the smaller range and quantization
            // to the dtype's.
            if !config.reduce_range {
                let dq = p.dequantize(&q).expect("dequantize");
                assert!(rel_l2(&dq, &fq) < 1e-7, "{key}: dequantized");
            }
        }
    }
}

#[test]
fn moving_average_observers_equal_pytorch() {
    let (inputs, theirs) = reference();
    for (name, config) in configs().into_iter().filter(|(_, c)| !c.reduce_range) {
        for (g, granularity) in [
            ("channel", Granularity::PerChannel),
            ("tensor", Granularity::PerTensor),
        ] {
            let channels =
                (granularity == Granularity::PerChannel).then(|| inputs["obs.0"].size()[0]);
            let (min, max) =
                MovingAverageObserver::empty(channels, Device::Cpu).expect("empty observer");
            let observer = MovingAverageObserver::new(config, granularity, min, max);
            assert!(observer.qparams().is_err(), "no qparams before observing");
            for i in 0..5 {
                observer
                    .observe(&inputs[&format!("obs.{i}")])
                    .expect("observe");
            }
            let p = observer.qparams().expect("qparams");
            let key = format!("moving_{g}_{name}");
            assert_identical(&key, &p.scale, &theirs[&format!("{key}.scale")]);
            assert_identical(&key, &p.zero_point, &theirs[&format!("{key}.zero_point")]);
        }
    }
}

#[test]
fn fake_quantization_passes_gradients_straight_through() {
    let w = Tensor::randn([8, 16], tch::kind::FLOAT_CPU);
    // A range fitted to half the values, so that some are clipped.
    let p = qparams(&(&w * 0.5), Granularity::PerTensor, QConfig::INT8_SYMMETRIC).expect("qp");
    let leaf = w.copy().set_requires_grad(true);
    p.fake_quantize(&leaf)
        .expect("fake quantize")
        .sum(Kind::Float)
        .backward();
    let s = p.scale.double_value(&[0]);
    let unclamped = (&w * (1.0 / s as f32 as f64)).round();
    let inside = unclamped.ge(-128.0).logical_and(&unclamped.le(127.0));
    let clipped = i64::try_from(inside.logical_not().sum(Kind::Int64)).expect("count");
    assert!(clipped > 0, "the test clips some values");
    assert_identical("gradient", &leaf.grad(), &inside.to_kind(Kind::Float));
}

/// torchao's int4 dequantized weight, with `K` zero-padded to a multiple of `gs` and sliced
/// back, and the scales and zeros rounded to `kind` (as torchao rounds them to its dtype).
fn torchao_int4(w: &Tensor, gs: i64, kind: Kind) -> Tensor {
    let (n, k) = w.size2().expect("2-D");
    let kp = (k + gs - 1) / gs * gs;
    let wp = w.constant_pad_nd([0, kp - k]).reshape([n, kp / gs, gs]);
    let (mn, mx) = (wp.amin([2], true), wp.amax([2], true));
    let round = |t: Tensor| t.to_kind(kind).to_kind(Kind::Float);
    let scale = round((mx - &mn).clamp_min(1e-6) / 15.0);
    let zero = round(mn + &scale * 8.0);
    let low = &zero - &scale * 8.0;
    let q = (wp - low).divide(&scale).round().clamp(0, 15);
    ((q - 8.0) * scale + zero).reshape([n, kp]).narrow(1, 0, k)
}

#[test]
fn int4_equals_torchao_dequantized_reference() {
    let (inputs, theirs) = reference();
    let w = &inputs["w4"];
    let x = Tensor::randn([5, 256], tch::kind::FLOAT_CPU);
    let b = Tensor::randn([20], tch::kind::FLOAT_CPU);
    for gs in [32, 64, 128, 256] {
        let method = QuantMethod::Int4 {
            group_size: gs,
            activations: Kind::Float,
        };
        let layer = QLinear::new(w, Some(&b), method).expect("int4 layer");
        let dq = &theirs[&format!("int4_g{gs}.dequantized")];
        let ours = layer.dequantized().expect("dequantized");
        assert!(rel_l2(&ours, dq) < 1e-7, "g{gs}: dequantized weight");
        let helper = torchao_int4(w, gs, Kind::Float);
        assert!(rel_l2(&helper, dq) < 1e-7, "g{gs}: test helper");
        // With bf16 activations the scales and zeros are bf16 values.
        let method = QuantMethod::Int4 {
            group_size: gs,
            activations: Kind::BFloat16,
        };
        let bf16 = QLinear::new(w, Some(&b), method).expect("bf16 int4 layer");
        let want = torchao_int4(w, gs, Kind::BFloat16);
        let got = bf16.dequantized().expect("dequantized");
        assert!(rel_l2(&got, &want) < 1e-7, "g{gs}: bf16 dequantized weight");
        let err = rel_l2(
            &layer.forward(&x).expect("forward"),
            &reference_linear(&x, dq, Some(&b), Kind::Float),
        );
        eprintln!("int4 g{gs} fp32 x: relative L2 error {err:.2e}");
        assert!(err < FP32_RTOL, "g{gs}: forward {err:.2e}");
    }
}

/// Every int8 weight-only variant.
fn int8_weight_only(activations: Kind) -> Vec<(String, QuantMethod)> {
    let mut out = Vec::new();
    for granularity in [Granularity::PerChannel, Granularity::PerTensor] {
        for symmetric in [true, false] {
            let method = QuantMethod::Int8WeightOnly {
                granularity,
                symmetric,
                activations,
            };
            out.push((format!("{granularity:?} symmetric={symmetric}"), method));
        }
    }
    out
}

#[test]
fn int8_weight_only_equals_its_dequantized_weight() {
    let w = Tensor::randn([48, 100], tch::kind::FLOAT_CPU) * 0.1 + 0.02;
    let b = Tensor::randn([48], tch::kind::FLOAT_CPU);
    let x = Tensor::randn([7, 100], tch::kind::FLOAT_CPU);
    // fp16 keeps 11 significant bits: two roundings of at most 2^-12 each.
    let kinds = [
        (Kind::Float, FP32_RTOL),
        (Kind::BFloat16, BF16_RTOL),
        (Kind::Half, 5e-4),
    ];
    for (kind, rtol) in kinds {
        for (name, method) in int8_weight_only(kind) {
            let layer = QLinear::new(&w, Some(&b), method).expect("layer");
            let dq = layer.dequantized().expect("dequantized");
            let err = rel_l2(
                &layer.forward(&x).expect("forward"),
                &reference_linear(&x, &dq, Some(&b), kind),
            );
            eprintln!("int8 weight-only {name} {kind:?} x: relative L2 error {err:.2e}");
            assert!(err < rtol, "{name} {kind:?}: {err:.2e}");
            if kind == Kind::Float {
                // The stored integers and scales are the observer's.
                let QuantMethod::Int8WeightOnly {
                    granularity,
                    symmetric,
                    ..
                } = method
                else {
                    unreachable!()
                };
                let config = QConfig {
                    symmetric,
                    ..QConfig::INT8_SYMMETRIC
                };
                let p = qparams(&w, granularity, config).expect("qparams");
                let want = p.dequantize(&p.quantize(&w).expect("q")).expect("dq");
                assert!(rel_l2(&dq, &want) < 1e-7, "{name}: dequantized weight");
            }
        }
    }
}

/// `x` `[m, k]` laid out three ways: contiguous, a transposed view, a view at element offset 1;
/// and in bf16 at an element offset.
fn layouts(m: i64, k: i64) -> Vec<(&'static str, Tensor)> {
    let x = Tensor::randn([m, k], tch::kind::FLOAT_CPU);
    let transposed = x.tr().contiguous().tr();
    let buffer = Tensor::zeros([m * k + 1], tch::kind::FLOAT_CPU);
    buffer.narrow(0, 1, m * k).copy_(&x.reshape([-1]));
    let offset = buffer.narrow(0, 1, m * k).view([m, k]);
    let bf16 = Tensor::zeros([m * k + 1], (Kind::BFloat16, tch::Device::Cpu));
    bf16.narrow(0, 1, m * k).copy_(&x.reshape([-1]));
    let bf16_offset = bf16.narrow(0, 1, m * k).view([m, k]);
    vec![
        ("contiguous", x),
        ("transposed view", transposed),
        ("offset view", offset),
        ("bf16 offset view", bf16_offset),
    ]
}

#[test]
fn packed_kernels_are_guarded_at_awkward_shapes() {
    let n = 40;
    let mut worst = [0.0f64; 2];
    for k in [784, 1000, 4096] {
        let w = Tensor::randn([n, k], tch::kind::FLOAT_CPU) / (k as f64).sqrt();
        let int8 = QuantMethod::Int8WeightOnly {
            granularity: Granularity::PerChannel,
            symmetric: true,
            activations: Kind::BFloat16,
        };
        let int8 = QLinear::new(&w, None, int8).expect("int8 layer");
        let int8_dq = int8.dequantized().expect("dequantized");
        let int4 = QuantMethod::Int4 {
            group_size: 128,
            activations: Kind::BFloat16,
        };
        let int4 = QLinear::new(&w, None, int4).expect("int4 layer");
        let int4_dq = torchao_int4(&w, 128, Kind::BFloat16);
        for m in [1, 2, 3, 256] {
            // Every layout holds the same values, so one reference serves them all.
            let xs = layouts(m, k);
            let layers = [("int8", &int8, &int8_dq), ("int4", &int4, &int4_dq)];
            for (i, (name, layer, dq)) in layers.into_iter().enumerate() {
                let want = reference_linear(&xs[0].1, dq, None, Kind::BFloat16);
                for (layout, x) in &xs {
                    let y = layer.forward(x).expect("forward");
                    assert_eq!(y.size(), [m, n]);
                    let err = rel_l2(&y, &want);
                    worst[i] = worst[i].max(err);
                    assert!(
                        err < BF16_RTOL,
                        "{name} K={k} M={m} {layout}: relative L2 error {err:.2e}"
                    );
                }
            }
        }
    }
    eprintln!(
        "bf16 x at K = 784, 1000, 4096: worst relative L2 error int8 {:.2e}, int4 {:.2e}",
        worst[0], worst[1]
    );
}

#[test]
fn int8_dynamic_equals_its_integer_reference() {
    let w = Tensor::randn([24, 70], tch::kind::FLOAT_CPU) * 0.1 - 0.03;
    let b = Tensor::randn([24], tch::kind::FLOAT_CPU);
    let x = Tensor::randn([9, 70], tch::kind::FLOAT_CPU);
    for granularity in [Granularity::PerChannel, Granularity::PerTensor] {
        for symmetric in [true, false] {
            let method = QuantMethod::Int8Dynamic {
                granularity,
                symmetric,
            };
            let layer = QLinear::new(&w, Some(&b), method).expect("layer");
            let config = QConfig {
                symmetric,
                ..QConfig::INT8_SYMMETRIC
            };
            let p = qparams(&w, granularity, config).expect("qparams");
            let q = p.quantize(&w).expect("q").to_kind(Kind::Int64);
            let zp = p
                .zero_point
                .to_kind(Kind::Int64)
                .expand([24], false)
                .unsqueeze(1);
            let sx = (x.abs().amax([1], true) / 127.5).clamp_min(EPS);
            let xq = x.divide(&sx).round().clamp(-128, 127).to_kind(Kind::Int64);
            let acc = xq.matmul(&(q - zp).tr());
            let scale = p.scale.expand([24], false).unsqueeze(0);
            let want = acc.to_kind(Kind::Float) * sx * scale + &b;
            let err = rel_l2(&layer.forward(&x).expect("forward"), &want);
            assert!(
                err < 1e-6,
                "{granularity:?} symmetric={symmetric}: {err:.2e}"
            );
        }
    }
}

#[test]
fn int8_static_equals_the_fake_quantized_forward() {
    let w = Tensor::randn([32, 1000], tch::kind::FLOAT_CPU) * 0.03;
    let b = Tensor::randn([32], tch::kind::FLOAT_CPU);
    let x = Tensor::randn([3, 1000], tch::kind::FLOAT_CPU);
    // The activation range comes from other batches, so that some of x is clipped.
    let (min, max) = MovingAverageObserver::empty(None, Device::Cpu).expect("empty observer");
    let act = MovingAverageObserver::new(QConfig::INT8_SYMMETRIC, Granularity::PerTensor, min, max);
    act.observe(&(&x * 0.8)).expect("observe");
    let a = act.qparams().expect("activation qparams");
    for granularity in [Granularity::PerChannel, Granularity::PerTensor] {
        let p = qparams(&w, granularity, QConfig::INT8_SYMMETRIC).expect("qparams");
        let sa = a.scale.double_value(&[0]);
        let layer = QLinear::int8_static(&w, Some(&b), &p, sa).expect("layer");
        let fq_x = a.fake_quantize(&x).expect("fake x");
        let fq_w = p.fake_quantize(&w).expect("fake w");
        let want = fq_x.matmul(&fq_w.tr()) + &b;
        let y = layer.forward(&x).expect("forward");
        let err = rel_l2(&y, &want);
        assert!(err < FP32_RTOL, "{granularity:?}: {err:.2e}");
        let names: Vec<String> = layer.tensors().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["weight_int8_t", "weight_scale", "activation_scale", "bias"],
            "{granularity:?}"
        );
    }
}

#[test]
fn fp8_equals_its_dequantized_reference() {
    let w = Tensor::randn([10, 100], tch::kind::FLOAT_CPU) * 0.1;
    let b = Tensor::randn([10], tch::kind::FLOAT_CPU);
    let x =
        Tensor::randn([5, 100], tch::kind::FLOAT_CPU) * Tensor::rand([5, 1], tch::kind::FLOAT_CPU);
    for granularity in [Granularity::PerTensor, Granularity::PerChannel] {
        let layer = QLinear::new(&w, Some(&b), QuantMethod::Fp8 { granularity }).expect("layer");
        let amax = match granularity {
            Granularity::PerTensor => x.abs().max(),
            Granularity::PerChannel => x.abs().amax([1], true),
        };
        let sx = (amax / 448.0).clamp_min(1e-12);
        let xq = (x
            .divide(&sx)
            .clamp(-448.0, 448.0)
            .to_kind(Kind::Float8e4m3fn)
            .to_kind(Kind::Float))
            * sx;
        let dq = layer.dequantized().expect("dequantized");
        let err = rel_l2(
            &layer.forward(&x).expect("forward"),
            &reference_linear(&xq, &dq, Some(&b), Kind::Float),
        );
        assert!(err < FP32_RTOL, "{granularity:?}: {err:.2e}");
        // e4m3 keeps 3 mantissa bits: the weight is within 2^-4 of itself.
        assert!(rel_l2(&dq, &w) < 0.0625, "{granularity:?}: weight error");
    }
}

#[test]
fn cast_layers_multiply_in_their_kind() {
    let w = Tensor::randn([12, 33], tch::kind::FLOAT_CPU);
    let b = Tensor::randn([12], tch::kind::FLOAT_CPU);
    let x = Tensor::randn([4, 33], tch::kind::FLOAT_CPU);
    for kind in [Kind::BFloat16, Kind::Half] {
        let layer = QLinear::new(&w, Some(&b), QuantMethod::Cast { kind }).expect("layer");
        let dq = layer.dequantized().expect("dequantized");
        assert!(dq.equal(&w.to_kind(kind).to_kind(Kind::Float)));
        let err = rel_l2(
            &layer.forward(&x).expect("forward"),
            &reference_linear(&x, &dq, Some(&b), kind),
        );
        assert!(err < BF16_RTOL, "{kind:?}: {err:.2e}");
    }
}
