//! A quantized linear's construction: the tensors and bytes it stores, which are what `kiln plan`
//! costs, and the misuse it refuses with an error.

use kiln::ir::Granularity;
use tch::{Device, Kind, Tensor};

use super::*;

#[test]
fn tensors_and_bytes_list_what_is_stored() {
    let (n, k) = (10, 250);
    let w = Tensor::randn([n, k], tch::kind::FLOAT_CPU);
    let b = Tensor::randn([n], tch::kind::FLOAT_CPU);
    // (method, stored tensors and their shapes, bytes).
    type Case = (QuantMethod, Vec<(&'static str, Vec<i64>)>, i64);
    let cases: Vec<Case> = vec![
        (
            QuantMethod::Int8WeightOnly {
                granularity: Granularity::PerChannel,
                symmetric: false,
                activations: Kind::BFloat16,
            },
            vec![
                ("weight_int8", vec![n, 256]),
                ("weight_scale", vec![n]),
                ("weight_zero_point", vec![n]),
                ("bias", vec![n]),
            ],
            n * 256 + 2 * n + 4 * n + 4 * n,
        ),
        (
            QuantMethod::Int8Dynamic {
                granularity: Granularity::PerTensor,
                symmetric: true,
            },
            vec![
                ("weight_int8_t", vec![k, n]),
                ("weight_scale", vec![n]),
                ("bias", vec![n]),
            ],
            k * n + 4 * n + 4 * n,
        ),
        (
            QuantMethod::Int4 {
                group_size: 64,
                activations: Kind::BFloat16,
            },
            vec![
                ("weight_int4_packed", vec![16, 128]),
                ("weight_scales_and_zeros", vec![4, 16, 2]),
                ("bias", vec![n]),
            ],
            16 * 128 + 4 * 16 * 2 * 2 + 4 * n,
        ),
        (
            QuantMethod::Fp8 {
                granularity: Granularity::PerChannel,
            },
            vec![
                ("weight_fp8", vec![16, 256]),
                ("weight_scale", vec![16, 1]),
                ("bias", vec![n]),
            ],
            16 * 256 + 4 * 16 + 4 * n,
        ),
        (
            QuantMethod::Cast { kind: Kind::Half },
            vec![("weight", vec![n, k]), ("bias", vec![n])],
            2 * n * k + 4 * n,
        ),
    ];
    for (method, names, bytes) in cases {
        let layer = QLinear::new(&w, Some(&b), method).expect("layer");
        let got: Vec<(String, Vec<i64>)> = layer
            .tensors()
            .iter()
            .map(|(s, t)| (s.clone(), t.size()))
            .collect();
        let want: Vec<(String, Vec<i64>)> =
            names.into_iter().map(|(s, v)| (s.to_string(), v)).collect();
        assert_eq!(got, want, "{method:?}");
        assert_eq!(layer.bytes(), bytes, "{method:?}");
        assert_eq!((layer.out_features(), layer.in_features()), (n, k));
    }
}

#[test]
fn stored_tensors_are_what_the_plan_costs() {
    use super::super::finalize::{conversion, Conversion};
    use kiln::ir::{Precision, QuantScheme};
    // `kiln plan` costs a quantized layer with `kiln::plan::stored`; the report counts the bytes
    // of what the kernels store. Every scheme, at sizes that need padding and sizes that do not,
    // with and without a bias, stores exactly the listed tensors.
    let schemes = [
        QuantScheme::Int8 {
            granularity: Granularity::PerTensor,
            symmetric: true,
            dynamic: false,
        },
        QuantScheme::Int8 {
            granularity: Granularity::PerChannel,
            symmetric: false,
            dynamic: false,
        },
        QuantScheme::Int8 {
            granularity: Granularity::PerTensor,
            symmetric: false,
            dynamic: true,
        },
        QuantScheme::Int8 {
            granularity: Granularity::PerChannel,
            symmetric: true,
            dynamic: true,
        },
        QuantScheme::Int4 { group_size: 32 },
        QuantScheme::Fp8 {
            granularity: Granularity::PerTensor,
        },
        QuantScheme::Fp8 {
            granularity: Granularity::PerChannel,
        },
        QuantScheme::Qat {
            granularity: Granularity::PerChannel,
        },
        QuantScheme::Cast {
            to: Precision::Bf16,
        },
        QuantScheme::Cast {
            to: Precision::Fp16,
        },
    ];
    // The CPU always; CUDA's layouts (other padding) where a GPU is present.
    let mut devices = vec![(Device::Cpu, kiln::ir::Device::Cpu)];
    if tch::Cuda::is_available() {
        devices.push((Device::Cuda(0), kiln::ir::Device::Cuda(0)));
    }
    for ((n, k), (device, on)) in [(10, 40), (33, 64), (64, 128)]
        .into_iter()
        .flat_map(|size| devices.iter().map(move |d| (size, *d)))
    {
        let w = Tensor::randn([n, k], (Kind::Float, device));
        let b = Tensor::randn([n], (Kind::Float, device));
        for bias in [true, false] {
            let b = bias.then_some(&b);
            for scheme in schemes {
                let layer = match conversion(scheme) {
                    Conversion::Kernel(method) => QLinear::new(&w, b, method),
                    Conversion::Observed(granularity) => {
                        let p = qparams(&w, granularity, QConfig::INT8_SYMMETRIC).expect("qparams");
                        QLinear::int8_static(&w, b, &p, 0.05)
                    }
                }
                .expect("layer");
                let got: Vec<(String, u64)> = layer
                    .tensors()
                    .iter()
                    .map(|(name, t)| {
                        let bytes = t.numel() * t.kind().elt_size_in_bytes();
                        (name.clone(), bytes as u64)
                    })
                    .collect();
                let want: Vec<(String, u64)> =
                    kiln::plan::stored::stored(&scheme, n as u64, k as u64, bias, on)
                        .into_iter()
                        .map(|s| (s.name.to_string(), s.bytes))
                        .collect();
                assert_eq!(got, want, "{scheme:?} at {n} x {k} on {on}, bias {bias}");
            }
        }
    }
}

#[test]
fn misuse_is_an_error_not_a_crash() {
    let w = Tensor::randn([16, 64], tch::kind::FLOAT_CPU);
    let int4 = |group_size| QuantMethod::Int4 {
        group_size,
        activations: Kind::BFloat16,
    };
    assert!(QLinear::new(&w, None, int4(48)).is_err(), "group size 48");
    assert!(QLinear::new(&w, None, QuantMethod::Cast { kind: Kind::Float }).is_err());
    let int8 = QuantMethod::Int8WeightOnly {
        granularity: Granularity::PerChannel,
        symmetric: true,
        activations: Kind::Int,
    };
    assert!(QLinear::new(&w, None, int8).is_err(), "int activations");
    let bias = Tensor::zeros([15], tch::kind::FLOAT_CPU);
    assert!(
        QLinear::new(&w, Some(&bias), int4(32)).is_err(),
        "bias shape"
    );
    let layer = QLinear::new(&w, None, int4(32)).expect("layer");
    assert!(layer
        .forward(&Tensor::zeros([2, 63], tch::kind::FLOAT_CPU))
        .is_err());
    assert!(layer
        .forward(&Tensor::zeros([2, 3, 64], tch::kind::FLOAT_CPU))
        .is_err());
    let quint8 = QConfig {
        dtype: QDtype::QUInt8,
        symmetric: false,
        reduce_range: false,
    };
    let p = qparams(&w, Granularity::PerChannel, quint8).expect("qparams");
    assert!(
        QLinear::int8_static(&w, None, &p, 0.1).is_err(),
        "quint8 weights"
    );
}
