//! The hand-written tch baseline of `bench/run.sh`: the models of `bench/{mlp,linear,cnn}.exp`
//! written directly against tch's `nn` module, trained with tch's Adam (libtorch's C++
//! `torch::optim::Adam`), on the CPU.
//!
//! ```text
//! cargo run --release --example tch_bench -- MODEL STEPS
//! ```
//!
//! `MODEL` is `mlp`, `linear` or `cnn`. Each step gathers a batch from a shuffled synthetic data
//! set with `index_select` (as Kiln's loader does), zeroes the gradients, runs forward, the loss,
//! backward and the Adam step, and reads the loss as an `f64` (as Kiln does, to catch NaN). Only
//! the loop is timed. Prints `steps_per_s <value>` and the number of libtorch threads (only the
//! latter with `STEPS` 0).

use std::time::Instant;

use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Reduction, Tensor};

struct Bench {
    net: Box<dyn Module>,
    inputs: Tensor,
    targets: Tensor,
    batch: i64,
    classes: bool,
}

fn build(model: &str, vs: &nn::Path) -> Bench {
    let opts = (Kind::Float, Device::Cpu);
    match model {
        "mlp" => Bench {
            net: Box::new(
                nn::seq()
                    .add(nn::linear(vs / "fc1", 784, 256, Default::default()))
                    .add_fn(|x| x.relu())
                    .add(nn::linear(vs / "fc2", 256, 10, Default::default())),
            ),
            inputs: Tensor::randn([10_000, 784], opts),
            targets: Tensor::randint(10, [10_000], (Kind::Int64, Device::Cpu)),
            batch: 100,
            classes: true,
        },
        "linear" => Bench {
            net: Box::new(nn::linear(vs / "fc", 1000, 1000, Default::default())),
            inputs: Tensor::randn([10_000, 1000], opts),
            targets: Tensor::randn([10_000, 1000], opts),
            batch: 1000,
            classes: false,
        },
        "cnn" => {
            let conv = nn::ConvConfig {
                padding: 1,
                ..Default::default()
            };
            Bench {
                net: Box::new(
                    nn::seq()
                        .add(nn::conv2d(vs / "conv1", 1, 16, 3, conv))
                        .add_fn(|x| x.relu().max_pool2d_default(2))
                        .add(nn::conv2d(vs / "conv2", 16, 32, 3, conv))
                        .add_fn(|x| x.relu().max_pool2d_default(2).flatten(1, -1))
                        .add(nn::linear(vs / "head", 32 * 7 * 7, 10, Default::default())),
                ),
                inputs: Tensor::randn([6_400, 1, 28, 28], opts),
                targets: Tensor::randint(10, [6_400], (Kind::Int64, Device::Cpu)),
                batch: 64,
                classes: true,
            }
        }
        other => {
            eprintln!("unknown model `{other}`: use mlp, linear or cnn");
            std::process::exit(2);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: tch_bench MODEL STEPS   (MODEL: mlp, linear or cnn)");
        std::process::exit(2);
    }
    let steps: i64 = args[2].parse().expect("STEPS must be a number");
    tch::manual_seed(0);
    let vs = nn::VarStore::new(Device::Cpu);
    let b = build(&args[1], &vs.root());
    let mut opt = nn::Adam::default().build(&vs, 1e-3).expect("Adam");
    let n = b.inputs.size()[0];
    let per_epoch = n / b.batch;

    let started = Instant::now();
    let mut perm = Tensor::randperm(n, (Kind::Int64, Device::Cpu));
    let mut last = 0.0;
    for step in 0..steps {
        let i = step % per_epoch;
        if i == 0 && step > 0 {
            perm = Tensor::randperm(n, (Kind::Int64, Device::Cpu));
        }
        let index = perm.narrow(0, i * b.batch, b.batch);
        let x = b.inputs.index_select(0, &index);
        let y = b.targets.index_select(0, &index);
        let out = b.net.forward(&x);
        let loss = if b.classes {
            out.cross_entropy_for_logits(&y)
        } else {
            out.mse_loss(&y, Reduction::Mean)
        };
        opt.backward_step(&loss);
        last = loss.double_value(&[]);
        assert!(
            last.is_finite(),
            "the loss became {last} at step {}",
            step + 1
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    println!("threads {}", tch::get_num_threads());
    if steps == 0 {
        return;
    }
    println!("final_loss {last}");
    println!("steps_per_s {}", steps as f64 / seconds);
}
