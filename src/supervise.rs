//! Supervising the processes that train: `kiln` starts `kiln-runtime`, which starts one
//! `kiln-runtime` per CPU sweep trial. The stop signals (SIGINT, SIGTERM, SIGHUP) a process
//! receives are passed on to its children; a child never outlives its parent (the kernel sends it
//! SIGTERM when the parent dies); a child's end is read with its peak memory, and the facts that
//! tell why a signal killed it (the cgroup's out-of-memory kills, the memory limit) are read here.
//! No libtorch: both binaries use it.

use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, ChildStdout, Command};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The signals that stop a run cleanly: Ctrl-C, `kill`, a closed terminal.
pub const STOP_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The environment variable naming a file to which `kiln-runtime` appends the path of every run
/// directory it opens, one a line; `kiln` reads it when the runtime dies.
pub const RUN_DIRS_ENV: &str = "KILN_RUN_DIRS_FILE";

/// The running supervised children of this process, by pid.
static CHILDREN: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// The first stop signal this process received (0 before any).
static STOPPING: AtomicI32 = AtomicI32::new(0);

fn children() -> MutexGuard<'static, Vec<i32>> {
    CHILDREN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Calls `f` with each stop signal this process receives, on a thread of its own, after passing
/// the signal on to every supervised child. Once a stop signal came, no new child starts.
pub fn on_stop_signals(f: impl Fn(i32) + Send + 'static) -> io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new(STOP_SIGNALS)?;
    std::thread::spawn(move || {
        for sig in signals.forever() {
            let _ = STOPPING.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
            for &pid in children().iter() {
                // SAFETY: `kill` has no memory effects; the pid is a child not yet reaped.
                unsafe { libc::kill(pid, sig) };
            }
            f(sig);
        }
    });
    Ok(())
}

/// Makes a write past the file-size limit (`ulimit -f`) fail with an error (EFBIG) that the
/// writer reports, instead of killing the process with SIGXFSZ. Children inherit it.
pub fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to "ignore" runs no code of ours in the handler.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
}

/// The name of a signal (`SIGTERM`), or `signal N` for one without a usual name.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// A child started by [`spawn`], until [`Supervised::wait`] reaps it.
#[derive(Debug)]
pub struct Supervised {
    pid: i32,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

/// How a supervised child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Its exit status, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// Its peak resident memory, in bytes.
    pub peak_rss: u64,
}

/// Starts `cmd` as a supervised child: the stop signals this process receives reach it, and the
/// kernel sends it SIGTERM when this process dies (also when it died while the child started).
/// The kernel watches the thread that calls `spawn`, so that thread must outlive the child (the
/// main thread, or a pool's thread that waits for it).
pub fn spawn(cmd: &mut Command) -> io::Result<Supervised> {
    let parent = std::process::id() as i32;
    // SAFETY: the closure only makes async-signal-safe system calls (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(io::Error::other(
                    "the parent exited before the child started",
                ));
            }
            Ok(())
        });
    }
    // The list stays locked while the child starts, so a signal arriving meanwhile reaches it.
    let mut running = children();
    let sig = STOPPING.load(Ordering::SeqCst);
    if sig != 0 {
        return Err(io::Error::new(
            io::ErrorKind::Interrupted,
            format!("stopping: {} was received", signal_name(sig)),
        ));
    }
    let mut child = cmd.spawn()?;
    let pid = child.id() as i32;
    running.push(pid);
    Ok(Supervised {
        pid,
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
    })
}

impl Supervised {
    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// The child's standard output, when it was piped (once).
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// The child's standard error, when it was piped (once).
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.stderr.take()
    }

    /// Waits for the child to end and reaps it.
    pub fn wait(self) -> io::Result<Exit> {
        // Wait without reaping first: the pid stays this child's until it is off the list, so a
        // forwarded signal never reaches a process that reused it.
        loop {
            // SAFETY: `info` is a plain C struct that waitid fills.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let flags = libc::WEXITED | libc::WNOWAIT;
            // SAFETY: `info` outlives the call.
            if unsafe { libc::waitid(libc::P_PID, self.pid as u32, &mut info, flags) } == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        children().retain(|&p| p != self.pid);
        let mut status = 0;
        // SAFETY: `usage` is a plain C struct that wait4 fills.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: `status` and `usage` outlive the call.
            if unsafe { libc::wait4(self.pid, &mut status, 0, &mut usage) } == self.pid {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(Exit {
            code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
            signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
            peak_rss: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
        })
    }
}

/// Sends `sig` to every supervised child still running (one not yet reaped: a child leaves the
/// list before it is reaped, under the same lock, so its pid cannot have been reused).
pub fn signal_children(sig: i32) {
    for &pid in children().iter() {
        // SAFETY: `kill` has no memory effects; the pid is a child not yet reaped.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Appends `dir` to the file named by [`RUN_DIRS_ENV`], when it is set; best effort, as the list
/// only serves the report of a runtime that dies. Each path is written as its bytes and ends
/// with a NUL, the one byte no path holds.
pub fn record_run_dir(dir: &Path) {
    let Some(list) = std::env::var_os(RUN_DIRS_ENV) else {
        return;
    };
    let mut entry = std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()).to_vec();
    entry.push(0);
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(list) {
        let _ = f.write_all(&entry);
    }
}

/// The run directories listed in `list`, in order, each once.
pub fn recorded_run_dirs(list: &Path) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = std::fs::read(list).unwrap_or_default();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for entry in bytes.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let dir = PathBuf::from(std::ffi::OsStr::from_bytes(entry));
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// This process's memory cgroup directory (cgroup v2, or v1's memory controller).
fn cgroup_dir() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let root = Path::new("/sys/fs/cgroup");
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            Some(root.join(rel))
        } else if controllers.split(',').any(|c| c == "memory") {
            Some(root.join("memory").join(rel))
        } else {
            None
        }
    })
}

/// The value of `key` in a file of `key value` lines.
fn keyed(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(char::is_whitespace)?;
        (k == key)
            .then(|| v.split_whitespace().next()?.parse().ok())
            .flatten()
    })
}

/// How many processes the kernel's out-of-memory killer has killed in this process's memory
/// cgroup, when the cgroup counts them.
pub fn oom_kills() -> Option<u64> {
    let dir = cgroup_dir()?;
    keyed(&dir.join("memory.events"), "oom_kill")
        .or_else(|| keyed(&dir.join("memory.oom_control"), "oom_kill"))
}

/// The memory this process's children can use: the cgroup's limit, or the machine's memory.
pub fn memory_limit() -> Option<u64> {
    let total = keyed(Path::new("/proc/meminfo"), "MemTotal:").map(|kib| kib * 1024);
    let cgroup = cgroup_dir().and_then(|dir| {
        ["memory.max", "memory.limit_in_bytes"]
            .iter()
            .find_map(|f| {
                std::fs::read_to_string(dir.join(f))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            })
    });
    match (cgroup, total) {
        (Some(c), Some(t)) => Some(u64::min(c, t)),
        (c, t) => c.or(t),
    }
}
