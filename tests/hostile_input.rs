//! Hostile input: a FIFO, a device, an oversized file and a directory full of looping links are
//! refused or walked at once, each file checked once; every absurd option value is a usage error.
//! Each case runs the real `kiln` binary under a deadline and kills it when it overruns.
#![cfg(unix)]

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::scratch;

/// How long `kiln check` and `kiln plan` may take to answer on hostile input.
const DEADLINE: Duration = Duration::from_secs(2);
/// `kiln run` starts `kiln-runtime`, which loads libtorch before it reads its arguments.
const RUN_DEADLINE: Duration = Duration::from_secs(30);

/// What `kiln` answered.
struct Answer {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `kiln` in `dir`; fails the test, after killing it, if it has not exited by `deadline`.
fn kiln_within(deadline: Duration, dir: &Path, args: &[&str]) -> Answer {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kiln starts");
    // Both pipes are drained while waiting, so that a full pipe cannot stall the child.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for kiln") {
            break status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`kiln {}` did not answer within {deadline:?}; killed",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Answer {
        code: status.code(),
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn symlink(target: &str, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

/// The `kiln check --format json` diagnostics as (file, code) pairs.
fn diagnostics(stdout: &str) -> Vec<(String, String)> {
    let all: Vec<serde_json::Value> = serde_json::from_str(stdout).expect("a JSON array");
    all.iter()
        .map(|d| {
            (
                d["file"].as_str().expect("file").to_string(),
                d["code"].as_str().expect("code").to_string(),
            )
        })
        .collect()
}

const HELP_NOT_REGULAR: &str = "name a regular file";

#[test]
fn a_fifo_is_refused_at_once() {
    let dir = scratch("fifo");
    mkfifo(&dir.join("pipe.exp"));
    let check = kiln_within(DEADLINE, &dir, &["check", "pipe.exp"]);
    assert_eq!(check.code, Some(2), "unreadable input:\n{}", check.stdout);
    assert!(
        check.stdout.contains("K0003(unreadable-file)")
            && check
                .stdout
                .contains("cannot read `pipe.exp`: it is a FIFO")
            && check.stdout.contains(HELP_NOT_REGULAR),
        "{}",
        check.stdout
    );
    assert!(
        check.stderr.contains("checked 1 file: 1 error"),
        "{}",
        check.stderr
    );

    // Found by a directory walk, the FIFO is refused the same way.
    let walk = kiln_within(DEADLINE, &dir, &["check", "."]);
    assert_eq!(walk.code, Some(2));
    assert!(walk.stdout.contains("it is a FIFO"), "{}", walk.stdout);

    let plan = kiln_within(DEADLINE, &dir, &["plan", "pipe.exp"]);
    assert_eq!(plan.code, Some(2));
    assert!(
        plan.stderr.contains("K0003") && plan.stderr.contains("it is a FIFO"),
        "{}",
        plan.stderr
    );

    // Reached through `extends`, it is the base that cannot be read.
    std::fs::write(
        dir.join("child.exp"),
        "extends \"pipe.exp\"\nexperiment \"x\" {\n  seed 1\n}\n",
    )
    .expect("write");
    let extends = kiln_within(DEADLINE, &dir, &["check", "child.exp"]);
    assert_eq!(extends.code, Some(1));
    assert!(
        extends.stdout.contains("K0122(extends-not-found)")
            && extends.stdout.contains("it is a FIFO")
            && extends.stdout.contains(HELP_NOT_REGULAR),
        "{}",
        extends.stdout
    );

    let run = kiln_within(RUN_DEADLINE, &dir, &["run", "pipe.exp"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("K0003") && run.stderr.contains("it is a FIFO"),
        "{}",
        run.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dev_zero_is_refused_not_read() {
    let dir = scratch("zero");
    let check = kiln_within(DEADLINE, &dir, &["check", "/dev/zero"]);
    assert_eq!(check.code, Some(2));
    assert!(
        check
            .stdout
            .contains("cannot read `/dev/zero`: it is a character device, not a regular file")
            && check.stdout.contains(HELP_NOT_REGULAR),
        "{}",
        check.stdout
    );
    let plan = kiln_within(DEADLINE, &dir, &["plan", "/dev/zero"]);
    assert_eq!(plan.code, Some(2));
    assert!(plan.stderr.contains("character device"), "{}", plan.stderr);
    std::fs::write(
        dir.join("child.exp"),
        "extends \"/dev/zero\"\nexperiment \"x\" {\n  seed 1\n}\n",
    )
    .expect("write");
    let extends = kiln_within(DEADLINE, &dir, &["check", "child.exp"]);
    assert!(
        extends.stdout.contains("K0122") && extends.stdout.contains("character device"),
        "{}",
        extends.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_over_the_limit_is_refused_without_being_read() {
    let dir = scratch("large");
    // 8 GiB, sparse: reading it whole would take seconds and gigabytes.
    let huge = std::fs::File::create(dir.join("huge.exp")).expect("create");
    huge.set_len(8 << 30).expect("a sparse file");
    let check = kiln_within(DEADLINE, &dir, &["check", "huge.exp"]);
    assert_eq!(check.code, Some(2));
    assert!(
        check.stdout.contains(
            "cannot read `huge.exp`: it is 8,589,934,592 bytes (8.00 GiB), over the 16.00 MiB limit"
        ),
        "{}",
        check.stdout
    );
    // One byte over the limit is over.
    std::fs::write(dir.join("over.exp"), vec![b' '; (16 << 20) + 1]).expect("write");
    let over = kiln_within(DEADLINE, &dir, &["check", "over.exp"]);
    assert_eq!(over.code, Some(2));
    assert!(over.stdout.contains("16,777,217 bytes"), "{}", over.stdout);
}

#[test]
fn a_directory_of_looping_links_checks_each_file_once() {
    let dir = scratch("loops");
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    // One real file with one error of its own (and the settings it lacks).
    std::fs::write(root.join("real.exp"), "experiment \"x\" {\n  seed -1\n}\n").expect("write");
    symlink(".", &root.join("self"));
    symlink("..", &root.join("up"));
    symlink("..", &root.join("sub/up"));
    symlink("sub", &root.join("linkdir"));
    symlink("cycle-b", &root.join("cycle-a"));
    symlink("cycle-a", &root.join("cycle-b"));
    symlink("pong.exp", &root.join("ping.exp"));
    symlink("ping.exp", &root.join("pong.exp"));
    symlink("nowhere.exp", &root.join("gone.exp"));
    symlink("real.exp", &root.join("alias.exp"));
    symlink("../real.exp", &root.join("sub/again.exp"));
    let answer = kiln_within(
        DEADLINE,
        &dir,
        &[
            "check",
            "--format",
            "json",
            "root",
            "root/alias.exp",
            "root/real.exp",
            "root/linkdir",
        ],
    );
    assert_eq!(answer.code, Some(2), "the broken links are unreadable");
    let found = diagnostics(&answer.stdout);
    let out_of_range: Vec<_> = found.iter().filter(|(_, c)| c == "K0121").collect();
    assert_eq!(
        out_of_range,
        [&("root/real.exp".to_string(), "K0121".to_string())],
        "the real file is checked once, under its own name:\n{}",
        answer.stdout
    );
    let mut unreadable: Vec<&str> = found
        .iter()
        .filter(|(_, c)| c == "K0003")
        .map(|(f, _)| f.as_str())
        .collect();
    unreadable.sort();
    assert_eq!(
        unreadable,
        ["root/gone.exp", "root/ping.exp", "root/pong.exp"],
        "a dangling link and a cycle of links are reported, once each"
    );
    assert!(
        answer.stderr.contains("checked 4 files:"),
        "{}",
        answer.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_named_twice_is_checked_once() {
    let dir = scratch("twice");
    std::fs::write(dir.join("a.exp"), "experiment \"x\" {\n  seed -1\n}\n").expect("write");
    let answer = kiln_within(DEADLINE, &dir, &["check", "a.exp", "./a.exp", "."]);
    assert_eq!(answer.code, Some(1));
    assert_eq!(
        answer.stdout.matches("K0121").count(),
        1,
        "{}",
        answer.stdout
    );
    assert!(
        answer.stderr.contains("checked 1 file:"),
        "{}",
        answer.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each absurd value is a usage error that names its option, answered at once.
fn refused(deadline: Duration, args: &[&str], option: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let answer = kiln_within(deadline, root, args);
    let shown = format!("kiln {}:\n{}", args.join(" "), answer.stderr);
    assert_eq!(answer.code, Some(2), "{shown}");
    assert!(answer.stderr.contains(option), "names {option}: {shown}");
    assert!(
        !answer.stderr.contains("K0005") && !answer.stderr.contains("panicked"),
        "{shown}"
    );
}

#[test]
fn absurd_device_memory_values_are_usage_errors() {
    let file = "experiments/mnist_mlp.exp";
    for value in [
        "cuda:0=0GiB",
        "cuda:0=1e400GiB",
        "cuda:0=99999999999999999999GiB",
        "cuda:0=18446744073709551616bytes",
        "cuda:0=-1GiB",
        "cuda:0=NaNGiB",
        "cuda:0=infGiB",
        "cuda:0=0.5bytes",
        "cuda:0=80",
        "cuda:0=5steps",
        "cuda:0",
        "=1GiB",
        "auto=1GiB",
        "cuda:99999999999=1GiB",
    ] {
        for command in ["check", "plan"] {
            let flag = format!("--device-memory={value}");
            refused(DEADLINE, &[command, &flag, file], "--device-memory");
        }
    }
    refused(
        DEADLINE,
        &[
            "plan",
            "--device-memory",
            "cuda:0=1GiB",
            "--device-memory",
            "cuda:0=2GiB",
            file,
        ],
        "--device-memory",
    );
    refused(DEADLINE, &["check", "--format", "xml", file], "--format");
    // Sane values in every accepted spelling still pass.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ok = kiln_within(
        DEADLINE,
        root,
        &[
            "check",
            "--device-memory",
            "cuda:0=1e3MiB",
            "--device-memory",
            "cpu = 16 GB",
            file,
        ],
    );
    assert_eq!(ok.code, Some(0), "{}{}", ok.stdout, ok.stderr);
}

#[test]
fn absurd_run_options_are_usage_errors() {
    let file = "experiments/mnist_mlp.exp";
    for (option, value) in [
        ("--threads", "0"),
        ("--threads", "99999999999"),
        ("--threads", "1025"),
        ("--threads", "-1"),
        ("--threads", "many"),
        ("--max-steps", "0"),
        ("--max-steps", "-1"),
        ("--max-steps", "99999999999999999999999"),
        ("--trial", "0"),
        ("--trial", "-3"),
        ("--trial", "99999999999999999999"),
        ("--device", "cuda:99999999999"),
        ("--device", "gpu"),
        ("--runs-dir", ""),
        ("--run-dir", ""),
        ("--resume", ""),
        ("--init", ""),
        ("--init", "/dev/zero"),
        ("--init", "experiments"),
    ] {
        refused(RUN_DEADLINE, &["run", option, value, file], option);
    }
    // Initial weights from a FIFO would wait for a writer forever.
    let dir = scratch("init");
    let fifo = dir.join("weights.safetensors");
    mkfifo(&fifo);
    let fifo = fifo.to_str().expect("a UTF-8 path");
    refused(RUN_DEADLINE, &["run", "--init", fifo, file], "--init");
    let _ = std::fs::remove_dir_all(&dir);
}
