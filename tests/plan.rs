//! Plan numbers of the examples, against values worked out by hand (the arithmetic is in the
//! comments; conventions in docs/language.md: 2 FLOPs per multiply-add in linear, convolution and
//! attention, 1 per output element elsewhere, pooling 1 per window element).

use std::path::Path;

use kiln::check::{check_path, FsLoader, Options};
use kiln::ir::Device;
use kiln::plan::{plan, Plan};

fn plan_of(file: &str) -> Plan {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let checked = check_path(&path, &FsLoader, &Options::default());
    assert!(
        !checked.has_errors(),
        "{file} has errors: {:#?}",
        checked.diagnostics
    );
    assert_eq!(checked.trials.len(), 1);
    plan(&checked.trials[0])
}

fn rows(p: &Plan) -> Vec<(&str, &str, Vec<i64>, u64, u64)> {
    p.layers
        .iter()
        .map(|l| {
            (
                l.name.as_str(),
                l.kind.as_str(),
                l.output.to_vec(),
                l.params,
                l.flops,
            )
        })
        .collect()
}

#[test]
fn flagship_mlp() {
    let p = plan_of("experiments/mnist_mlp.exp");
    assert_eq!(
        rows(&p),
        vec![
            // 784*256 + 256 = 200,960 params; 2*784*256 = 401,408 FLOPs.
            ("fc1", "linear", vec![256], 200_960, 401_408),
            ("1", "relu", vec![256], 0, 256),
            // 256*10 + 10 = 2,570 params; 2*256*10 = 5,120 FLOPs.
            ("fc2", "linear", vec![10], 2_570, 5_120),
        ]
    );
    let t = &p.totals;
    assert_eq!(t.params, 203_530);
    assert_eq!(t.forward_flops_per_sample, 401_408 + 256 + 5_120);
    // fp32 weights and gradients: 4 bytes each; Adam keeps two moments: 8 bytes per parameter.
    assert_eq!(t.weight_bytes, 814_120);
    assert_eq!(t.gradient_bytes, 814_120);
    assert_eq!(t.optimizer_bytes, 1_628_240);
    // Stored activations per sample: input 784 + 256 + 256 + 10 = 1,306 floats; batch 64.
    assert_eq!(t.activation_bytes, 1_306 * 64 * 4);
    // Forward + backward = 3x forward, for the batch of 64.
    assert_eq!(t.step_flops, 3 * 406_784 * 64);
    assert_eq!(p.devices.len(), 1);
    assert_eq!(p.devices[0].device, Device::Auto);
    // Gradients are unset between steps on one device: backward makes them as it frees the
    // activations. At its peak, reaching fc1, it holds the input (784 x 64 x 4 = 200,704 bytes)
    // and every gradient (814,120): 1,014,824, under the gradients plus the stored activations
    // (1,148,456). An evaluation batch of 64 holds, at its widest, the model's input and the
    // relu's input and output (784 + 256 + 256 = 1,296 values x 64 x 4 = 331,776 bytes), with
    // the gradients the last step left: 1,145,896, the larger.
    let d = &p.devices[0];
    assert_eq!(d.backward_peak_bytes, Some(200_704 + 814_120));
    assert_eq!(d.eval_activation_bytes, 331_776);
    assert_eq!(d.total_bytes, 814_120 + 1_628_240 + 814_120 + 331_776);
}

#[test]
fn mnist_cnn() {
    let p = plan_of("experiments/mnist_cnn.exp");
    assert_eq!(
        rows(&p),
        vec![
            // 16*1*3*3 + 16 = 160 params; 2*(1*9)*16*28*28 = 225,792 FLOPs.
            ("conv1", "conv2d", vec![16, 28, 28], 160, 225_792),
            ("1", "relu", vec![16, 28, 28], 0, 12_544),
            // 16*14*14 outputs, 4 window elements each.
            ("2", "max_pool2d", vec![16, 14, 14], 0, 12_544),
            // 32*16*9 + 32 = 4,640 params; 2*(16*9)*32*14*14 = 1,806,336 FLOPs.
            ("conv2", "conv2d", vec![32, 14, 14], 4_640, 1_806_336),
            ("4", "relu", vec![32, 14, 14], 0, 6_272),
            ("5", "max_pool2d", vec![32, 7, 7], 0, 6_272),
            ("6", "flatten", vec![1_568], 0, 0),
            // 1568*10 + 10 = 15,690 params; 2*1568*10 = 31,360 FLOPs.
            ("head", "linear", vec![10], 15_690, 31_360),
        ]
    );
    let t = &p.totals;
    assert_eq!(t.params, 160 + 4_640 + 15_690);
    assert_eq!(t.forward_flops_per_sample, 2_101_120);
    assert_eq!(t.optimizer_bytes, 8 * 20_490);
    // Activations: 784 + 12,544 + 12,544 + 3,136 + 6,272 + 6,272 + 1,568 + 1,568 + 10 = 44,698.
    assert_eq!(t.activation_bytes, 44_698 * 64 * 4);
    assert_eq!(t.step_flops, 3 * 2_101_120 * 64);
}

#[test]
fn sequence_transformer() {
    let p = plan_of("experiments/sequence_transformer.exp");
    // E = 64, S = 32, H = 256, 4 heads, 32 classes. Sinusoidal positions: no parameters, one
    // addition per element, S*E = 2,048.
    // Block params: attention 4E^2 + 4E = 16,640; two layernorms 4E = 256;
    // MLP E*H + H + H*E + E = 33,088; total 49,984.
    // Block FLOPs: projections 8*S*E^2 = 1,048,576; scores and mixing 4*S^2*E = 262,144;
    // MLP 4*S*E*H = 2,097,152; total 3,407,872.
    assert_eq!(
        rows(&p),
        vec![
            ("embed", "embedding", vec![32, 64], 16 * 64, 0),
            ("pos", "sinusoidal", vec![32, 64], 0, 2_048),
            (
                "encoder.layer1",
                "transformer_block",
                vec![32, 64],
                49_984,
                3_407_872
            ),
            (
                "encoder.layer2",
                "transformer_block",
                vec![32, 64],
                49_984,
                3_407_872
            ),
            ("norm", "layernorm", vec![32, 64], 128, 2_048),
            ("4", "mean", vec![64], 0, 2_048),
            ("head", "linear", vec![32], 64 * 32 + 32, 2 * 64 * 32),
        ]
    );
    let t = &p.totals;
    assert_eq!(t.params, 1_024 + 2 * 49_984 + 128 + 2_080);
    // AdamW: 8 bytes per parameter.
    assert_eq!(t.optimizer_bytes, 8 * 103_200);
    // bf16 activations (2 bytes): input 32 + 5 * 2,048 + 64 + 32 = 10,368 values per sample.
    assert_eq!(t.activation_bytes, 10_368 * 128 * 2);
    assert_eq!(
        t.step_flops,
        3 * (2 * 3_407_872 + 2_048 + 2_048 + 2_048 + 4_096) * 128
    );
}

#[test]
fn model_parallel_splits_memory_by_placement() {
    let p = plan_of("experiments/article_model_parallel.exp");
    let d: Vec<(Device, u64)> = p.devices.iter().map(|d| (d.device, d.params)).collect();
    assert_eq!(
        d,
        vec![(Device::Cuda(0), 200_960), (Device::Cuda(1), 2_570)]
    );
    // SGD with momentum keeps one buffer: 4 bytes per parameter.
    assert_eq!(p.devices[0].optimizer_bytes, 4 * 200_960);
    // cuda:0 stores the input and two [256] outputs per sample; cuda:1 the [10] logits.
    assert_eq!(p.devices[0].activation_bytes, (784 + 256 + 256) * 128 * 4);
    assert_eq!(p.devices[1].activation_bytes, 10 * 128 * 4);
}

#[test]
fn data_parallel_replicates_the_model_and_splits_the_batch() {
    let p = plan_of("experiments/article_data_parallel.exp");
    assert_eq!(p.micro_batch, 256 / 4);
    assert_eq!(p.devices.len(), 4);
    for d in &p.devices {
        // Plain SGD keeps no state, so every replica needs the same.
        assert_eq!(d.params, 7_850);
        assert_eq!(d.activation_bytes, (784 + 10) * 64 * 4);
        assert_eq!(d.optimizer_bytes, 0);
    }
}

#[test]
fn ddp_splits_the_batch_over_the_world() {
    let p = plan_of("experiments/article_ddp_nccl.exp");
    assert_eq!(p.micro_batch, 250);
    assert_eq!(p.devices.len(), 1);
    assert_eq!(p.devices[0].replicas, 4);
    assert_eq!(p.totals.params, 1_001_000);
    assert_eq!(p.devices[0].activation_bytes, 2_000 * 250 * 4);
}

#[test]
fn pipeline_stages_follow_blocks() {
    let p = plan_of("experiments/mnist_mlp_pipeline.exp");
    let d: Vec<(Device, u64)> = p.devices.iter().map(|d| (d.device, d.params)).collect();
    // Stage 1: 784*1024 + 1024; stage 2: 1024*1024 + 1024 + 1024*10 + 10.
    assert_eq!(
        d,
        vec![(Device::Cuda(0), 803_840), (Device::Cuda(1), 1_059_850)]
    );
    // 1F1B keeps min(stages, micro-batches) = 2 micro-batches of 256 / 8 = 32 in flight.
    assert_eq!(
        p.devices[0].activation_bytes,
        (784 + 3 * 1_024) * 32 * 2 * 4
    );
    assert_eq!(p.devices[0].capacity_bytes, Some(80 << 30));
}

#[test]
fn what_crosses_between_devices_each_step() {
    use kiln::plan::{AllReduce, Transfer};
    // Model parallel: relu's [256] output on cuda:0 feeds fc2 on cuda:1; batch 128, fp32:
    // 256 * 128 * 4 = 131,072 bytes forward (and as many of gradients back).
    let p = plan_of("experiments/article_model_parallel.exp");
    assert_eq!(
        p.communication.transfers,
        vec![Transfer {
            after: "act".into(),
            to_layer: "fc2".into(),
            from: Device::Cuda(0),
            to: Device::Cuda(1),
            bytes_per_step: 131_072,
        }]
    );
    assert_eq!(p.communication.allreduce, None);
    assert_eq!(p.communication.pipeline_bubble, None);

    // Pipeline of 2 stages, 8 micro-batches: stage 1 ends in a [1024] output, batch 256, fp32:
    // 1024 * 256 * 4 = 1 MiB; the bubble is (2 - 1) / (8 + 2 - 1) = 1/9.
    let p = plan_of("experiments/mnist_mlp_pipeline.exp");
    let t = &p.communication.transfers;
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!((t[0].from, t[0].to), (Device::Cuda(0), Device::Cuda(1)));
    assert_eq!(t[0].bytes_per_step, 1 << 20);
    let bubble = p.communication.pipeline_bubble.expect("a bubble");
    assert!((bubble - 1.0 / 9.0).abs() < 1e-12, "{bubble}");

    // DDP over 4 processes of a 1000 -> 1000 linear layer: 1,001,000 fp32 gradients,
    // 4,004,000 bytes; a ring moves 2 * 3/4 of them in and out of each rank: 6,006,000.
    let p = plan_of("experiments/article_ddp_nccl.exp");
    assert_eq!(
        p.communication.allreduce,
        Some(AllReduce {
            replicas: 4,
            bytes: 4_004_000,
            ring_bytes_per_replica: 6_006_000,
        })
    );
    assert!(p.communication.transfers.is_empty());
    let text = kiln::present::plan::to_text(&p);
    assert!(
        text.contains("all-reduce of 3.82 MiB of gradients over 4 replicas: each sends and receives 5.73 MiB (ring)"),
        "{text}"
    );

    // One device: nothing crosses, and the text has no communication section.
    let p = plan_of("experiments/mnist_mlp.exp");
    assert_eq!(p.communication, Default::default());
    assert!(!kiln::present::plan::to_text(&p).contains("communication"));
}

#[test]
fn pipeline_memory_per_stage() {
    // mnist_mlp_pipeline: 1F1B over 2 stages, 8 micro-batches of 256 / 8 = 32 samples, fp32,
    // Adam (8 bytes of state per parameter). Stage 0 keeps min(2 - 0, 8) = 2 micro-batches, stage
    // 1 keeps 1. Stage 0 stores the input 784 and fc1, relu, dropout: 784 + 3 * 1024 = 3,856
    // values a sample; stage 1 the activation it received (1,024) and fc2, relu, fc3:
    // 1,024 + 1,024 + 1,024 + 10 = 3,082. Evaluation runs the whole batch of 256 through each
    // stage without gradients, which the totals count instead: stage 0 holds the input and the
    // relu's input and output, 784 + 2 * 1,024 = 2,832 values a sample; stage 1 fc2's or its
    // relu's, 2,048.
    let p = plan_of("experiments/mnist_mlp_pipeline.exp");
    let names: Vec<(&str, &str)> = p
        .stages
        .iter()
        .map(|s| (s.first.as_str(), s.last.as_str()))
        .collect();
    assert_eq!(
        names,
        [("stage1.fc1", "stage1.2"), ("stage2.fc2", "stage2.fc3")]
    );
    let s: Vec<(u64, Device, u64, u64, u64, u64)> = p
        .stages
        .iter()
        .map(|s| {
            let m = &s.memory;
            (
                s.in_flight,
                m.device,
                m.params,
                m.optimizer_bytes,
                m.activation_bytes,
                m.total_bytes,
            )
        })
        .collect();
    assert_eq!(
        s,
        vec![
            (
                2,
                Device::Cuda(0),
                803_840,
                8 * 803_840,
                3_856 * 32 * 2 * 4,
                16 * 803_840 + 2_832 * 256 * 4
            ),
            (
                1,
                Device::Cuda(1),
                1_059_850,
                8 * 1_059_850,
                3_082 * 32 * 4,
                16 * 1_059_850 + 2_048 * 256 * 4
            ),
        ]
    );
    let text = kiln::present::plan::to_text(&p);
    assert!(
        text.contains("stage 1 (stage2.fc2 .. stage2.fc3) on cuda:1: 18.17 MiB"),
        "{text}"
    );

    // Three stages balanced by FLOPs (fc1 1,024 | relu 32, fc2 512 | fc3 64 per sample), batch
    // 32 in 4 micro-batches of 8, plain SGD (no state). Per sample, stage 0 keeps the input and
    // fc1 (16 + 32), stage 1 what it received, relu and fc2 (32 + 32 + 8), stage 2 what it
    // received and fc3 (8 + 4). GPipe keeps all 4 micro-batches on every stage; 1F1B 3, 2, 1.
    let exp = |schedule: &str| {
        format!(
            r#"experiment "three" {{
  data {{
    source synthetic(inputs: normal([16]), targets: randint(4), count: 320)
    batch 32
  }}
  model {{
    input [16]
    fc1: linear(32)
    relu
    fc2: linear(8)
    fc3: linear(4)
  }}
  device cuda
  parallel pipeline(stages: 3, micro_batches: 4, schedule: {schedule})
  optimizer sgd(lr: 0.1)
  train {{
    steps 10
    loss cross_entropy
  }}
}}
"#
        )
    };
    for (schedule, flight) in [("gpipe", [4, 4, 4]), ("1f1b", [3, 2, 1])] {
        let checked = kiln::check::check_text("three.exp", exp(schedule));
        assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
        let p = plan(&checked.trials[0]);
        let got: Vec<(Device, u64, u64, u64)> = p
            .stages
            .iter()
            .map(|s| {
                let m = &s.memory;
                (m.device, s.in_flight, m.activation_bytes, m.total_bytes)
            })
            .collect();
        // Weights and gradients: 4 + 4 bytes per parameter; stage 0 holds 16 * 32 + 32 = 544
        // parameters, stage 1 32 * 8 + 8 = 264, stage 2 8 * 4 + 4 = 36.
        let acts = [
            48 * 8 * flight[0] * 4,
            72 * 8 * flight[1] * 4,
            12 * 8 * flight[2] * 4,
        ];
        // Evaluation runs the whole batch of 32 through each stage without gradients: fc1's
        // input and output (16 + 32), relu's (32 + 32), fc3's (8 + 4); the totals count the
        // larger of the two.
        let eval = [48 * 32 * 4, 64 * 32 * 4, 12 * 32 * 4];
        let most = |i: usize| acts[i].max(eval[i]);
        assert_eq!(
            got,
            vec![
                (Device::Cuda(0), flight[0], acts[0], 8 * 544 + most(0)),
                (Device::Cuda(1), flight[1], acts[1], 8 * 264 + most(1)),
                (Device::Cuda(2), flight[2], acts[2], 8 * 36 + most(2)),
            ],
            "{schedule}"
        );
    }
}

#[test]
fn replicas_on_one_device_add_up() {
    // Three replicas of a 12 -> 16 -> 3 model with Adam: 12*16 + 16 + 16*3 + 3 = 259
    // parameters, 1,036 bytes of weights and as many of gradients on every replica; Adam's
    // two moments (2,072 bytes) only on replica 0, which trains. Batch 24 over 3 replicas:
    // slices of 8, activations (12 + 16 + 16 + 3) * 8 * 4 = 1,504 bytes per replica.
    let text = r#"
experiment "dp" {
  data {
    source synthetic(inputs: normal([12]), targets: randint(3), count: 96)
    batch 24
  }
  model {
    input [12]
    fc1: linear(16)
    tanh
    fc2: linear(3)
  }
  device cuda
  parallel data(devices: [cuda:0, cuda:0, cuda:2])
  optimizer adam(lr: 1e-3)
  train {
    epochs 1
    loss cross_entropy
  }
}
"#;
    let checked = kiln::check::check_text("dp.exp", text);
    assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
    let p = plan(&checked.trials[0]);
    assert_eq!(p.micro_batch, 8);
    let d: Vec<(Device, u64, u64, u64, u64, u64)> = p
        .devices
        .iter()
        .map(|d| {
            (
                d.device,
                d.weight_bytes,
                d.gradient_bytes,
                d.optimizer_bytes,
                d.activation_bytes,
                d.total_bytes,
            )
        })
        .collect();
    assert_eq!(
        d,
        vec![
            // Replica 0 also evaluates, the whole batch of 24 without gradients: the input and
            // the tanh's input and output, 12 + 16 + 16 = 44 values a sample, 4,224 bytes.
            (Device::Cuda(0), 2_072, 2_072, 2_072, 3_008, 6_216 + 4_224),
            (Device::Cuda(2), 1_036, 1_036, 0, 1_504, 3_576),
        ]
    );
    let text = kiln::present::plan::to_text(&p);
    assert!(
        text.contains("data over 3 replicas [cuda:0, cuda:0, cuda:2]"),
        "{text}"
    );
}

/// The compression rows of a plan: (layer, bytes before, bytes after).
fn compressed(p: &Plan) -> Vec<(&str, u64, u64)> {
    let c = p.compression.as_ref().expect("a compression section");
    c.layers
        .iter()
        .map(|l| (l.layer.as_str(), l.bytes_before, l.bytes_after))
        .collect()
}

#[test]
fn compression_bytes_before_and_after() {
    // Bytes after are those of the tensors the runtime stores (`plan::stored`), as the run's
    // report counts them. The article's 1000 -> 1000 linear: 1,001,000 fp32 parameters =
    // 4,004,000 bytes. Dynamic int8 per channel, symmetric, on the CPU: 1,000,000 bytes + 1,000
    // fp32 scales x 4 + the fp32 bias 1,000 x 4 = 1,008,000. Pruning 50% leaves the dense bytes
    // as they are.
    let p = plan_of("experiments/article_prune_quantize.exp");
    assert_eq!(compressed(&p), vec![("fc", 4_004_000, 1_008_000)]);
    let c = p.compression.as_ref().expect("compression");
    assert_eq!(c.layers[0].sparsity, Some(0.5));
    assert_eq!(c.model_bytes_after, 1_008_000);
    assert!((c.ratio - 4_004_000.0 / 1_008_000.0).abs() < 1e-12);

    // Weight-only int8 on the MLP (its scales in bf16, the kernel's input dtype): fc1 200,704 +
    // 256 x 2 + 256 x 4 = 202,240 (from 803,840); fc2 2,560 + 20 + 40 = 2,620 (from 10,280).
    // The model: 814,120 -> 204,860, 3.97x.
    let p = plan_of("experiments/mnist_mlp_int8.exp");
    assert_eq!(
        compressed(&p),
        vec![("fc1", 803_840, 202_240), ("fc2", 10_280, 2_620)]
    );
    let c = p.compression.as_ref().expect("compression");
    assert_eq!(
        (c.model_bytes_before, c.model_bytes_after),
        (814_120, 204_860)
    );
    assert!(c.ratio >= 3.9);

    // int4 on fc2 (10 x 256, groups of 128): the kernel packs 16 rows (10 padded), 16 x 256 / 2
    // = 2,048 bytes, and 2 groups x 16 rows x (bf16 scale + bf16 zero) = 128, bias 40: 2,216.
    let p = plan_of("experiments/mnist_mlp_int4.exp");
    assert_eq!(compressed(&p), vec![("fc2", 10_280, 2_216)]);

    // bf16 casts: 2 bytes a weight, the bias stays fp32.
    let p = plan_of("experiments/mnist_mlp_bf16_weights.exp");
    assert_eq!(
        compressed(&p),
        vec![("fc1", 803_840, 402_432), ("fc2", 10_280, 5_160)]
    );

    // Half of fc1's 256 units: 128 x 784 weights + 128 biases, fp32; fc2, which reads them,
    // loses the same 128 inputs: 10 x 128 weights + 10 biases.
    let p = plan_of("experiments/mnist_mlp_prune_structured.exp");
    assert_eq!(
        compressed(&p),
        vec![("fc1", 803_840, 401_920), ("fc2", 10_280, 5_160)]
    );
    let kept = p.compression.as_ref().expect("compression").layers[0]
        .kept
        .as_ref()
        .expect("kept units");
    assert_eq!(
        (kept.units, kept.of, kept.along),
        (128, 256, "output units")
    );
}

#[test]
fn compression_shows_schedules_in_words_in_text_and_yaml() {
    let p = plan_of("experiments/mnist_mlp_prune_gradual.exp");
    let text = kiln::present::plan::to_text(&p);
    assert!(
        text.contains("prune l1_unstructured 90%, gradual 0 -> 90% over steps 100..1000 every 50"),
        "{text}"
    );
    assert!(text.contains("90% sparse, dense bytes unchanged"), "{text}");
    let yaml = serde_yaml::to_string(&p).expect("yaml");
    assert!(
        yaml.contains("compression:\n  layers:\n  - layer: fc1\n"),
        "{yaml}"
    );
    assert!(yaml.contains("sparsity: 0.9"), "{yaml}");
    let p = plan_of("experiments/mnist_mlp_prune_iterative.exp");
    assert!(kiln::present::plan::to_text(&p)
        .contains("iterative, 3 rounds of 41.5% of the remaining weights, rewinding to step 125"));
    // Nothing compressed, no section.
    let p = plan_of("experiments/mnist_mlp.exp");
    assert!(p.compression.is_none());
    assert!(!kiln::present::plan::to_text(&p).contains("compression"));
    assert!(!serde_yaml::to_string(&p)
        .expect("yaml")
        .contains("compression"));
}

#[test]
fn the_layer_table_lines_up_whatever_its_widths() {
    // Fixed columns (kind 18, output 16, params 12 wide) were pushed out of line by long shapes
    // and counts: the head's 2,097,153,000 parameters are 13 characters.
    let text = "experiment \"wide\" {\n  data {\n    source synthetic(inputs: normal([3, 64, 64]), targets: randint(1000), count: 64)\n    batch 8\n  }\n  model {\n    input [3, 64, 64]\n    a_convolution_with_a_long_name: conv2d(512, 3, padding: 1)\n    flatten\n    head: linear(1000)\n  }\n  device cpu\n  optimizer sgd(lr: 0.1)\n  train {\n    steps 1\n    loss cross_entropy\n  }\n}\n";
    let checked = kiln::check::check_text("wide.exp", text);
    assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
    let out = kiln::present::plan::to_text(&plan(&checked.trials[0]));
    let lines: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("layer"))
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 4, "{out}");
    let device = lines[0].find("device").expect("device column");
    let params_end = lines[0].find("params").expect("params column") + "params".len();
    for l in &lines[1..] {
        assert_eq!(l.find("cpu"), Some(device), "{out}");
        assert!(
            l[..params_end].ends_with(|c: char| c.is_ascii_digit()),
            "{out}"
        );
    }
}
