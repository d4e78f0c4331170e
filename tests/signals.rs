//! Signals and process death, with real processes and real signals: SIGTERM to `kiln`, SIGKILL
//! to `kiln-runtime`, a file-size limit during a checkpoint write, and `kiln` killed outright.
//! Each ends in a diagnostic naming the cause, leaves no process behind and keeps an intact
//! checkpoint from which `--resume` reaches the metrics of an uninterrupted run.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::{checkpoint_intact, metrics, same_computation};

/// A small experiment whose checkpoints (about 230 kB: weights and AdamW's state) are much
/// larger than its step records, checkpointing every 20 steps.
const EXPERIMENT: &str = r#"
experiment "signals" {
  seed 5
  data {
    source synthetic(inputs: normal([32]), targets: randint(4), count: 2000)
    split(train: 0.8, val: 0.2)
    batch 32
  }
  model {
    input [32]
    fc1: linear(512)
    relu
    dropout(0.2)
    fc2: linear(4)
  }
  device cpu
  optimizer adamw(lr: 3e-3)
  schedule cosine(warmup: 20 steps)
  train {
    steps 300
    loss cross_entropy
    metrics [accuracy]
    eval_every 100 steps
    checkpoint(every: 20 steps, keep: 2)
  }
}
"#;

/// The experiment file and the run directory, relative to the scratch directory where `kiln`
/// runs (short paths keep the wrapped help lines whole).
const EXP: &str = "signals.exp";
const RUN: &str = "run";

/// A fresh scratch directory for one test, holding the experiment file.
fn scratch(name: &str) -> PathBuf {
    scratch_with(name, EXPERIMENT)
}

/// A fresh scratch directory for one test, holding `experiment` as the experiment file.
fn scratch_with(name: &str, experiment: &str) -> PathBuf {
    let dir = support::scratch(name);
    std::fs::write(dir.join(EXP), experiment).expect("experiment");
    dir
}

/// `kiln ARGS` in the scratch directory `dir`, on one CPU thread: two runs on two threads were
/// seen to differ in the last bit of a loss on a loaded machine (README, "Reproducibility").
fn kiln(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .envs(support::parity::SINGLE_THREADED);
    c
}

/// Starts `kiln run signals.exp --quiet --run-dir run` in `dir`, its output captured.
fn start(dir: &Path) -> Child {
    kiln(dir, &["run", EXP, "--quiet", "--run-dir", RUN])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kiln starts")
}

/// The output with its lines joined (the help is wrapped to the terminal's width).
fn text(o: &Output) -> String {
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    all.split_whitespace()
        .filter(|w| *w != "│")
        .collect::<Vec<_>>()
        .join(" ")
}

/// The metrics of one uninterrupted run of the experiment, shared by the tests.
fn uninterrupted() -> &'static [serde_json::Value] {
    static WHOLE: OnceLock<Vec<serde_json::Value>> = OnceLock::new();
    WHOLE.get_or_init(|| {
        let dir = scratch("whole");
        let o = kiln(&dir, &["run", EXP, "--quiet", "--run-dir", RUN])
            .output()
            .expect("kiln starts");
        assert!(o.status.success(), "{}", text(&o));
        metrics(&dir.join(RUN))
    })
}

/// Resumes the run of the scratch directory `dir` to its end and checks that it reaches the
/// uninterrupted run's metrics.
fn resumes_to_the_same_metrics(dir: &Path) {
    let o = kiln(dir, &["run", EXP, "--quiet", "--resume", RUN])
        .output()
        .expect("kiln starts");
    assert!(o.status.success(), "{}", text(&o));
    // A resume restores every tensor, generator and position exactly: the same computation.
    same_computation(
        metrics(&dir.join(RUN)).as_slice(),
        uninterrupted(),
        "resumed metrics",
    );
}

/// The child processes of `pid` now.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The one child process of `pid`, once it has started.
fn child_of(pid: u32) -> u32 {
    let start = Instant::now();
    loop {
        if let [child] = children(pid)[..] {
            return child;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no child of {pid}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether process `pid` exists and has not ended (a zombie has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
        state != Some(Some('Z'))
    })
}

/// Checks that every process of `pids` ends within `limit`; kills those left before failing.
fn ended_within(pids: &[u32], limit: Duration, what: &str) {
    let start = Instant::now();
    while pids.iter().any(|&p| alive(p)) && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &left {
        // SAFETY: `kill` only sends a signal.
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "{what}: {left:?} still running");
}

/// Waits for the first checkpoint's sidecar (written last) in the run directory `dir`.
fn first_checkpoint(dir: &Path) {
    let start = Instant::now();
    loop {
        let written = std::fs::read_dir(dir.join("checkpoints")).map(|d| {
            d.filter_map(Result::ok)
                .any(|e| e.file_name().to_string_lossy().ends_with(".yaml"))
        });
        if written.unwrap_or(false) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits for `kiln` to exit, at most two minutes; past that, kills it and `others` and fails.
fn finish(child: Child, others: &[u32]) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(o) => o.expect("kiln exits"),
        Err(_) => {
            for p in others.iter().chain([&pid]) {
                // SAFETY: `kill` only sends a signal.
                unsafe { libc::kill(*p as i32, libc::SIGKILL) };
            }
            panic!("kiln did not exit within two minutes");
        }
    }
}

/// Sends `sig` to process `pid`.
fn signal(pid: u32, sig: i32) {
    // SAFETY: `kill` only sends a signal.
    let r = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(r, 0, "kill {pid}: {}", std::io::Error::last_os_error());
}

#[test]
fn sigterm_to_kiln_checkpoints_and_resumes_to_the_same_metrics() {
    let dir = scratch("sigterm");
    let d = dir.join(RUN);
    let child = start(&dir);
    let runtime = child_of(child.id());
    first_checkpoint(&d);
    signal(child.id(), libc::SIGTERM);
    let o = finish(child, &[runtime]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("K0506(interrupted)"), "{t}");
    assert!(t.contains("interrupted by SIGTERM at step"), "{t}");
    assert!(
        t.contains("resume with `kiln run signals.exp --resume run`"),
        "{t}"
    );
    assert!(!alive(runtime), "kiln-runtime outlived kiln");
    let (step, _) = checkpoint_intact(&d);
    assert!((20..300).contains(&step), "checkpoint at step {step}");
    resumes_to_the_same_metrics(&dir);
}

#[test]
fn more_signals_while_stopping_change_nothing() {
    let dir = scratch("repeated");
    let d = dir.join(RUN);
    let child = start(&dir);
    let runtime = child_of(child.id());
    first_checkpoint(&d);
    signal(child.id(), libc::SIGTERM);
    for sig in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM] {
        std::thread::sleep(Duration::from_millis(20));
        signal(child.id(), sig);
        if alive(runtime) {
            // The runtime may end between the check and the signal; then nothing is sent.
            // SAFETY: `kill` only sends a signal.
            unsafe { libc::kill(runtime as i32, sig) };
        }
    }
    let o = finish(child, &[runtime]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert_eq!(t.matches("K0506(interrupted)").count(), 1, "{t}");
    assert!(!t.contains("K0509") && !t.contains("K0511"), "{t}");
    checkpoint_intact(&d);
    resumes_to_the_same_metrics(&dir);
}

#[test]
fn sigkill_to_the_runtime_is_reported_with_the_checkpoint_and_resumes() {
    let dir = scratch("sigkill");
    let d = dir.join(RUN);
    let child = start(&dir);
    let runtime = child_of(child.id());
    first_checkpoint(&d);
    signal(runtime, libc::SIGKILL);
    let o = finish(child, &[runtime]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("K0511(runtime-killed)"), "{t}");
    assert!(t.contains("`kiln-runtime` was killed by SIGKILL"), "{t}");
    assert!(t.contains("another process killed it"), "{t}");
    assert!(
        t.contains("╭─[signals.exp:21:5]"),
        "points at the loss: {t}"
    );
    let (step, _) = checkpoint_intact(&d);
    // A path may be wrapped after a slash.
    assert!(
        t.replace("/ ", "/").contains(&format!(
            "the last checkpoint, `run/checkpoints/step-{step:09}.safetensors` (step {step}), is kept"
        )),
        "names the checkpoint: {t}"
    );
    assert!(
        t.contains("resume with `kiln run signals.exp --resume run`"),
        "names the resume command: {t}"
    );
    resumes_to_the_same_metrics(&dir);
}

#[test]
fn a_file_size_limit_during_a_checkpoint_write_is_named_and_the_run_resumes() {
    let dir = scratch("fsize");
    let d = dir.join(RUN);
    let child = start(&dir);
    let runtime = child_of(child.id());
    first_checkpoint(&d);
    let (first, size) = checkpoint_intact(&d);
    // Below the checkpoint's size, far above the step records', so the next checkpoint fails.
    let limit = libc::rlimit {
        rlim_cur: size / 2,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: prlimit reads `limit` and writes nothing back (null old limit).
    let r = unsafe {
        libc::prlimit(
            runtime as i32,
            libc::RLIMIT_FSIZE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    let o = finish(child, &[runtime]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("K0509(run-io)"), "{t}");
    assert!(t.contains("File too large"), "{t}");
    assert!(t.contains("file-size limit (`ulimit -f`)"), "{t}");
    assert!(t.contains("while checkpointing"), "{t}");
    assert!(!alive(runtime), "kiln-runtime outlived kiln");
    assert_eq!(
        checkpoint_intact(&d).0,
        first,
        "the first checkpoint is kept"
    );
    resumes_to_the_same_metrics(&dir);
}

#[test]
fn killing_kiln_leaves_no_runtime_behind() {
    // A run far too long to end by itself while the test waits.
    let dir = scratch_with("orphan", &EXPERIMENT.replace("steps 300", "steps 100000"));
    let d = dir.join(RUN);
    let mut child = start(&dir);
    let runtime = child_of(child.id());
    first_checkpoint(&d);
    child.kill().expect("SIGKILL to kiln");
    child.wait().expect("reaped");
    // A killed `kiln` cannot remove its list of run directories; the test does.
    let list = format!("kiln-run-dirs-{}-", child.id());
    for entry in std::fs::read_dir(std::env::temp_dir())
        .expect("temp dir")
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with(&list) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    ended_within(
        &[runtime],
        Duration::from_secs(10),
        "kiln-runtime outlived kiln",
    );
    checkpoint_intact(&d);
}

/// A sweep of two trials, each in its own `kiln-runtime` process, too long to end by itself.
fn sweep(name: &str) -> PathBuf {
    scratch_with(
        name,
        &EXPERIMENT
            .replace("steps 300", "steps 100000")
            .replace("adamw(lr: 3e-3)", "adamw(lr: sweep [3e-3, 1e-3])"),
    )
}

/// The trials that run at once: as many as there are cores, up to the sweep's two.
fn concurrent_trials() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

/// The trial processes the runtime `pid` started, once each trial running has written a
/// checkpoint.
fn trials_of(pid: u32, dir: &Path) -> Vec<u32> {
    let start = Instant::now();
    loop {
        let checkpointed = std::fs::read_dir(dir.join("runs/signals"))
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|stamp| std::fs::read_dir(stamp.path()).into_iter().flatten())
            .flatten()
            .filter(|trial| {
                std::fs::read_dir(trial.path().join("checkpoints")).is_ok_and(|mut c| {
                    c.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".yaml")))
                })
            })
            .count();
        if checkpointed == concurrent_trials() {
            return children(pid);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the trials did not checkpoint"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sigterm_to_kiln_stops_every_trial_of_a_sweep() {
    let dir = sweep("sweep-sigterm");
    let child = kiln(&dir, &["run", EXP, "--quiet", "--runs-dir", "runs"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kiln starts");
    let runtime = child_of(child.id());
    let trials = trials_of(runtime, &dir);
    assert!(!trials.is_empty());
    signal(child.id(), libc::SIGTERM);
    let o = finish(child, &[&[runtime], &trials[..]].concat());
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert_eq!(
        t.matches("interrupted by SIGTERM at step").count(),
        concurrent_trials(),
        "{t}"
    );
    for pid in trials.iter().chain([&runtime]) {
        assert!(!alive(*pid), "process {pid} outlived kiln: {t}");
    }
}

#[test]
fn a_killed_sweep_runtime_takes_its_trials_along_and_names_each_checkpoint() {
    let dir = sweep("sweep-sigkill");
    let child = kiln(&dir, &["run", EXP, "--quiet", "--runs-dir", "runs"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kiln starts");
    let runtime = child_of(child.id());
    let trials = trials_of(runtime, &dir);
    signal(runtime, libc::SIGKILL);
    let o = finish(child, &trials);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("`kiln-runtime` was killed by SIGKILL"), "{t}");
    ended_within(
        &trials,
        Duration::from_secs(10),
        "trial processes outlived their runtime",
    );
    let t = t.replace("/ ", "/");
    for k in 1..=concurrent_trials() {
        assert!(
            t.contains(&format!("--trial {k} --resume runs/signals/")),
            "{t}"
        );
    }
}

/// A memory cgroup limited to `bytes` (swap included) below this process's own, when this
/// machine lets one be made (cgroup v1's memory controller or cgroup v2, as root).
fn memory_cgroup(name: &str, bytes: u64) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let (dir, limits): (PathBuf, &[&str]) = text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let rel = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            let v1: &[&str] = &["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"];
            Some((Path::new("/sys/fs/cgroup/memory").join(rel), v1))
        } else if controllers.is_empty() {
            let v2: &[&str] = &["memory.max", "memory.swap.max"];
            Some((Path::new("/sys/fs/cgroup").join(rel), v2))
        } else {
            None
        }
    })?;
    let cgroup = dir.join(name);
    let _ = std::fs::remove_dir(&cgroup);
    std::fs::create_dir(&cgroup).ok()?;
    std::fs::write(cgroup.join(limits[0]), bytes.to_string()).ok()?;
    // Without swap, or with swap counted in the limit, the kernel kills rather than swaps.
    let swap = if limits[1] == "memory.swap.max" {
        0
    } else {
        bytes
    };
    let _ = std::fs::write(cgroup.join(limits[1]), swap.to_string());
    Some(cgroup)
}

#[test]
fn the_out_of_memory_killer_is_named_as_the_likely_cause() {
    let limit = 500 << 20;
    let Some(cgroup) = memory_cgroup(&format!("kiln-oom-{}", std::process::id()), limit) else {
        eprintln!("not run: no memory cgroup can be made here (it needs root)");
        return;
    };
    // About 1 GB of samples, twice the cgroup's limit.
    let dir = scratch_with(
        "oom",
        &EXPERIMENT
            .replace(
                "normal([32]), targets: randint(4), count: 2000",
                "normal([64]), targets: randint(4), count: 4000000",
            )
            .replace("input [32]", "input [64]"),
    );
    // A shell moves itself into the cgroup, then becomes `kiln`.
    let child = Command::new("sh")
        .args([
            "-c",
            "echo $$ > \"$1\" && exec \"$0\" run signals.exp --quiet --run-dir run",
            env!("CARGO_BIN_EXE_kiln"),
        ])
        .arg(cgroup.join("cgroup.procs"))
        .current_dir(&dir)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh starts");
    let runtime = child_of(child.id());
    let o = finish(child, &[runtime]);
    let _ = std::fs::remove_dir(&cgroup);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("`kiln-runtime` was killed by SIGKILL"), "{t}");
    assert!(
        t.contains("most likely the kernel's out-of-memory killer: its memory peaked at"),
        "{t}"
    );
    assert!(t.contains("of 500.00 MiB"), "names the limit: {t}");
    assert!(t.contains("it had created no run directory yet"), "{t}");
}
