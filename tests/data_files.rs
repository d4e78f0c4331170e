//! Broken and hostile data files through the real `kiln run`: NaN and infinities in training and
//! validation samples of every file format, values beyond 32-bit floats, a gzip file holding far
//! more than its header declares (refused within a bounded amount of memory, measured with
//! `wait4`), and sources that are not regular files.

mod support;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::files::{self, npy_bytes as npy, zip, Array};
use support::scratch;

/// How a `kiln run` ended.
struct Ended {
    /// The exit status.
    code: Option<i32>,
    /// Standard output and error.
    text: String,
    /// The peak resident memory of `kiln` and every process it waited for (`kiln-runtime`), in
    /// bytes.
    peak: u64,
    /// How long it ran.
    took: Duration,
}

/// Runs `kiln run EXP --device cpu --runs-dir RUNS --quiet` in `dir`, killing it after
/// `limit`; the peak memory comes from `wait4`, which covers the processes `kiln` waited for.
// The child is reaped by `wait4`, which std's `Child::wait` would not let read its usage.
#[allow(clippy::zombie_processes)]
fn kiln_run(dir: &Path, exp: &str, limit: Duration) -> Ended {
    let path = dir.join("data.exp");
    std::fs::write(&path, exp).expect("write the experiment");
    let out = File::create(dir.join("output.txt")).expect("output file");
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "run",
            "data.exp",
            "--device",
            "cpu",
            "--quiet",
            "--runs-dir",
            "runs",
        ])
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("output file"))
        .stderr(out)
        .spawn()
        .expect("kiln starts");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is this test's own child, and `status` and `usage` outlive the call.
        let done = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(done >= 0, "wait4 failed");
        if done == pid {
            break;
        }
        if started.elapsed() > limit {
            // SAFETY: signalling this test's own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: as above; this reaps the killed child.
            unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            panic!("`kiln run` did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Ended {
        code,
        text: unwrapped(&std::fs::read_to_string(dir.join("output.txt")).unwrap_or_default()),
        // Linux reports kibibytes.
        peak: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
        took,
    }
}

/// The output with the diagnostic's wrapped lines joined: every run of blanks and the `│` that
/// continues a message becomes one space.
fn unwrapped(text: &str) -> String {
    text.split_whitespace()
        .filter(|w| *w != "│")
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every `steps.jsonl` under `dir`, with its number of lines.
fn step_logs(dir: &Path) -> Vec<(PathBuf, usize)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(step_logs(&path));
        } else if path.file_name().is_some_and(|n| n == "steps.jsonl") {
            let lines = std::fs::read_to_string(&path)
                .unwrap_or_default()
                .lines()
                .count();
            found.push((path, lines));
        }
    }
    found
}

/// An experiment on `source`: samples of 3x4 values, one half for training, the other for
/// validation.
fn experiment(source: &str) -> String {
    format!(
        r#"experiment "bad-data" {{
  data {{
    source {source}
    split(train: 0.5, val: 0.5)
    batch 2
  }}
  model {{
    input [3, 4]
    flatten
    fc: linear(10)
  }}
  device cpu
  optimizer sgd(lr: 0.1)
  train {{
    steps 3
    loss cross_entropy
  }}
}}
"#
    )
}

/// Expects `kiln run` on `source` in `dir` to fail with K0503 at the source, naming each of
/// `needles`, before the first training step.
fn refused(dir: &Path, source: &str, needles: &[&str]) {
    let _ = std::fs::remove_dir_all(dir.join("runs"));
    let e = kiln_run(dir, &experiment(source), Duration::from_secs(20));
    let t = &e.text;
    assert_eq!(e.code, Some(1), "{t}");
    assert!(t.contains("K0503(data-invalid)"), "{t}");
    assert!(t.contains("data.exp:3:12]"), "the span of the source: {t}");
    for needle in needles {
        assert!(t.contains(needle), "expected {needle:?}: {t}");
    }
    assert!(!t.contains("panicked"), "{t}");
    let logs = step_logs(&dir.join("runs"));
    assert!(
        logs.iter().all(|(_, lines)| *lines == 0),
        "a training step ran: {logs:?}"
    );
}

/// Two samples of 3x4 values `0..24` with `bad` at flat index `at`, as little-endian float32.
fn samples_with(bad: f32, at: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..24).map(|i| i as f32).collect();
    v[at] = bad;
    v
}

fn le_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The labels of the two samples, as a `.npy` file of int64.
fn labels_npy() -> Vec<u8> {
    let body: Vec<u8> = [3i64, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
    npy("<i8", &[2], &body)
}

/// A safetensors file of float32 `inputs` `[2, 3, 4]` and int64 `targets` `[2]`.
fn safetensors(inputs: &[f32]) -> Vec<u8> {
    let x = Array::f32(&[2, 3, 4], inputs);
    let y = Array::i64(&[2], &[3, 7]);
    files::safetensors(&[("inputs", &x), ("targets", &y)])
}

/// A CSV file of two samples of twelve features and a label, with `bad` written in feature
/// `feature` of sample `sample`.
fn csv(sample: usize, feature: usize, bad: &str) -> String {
    let mut text: String = (0..12).map(|f| format!("f{f},")).collect::<String>() + "label\n";
    for s in 0..2 {
        for f in 0..12 {
            if (s, f) == (sample, feature) {
                text += bad;
            } else {
                text += &(s * 12 + f).to_string();
            }
            text.push(',');
        }
        text += if s == 0 { "3\n" } else { "7\n" };
    }
    text
}

// Each case is run with the bad value in sample 0 and in sample 1: with one sample for training
// and one for validation, one of the two runs has it in the validation split, whichever way the
// seeded split falls.

#[test]
fn nan_and_inf_in_npy_are_refused_in_either_split() {
    let dir = scratch("npy");
    std::fs::write(dir.join("y.npy"), labels_npy()).expect("write");
    let source = r#"npy(inputs: "x.npy", targets: "y.npy", classes: 10)"#;
    for (bad, at, words) in [
        (
            f32::NAN,
            5,
            "holds NaN at sample 0 (counted from 0 in the file), feature 5 (row 1, column 1)",
        ),
        (
            f32::INFINITY,
            12 + 11,
            "holds +Inf at sample 1 (counted from 0 in the file), feature 11 (row 2, column 3)",
        ),
    ] {
        let x = npy("<f4", &[2, 3, 4], &le_bytes(&samples_with(bad, at)));
        std::fs::write(dir.join("x.npy"), x).expect("write");
        refused(&dir, source, &["`x.npy`", words]);
    }
    // In the targets, and in float64 beyond the range of float32.
    let x = npy("<f4", &[2, 3, 4], &le_bytes(&samples_with(0.0, 0)));
    std::fs::write(dir.join("x.npy"), x).expect("write");
    let y: Vec<u8> = [3f32, f32::NAN]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(dir.join("y.npy"), npy("<f4", &[2], &y)).expect("write");
    refused(
        &dir,
        source,
        &["`y.npy` holds NaN at sample 1 (counted from 0 in the file)"],
    );
    std::fs::write(dir.join("y.npy"), labels_npy()).expect("write");
    let mut wide: Vec<f64> = (0..24).map(f64::from).collect();
    wide[2] = -1e300;
    let body: Vec<u8> = wide.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("x.npy"), npy("<f8", &[2, 3, 4], &body)).expect("write");
    refused(
        &dir,
        source,
        &["`x.npy` holds -1e300 at sample 0 (counted from 0 in the file), feature 2 (row 0, column 2), beyond the range of 32-bit floats"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nan_and_inf_in_npz_are_refused_in_either_split() {
    let dir = scratch("npz");
    let source = r#"npz("d.npz", inputs: "x", targets: "y", classes: 10)"#;
    for (bad, at, words) in [
        (f32::NAN, 13, "the array `x` in `d.npz` holds NaN at sample 1 (counted from 0 in the file), feature 1 (row 0, column 1)"),
        (f32::NEG_INFINITY, 7, "the array `x` in `d.npz` holds -Inf at sample 0 (counted from 0 in the file), feature 7 (row 1, column 3)"),
    ] {
        let x = npy("<f4", &[2, 3, 4], &le_bytes(&samples_with(bad, at)));
        std::fs::write(dir.join("d.npz"), zip(&[("x.npy", x), ("y.npy", labels_npy())]))
            .expect("write");
        refused(&dir, source, &[words]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nan_and_inf_in_safetensors_are_refused_in_either_split() {
    let dir = scratch("safetensors");
    let source =
        r#"safetensors("d.safetensors", inputs: "inputs", targets: "targets", classes: 10)"#;
    for (bad, at, words) in [
        (f32::INFINITY, 0, "the tensor `inputs` in `d.safetensors` holds +Inf at sample 0 (counted from 0 in the file), feature 0 (row 0, column 0)"),
        (f32::NAN, 12 + 10, "the tensor `inputs` in `d.safetensors` holds NaN at sample 1 (counted from 0 in the file), feature 10 (row 2, column 2)"),
    ] {
        std::fs::write(dir.join("d.safetensors"), safetensors(&samples_with(bad, at)))
            .expect("write");
        refused(&dir, source, &[words]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nan_inf_and_overflow_in_csv_are_refused_in_either_split() {
    let dir = scratch("csv");
    let source = r#"csv("d.csv", target: "label", classes: 10)"#;
    for (sample, feature, bad, why) in [
        (0, 4, "nan", "which is not a finite number"),
        (1, 9, "-inf", "which is not a finite number"),
        (1, 0, "1e39", "which overflows 32-bit floats"),
    ] {
        std::fs::write(dir.join("d.csv"), csv(sample, feature, bad)).expect("write");
        let line = sample + 2;
        refused(
            &dir,
            source,
            &[&format!(
                "line {line} of `d.csv` (sample {sample}, counted from 0) has `{bad}` in column `f{feature}` (feature {feature}), {why}"
            )],
        );
    }
    // A label beyond every integer type is named by its value.
    let text = csv(0, 0, "0").replace(",7\n", ",1e30\n");
    std::fs::write(dir.join("d.csv"), text).expect("write");
    refused(
        &dir,
        source,
        &["holds the label 1e30 for line 3, outside the 10 classes [0, 10)"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The resident memory of `kiln-runtime` on a small run, measured as the tests below are.
fn baseline(dir: &Path) -> u64 {
    std::fs::write(
        dir.join("x.npy"),
        npy("<f4", &[2, 3, 4], &le_bytes(&samples_with(0.0, 0))),
    )
    .expect("write");
    std::fs::write(dir.join("y.npy"), labels_npy()).expect("write");
    let e = kiln_run(
        dir,
        &experiment(r#"npy(inputs: "x.npy", targets: "y.npy", classes: 10)"#),
        Duration::from_secs(20),
    );
    assert_eq!(e.code, Some(0), "{}", e.text);
    e.peak
}

#[test]
fn a_gzip_file_holding_far_more_than_its_header_declares_is_refused_in_bounded_memory() {
    let dir = scratch("gzip");
    // The runtime alone (libtorch loaded, a small run) holds a few hundred MB; the declared data
    // must be large enough for three times it to stand clear of that.
    let base = baseline(&dir);
    const DECLARED: u64 = 500 * 800 * 1000;
    assert!(
        base < 2 * DECLARED,
        "a small run peaks at {} MB: the declared size no longer leaves room to tell a bounded read",
        base >> 20
    );
    const HOLDS: u64 = 4 << 30;
    // 400 MB declared, 4 GiB of zeros written: a few MB compressed, streamed in chunks.
    let file = File::create(dir.join("images.idx.gz")).expect("create");
    let mut gz = flate2::write::GzEncoder::new(BufWriter::new(file), flate2::Compression::fast());
    gz.write_all(&[0, 0, 8, 3]).expect("write");
    for d in [500u32, 800, 1000] {
        gz.write_all(&d.to_be_bytes()).expect("write");
    }
    let zeros = vec![0u8; 16 << 20];
    for _ in 0..HOLDS / zeros.len() as u64 {
        gz.write_all(&zeros).expect("write");
    }
    gz.finish().expect("finish").flush().expect("flush");
    let mut labels = vec![0, 0, 8, 1];
    labels.extend_from_slice(&500u32.to_be_bytes());
    labels.extend_from_slice(&[1; 500]);
    std::fs::write(dir.join("labels.idx"), labels).expect("write");
    let source = r#"idx("images.idx.gz", labels: "labels.idx", classes: 10)"#;
    // The model takes the samples the header declares, so that `kiln check` (which reads only
    // the header) lets the runtime reach the data.
    let text = experiment(source).replace("input [3, 4]", "input [800, 1000]");
    let e = kiln_run(&dir, &text, Duration::from_secs(20));
    let t = &e.text;
    assert_eq!(e.code, Some(1), "{t}");
    assert!(t.contains("K0503(data-invalid)"), "{t}");
    assert!(
        t.contains("`images.idx.gz` declares 500 x 800 x 1000 values (400000016 bytes with the header), but decompressed it holds more"),
        "{t}"
    );
    // Printed for the record: `cargo test --release --test data_files gzip -- --nocapture`.
    eprintln!(
        "gzip bomb refused: peak RSS {} MiB (a small run peaks at {} MiB; bound 3 x {} MiB)",
        e.peak >> 20,
        base >> 20,
        DECLARED >> 20
    );
    assert!(
        e.peak < 3 * DECLARED,
        "peak {} MB, over three times the {} MB declared (a small run peaks at {} MB)",
        e.peak >> 20,
        DECLARED >> 20,
        base >> 20
    );
    assert!(e.took < Duration::from_secs(10), "took {:?}", e.took);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sources_that_are_not_regular_files_are_refused_at_once() {
    let dir = scratch("special");
    let fifo = dir.join("pipe.csv");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: `c` is a valid, NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (path, why) in [
        (
            "pipe.csv",
            "it is a FIFO (a named pipe), not a regular file",
        ),
        ("/dev/zero", "it is a device, not a regular file"),
    ] {
        let source = format!(r#"csv("{path}", target: "label", classes: 10)"#);
        let e = kiln_run(&dir, &experiment(&source), Duration::from_secs(10));
        let t = &e.text;
        assert_eq!(e.code, Some(1), "{t}");
        assert!(t.contains("K0502(data-missing)") && t.contains(why), "{t}");
        assert!(e.took < Duration::from_secs(5), "took {:?}", e.took);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_file_names_the_file_beside_it_and_where_paths_resolve_from() {
    let dir = scratch("typo");
    let x = npy("<f4", &[2, 3, 4], &le_bytes(&samples_with(0.0, 0)));
    std::fs::write(dir.join("inputs.npy"), x).expect("write");
    std::fs::write(dir.join("labels.npy"), labels_npy()).expect("write");
    // The experiment sits in the working directory, so its own directory is empty as written.
    let ended = kiln_run(
        &dir,
        &experiment(r#"npy(inputs: "input.npy", targets: "labels.npy", classes: 10)"#),
        Duration::from_secs(60),
    );
    assert_eq!(ended.code, Some(1), "{}", ended.text);
    let text = unwrapped(&ended.text);
    assert!(text.contains("K0502"), "{text}");
    assert!(text.contains("did you mean `inputs.npy`?"), "{text}");
    let base = std::fs::canonicalize(&dir).expect("canonical");
    assert!(
        text.contains(&format!("declares the source, {}", base.display())),
        "{text}"
    );
    assert!(!text.contains("()"), "{text}");
    // `kiln check` says the same, as a warning: the file may be on the training machine.
    assert!(text.contains("K0414"), "{text}");
}

#[test]
fn a_quoted_header_cell_keeps_its_blanks_in_check_and_run_alike() {
    let dir = scratch("quoted");
    // Twelve features and a label column whose quoted name has blanks around it.
    let text = csv(0, 0, "0").replacen("label", "\" label \"", 1);
    std::fs::write(dir.join("d.csv"), text).expect("write");
    // `label` names no column: refused by `kiln check` before the run.
    let ended = kiln_run(
        &dir,
        &experiment(r#"csv("d.csv", target: "label", classes: 10)"#),
        Duration::from_secs(60),
    );
    assert_eq!(ended.code, Some(1), "{}", ended.text);
    assert!(ended.text.contains("K0220"), "{}", ended.text);
    // The name as quoted, blanks and all, is the column, for both.
    let ended = kiln_run(
        &dir,
        &experiment(r#"csv("d.csv", target: " label ", classes: 10)"#),
        Duration::from_secs(60),
    );
    assert_eq!(ended.code, Some(0), "{}", ended.text);
}
