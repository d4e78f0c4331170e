//! Running `kiln-runtime` for the tests of distributed runs (`ddp`, `fsdp`): a command without
//! a launcher's rank variables, a wait with a limit, and the processes a test left behind.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{root, s, text};

/// `kiln-runtime` with `args`, in the repository's root, without colour.
pub fn runtime(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln-runtime"));
    c.args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .env("OMP_NUM_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_USE_AGENT_STORE",
        "SLURM_PROCID",
        "SLURM_NTASKS",
    ] {
        c.env_remove(v);
    }
    c
}

/// Waits for `child`, failing after `limit`; returns its output and how long it took.
pub fn finish(child: Child, limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let id = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().expect("wait"));
    while !waiter.is_finished() {
        if started.elapsed() > limit {
            // SAFETY: the pid is our own child, not yet reaped (the waiter has not returned).
            unsafe { libc::kill(id as i32, libc::SIGKILL) };
            panic!("the process did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (waiter.join().expect("waiter"), started.elapsed())
}

/// The processes whose command line mentions `needle` (a unique scratch path).
pub fn processes_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

/// Asserts that no process of the test at `dir` is left.
pub fn none_left(dir: &Path) {
    // A process that just exited may not be reaped yet; give it a moment.
    let started = Instant::now();
    loop {
        let left = processes_with(s(dir));
        if left.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "processes left behind: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `kiln-runtime run exp` to the end in `run` (the launcher when the experiment is
/// distributed), asserting that it succeeds.
pub fn run_to_end(exp: &Path, run: &Path) {
    let child = runtime(&["run", s(exp), "--quiet", "--run-dir", s(run)])
        .spawn()
        .expect("start");
    let (out, _) = finish(child, Duration::from_secs(120));
    assert!(out.status.success(), "the run failed:\n{}", text(&out));
}

/// Starts the distributed run of `exp` by `kiln run` in `run`, kills rank `victim`'s process with
/// SIGKILL once rank 0 has written a checkpoint (training is under way), and waits for the
/// launcher (30 s at most): its output and how long it took to end after the kill.
pub fn kill_a_rank(exp: &Path, run: &Path, victim: usize) -> (Output, Duration) {
    let launcher = runtime(&["run", s(exp), "--run-dir", s(run)])
        .spawn()
        .expect("start");
    let launcher_pid = launcher.id();
    let started = Instant::now();
    while super::newest_checkpoint(run).is_none() {
        assert!(started.elapsed() < Duration::from_secs(60), "no checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
    let variable = format!("RANK={victim}");
    let pid = processes_with(s(exp))
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|e| e.split(|b| *b == 0).any(|v| v == variable.as_bytes()))
                && *pid != launcher_pid
        })
        .expect("the rank's process");
    // SAFETY: a process this test started (through the launcher), still running.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    finish(launcher, Duration::from_secs(30))
}
