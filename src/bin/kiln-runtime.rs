//! `kiln-runtime`: the part of Kiln that loads libtorch. `kiln` starts it for the commands that
//! need libtorch (`kiln run`, `kiln eval`, `kiln export`, `kiln generate`, `kiln predict`, `kiln env`), passing its arguments through.

use std::io::Write;

use clap::{Parser, Subcommand};

#[path = "../runtime/mod.rs"]
mod runtime;
#[cfg(test)]
#[path = "../../tests/support/toolkit.rs"]
mod toolkit;

/// Runs Kiln experiments on libtorch.
#[derive(Parser)]
#[command(name = "kiln", bin_name = "kiln", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train an experiment (every trial of its sweeps).
    Run(runtime::run::RunOptions),
    /// Print the libtorch version and the devices it sees.
    Env,
    /// Evaluate given weights on a split of an experiment's data, without training: a run's
    /// final weights or checkpoint (compressed, when the experiment compresses), a safetensors
    /// file or a `kiln export`.
    Eval(runtime::eval::EvalOptions),
    /// Write a run's model (compressed, when the experiment compresses) as safetensors with a
    /// manifest.
    Export(runtime::artifact::ExportOptions),
    /// Sample text (or token ids) from a causal language model a run trained.
    Generate(runtime::generate::GenerateOptions),
    /// Write a run's predictions for the samples of a file, as CSV or `.npy`.
    Predict(runtime::predict::PredictOptions),
}

fn main() {
    steady_allocations();
    std::panic::set_hook(Box::new(|info| {
        let _ = writeln!(
            std::io::stderr(),
            "error[K0005]: Kiln failed internally ({info}); please report it"
        );
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let code = match cli.command {
        Command::Run(options) => runtime::run::main(&options),
        Command::Env => env(),
        Command::Eval(options) => runtime::eval::eval_main(&options),
        Command::Export(options) => runtime::artifact::export_main(&options),
        Command::Generate(options) => runtime::generate::generate_main(&options),
        Command::Predict(options) => runtime::predict::predict_main(&options),
    };
    std::process::exit(code);
}

/// Keeps glibc's allocator from returning large blocks to the system between steps. By default
/// a block of 128 KiB or more is `mmap`ed and unmapped when freed, and the threshold moves with
/// what was freed last; a training step allocates and frees its activations and gradients
/// (hundreds of KiB to MiB each) every step, so that, depending on the order of allocations, they
/// are mapped afresh and fault their pages in every step (2-4% of a transformer's CPU time in
/// page faults; 13% more steps/s on `experiments/shakespeare_char.exp` with the threshold fixed).
/// Fixed at 256 MiB, with the heap trimmed only when 1 GiB at its top is free, the step's blocks
/// are reused from the heap. Larger blocks (a dataset, a checkpoint's buffers) are still mapped
/// and returned when freed.
fn steady_allocations() {
    // SAFETY: `mallopt` only sets the allocator's parameters, before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Prints the libtorch version and the devices it sees.
fn env() -> i32 {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "kiln       {}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(out, "libtorch   {}", env!("KILN_LIBTORCH_VERSION"));
    let _ = writeln!(out, "threads    {}", tch::get_num_threads());
    let cuda = tch::Cuda::is_available();
    let _ = writeln!(
        out,
        "cuda       {}",
        if cuda { "available" } else { "not available" }
    );
    if cuda {
        let _ = writeln!(out, "devices    {}", tch::Cuda::device_count());
        let _ = writeln!(out, "cudnn      {}", tch::Cuda::cudnn_is_available());
    }
    let backends = if runtime::dist::c10d::has_nccl() {
        "gloo, nccl"
    } else {
        "gloo"
    };
    let _ = writeln!(out, "c10d       {backends}");
    0
}
