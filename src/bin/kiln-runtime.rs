//! `kiln-runtime`: the part of Kiln that loads libtorch. `kiln` starts it for the commands that
//! need libtorch (`kiln run`, `kiln env`), passing its arguments through.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[path = "../runtime/mod.rs"]
mod runtime;

/// Runs Kiln experiments on libtorch.
#[derive(Parser)]
#[command(name = "kiln", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train an experiment (every trial of its sweeps).
    Run {
        /// The experiment file.
        path: PathBuf,
        /// Put every layer on this device (`cpu`, `cuda`, `cuda:N`), overriding placements.
        #[arg(long)]
        device: Option<String>,
        /// No progress output.
        #[arg(long)]
        quiet: bool,
        /// Continue the run in this directory from its last checkpoint.
        #[arg(long, value_name = "RUN_DIR")]
        resume: Option<PathBuf>,
        /// Where run directories are created.
        #[arg(long, default_value = "runs")]
        runs_dir: PathBuf,
        /// Initial weights: a safetensors file with PyTorch `state_dict` names (`fc1.weight`).
        #[arg(long, value_name = "SAFETENSORS")]
        init: Option<PathBuf>,
        /// Run only this trial of a sweep (1-based).
        #[arg(long, value_name = "K")]
        trial: Option<usize>,
        /// Create the run in exactly this directory.
        #[arg(long, value_name = "DIR")]
        run_dir: Option<PathBuf>,
        /// libtorch's intra-op threads.
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
        /// Stop after this many optimizer steps (a smoke test); the schedule keeps its length.
        #[arg(long, value_name = "N")]
        max_steps: Option<u64>,
    },
    /// Print the libtorch version and the devices it sees.
    Env,
}

fn main() {
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
        Command::Run {
            path,
            device,
            quiet,
            resume,
            runs_dir,
            init,
            trial,
            run_dir,
            threads,
            max_steps,
        } => {
            let device = match device.as_deref().map(parse_device).transpose() {
                Ok(d) => d,
                Err(message) => {
                    let _ = writeln!(std::io::stderr(), "error: {message}");
                    std::process::exit(2);
                }
            };
            runtime::run::main(&runtime::run::RunOptions {
                file: path,
                device,
                quiet,
                resume,
                runs_dir,
                init,
                trial,
                run_dir,
                threads,
                max_steps,
            })
        }
        Command::Env => env(),
    };
    std::process::exit(code);
}

fn parse_device(text: &str) -> Result<kiln::plan::Device, String> {
    match text {
        "cpu" => Ok(kiln::plan::Device::Cpu),
        "cuda" => Ok(kiln::plan::Device::Cuda(0)),
        "auto" => Ok(kiln::plan::Device::Auto),
        other => other
            .strip_prefix("cuda:")
            .and_then(|i| i.parse().ok())
            .map(kiln::plan::Device::Cuda)
            .ok_or_else(|| format!("`--device {other}`: expected cpu, cuda, cuda:N or auto")),
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
    0
}
