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
    // What backward keeps, per sample in bytes: fc1 its input (the batch, 784 x 4 = 3,136, held
    // anyway), relu its output (256 x 4 = 1,024; fc2 keeps the same tensor), nothing of fc1's
    // output. Per layer, for the batch of 64: relu 65,536, the others 0.
    let kept: Vec<u64> = p.layers.iter().map(|l| l.activation_bytes).collect();
    assert_eq!(kept, vec![0, 1_024 * 64, 0]);
    // The widest moment, per sample: relu's backward, holding the batch (3,136), relu's output
    // (1,024), the gradient reaching it (1,024) and the one it makes (1,024): 6,208. (relu's
    // forward holds 3,136 + 1,024 + its input 1,024 = 5,184; the forward's end 3,136 + 1,024 +
    // the loss's output, log-softmax and gradient 3 x 40 = 4,280.)
    assert_eq!(t.activation_bytes, 6_208 * 64);
    // Forward + backward = 3x forward, for the batch of 64.
    assert_eq!(t.step_flops, 3 * 406_784 * 64);
    assert_eq!(p.devices.len(), 1);
    assert_eq!(p.devices[0].device, Device::Auto);
    // Gradients are unset between steps on one device: backward makes them as it frees the
    // activations. At its peak, reaching fc1, it holds the batch and the gradient reaching fc1
    // ((3,136 + 1,024) x 64 = 266,240 bytes) and every gradient (814,120): 1,080,360, under the
    // gradients plus the activations (1,211,432). An evaluation batch of 64 holds, at its
    // widest, the batch and relu's input and output ((3,136 + 2,048) x 64 = 331,776 bytes), with
    // the gradients the last step left: 1,145,896, the larger. The allocator's margin is the
    // largest tensor, the batch of 64: 200,704.
    let d = &p.devices[0];
    assert_eq!(d.backward_peak_bytes, Some(266_240 + 814_120));
    assert_eq!(d.eval_activation_bytes, 331_776);
    assert_eq!(d.allocator_margin_bytes, 200_704);
    assert_eq!(
        d.total_bytes,
        814_120 + 1_628_240 + 814_120 + 331_776 + 200_704
    );
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
    // Kept per sample, in bytes: each relu its output (12,544 and 6,272 values x 4: 50,176 and
    // 25,088), each pool its int64 indices (3,136 and 1,568 x 8: 25,088 and 12,544) and its
    // output, which conv2 and the head keep (12,544 and 6,272); the convolutions and the head
    // keep their inputs, made by others, and flatten is a view.
    let kept: Vec<u64> = p.layers.iter().map(|l| l.activation_bytes / 64).collect();
    assert_eq!(
        kept,
        vec![0, 50_176, 25_088 + 12_544, 0, 25_088, 12_544 + 6_272, 0, 0]
    );
    // The widest moment, per sample: conv2's backward, holding the batch (3,136), what relu1
    // and pool1 keep (87,808), the gradient reaching conv2 (25,088), the one it makes for pool1's
    // output (12,544) and its buffers of its input's and output's size (12,544 + 25,088):
    // 166,208.
    assert_eq!(t.activation_bytes, 166_208 * 64);
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
    // Kept per sample, bf16 with dropout 0.1 under `device auto` (counted as the CPU runs it),
    // T = S*E = 2,048 values, W = S*H = 8,192, scores 4 heads x 32 x 32 = 4,096, in bytes: the
    // sinusoids' fp32 output (T x 4 = 8,192), which layer1's first norm keeps. Each block: its
    // norms' statistics (2 x 32 rows x 2 x 4 = 512); the bf16 copies of its norms' fp32 outputs
    // that attention and the MLP's first linear read (2 x T x 2 = 8,192); the math path of
    // dropout on the attention weights in fp32 (queries, keys and values 3 x T x 4, softmax,
    // mask and dropped weights 3 x 4,096 x 4: 73,728); attention's output as the output
    // projection reads it (T x 2 = 4,096); dropout's bf16 masks after attention and after the
    // MLP (T x 2 x 2 = 8,192) and inside the MLP (W x 2 = 16,384); the fp32 residual sum the
    // second norm keeps (8,192); the MLP's first output, which gelu keeps, and its dropped
    // activation, which the second linear keeps (2 x W x 2 = 32,768); its own fp32 output,
    // which the next norm keeps (8,192): 160,256, and, per pass, the bf16 copies of its
    // weights but the norms' ((49,984 - 256) x 2 = 99,456). The final norm keeps its
    // statistics (256), the head the bf16 copy of the mean (128) and of its weights (4,160).
    let kept: Vec<u64> = p.layers.iter().map(|l| l.activation_bytes).collect();
    let block = 160_256 * 128 + 99_456;
    assert_eq!(
        kept,
        vec![
            0,
            8_192 * 128,
            block,
            block,
            256 * 128,
            0,
            128 * 128 + 4_160
        ]
    );
    // The widest moment comes on top of those (their sum, 42,326,336 bytes, and the batch's
    // ids, 32 x 8 x 128): a block's backward, with its gradients; `tests/memory.rs` measures
    // transformers against it.
    assert_eq!(t.activation_bytes, 44_927_232);
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
    // Per sample, in bytes: cuda:0 holds the batch (784 x 4 = 3,136) and relu's output (1,024),
    // and at relu's backward the gradient reaching it and the one it makes (1,024 each): 6,208.
    // cuda:1 keeps its copy of relu's output (1,024), and at fc2's backward the logits'
    // gradient (40) and the copy's (1,024): 2,088.
    assert_eq!(p.devices[0].activation_bytes, 6_208 * 128);
    assert_eq!(p.devices[1].activation_bytes, 2_088 * 128);
}

#[test]
fn data_parallel_replicates_the_model_and_splits_the_batch() {
    let p = plan_of("experiments/article_data_parallel.exp");
    assert_eq!(p.micro_batch, 256 / 4);
    assert_eq!(p.devices.len(), 4);
    for d in &p.devices {
        // Plain SGD keeps no state, so every replica needs the same.
        assert_eq!(d.params, 7_850);
        // Per sample: the batch (784 x 4 = 3,136) and, at the forward's end, the logits, their
        // log-softmax and gradient (3 x 40): 3,256, for a slice of 64.
        assert_eq!(d.activation_bytes, 3_256 * 64);
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
    // Per sample: the batch (1,000 x 4 bytes) and, at the forward's end, the output and its
    // gradient (mse keeps the output itself): 12,000 bytes, for a slice of 250.
    assert_eq!(p.devices[0].activation_bytes, 12_000 * 250);
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
    // 1F1B keeps min(stages, micro-batches) = 2 micro-batches of 256 / 8 = 32 in flight: see
    // `pipeline_memory_per_stage`.
    assert_eq!(p.devices[0].activation_bytes, 921_600);
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
    // mnist_mlp_pipeline: 1F1B over 2 stages, 8 micro-batches of 256 / 8 = 32 samples, fp32 on
    // CUDA, Adam (8 bytes of state per parameter). Stage 0 keeps min(2 - 0, 8) = 2 micro-batches,
    // stage 1 keeps 1. Per sample, in bytes: stage 0 receives the batch (3,136) and keeps relu's
    // output (4,096), dropout's boolean mask (1,024) and its output (4,096, which fc2 keeps):
    // 9,216; its widest moment is dropout's backward, 3,136 + 9,216 less its output (freed by
    // stage 1's backward) + the gradient reaching it and the one it makes (4,096 each): 16,448.
    // So 16,448 * 32 + (9,216 + 3,136) * 32 for the second micro-batch in flight = 921,600.
    // Stage 1 receives dropout's output (4,096) and keeps relu's output (4,096); at relu's
    // backward it also holds two gradients of 4,096: 16,384 * 32 = 524,288. Evaluation runs the
    // whole batch of 256 through each stage without gradients, which the totals count instead:
    // stage 0 holds the batch and relu's input and output, 3,136 + 8,192 = 11,328 bytes a
    // sample; stage 1 fc2's or its relu's, 8,192. Each stage's allocator margin is its largest
    // tensor, a [1024] activation of the evaluation's 256 samples: 1 MiB.
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
                921_600,
                16 * 803_840 + 11_328 * 256 + (1 << 20)
            ),
            (
                1,
                Device::Cuda(1),
                1_059_850,
                8 * 1_059_850,
                524_288,
                16 * 1_059_850 + 8_192 * 256 + (1 << 20)
            ),
        ]
    );
    let text = kiln::present::plan::to_text(&p);
    assert!(
        text.contains("stage 1 (stage2.fc2 .. stage2.fc3) on cuda:1: 19.17 MiB"),
        "{text}"
    );

    // Three stages balanced by FLOPs (fc1 1,024 | relu 32, fc2 512 | fc3 64 per sample), batch
    // 32 in 4 micro-batches of 8, plain SGD (no state). Per sample, in bytes: stage 0 receives
    // the batch (64) and keeps nothing of its own (fc1 keeps the batch), its widest moment the
    // batch and fc1's output or its gradient (128): 192. Stage 1 receives fc1's output (128),
    // keeps relu's output (128) and fc2's (32, which fc3 keeps): 160, its widest moment relu's
    // backward, 128 + 128 + two gradients of 128: 512. Stage 2 receives fc2's output (32) and
    // keeps nothing, its widest moment the forward's end, 32 + the logits, their log-softmax
    // and gradient (3 x 16): 80. Each micro-batch in flight after the first adds what the stage
    // received and keeps. GPipe keeps all 4 micro-batches on every stage; 1F1B 3, 2, 1.
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
            192 * 8 + 64 * 8 * (flight[0] - 1),
            512 * 8 + (160 + 128) * 8 * (flight[1] - 1),
            80 * 8 + 32 * 8 * (flight[2] - 1),
        ];
        // Evaluation runs the whole batch of 32 through each stage without gradients: the batch
        // and fc1's output (64 + 128), relu's input and output (128 + 128), fc3's (32 + 16); the
        // totals count the larger of the two, and an allocator margin of the largest tensor
        // (fc1's output for the batch of 32: 4,096).
        let eval = [192 * 32, 256 * 32, 48 * 32];
        let most = |i: usize| acts[i].max(eval[i]) + 4_096;
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
    // slices of 8. Per sample, in bytes: the batch (48) and tanh's output (64), and at tanh's
    // backward the gradient reaching it and the one it makes (64 each): 240, 1,920 bytes per
    // replica. Each device's allocator margin is its largest tensor: a [16] activation of the
    // evaluation batch of 24, 1,536 bytes.
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
            // Replica 0 also evaluates, the whole batch of 24 without gradients: the batch and
            // tanh's input and output, 48 + 64 + 64 = 176 bytes a sample, 4,224 bytes.
            (
                Device::Cuda(0),
                2_072,
                2_072,
                2_072,
                3_840,
                6_216 + 4_224 + 1_536
            ),
            (
                Device::Cuda(2),
                1_036,
                1_036,
                0,
                1_920,
                2_072 + 1_920 + 1_536
            ),
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
        .take_while(|l| !l.is_empty() && !l.starts_with("kept:"))
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
