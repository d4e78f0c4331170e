//! The command line: argument parsing, file discovery, output. The only place, with the language
//! server (`kiln::lsp::server`), that does IO.

mod commands;
mod fmt;
mod report;
mod runtime;

use std::io::Write;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use kiln::ir::Device;

/// Exit status: no errors.
pub const EXIT_OK: i32 = 0;
/// Exit status: the files have errors.
pub const EXIT_ERRORS: i32 = 1;
/// Exit status: wrong usage or unreadable input.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: a signal killed `kiln-runtime` (K0511).
pub const EXIT_KILLED: i32 = 3;

/// Declarative deep-learning experiments, checked before they run.
#[derive(Parser)]
#[command(name = "kiln", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check experiment files (or every `.exp` file under directories) and report problems.
    Check {
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<std::path::PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
        /// A device's memory, as `cuda:0=80GiB` (overrides the file's `memory` lines).
        #[arg(
            long = "device-memory",
            value_name = "DEVICE=SIZE",
            value_parser = commands::device_memory,
        )]
        device_memory: Vec<(Device, u64)>,
    },
    /// Print the static plan of an experiment: shapes, parameters, FLOPs and memory per device.
    Plan {
        /// The experiment file.
        path: std::path::PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
        format: PlanFormat,
        /// A device's memory, as `cuda:0=80GiB` (overrides the file's `memory` lines).
        #[arg(
            long = "device-memory",
            value_name = "DEVICE=SIZE",
            value_parser = commands::device_memory,
        )]
        device_memory: Vec<(Device, u64)>,
    },
    /// Rewrite experiment files (or every `.exp` file under directories) in the canonical layout.
    Fmt {
        /// Files or directories; `-` reads standard input and writes standard output.
        #[arg(required = true)]
        paths: Vec<std::path::PathBuf>,
        /// Write nothing: list the files that would change and exit with 1 if there are any.
        #[arg(long)]
        check: bool,
    },
    /// Train an experiment on libtorch (every trial of its sweeps); `kiln run --help` for options.
    #[command(disable_help_flag = true)]
    Run {
        /// The experiment file and options, passed to `kiln-runtime run`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Print the libtorch version and the devices it sees.
    Env,
    /// Evaluate given weights on a split without training: a run's final weights or checkpoint
    /// (compressed, when the experiment compresses) or a safetensors file; `kiln eval --help` for
    /// options.
    #[command(disable_help_flag = true)]
    Eval {
        /// The run directory or experiment file and options, passed to `kiln-runtime eval`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Write a run's model (compressed, when the experiment compresses) as safetensors with a
    /// manifest; `kiln export --help` for options.
    #[command(disable_help_flag = true)]
    Export {
        /// The run directory and options, passed to `kiln-runtime export`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Sample text (or token ids) from a causal language model a run trained; `kiln generate
    /// --help` for options.
    #[command(disable_help_flag = true)]
    Generate {
        /// The run directory and options, passed to `kiln-runtime generate`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Write a run's predictions (classes and probabilities, or values) for the samples of a
    /// file, as CSV or `.npy`; `kiln predict --help` for options.
    #[command(disable_help_flag = true)]
    Predict {
        /// The run directory and options, passed to `kiln-runtime predict`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Summarise a finished run from its directory (a sweep's directory: its trials, ranked).
    Report {
        /// The run directory, as `runs/<experiment>/<timestamp>`.
        run_dir: std::path::PathBuf,
        /// Show every epoch, not only the first and last ones of a long run.
        #[arg(long)]
        all: bool,
    },
    /// Serve the Language Server Protocol on stdin and stdout, for editors.
    Lsp,
    /// Compare two runs side by side: results, settings and the experiment lines that differ.
    Compare {
        /// The first run directory (A).
        run_a: std::path::PathBuf,
        /// The second run directory (B).
        run_b: std::path::PathBuf,
        /// Show every epoch, not only the first and last ones of a long run.
        #[arg(long)]
        all: bool,
    },
}

/// How `kiln check` prints diagnostics.
#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    /// miette reports, in colour on a terminal.
    Human,
    /// A JSON array with one object per diagnostic.
    Json,
}

/// How `kiln plan` prints the plan.
#[derive(Clone, Copy, ValueEnum)]
pub enum PlanFormat {
    /// A table.
    Text,
    /// YAML, one document per trial.
    Yaml,
}

/// Runs the command line and returns the exit status.
pub fn main() -> i32 {
    // Internal errors become diagnostics (see `commands::guarded`); keep backtraces off screen.
    std::panic::set_hook(Box::new(|_| {}));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
        }
    };
    if let Err(e) = validate(&cli.command) {
        let _ = e.print();
        return EXIT_USAGE;
    }
    let result = match cli.command {
        Command::Check {
            paths,
            format,
            device_memory,
        } => commands::check(&paths, format, &device_memory),
        Command::Plan {
            path,
            format,
            device_memory,
        } => commands::plan(&path, format, &device_memory),
        Command::Fmt { paths, check } => fmt::fmt(&paths, check),
        Command::Run { args } => runtime::runtime("run", &args),
        Command::Env => runtime::runtime("env", &[]),
        Command::Eval { args } => runtime::runtime("eval", &args),
        Command::Export { args } => runtime::runtime("export", &args),
        Command::Generate { args } => runtime::runtime("generate", &args),
        Command::Predict { args } => runtime::runtime("predict", &args),
        Command::Report { run_dir, all } => report::report(&run_dir, all),
        Command::Compare { run_a, run_b, all } => report::compare(&run_a, &run_b, all),
        Command::Lsp => kiln::lsp::server::run().map(|()| EXIT_OK),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            let _ = writeln!(std::io::stderr(), "error: {message}");
            EXIT_USAGE
        }
    }
}

/// What clap cannot check value by value: a device given twice to `--device-memory`.
fn validate(command: &Command) -> Result<(), clap::Error> {
    let (name, device_memory) = match command {
        Command::Check { device_memory, .. } => ("check", device_memory),
        Command::Plan { device_memory, .. } => ("plan", device_memory),
        _ => return Ok(()),
    };
    for (i, (device, _)) in device_memory.iter().enumerate() {
        if device_memory[..i].iter().any(|(d, _)| d == device) {
            let mut cli = Cli::command();
            // Built, so that the usage line reads `kiln check`, not `check`.
            cli.build();
            let sub = cli.find_subcommand(name).cloned();
            return Err(sub.unwrap_or(cli).error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("`--device-memory` names {device} twice; give each device once"),
            ));
        }
    }
    Ok(())
}
