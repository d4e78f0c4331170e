//! Robustness: no input may make Kiln panic, abort, overflow its stack or hang.
//!
//! * `pathological_inputs_*` feed huge, empty, binary and deeply bracketed files to
//!   [`kiln::check::check_text`] and to the `kiln` binary.
//! * `fuzz_parser_and_checker` feeds at least [`FUZZ_INPUTS`] random and mutated inputs to the
//!   parser and the checker, and formats every one that parses (`kiln fmt` must be idempotent,
//!   keep the comments and keep the meaning). The inputs come from a seeded PRNG, so a failure is reproducible. The
//!   loop runs in a child process (this test executable, re-run on the ignored `fuzz_worker`
//!   test) under a memory limit, so that an abort, a stack overflow or a hang is reported with
//!   its input instead of killing the test run. The fuzz settings can be changed with
//!   `KILN_FUZZ_SEED`, `KILN_FUZZ_INPUTS` and `KILN_FUZZ_MAX_FAILURES`; `KILN_FUZZ_SKIP`
//!   (comma-separated words) skips the inputs that contain one, to look past a known bug.

mod support;

use std::fmt::Write as _;
use std::fs::File;
use std::io::Read as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use kiln::check::layers::param_names;
use kiln::check::{check_path, check_text, Checked, MemoryLoader, Options};
use kiln::diagnostic::render::{self, Style};
use kiln::diagnostic::Code;
use kiln::ir::Kind;
use support::formatting;

/// How long one pathological input may take, through the library or the binary. A guard against
/// hangs, not a speed test.
const HANG_GUARD: Duration = Duration::from_secs(30);
/// How long one fuzz input (at most tens of kilobytes) may take.
const FUZZ_HANG_GUARD: Duration = Duration::from_secs(10);
/// The longest one trial of a fuzz input may take: the checker takes well under a millisecond
/// on such small files, so anything slower has a cost that the file's size does not explain.
const FUZZ_SLOW: Duration = Duration::from_secs(1);
/// The fewest inputs the fuzz test must check.
const FUZZ_INPUTS: u64 = 12_000;
/// The fuzz seed (`KILN_FUZZ_SEED` overrides it).
const FUZZ_SEED: u64 = 0x6b69_6c6e_2d66_757a;
/// The address-space limit of the fuzz child, in KiB: a runaway allocation fails there (and
/// aborts) instead of exhausting the machine.
const FUZZ_MEMORY_KIB: u64 = 4 << 20;
/// The name of the loaded file, and of the base file `extends "base.exp"` finds.
const FUZZ_FILE: &str = "fuzz.exp";
const BASE_FILE: &str = "base.exp";

// ---------------------------------------------------------------------------------------------
// A small deterministic PRNG (xorshift64*), seeded through splitmix64.

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True once in `n` times.
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Running the library and the binary with guards.

/// Checks `bytes` as a file and uses every output (rendered diagnostics, plans), so that the
/// renderers and the planner see the checker's results too. Returns the number of trials.
fn exercise(bytes: &[u8]) -> usize {
    let checked = if contains(bytes, b"extends") {
        // `extends "base.exp"` finds a valid experiment; `extends "fuzz.exp"` is a cycle.
        let mut loader = MemoryLoader::default();
        loader.insert(FUZZ_FILE, bytes.to_vec());
        loader.insert(BASE_FILE, SEEDS[0].1.as_bytes().to_vec());
        check_path(Path::new(FUZZ_FILE), &loader, &Options::default())
    } else {
        check_text(FUZZ_FILE, bytes.to_vec())
    };
    use_checked(&checked, true);
    formats_faithfully(bytes, &checked);
    checked.trial_count
}

/// `kiln fmt`'s promises on every input that parses: idempotent, comments kept, meaning kept.
fn formats_faithfully(bytes: &[u8], checked: &Checked) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    if kiln::syntax::parse(kiln::span::FileId(0), text).is_err() {
        return;
    }
    let out = formatting::formatted("fuzzed input", text);
    let again = if contains(bytes, b"extends") {
        let mut loader = MemoryLoader::default();
        loader.insert(FUZZ_FILE, out.clone().into_bytes());
        loader.insert(BASE_FILE, SEEDS[0].1.as_bytes().to_vec());
        check_path(Path::new(FUZZ_FILE), &loader, &Options::default())
    } else {
        check_text(FUZZ_FILE, out.clone().into_bytes())
    };
    assert_eq!(
        formatting::meaning(checked),
        formatting::meaning(&again),
        "formatting changed the meaning: {text:?} -> {out:?}"
    );
}

/// Renders the diagnostics (when asked) and plans every trial.
fn use_checked(checked: &Checked, render_diagnostics: bool) {
    if render_diagnostics {
        let style = Style {
            color: false,
            width: 100,
        };
        for d in &checked.diagnostics {
            std::hint::black_box(render::to_text(d, &checked.sources, style));
            std::hint::black_box(render::to_json(d, &checked.sources));
        }
    }
    for trial in &checked.trials {
        let plan = kiln::plan::plan(trial);
        plan_is_consistent(&plan);
        std::hint::black_box(kiln::present::plan::to_text(&plan));
    }
    assert!(
        checked.diagnostics.iter().all(|d| d.code != Code::Internal),
        "the library reported an internal error"
    );
}

/// What the plan's documentation promises, in exact arithmetic: a total that disagrees with
/// its parts is a sum that wrapped around (a debug build panics there instead).
fn plan_is_consistent(plan: &kiln::plan::Plan) {
    let t = &plan.totals;
    let layer_params: u128 = plan.layers.iter().map(|l| u128::from(l.params)).sum();
    let layer_flops: u128 = plan.layers.iter().map(|l| u128::from(l.flops)).sum();
    assert_eq!(
        u128::from(t.params),
        layer_params,
        "plan: the parameter total is not the sum of the layers' parameters"
    );
    assert!(
        u128::from(t.forward_flops_per_sample) >= layer_flops,
        "plan: the forward FLOPs per sample are fewer than the layers' sum"
    );
    assert!(
        u128::from(t.step_flops) >= u128::from(t.forward_flops_per_sample) * u128::from(plan.batch),
        "plan: the step FLOPs are fewer than the forward FLOPs of the batch"
    );
    for d in &plan.devices {
        // Training and evaluation do not hold their activations at once: the larger counts,
        // evaluation's with the gradients; training's gradients and activations together, or
        // their backward peak, which is neither more than both nor less than the gradients.
        // The allocator's margin and data kept on the device (`placement`) add their bytes.
        let (g, a) = (u128::from(d.gradient_bytes), u128::from(d.activation_bytes));
        let training = match d.backward_peak_bytes {
            Some(p) => {
                let p = u128::from(p);
                assert!(
                    p <= g + a && p >= g,
                    "plan: the backward peak of {} is outside its gradients and activations",
                    d.device
                );
                p
            }
            None => g + a,
        };
        let held = training.max(g + u128::from(d.eval_activation_bytes));
        let parts = [
            u128::from(d.weight_bytes),
            u128::from(d.optimizer_bytes),
            held,
            u128::from(d.allocator_margin_bytes),
            u128::from(d.data_bytes),
        ];
        assert_eq!(
            u128::from(d.total_bytes),
            parts.iter().sum::<u128>(),
            "plan: the memory of {} is not the sum of its parts",
            d.device
        );
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Runs `f` on its own thread (with the default 2 MiB stack, as rayon's workers that run the
/// checks in `kiln check`) and fails when it panics or outlives `limit`.
fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(what.to_string())
        .spawn(move || {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
        })
        .expect("spawn a thread");
    let start = Instant::now();
    match rx.recv_timeout(limit) {
        Ok(Ok(v)) => v,
        Ok(Err(payload)) => panic!("{what}: panicked: {}", panic_message(&*payload)),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still running after {:?}: a hang?", start.elapsed())
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the thread died"),
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a non-string panic payload)".to_string()
    }
}

/// Waits for a child until `deadline`; kills it past the deadline and returns `None`.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait().expect("wait for a child") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How a process ended, in words: `exit 1`, or the signal that killed it.
fn describe(status: &ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            let name = match sig {
                6 => " (SIGABRT: an abort, e.g. a failed allocation)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV: e.g. a stack overflow)",
                _ => "",
            };
            return format!("killed by signal {sig}{name}");
        }
    }
    match status.code() {
        Some(101) => "exit 101 (a panic)".to_string(),
        Some(c) => format!("exit {c}"),
        None => "no exit code".to_string(),
    }
}

/// A fresh, unique directory under the system's temp dir.
fn temp_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!(
        "kiln-robustness-{name}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create a temp dir");
    dir
}

fn read_lossy(path: &Path) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Bytes as an escaped, truncated string for failure messages.
fn escaped(bytes: &[u8], max: usize) -> String {
    let mut out = String::new();
    for &b in bytes.iter().take(max) {
        out.extend(std::ascii::escape_default(b).map(char::from));
    }
    if bytes.len() > max {
        let _ = write!(out, "... ({} bytes in all)", bytes.len());
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Pathological inputs.

/// A valid experiment around `model_lines` (the data feed `[16]`, the model ends in
/// `linear(10)`).
fn experiment_around(model_lines: impl Iterator<Item = String>) -> String {
    let mut s = String::from(
        "experiment \"big\" {\n  data {\n    source synthetic(inputs: normal([16]), targets: randint(10), count: 1000)\n    batch 32\n  }\n  model {\n    input [16]\n",
    );
    for line in model_lines {
        s.push_str("    ");
        s.push_str(&line);
        s.push('\n');
    }
    s.push_str(
        "    linear(10)\n  }\n  optimizer sgd(lr: 0.1)\n  train {\n    epochs 1\n    loss cross_entropy\n  }\n}\n",
    );
    s
}

/// `n` lines of valid layers of width 16.
fn valid_layer_lines(n: usize) -> impl Iterator<Item = String> {
    (0..n).map(|i| match i % 5 {
        0 => format!("fc{i}: linear(16)"),
        1 => "relu".to_string(),
        2 => format!("residual {{ r{i}: linear(16); gelu }}"),
        3 => format!("n{i}: layernorm(16)"),
        _ => "dropout(0.1)".to_string(),
    })
}

/// `count` bytes of ASCII made of the language's tokens, in random order.
fn random_token_text(rng: &mut Rng, count: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(count + 64);
    while out.len() < count {
        out.extend_from_slice(token(rng).as_bytes());
        out.push(*rng.pick(b"  \n"));
    }
    out.truncate(count);
    out
}

/// A well-formed file whose brackets (`open` and its match) nest exactly `depth` deep.
fn nested_well_formed(open: &str, depth: usize) -> String {
    match open {
        "{" => {
            // Blocks inside the model, each a residual.
            let inner = format!(
                "{}linear(16){}",
                "residual {\n".repeat(depth - 3),
                "\n}".repeat(depth - 3)
            );
            experiment_around(std::iter::once(inner))
        }
        _ => {
            // A value nested inside a tag list / call arguments.
            let mut v = "\"x\"".to_string();
            for _ in 0..depth - 1 {
                v = if open == "[" {
                    format!("[{v}]")
                } else {
                    format!("f({v})")
                };
            }
            experiment_around(std::iter::empty()).replacen(
                "experiment \"big\" {\n",
                &format!("experiment \"big\" {{\n  tags {v}\n"),
                1,
            )
        }
    }
}

/// The pathological inputs, each with the exit status `kiln check` should give it.
fn pathological_cases() -> Vec<(&'static str, Vec<u8>, i32)> {
    let mut rng = Rng::new(42);
    const MB: usize = 1 << 20;
    let mut cases: Vec<(&'static str, Vec<u8>, i32)> = vec![
        ("empty", vec![], 1),
        ("only-newlines", b"\n\n\r\n;;;\n".to_vec(), 1),
        ("only-bom", "\u{FEFF}".as_bytes().to_vec(), 1),
        ("only-comment", b"# nothing here".to_vec(), 1),
        (
            "invalid-utf8",
            b"experiment \"x\" {\n  seed 1\xff\xfe\n}\n".to_vec(),
            1,
        ),
        ("invalid-utf8-at-start", b"\x80\x80\x80".to_vec(), 1),
        (
            "truncated-utf8-at-end",
            b"experiment \"\xe2\x82".to_vec(),
            1,
        ),
        ("nested-brackets-1mb", vec![b'['; MB], 1),
        ("nested-braces-1mb", vec![b'{'; MB], 1),
        ("nested-parens-1mb", vec![b'('; MB], 1),
        ("nested-mixed-1mb", b"x [{(".repeat(MB / 5), 1),
        ("closing-brackets-1mb", b"]})".repeat(MB / 3), 1),
        (
            "nested-in-a-statement-1mb",
            [b"experiment \"x\" { tags ".as_slice(), &vec![b'['; MB]].concat(),
            1,
        ),
        (
            "brackets-in-a-string-1mb",
            [b"experiment \"".as_slice(), &vec![b'['; MB], b"\" {}"].concat(),
            1,
        ),
        (
            "brackets-in-a-comment-1mb",
            [b"# ".as_slice(), &vec![b'('; MB], b"\n"].concat(),
            1,
        ),
        ("long-identifier-1mb", vec![b'a'; MB], 1),
        (
            "long-number-1mb",
            [
                b"experiment \"x\" { seed ".as_slice(),
                &vec![b'9'; MB],
                b" }",
            ]
            .concat(),
            1,
        ),
        (
            "long-string-1mb",
            [b"experiment \"".as_slice(), &vec![b'x'; MB], b"\" {}"].concat(),
            1,
        ),
        ("random-bytes-10mb", rng.bytes(10 * MB), 1),
        (
            "random-tokens-10mb",
            random_token_text(&mut rng, 10 * MB),
            1,
        ),
        (
            "valid-100k-lines",
            experiment_around(valid_layer_lines(100_000)).into_bytes(),
            0,
        ),
        (
            "sweep-10k-trials",
            experiment_around(valid_layer_lines(20))
                .replace("epochs 1", "epochs sweep range(1, 10001)")
                .into_bytes(),
            0,
        ),
        (
            "sweep-too-many-trials",
            experiment_around(valid_layer_lines(20))
                .replace("epochs 1", "epochs sweep range(1, 1001)")
                .replace("lr: 0.1", "lr: sweep logspace(1e-4, 1e-1, 1000)")
                .into_bytes(),
            1,
        ),
    ];
    // Heads that do not divide a (prime) width: the suggestion must not search up to the width.
    cases.push((
        "attention-heads-prime-width",
        experiment_around(["attention(heads: 2)".to_string()].into_iter())
            .replace("normal([16])", "normal([1, 8999999999999971])")
            .replace("input [16]", "input [1, 8999999999999971]")
            .into_bytes(),
        1,
    ));
    // Well-formed nesting at the deepest level the parser accepts, and one level deeper.
    let max = kiln::syntax::MAX_NESTING;
    cases.extend([
        (
            "nesting-max-brackets",
            nested_well_formed("[", max).into_bytes(),
            1,
        ),
        (
            "nesting-max-braces",
            nested_well_formed("{", max).into_bytes(),
            0,
        ),
        (
            "nesting-max-parens",
            nested_well_formed("(", max).into_bytes(),
            1,
        ),
        (
            "nesting-over-max-brackets",
            nested_well_formed("[", max + 1).into_bytes(),
            1,
        ),
        (
            "nesting-over-max-braces",
            nested_well_formed("{", max + 1).into_bytes(),
            1,
        ),
        (
            "nesting-over-max-parens",
            nested_well_formed("(", max + 1).into_bytes(),
            1,
        ),
    ]);
    cases
}

/// 100,000 lines that parse but each make a diagnostic (a misspelt layer).
fn many_diagnostics_case() -> Vec<u8> {
    experiment_around((0..100_000).map(|i| format!("l{i}: lineer(16)"))).into_bytes()
}

#[test]
fn pathological_inputs_through_the_library() {
    let mut cases: Vec<(&'static str, Vec<u8>, i32)> = pathological_cases();
    cases.push(("many-diagnostics-100k-lines", many_diagnostics_case(), 1));
    for (name, bytes, code) in cases {
        let len = bytes.len();
        let (errors, too_deep) = within(name, HANG_GUARD, move || {
            let checked = check_text("input.exp", bytes);
            use_checked(&checked, false);
            let too_deep = checked.diagnostics.iter().any(|d| d.code == Code::TooDeep);
            (checked.has_errors(), too_deep)
        });
        assert_eq!(
            errors,
            code != 0,
            "{name} ({len} bytes): expected {}",
            if code == 0 { "no errors" } else { "errors" }
        );
        if name.starts_with("nesting-") {
            assert_eq!(
                too_deep,
                name.contains("over-max"),
                "{name}: the nesting limit is {}",
                kiln::syntax::MAX_NESTING
            );
        }
    }
}

/// Layer sizes whose parameter, FLOP and byte counts pass `u64` (or `i64`): the checker must
/// reject them or count them exactly, never wrap around (a debug build panics instead).
#[test]
fn sizes_past_the_integer_limits() {
    let cases: [(&str, &str, &[&str]); 5] = [
        (
            "parameters",
            "[784]",
            &["huge: linear(9000000000000000)", "linear(10)"],
        ),
        (
            "weight-bytes",
            "[1]",
            &[
                "a: linear(1073741824)",
                "b: linear(2147483648, bias: false)",
                "linear(10)",
            ],
        ),
        (
            "conv-flops",
            "[8, 28, 28]",
            &["conv2d(9000000000000000, 3)", "flatten", "linear(10)"],
        ),
        (
            "linear-params",
            "[10000000000]",
            &["linear(4294967295)", "linear(10)"],
        ),
        (
            "input-numel",
            "[4294967296, 4294967296]",
            &["relu", "flatten", "linear(10)"],
        ),
    ];
    let mut failures = Vec::new();
    for (name, input, layers) in cases {
        let text = experiment_around(layers.iter().map(|l| l.to_string()))
            .replace("normal([16])", &format!("normal({input})"))
            .replace("input [16]", &format!("input {input}"));
        let run = catch_unwind(|| {
            within(name, HANG_GUARD, move || {
                let checked = check_text("sizes.exp", text);
                use_checked(&checked, true);
            })
        });
        if let Err(payload) = run {
            failures.push(panic_message(&*payload));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A `kiln` process checking one input.
struct Run {
    what: String,
    child: Child,
    out: PathBuf,
    err: PathBuf,
    expect: i32,
    json: bool,
}

fn spawn_kiln(dir: &Path, what: String, args: &[&std::ffi::OsStr], expect: i32, json: bool) -> Run {
    let tag: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let out = dir.join(format!("{tag}.stdout"));
    let err = dir.join(format!("{tag}.stderr"));
    let child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(File::create(&out).expect("create a stdout file"))
        .stderr(File::create(&err).expect("create a stderr file"))
        .spawn()
        .expect("start kiln");
    Run {
        what,
        child,
        out,
        err,
        expect,
        json,
    }
}

/// Waits for every run and returns the problems found.
fn finish(runs: Vec<Run>, started: Instant) -> Vec<String> {
    let mut problems = Vec::new();
    for mut run in runs {
        let Some(status) = wait_until(&mut run.child, started + HANG_GUARD) else {
            problems.push(format!(
                "{}: still running after {:?}, killed (a hang?)",
                run.what, HANG_GUARD
            ));
            continue;
        };
        let stdout = read_lossy(&run.out);
        let stderr = read_lossy(&run.err);
        let mut problem = Vec::new();
        match status.code() {
            Some(c @ (0..=2)) if c == run.expect => {}
            Some(c @ (0..=2)) => problem.push(format!("exit {c}, expected {}", run.expect)),
            _ => problem.push(describe(&status)),
        }
        if stdout.contains("K0005") || stderr.contains("K0005") {
            problem.push("an internal error (K0005: a caught panic)".to_string());
        }
        if run.json && status.code() != Some(2) {
            match serde_json::from_str::<serde_json::Value>(&stdout) {
                Ok(v) if v.is_array() => {}
                _ => problem.push("the JSON output is not a JSON array".to_string()),
            }
        }
        if !problem.is_empty() {
            problems.push(format!(
                "{}: {}\n  stderr: {}",
                run.what,
                problem.join("; "),
                tail(&stderr, 600).trim()
            ));
        }
    }
    problems
}

#[test]
fn pathological_inputs_through_the_binary() {
    let dir = temp_dir("binary");
    let cases_dir = dir.join("cases");
    std::fs::create_dir_all(&cases_dir).unwrap();
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut files = Vec::new();
    for (name, bytes, code) in pathological_cases() {
        // A case that hangs when its bug is back would make the directory run wait on it too.
        let alone = name == "attention-heads-prime-width";
        let path = if alone { &dir } else { &cases_dir }.join(format!("{name}.exp"));
        std::fs::write(&path, bytes).unwrap();
        files.push((name.to_string(), path, code));
    }
    // Kept out of `cases/`: thousands of diagnostics make output, not checking, the cost.
    let many = dir.join("many-diagnostics-100k-lines.exp");
    std::fs::write(&many, many_diagnostics_case()).unwrap();
    files.push(("many-diagnostics-100k-lines".into(), many, 1));

    // Two files at a time on each core would measure contention, not hangs: run a few at once.
    let mut problems = Vec::new();
    for chunk in files.chunks(4) {
        let started = Instant::now();
        let mut runs = Vec::new();
        for (name, path, code) in chunk {
            for json in [false, true] {
                let mut args = vec![std::ffi::OsStr::new("check"), path.as_os_str()];
                if json {
                    args.extend(["--format", "json"].map(std::ffi::OsStr::new));
                }
                let what = format!(
                    "kiln check{} {name}",
                    if json { " --format json" } else { "" }
                );
                runs.push(spawn_kiln(&logs, what, &args, *code, json));
            }
        }
        problems.extend(finish(runs, started));
    }
    // A directory of them, checked in parallel.
    let started = Instant::now();
    let run = spawn_kiln(
        &logs,
        "kiln check cases/".into(),
        &[std::ffi::OsStr::new("check"), cases_dir.as_os_str()],
        1,
        false,
    );
    problems.extend(finish(vec![run], started));
    // Usage errors are exit 2.
    let started = Instant::now();
    let missing = dir.join("does-not-exist.exp");
    let run = spawn_kiln(
        &logs,
        "kiln check missing-file".into(),
        &[std::ffi::OsStr::new("check"), missing.as_os_str()],
        2,
        false,
    );
    problems.extend(finish(vec![run], started));

    if problems.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        panic!(
            "kiln failed on pathological inputs (files kept in {}):\n{}",
            dir.display(),
            problems.join("\n")
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Fuzzing.

/// Valid experiments that cover every section; mutated along with `experiments/*.exp`.
const SEEDS: &[(&str, &str)] = &[
    (
        "seed:full",
        r#"experiment "full" {
  description "everything"
  tags ["a", "b"]
  seed 7
  data {
    source synthetic(inputs: normal([64]), targets: randint(10), count: 10000)
    split(train: 0.8, val: 0.2)
    batch 64
    shuffle true
  }
  model {
    input [64]
    fc0: linear(128)
    relu
    block enc {
      residual {
        l1: linear(128)
        gelu
      }
      ln: layernorm(128)
    }
    drop: dropout(0.1)
    out: linear(10)
  }
  device cuda:0
  memory cuda:0 80 GiB
  compress {
    prune fc0 l1_unstructured(amount: 0.5)
    quantize out int8(granularity: per_channel)
  }
  optimizer adam(lr: sweep [1e-3, 3e-4])
  schedule cosine(warmup: 100 steps)
  train {
    epochs 3
    loss cross_entropy
    metrics [accuracy, loss]
    precision bf16
    clip_norm 1.0
    early_stop(metric: val_loss, patience: 3)
    checkpoint(every: 1 epochs, keep: 2)
  }
}
"#,
    ),
    (
        "seed:conv",
        r#"experiment "conv" {
  description "small cnn"
  tags ["cnn"]
  seed 1
  data {
    source synthetic(inputs: uniform([1, 28, 28], low: 0, high: 1), targets: randint(10), count: 2048)
    split(train: 0.7, val: 0.2, test: 0.1)
    batch 32
    shuffle false
    normalize(mean: 0.5, std: 0.25)
  }
  model {
    input [1, 28, 28]
    c1: conv2d(8, 3, padding: 1)
    bn1: batchnorm2d
    relu
    max_pool2d(2)
    c2: conv2d(16, kernel_size: 3, stride: 1, padding: 1, groups: 2)
    groupnorm(4)
    silu
    avg_pool2d(2)
    adaptive_avg_pool2d([1, 1])
    flatten
    fc: linear(10)
    log_softmax(dim: -1)
  }
  device cpu
  optimizer sgd(lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 1e-4)
  schedule step(every: 2 epochs, gamma: 0.5)
  train {
    epochs 4
    loss nll
    metrics [accuracy, top_k(k: 3), loss]
    eval_every 1 epoch
    accumulate 2
  }
}
"#,
    ),
    (
        "seed:transformer",
        r#"experiment "tiny-transformer" {
  data {
    source synthetic(inputs: randint(1000, shape: [32]), targets: randint(2), count: 4096)
    batch 16
  }
  model {
    input [32]
    tok: embedding(1000, 64)
    residual {
      ln1: layernorm(64)
      attn: attention(heads: 4, dropout: 0.1, causal: true)
    }
    block layers {
      t1: transformer_block(heads: 8, hidden: 256)
      t2: transformer_block(heads: 8, hidden: 256, dropout: 0.1)
    }
    mean(dim: 0)
    head: linear(2)
  }
  device cuda:0
  memory cuda:0 16 GiB
  memory cuda:1 16 GiB
  place layers on cuda:1
  optimizer adamw(lr: sweep logspace(1e-4, 1e-2, 3), betas: [0.9, 0.95], weight_decay: 0.1)
  schedule one_cycle(max_lr: 1e-2, pct_start: 0.3)
  train {
    steps 2000
    loss cross_entropy(label_smoothing: 0.1)
    metrics [accuracy]
    precision fp16
    clip_value 0.5
  }
}
"#,
    ),
    (
        "seed:pipeline",
        r#"experiment "pipe" {
  data {
    source synthetic(inputs: normal([128]), targets: normal([8]), count: 10000)
    batch 64
  }
  model {
    input [128]
    block a {
      linear(256); tanh
    }
    block b {
      linear(256); sigmoid; dropout(p: sweep [0.05, 0.1])
    }
    out: linear(8)
  }
  device cuda
  parallel pipeline(stages: 2, micro_batches: 4, schedule: gpipe)
  compress {
    prune [a, b] random_unstructured(amount: 0.3, schedule: gradual(start: 100 steps, end: 900 steps, every: 100 steps))
    quantize out.weight int4(group_size: 32)
  }
  optimizer rmsprop(lr: 1e-3, alpha: 0.99)
  schedule exponential(gamma: 0.9)
  train {
    epochs sweep range(1, 4)
    loss mse
    accumulate 4
    micro_batch 16
    checkpoint(every: 500 steps, keep: 1)
  }
}
"#,
    ),
    (
        "seed:data-parallel",
        r#"extends "base.exp"
experiment "dp" {
  data {
    batch 128
  }
  device cuda
  parallel data(devices: [cuda:0, cuda:1])
  train {
    epochs 2
  }
}
"#,
    ),
];

/// Keywords, layer kinds, settings and values of the language.
#[rustfmt::skip]
const WORDS: &[&str] = &[
    "experiment", "extends", "description", "tags", "seed", "data", "model", "device", "place",
    "memory", "parallel", "compress", "optimizer", "schedule", "train", "source", "split", "batch",
    "shuffle", "normalize", "input", "block", "residual", "on", "sweep", "range", "logspace",
    "synthetic", "idx", "npy", "npz", "csv", "safetensors", "normal", "uniform", "randint",
    "inputs", "targets", "count", "classes", "shape", "labels", "images", "path", "train", "val",
    "test", "mean", "std", "low", "high", "sgd", "adam", "adamw", "rmsprop", "lr", "momentum",
    "betas", "eps", "weight_decay", "nesterov", "amsgrad", "constant", "step", "exponential",
    "cosine", "warmup", "one_cycle", "gamma", "every", "min_lr", "max_lr", "pct_start", "length",
    "epochs", "steps", "loss", "metrics", "eval_every", "early_stop", "precision", "checkpoint",
    "accumulate", "micro_batch", "clip_norm", "clip_value", "cross_entropy", "mse", "l1", "huber",
    "smooth_l1", "delta", "beta", "mae", "rmse", "r2",
    "bce_with_logits", "nll", "label_smoothing", "accuracy", "top_k", "k", "patience", "min_delta",
    "metric", "mode", "min", "max", "val_loss", "val_accuracy", "train_loss", "dir", "keep",
    "fp32", "bf16", "fp16", "none", "pipeline", "ddp", "devices", "replicas", "stages",
    "micro_batches", "gpipe", "1f1b", "one_f_one_b", "backend", "world_size", "gloo", "nccl",
    "prune", "quantize", "l1_unstructured", "random_unstructured", "ln_structured", "int8", "int4",
    "fp8", "qat", "amount", "n", "dim", "granularity", "group_size", "per_tensor", "per_channel",
    "before", "after", "finetune", "gradual", "initial", "iterative", "rounds", "rewind",
    "global_unstructured", "symmetric", "activations", "dynamic", "per_row", "start", "end", "cpu",
    "cuda", "auto", "true", "false", "weight", "bias",
    "fc1", "fc1.weight", "enc.fc1", "x", "_", "in_features", "out_features", "heads", "hidden",
    "causal", "p",
];

#[rustfmt::skip]
const NUMBERS: &[&str] = &[
    "0", "1", "2", "3", "4", "7", "8", "10", "16", "32", "64", "100", "128", "255", "256", "784",
    "1000", "1024", "65536", "2147483647", "2147483648", "4294967295", "4294967296", "1000000000",
    "9007199254740993", "9000000000000000", "9e15", "1e18", "9223372036854775808",
    "18446744073709551616", "1e308", "1e999", "-1", "-2", "-64", "-9e15", "-1e999", "-0", "0.0",
    "0.5", "1.5", "0.999999", "1e-3", "3e-4", "1E-8", "1e+2", "1e-300", "1e-999", "1_000",
    "1_000_000", "0_0", "1.0e1",
];

#[rustfmt::skip]
const UNITS: &[&str] = &[
    "steps", "step", "epochs", "epoch", "samples", "GiB", "MiB", "KiB", "GB", "MB", "KB", "bytes",
];

#[rustfmt::skip]
const PUNCTUATION: &[&str] = &[
    "{", "}", "(", ")", "[", "]", ":", ",", "->", ";", "\n", "\n", "\n", ".", "# note\n", "\\\n",
    "\t", "\u{FEFF}", "-", "\"", "=", "@", "é", "😀",
];

#[rustfmt::skip]
const STRINGS: &[&str] = &[
    "\"x\"", "\"\"", "\"a\\\"b\"", "\"\\\\\"", "\"\\n\\t\"", "\"../data/mnist/images.idx.gz\"",
    "\"base.exp\"", "\"fuzz.exp\"", "\"ünïcødé 😀\"", "\"unterminated", "\"bad \\q escape\"",
];

#[rustfmt::skip]
const DEVICES: &[&str] = &[
    "cuda:0", "cuda:1", "cuda:7", "cuda:99999999999", "cpu:0", "cpu", "cuda", "auto", "tpu:0",
];

fn number(rng: &mut Rng) -> String {
    let n = rng.pick(NUMBERS).to_string();
    if rng.one_in(4) {
        format!("{n} {}", rng.pick(UNITS))
    } else {
        n
    }
}

/// One token of the language, valid or not.
fn token(rng: &mut Rng) -> String {
    match rng.below(12) {
        0..=2 => rng.pick(WORDS).to_string(),
        3 => rng.pick(Kind::ALL).name().to_string(),
        4 | 5 => number(rng),
        6 => rng.pick(STRINGS).to_string(),
        7 => rng.pick(DEVICES).to_string(),
        _ => rng.pick(PUNCTUATION).to_string(),
    }
}

/// A random value, `depth` levels at most.
fn value(rng: &mut Rng, depth: usize) -> String {
    let kinds = if depth == 0 { 5 } else { 9 };
    match rng.below(kinds) {
        0 | 1 => number(rng),
        2 => rng.pick(WORDS).to_string(),
        3 => rng.pick(STRINGS).to_string(),
        4 => rng.pick(DEVICES).to_string(),
        5 => {
            let items: Vec<String> = (0..rng.below(4)).map(|_| value(rng, depth - 1)).collect();
            format!("[{}]", items.join(", "))
        }
        6 => format!("{}({})", rng.pick(WORDS), args(rng, &[], depth - 1)),
        7 => match rng.below(3) {
            0 => format!(
                "sweep [{}, {}]",
                value(rng, depth - 1),
                value(rng, depth - 1)
            ),
            1 => format!(
                "sweep range({}, {}, {})",
                rng.pick(NUMBERS),
                rng.pick(NUMBERS),
                rng.pick(NUMBERS)
            ),
            _ => format!(
                "sweep logspace({}, {}, {})",
                rng.pick(NUMBERS),
                rng.pick(NUMBERS),
                rng.pick(NUMBERS)
            ),
        },
        _ => format!("{} -> {}", value(rng, depth - 1), value(rng, depth - 1)),
    }
}

/// Random arguments, named from `names` or positional.
fn args(rng: &mut Rng, names: &[&str], depth: usize) -> String {
    let mut out = Vec::new();
    for _ in 0..rng.below(4) {
        let v = value(rng, depth);
        out.push(match (names.is_empty(), rng.below(3)) {
            (false, 0) | (false, 1) => format!("{}: {v}", rng.pick(names)),
            (true, 0) => format!("{}: {v}", rng.pick(WORDS)),
            _ => v,
        });
    }
    out.join(", ")
}

/// A random layer statement.
fn layer(rng: &mut Rng, depth: usize, label: usize) -> String {
    let kind = *rng.pick(Kind::ALL);
    let params = param_names(kind);
    let kind = kind.name();
    let mut s = String::new();
    if rng.one_in(3) {
        let _ = write!(s, "l{label}: ");
    }
    if depth > 0 && rng.one_in(6) {
        let inner: Vec<String> = (0..rng.below(4))
            .map(|i| layer(rng, depth - 1, label * 10 + i))
            .collect();
        let head = if rng.one_in(2) {
            format!("block b{label}")
        } else {
            "residual".to_string()
        };
        let _ = write!(s, "{head} {{\n{}\n}}", inner.join("\n"));
        return s;
    }
    s.push_str(kind);
    if !params.is_empty() || rng.one_in(4) {
        // Layer arguments are mostly numbers; sometimes anything.
        let mut items = Vec::new();
        for _ in 0..rng.below(params.len().max(1) + 1) {
            let v = if rng.one_in(4) {
                value(rng, 1)
            } else {
                rng.pick(NUMBERS).to_string()
            };
            items.push(if !params.is_empty() && rng.one_in(2) {
                format!("{}: {v}", rng.pick(&params))
            } else {
                v
            });
        }
        let _ = write!(s, "({})", items.join(", "));
    }
    if rng.one_in(10) {
        let _ = write!(s, " on {}", rng.pick(DEVICES));
    }
    s
}

/// A random experiment that follows the grammar, so that the checker's deeper passes see it.
fn structured(rng: &mut Rng) -> String {
    const SOURCES: &[&str] = &[
        "synthetic(inputs: normal([V]), targets: randint(V), count: V)",
        "synthetic(inputs: uniform([V, V], low: V, high: V), targets: normal([V]), count: V)",
        "synthetic(inputs: randint(V, shape: [V]), targets: randint(V), count: V)",
        "idx(\"a.idx\", labels: \"b.idx\", classes: V)",
        "npy(inputs: \"a.npy\", targets: \"b.npy\", classes: V, shape: [V])",
        "csv(\"a.csv\", target: V, header: true, classes: V)",
    ];
    const SETTINGS: &[&str] = &[
        "description V",
        "tags [V, V]",
        "seed V",
        "device V",
        "memory V V",
        "place V on V",
        "parallel data(devices: [V, V])",
        "parallel data(replicas: V)",
        "parallel pipeline(stages: V, micro_batches: V, schedule: V)",
        "parallel ddp(backend: V, world_size: V)",
        "parallel model",
        "optimizer sgd(lr: V, momentum: V, nesterov: V)",
        "optimizer adam(lr: V, betas: [V, V], eps: V)",
        "optimizer V",
        "schedule step(every: V, gamma: V)",
        "schedule cosine(warmup: V, min_lr: V)",
        "schedule one_cycle(max_lr: V, pct_start: V)",
        "schedule V",
        "compress {\n prune V l1_unstructured(amount: V)\n quantize V int4(group_size: V)\n}",
        "compress {\n prune V ln_structured(amount: V, n: V, dim: V, schedule: gradual(start: V, end: V, every: V, initial: V))\n}",
        "compress {\n prune [V, V] global_unstructured(amount: V, schedule: iterative(rounds: V, rewind: V))\n quantize V int8(granularity: V, symmetric: V, activations: V)\n}",
        "compress {\n prune V random_unstructured(amount: V, schedule: after(finetune: V))\n quantize V V\n quantize V fp8(granularity: V)\n}",
    ];
    const TRAIN: &[&str] = &[
        "epochs V",
        "steps V",
        "loss V",
        "loss cross_entropy(label_smoothing: V)",
        "metrics [accuracy, top_k(k: V), V]",
        "eval_every V",
        "early_stop(metric: V, patience: V, min_delta: V, mode: V)",
        "precision V",
        "checkpoint(every: V, keep: V)",
        "accumulate V",
        "micro_batch V",
        "clip_norm V",
        "clip_value V",
    ];
    let fill = |rng: &mut Rng, template: &str| -> String {
        let mut out = String::new();
        for (i, part) in template.split('V').enumerate() {
            if i > 0 {
                out.push_str(&if rng.one_in(3) {
                    value(rng, 2)
                } else {
                    number(rng)
                });
            }
            out.push_str(part);
        }
        out
    };
    let mut s = String::from("experiment \"fuzz\" {\n");
    for _ in 0..rng.below(5) {
        let setting = *rng.pick(SETTINGS);
        s += &fill(rng, setting);
        s.push('\n');
    }
    let source = rng.pick(SOURCES);
    let _ = writeln!(
        s,
        "data {{\n source {}\n batch {}\n}}",
        fill(rng, source),
        number(rng)
    );
    let dims: Vec<String> = (0..1 + rng.below(3))
        .map(|_| rng.pick(&NUMBERS[..24]).to_string())
        .collect();
    let _ = writeln!(s, "model {{\n input [{}]", dims.join(", "));
    for i in 0..1 + rng.below(10) {
        s += &layer(rng, 2, i);
        s.push('\n');
    }
    s.push_str("}\n");
    for _ in 0..rng.below(3) {
        let setting = *rng.pick(SETTINGS);
        s += &fill(rng, setting);
        s.push('\n');
    }
    s.push_str("train {\n");
    for _ in 0..1 + rng.below(5) {
        let setting = *rng.pick(TRAIN);
        s += &fill(rng, setting);
        s.push('\n');
    }
    s.push_str("}\n}\n");
    s
}

/// A line-oriented view of a file, for line mutations.
fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|b| *b == b'\n').collect()
}

/// Applies one random mutation.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>, corpus: &[(String, Vec<u8>)]) -> &'static str {
    let len = input.len();
    let at = |rng: &mut Rng| rng.below(len + 1);
    match rng.below(14) {
        0 if len > 0 => {
            let i = rng.below(len);
            input[i] ^= 1 << rng.below(8);
            "flip-bit"
        }
        1 if len > 0 => {
            let i = rng.below(len);
            input[i] = *rng.pick(b"{}()[]:,;->\"#\\\n 0123456789.eE_ax");
            "replace-byte"
        }
        2 if len > 0 => {
            let i = rng.below(len);
            let n = (1 + rng.below(16)).min(len - i);
            input.drain(i..i + n);
            "delete-bytes"
        }
        3 | 4 => {
            let i = at(rng);
            let t = format!(" {} ", token(rng));
            input.splice(i..i, t.into_bytes());
            "insert-token"
        }
        5 => {
            let i = at(rng);
            let v = value(rng, 2);
            input.splice(i..i, v.into_bytes());
            "insert-value"
        }
        6 | 7 => {
            // Replaces a number with an extreme one.
            let digits: Vec<usize> = (0..len)
                .filter(|&i| {
                    input[i].is_ascii_digit() && (i == 0 || !input[i - 1].is_ascii_alphanumeric())
                })
                .collect();
            if digits.is_empty() {
                return "none";
            }
            let start = *rng.pick(&digits);
            let mut end = start;
            while end < len && (input[end].is_ascii_alphanumeric() || b"._-+".contains(&input[end]))
            {
                end += 1;
            }
            input.splice(start..end, rng.pick(NUMBERS).bytes());
            "replace-number"
        }
        8 => {
            // Replaces a word with another word of the language.
            let starts: Vec<usize> = (0..len)
                .filter(|&i| {
                    input[i].is_ascii_alphabetic()
                        && (i == 0 || !input[i - 1].is_ascii_alphanumeric())
                })
                .collect();
            if starts.is_empty() {
                return "none";
            }
            let start = *rng.pick(&starts);
            let mut end = start;
            while end < len && (input[end].is_ascii_alphanumeric() || input[end] == b'_') {
                end += 1;
            }
            let word = if rng.one_in(4) {
                rng.pick(Kind::ALL).name()
            } else {
                rng.pick(WORDS)
            };
            input.splice(start..end, word.bytes());
            "replace-word"
        }
        9 => {
            let mut ls: Vec<Vec<u8>> = lines(input).into_iter().map(<[u8]>::to_vec).collect();
            if ls.is_empty() {
                return "none";
            }
            let i = rng.below(ls.len());
            let copies = if rng.one_in(8) { 50 } else { 1 };
            for _ in 0..copies {
                ls.insert(i, ls[i].clone());
            }
            *input = ls.concat();
            "duplicate-line"
        }
        10 => {
            let mut ls: Vec<&[u8]> = lines(input);
            if ls.is_empty() {
                return "none";
            }
            ls.remove(rng.below(ls.len()));
            *input = ls.concat();
            "delete-line"
        }
        11 => {
            let mut ls: Vec<&[u8]> = lines(input);
            if ls.len() < 2 {
                return "none";
            }
            let (a, b) = (rng.below(ls.len()), rng.below(ls.len()));
            ls.swap(a, b);
            *input = ls.concat();
            "swap-lines"
        }
        12 => {
            let other = &rng.pick(corpus).1;
            let cut_a = at(rng);
            let cut_b = rng.below(other.len() + 1);
            input.truncate(cut_a);
            input.extend_from_slice(&other[cut_b..]);
            "splice"
        }
        _ => {
            input.truncate(at(rng));
            "truncate"
        }
    }
}

/// Input `index` of the fuzz run: its description and bytes. Each input has its own generator,
/// seeded from the run's seed and the index, so any input can be made again alone.
fn fuzz_input(seed: u64, index: u64, corpus: &[(String, Vec<u8>)]) -> (String, Vec<u8>) {
    let mut rng = Rng::new(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    match rng.below(20) {
        0 | 1 => {
            let n = rng.below(512);
            ("random-bytes".into(), rng.bytes(n))
        }
        2 => {
            // Random UTF-8 text: any scalar value, mostly ASCII.
            let n = rng.below(256);
            let text: String = (0..n)
                .map(|_| {
                    if rng.one_in(4) {
                        char::from_u32(rng.below(0x11_0000) as u32).unwrap_or('?')
                    } else {
                        (rng.below(95) as u8 + b' ') as char
                    }
                })
                .collect();
            ("random-utf8".into(), text.into_bytes())
        }
        3..=5 => {
            let n = rng.below(200);
            let mut out = String::new();
            if rng.one_in(2) {
                out.push_str("experiment \"soup\" {\n");
            }
            for _ in 0..n {
                out.push_str(&token(&mut rng));
                out.push(*rng.pick(&[' ', ' ', ' ', '\n']));
            }
            if rng.one_in(2) {
                out.push_str("\n}\n");
            }
            ("token-soup".into(), out.into_bytes())
        }
        6..=9 => {
            let mut bytes = structured(&mut rng).into_bytes();
            let mut ops = Vec::new();
            for _ in 0..rng.below(3) {
                ops.push(mutate(&mut rng, &mut bytes, corpus));
            }
            (format!("structured, then [{}]", ops.join(", ")), bytes)
        }
        _ => {
            let (name, base) = rng.pick(corpus);
            let mut bytes = base.clone();
            let n = if rng.one_in(5) {
                4 + rng.below(12)
            } else {
                1 + rng.below(4)
            };
            let ops: Vec<&str> = (0..n)
                .map(|_| mutate(&mut rng, &mut bytes, corpus))
                .collect();
            (format!("{name}, mutated [{}]", ops.join(", ")), bytes)
        }
    }
}

/// The files to mutate: every `experiments/*.exp` and the built-in seeds.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("read experiments/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "exp"))
        .map(|p| {
            let bytes = std::fs::read(&p).expect("read an example");
            (
                format!("experiments/{}", p.file_name().unwrap().to_string_lossy()),
                bytes,
            )
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no experiments/*.exp to mutate");
    files.extend(
        SEEDS
            .iter()
            .map(|(name, text)| (name.to_string(), text.as_bytes().to_vec())),
    );
    files
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}={v} is not a number"))
        }
        Err(_) => default,
    }
}

/// Where the last panic happened and what it said; filled by the worker's panic hook.
static LAST_PANIC: Mutex<Option<(String, String)>> = Mutex::new(None);
/// The backtrace of the last panic.
static LAST_BACKTRACE: Mutex<Option<std::backtrace::Backtrace>> = Mutex::new(None);

/// The frames of the last panic's backtrace that are Kiln's (a panic in `core` is told apart by
/// its caller).
fn kiln_frames() -> Vec<String> {
    let Some(bt) = LAST_BACKTRACE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    else {
        return vec![];
    };
    bt.to_string()
        .lines()
        .map(str::trim)
        .filter(|l| l.contains("kiln::"))
        .map(|l| l.split_once(": ").map_or(l, |(_, f)| f).to_string())
        .take(8)
        .collect()
}

/// Runs one input; its number of trials, or `Err((location, message))` when it panicked.
fn try_input(bytes: &[u8]) -> Result<usize, (String, String)> {
    match catch_unwind(AssertUnwindSafe(|| exercise(bytes))) {
        Ok(trials) => Ok(trials),
        Err(payload) => {
            let caught = LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()).take();
            Err(caught.unwrap_or_else(|| ("(unknown)".into(), panic_message(&*payload))))
        }
    }
}

/// Shrinks an input while it still panics at `location`.
fn minimise(mut input: Vec<u8>, location: &str) -> Vec<u8> {
    let mut budget = 4000;
    let mut chunk = (input.len() / 2).max(1);
    loop {
        let mut i = 0;
        let mut shrunk = false;
        while i < input.len() && budget > 0 {
            budget -= 1;
            let end = (i + chunk).min(input.len());
            let mut candidate = input[..i].to_vec();
            candidate.extend_from_slice(&input[end..]);
            match try_input(&candidate) {
                Err((loc, _)) if loc == location => {
                    input = candidate;
                    shrunk = true;
                }
                _ => i += chunk,
            }
        }
        if budget == 0 || (chunk == 1 && !shrunk) {
            return input;
        }
        if !shrunk {
            chunk = (chunk / 2).max(1);
        }
    }
}

/// The fuzz loop; `fuzz_parser_and_checker` runs it in a child process. It writes the input it
/// is about to check to `current.bin` and `current.txt` in `KILN_FUZZ_DIR`, so that the parent
/// can report an input that aborts, overflows the stack or hangs.
#[test]
#[ignore = "the fuzz loop; `fuzz_parser_and_checker` runs it in a child process"]
fn fuzz_worker() {
    let dir =
        std::env::var_os("KILN_FUZZ_DIR").map_or_else(|| temp_dir("fuzz-worker"), PathBuf::from);
    let seed = env_u64("KILN_FUZZ_SEED", FUZZ_SEED);
    let start = env_u64("KILN_FUZZ_START", 0);
    let total = env_u64("KILN_FUZZ_INPUTS", FUZZ_INPUTS);
    let corpus = corpus();
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map_or_else(
            || "(unknown)".to_string(),
            |l| format!("{}:{}", l.file(), l.line()),
        );
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        *LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()) = Some((location, message));
        *LAST_BACKTRACE.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(std::backtrace::Backtrace::force_capture());
    }));
    let mut found: Vec<(String, String)> = Vec::new();
    let mut reports = String::new();
    let mut count = 0u64;
    let mut slowest: Vec<(Duration, String)> = Vec::new();
    let mut slow_reported = 0;
    // Looking past a known bug: `KILN_FUZZ_SKIP=replicas,heads` skips inputs with those words.
    let skip: Vec<String> = std::env::var("KILN_FUZZ_SKIP")
        .map(|s| {
            s.split(',')
                .filter(|w| !w.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    for index in start..total {
        let (label, input) = fuzz_input(seed, index, &corpus);
        if skip.iter().any(|w| contains(&input, w.as_bytes())) {
            continue;
        }
        std::fs::write(dir.join("current.bin"), &input).expect("write current.bin");
        std::fs::write(
            dir.join("current.txt"),
            format!("seed {seed:#x}, input {index}: {label}"),
        )
        .expect("write current.txt");
        count += 1;
        let began = Instant::now();
        let result = try_input(&input);
        let took = began.elapsed();
        if slowest.len() < 5 || took > slowest[slowest.len() - 1].0 {
            slowest.push((took, format!("input {index}: {label}")));
            slowest.sort_by_key(|s| std::cmp::Reverse(s.0));
            slowest.truncate(5);
        }
        // A sweep checks its experiment once per trial: time each trial.
        let per_trial = took / result.as_ref().map_or(1, |n| (*n).max(1) as u32);
        if per_trial > FUZZ_SLOW && slow_reported < 3 {
            slow_reported += 1;
            found.push(("slow".into(), String::new()));
            let _ = write!(
                reports,
                "SLOW: {:.1} s ({:.1} s per trial) for a {}-byte input\n  seed {seed:#x}, input {index}: {label}\n  input: {}\n",
                took.as_secs_f64(),
                per_trial.as_secs_f64(),
                input.len(),
                escaped(&input, 400)
            );
        }
        if let Err((location, message)) = result {
            let frames = kiln_frames();
            let key = format!(
                "{location} in {}",
                frames.first().map_or("?", String::as_str)
            );
            if found.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let small = minimise(input.clone(), &location);
            let _ = write!(
                reports,
                "PANIC at {location}: {message}\n  called from: {}\n  seed {seed:#x}, input {index}: {label}\n  input ({} bytes): {}\n  minimised ({} bytes): {}\n",
                frames.join(" <- "),
                input.len(),
                escaped(&input, 400),
                small.len(),
                escaped(&small, 400)
            );
            found.push((key, message));
        }
    }
    let slowest: Vec<String> = slowest
        .iter()
        .map(|(t, what)| format!("  {:.1} ms  {what}", t.as_secs_f64() * 1e3))
        .collect();
    std::fs::write(dir.join("slowest.txt"), slowest.join("\n")).expect("write slowest.txt");
    std::fs::write(dir.join("done.txt"), format!("{count}")).expect("write done.txt");
    std::fs::write(dir.join("panics.txt"), &reports).expect("write panics.txt");
    // The recording hook would swallow this test's own failure message.
    drop(std::panic::take_hook());
    assert!(found.is_empty(), "{reports}");
}

/// Starts the fuzz worker from input `start`, under a memory limit where `sh` can set one.
fn spawn_worker(dir: &Path, start: u64, seed: u64, total: u64) -> Child {
    let exe = std::env::current_exe().expect("the test executable");
    let test_args = [
        "fuzz_worker",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ];
    let mut cmd = if cfg!(unix) && Path::new("/bin/sh").exists() {
        let mut c = Command::new("/bin/sh");
        c.arg("-c")
            .arg(format!(
                "ulimit -v {FUZZ_MEMORY_KIB} 2>/dev/null; ulimit -c 0 2>/dev/null; exec \"$0\" \"$@\""
            ))
            .arg(&exe)
            .args(test_args);
        c
    } else {
        let mut c = Command::new(&exe);
        c.args(test_args);
        c
    };
    let _ = std::fs::remove_file(dir.join("current.txt"));
    let _ = std::fs::remove_file(dir.join("done.txt"));
    cmd.env("KILN_FUZZ_DIR", dir)
        .env("KILN_FUZZ_SEED", seed.to_string())
        .env("KILN_FUZZ_START", start.to_string())
        .env("KILN_FUZZ_INPUTS", total.to_string())
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(File::create(dir.join("worker.log")).expect("create worker.log"))
        .stderr(File::create(dir.join("worker.err")).expect("create worker.err"))
        .spawn()
        .expect("start the fuzz worker")
}

/// The index in `current.txt` (`seed 0x.., input N: ...`).
fn current_index(text: &str) -> Option<u64> {
    let rest = text.split("input ").nth(1)?;
    rest.split(':').next()?.trim().parse().ok()
}

#[test]
fn fuzz_parser_and_checker() {
    let seed = env_u64("KILN_FUZZ_SEED", FUZZ_SEED);
    let total = env_u64("KILN_FUZZ_INPUTS", FUZZ_INPUTS);
    let max_failures = env_u64("KILN_FUZZ_MAX_FAILURES", 4);
    let dir = temp_dir("fuzz");
    let mut failures: Vec<String> = Vec::new();
    let mut checked = 0u64;
    let mut start = 0u64;
    let began = Instant::now();
    while start < total {
        let mut child = spawn_worker(&dir, start, seed, total);
        let mut seen = String::new();
        let mut since = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the worker") {
                break Some(status);
            }
            let now = read_lossy(&dir.join("current.txt"));
            if now != seen {
                seen = now;
                since = Instant::now();
            } else if since.elapsed() > FUZZ_HANG_GUARD {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let done = read_lossy(&dir.join("done.txt"));
        if let Ok(n) = done.trim().parse::<u64>() {
            // The worker got through: any panics it found are in panics.txt.
            checked += n;
            eprintln!(
                "fuzz: the slowest inputs of the last worker:\n{}",
                read_lossy(&dir.join("slowest.txt"))
            );
            let panics = read_lossy(&dir.join("panics.txt"));
            if !panics.is_empty() {
                failures.push(panics);
            }
            break;
        }
        // The worker died or hung on the input it was checking.
        let current = read_lossy(&dir.join("current.txt"));
        let input = std::fs::read(dir.join("current.bin")).unwrap_or_default();
        let Some(index) = current_index(&current) else {
            failures.push(format!(
                "the fuzz worker failed before its first input ({}):\n{}",
                status.as_ref().map_or("hung".into(), describe),
                tail(&read_lossy(&dir.join("worker.err")), 2000)
            ));
            break;
        };
        let saved = dir.join(format!("failure-{index}.exp"));
        let _ = std::fs::write(&saved, &input);
        let what = match &status {
            None => format!("HANG: no progress for {FUZZ_HANG_GUARD:?}"),
            Some(s) => format!("CRASH: {}", describe(s)),
        };
        let stderr = read_lossy(&dir.join("worker.err"));
        failures.push(format!(
            "{what}\n  {current}\n  input ({} bytes, saved as {}): {}\n  worker stderr: {}\n",
            input.len(),
            saved.display(),
            escaped(&input, 400),
            tail(&stderr, 800).trim()
        ));
        checked += index + 1 - start;
        start = index + 1;
        if failures.len() as u64 >= max_failures {
            failures.push(format!(
                "stopped after {} failures, at input {start} of {total}",
                failures.len()
            ));
            break;
        }
    }
    eprintln!(
        "fuzz: {checked} inputs (seed {seed:#x}) in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        panic!(
            "the fuzz run found problems (files in {}; rerun with KILN_FUZZ_SEED={seed:#x}):\n\n{}",
            dir.display(),
            failures.join("\n")
        );
    }
    assert!(
        checked >= 10_000,
        "only {checked} fuzz inputs were checked; at least 10,000 are required"
    );
}
