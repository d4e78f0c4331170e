//! `kiln run` and `kiln env`: they run in `kiln-runtime`, which `kiln` starts, passes its stop
//! signals on to, and outlives. A runtime killed by a signal is reported as K0511.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use super::{EXIT_ERRORS, EXIT_KILLED};
use kiln::check::{check_path, FsLoader, Options};
use kiln::diagnostic::problem::{Death, KilledRun, Running};
use kiln::diagnostic::render::{self, Style};
use kiln::diagnostic::Problem;
use kiln::span::{FileId, Span};
use kiln::supervise::{self, Exit};

/// The options of `kiln run` that take a value, so the experiment file is told apart from it.
const VALUED: [&str; 8] = [
    "--device",
    "--resume",
    "--runs-dir",
    "--init",
    "--trial",
    "--run-dir",
    "--threads",
    "--max-steps",
];

/// Runs `kiln-runtime` (installed beside `kiln`) as `kiln-runtime COMMAND ARGS...`; returns its
/// exit status. The arguments pass through as the operating system gave them: a file name need
/// not be UTF-8.
pub fn runtime(command: &str, args: &[OsString]) -> Result<i32, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate kiln: {e}"))?;
    let runtime = exe.with_file_name("kiln-runtime");
    if !runtime.is_file() {
        return Err(format!(
            "`{}` is missing: it is built with kiln (`cargo build --release`) and must sit beside it",
            runtime.display()
        ));
    }
    // SIGINT, SIGTERM and SIGHUP reach the runtime, which checkpoints and exits; `kiln` waits.
    supervise::on_stop_signals(|_| {}).map_err(|e| format!("cannot watch for signals: {e}"))?;
    let list = RunDirs::create()?;
    let oom_before = supervise::oom_kills();
    let mut cmd = std::process::Command::new(&runtime);
    cmd.arg(command)
        .args(args)
        .env(supervise::RUN_DIRS_ENV, &list.0);
    let child = match supervise::spawn(&mut cmd) {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
            let _ = writeln!(std::io::stderr(), "error: {e}; the run did not start");
            return Ok(EXIT_ERRORS);
        }
        Err(e) => return Err(format!("cannot start `{}`: {e}", runtime.display())),
    };
    let exit = child
        .wait()
        .map_err(|e| format!("cannot wait for `{}`: {e}", runtime.display()))?;
    match (exit.code, exit.signal) {
        (Some(code), _) => Ok(code),
        (None, sig) => {
            let sig = sig.unwrap_or(libc::SIGKILL);
            let cause = cause(sig, &exit, oom_before);
            let file = (command == "run").then(|| experiment_file(args)).flatten();
            killed(file, sig, cause, &supervise::recorded_run_dirs(&list.0));
            Ok(EXIT_KILLED)
        }
    }
}

/// The temporary file where the runtime lists its run directories; removed when dropped.
struct RunDirs(PathBuf);

impl RunDirs {
    fn create() -> Result<RunDirs, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path =
            std::env::temp_dir().join(format!("kiln-run-dirs-{}-{nanos}", std::process::id()));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| format!("cannot create `{}`: {e}", path.display()))?;
        Ok(RunDirs(path))
    }
}

impl Drop for RunDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Why `sig` most likely killed the runtime. SIGKILL is the out-of-memory killer's when the
/// cgroup counted a kill meanwhile or the runtime's peak memory came near the limit.
fn cause(sig: i32, exit: &Exit, oom_before: Option<u64>) -> Death {
    match sig {
        libc::SIGKILL => {
            let limit = supervise::memory_limit();
            let counted =
                matches!((oom_before, supervise::oom_kills()), (Some(b), Some(a)) if a > b);
            let near = limit.is_some_and(|l| exit.peak_rss >= l / 10 * 9);
            if counted || near {
                Death::OutOfMemory {
                    peak: exit.peak_rss,
                    limit,
                }
            } else {
                Death::Killed
            }
        }
        libc::SIGXFSZ => Death::FileSize,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGABRT => Death::Crash,
        _ => Death::Other,
    }
}

/// The experiment file of `kiln run`'s arguments: the first that is neither an option nor an
/// option's value.
fn experiment_file(args: &[OsString]) -> Option<PathBuf> {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if VALUED.iter().any(|v| arg == v) {
            rest.next();
        } else if !arg.as_encoded_bytes().starts_with(b"-") {
            return Some(PathBuf::from(arg));
        }
    }
    None
}

/// Prints K0511 for a runtime that `sig` killed, pointing into the experiment file of a
/// `kiln run` when there is one.
fn killed(file: Option<PathBuf>, sig: i32, cause: Death, dirs: &[PathBuf]) {
    let signal = supervise::signal_name(sig);
    let runs: Vec<KilledRun> = dirs.iter().map(|d| killed_run(d)).collect();
    let mut err = std::io::stderr().lock();
    let checked = file.map(|f| (check_path(&f, &FsLoader, &Options::default()), f));
    let Some((checked, file)) = checked.filter(|(c, _)| !c.sources.is_empty()) else {
        let _ = writeln!(err, "error: `kiln-runtime` was killed by {signal}");
        return;
    };
    let span = checked
        .trials
        .first()
        .map_or(Span::new(FileId(0), 0, 0), |e| e.train.loss_span);
    let d = Problem::Running(Running::RuntimeKilled {
        span,
        signal,
        cause,
        file,
        runs,
    })
    .diagnostic();
    let style = Style {
        color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        width: 100,
    };
    let _ = writeln!(err, "{}", render::to_text(&d, &checked.sources, style));
}

/// A run directory of the killed runtime, with its newest checkpoint.
fn killed_run(dir: &Path) -> KilledRun {
    let trial = dir
        .file_name()
        .and_then(|n| n.to_str()?.strip_prefix("trial-")?.parse().ok());
    let checkpoint = kiln::rundir::checkpoint::latest(&dir.join(kiln::rundir::CHECKPOINTS))
        .map(|(side, tensors)| (side.position.step, tensors));
    KilledRun {
        dir: dir.to_path_buf(),
        trial,
        checkpoint,
    }
}
