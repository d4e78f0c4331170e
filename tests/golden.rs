//! Golden tests for the diagnostics.
//!
//! Every `tests/diagnostics/*.exp` file (top level only; `bases/` holds `extends` bases and
//! `multi/` holds files that are checked by their own tests) is checked with its path relative
//! to the crate root, so the output does not depend on where the repository lives. Its
//! diagnostics as `kiln check --format json` gives them (code, message, spans, labels, help,
//! fixes) must equal the checked-in `<same stem>.json`. For a representative set of codes
//! ([`TEXT_GOLDENS`]) the diagnostics drawn as `kiln check` draws them, without colour at 100
//! columns and separated by one blank line, must also equal `<same stem>.out`; the other goldens
//! have no `.out`, so a change to how reports are drawn touches only those few files.
//!
//! Each golden is named `<CODE>-<name>.exp` (optionally `<CODE>-<name>-<more>.exp`) after the
//! code it exists for, and its diagnostics must include that code, so a golden cannot silently
//! stop testing it.
//!
//! A golden whose header comments hold `# --device-memory DEVICE=BYTES` is checked with that
//! capacity, as `kiln check --device-memory` gives it.
//!
//! To (re)write the `.json` and `.out` files after an intended change, run
//! `KILN_BLESS=1 cargo test --release --test golden`, then read every changed file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Once;

use kiln::check::{check_path, Checked, FsLoader, Options};
use kiln::diagnostic::render::{to_json, to_text, Style};
use kiln::diagnostic::Code;
use kiln::ir::Device;

/// The folder of golden files, relative to the crate root.
const DIR: &str = "tests/diagnostics";

/// How the goldens are drawn: no colour, 100 columns.
const STYLE: Style = Style {
    color: false,
    width: 100,
};

/// The goldens whose drawn text is kept too: syntax, unknown names, values, shapes,
/// strategies and warnings, a problem with labels in two files, and `multi/five-errors`.
const TEXT_GOLDENS: &[&str] = &[
    "K0001-syntax-error",
    "K0001-syntax-error-yaml-colon",
    "K0004-nesting-too-deep",
    "K0101-unknown-keyword",
    "K0101-unknown-keyword-wrong-block",
    "K0102-unknown-layer",
    "K0106-unknown-parameter",
    "K0114-unknown-reference",
    "K0118-duplicate-setting",
    "K0119-wrong-type",
    "K0121-out-of-range",
    "K0123-extends-cycle",
    "K0205-batch-arithmetic",
    "K0210-inconsistent-strategy",
    "K0301-shape-mismatch",
    "K0402-memory-exceeded",
    "K0404-no-op-layer",
];

/// Codes that no source file can provoke, so they have no golden `.exp`.
const NO_GOLDEN: &[(Code, &str)] = &[
    // An unreadable file has no text to put in a golden: `unreadable_file_is_k0003` checks a
    // path that does not exist instead.
    (Code::Io, "tested by `unreadable_file_is_k0003`"),
    // Kiln's own failures (a panic caught by the command line) are not a property of any
    // input file; a file that provoked one would be a bug to fix, not a golden to keep.
    (Code::Internal, "raised only when Kiln itself fails"),
    // Runtime failures happen while a run trains, not while a file is checked: `tests/run.rs`
    // provokes each one and checks its code, span and exit status.
    (
        Code::DeviceUnavailable,
        "a runtime failure, tested in tests/run.rs",
    ),
    (
        Code::DataMissing,
        "a runtime failure, tested in tests/run.rs",
    ),
    (
        Code::DataInvalid,
        "a runtime failure, tested in tests/run.rs",
    ),
    (
        Code::NonFiniteLoss,
        "a runtime failure, tested in tests/run.rs",
    ),
    (
        Code::WeightlessBatch,
        "a runtime failure, tested in tests/loss_exact.rs",
    ),
    (
        Code::OutOfMemory,
        "a runtime failure, tested in tests/run.rs",
    ),
    (
        Code::Interrupted,
        "a runtime failure, tested in tests/run.rs",
    ),
    (
        Code::ResumeIncompatible,
        "a runtime failure, tested in tests/resume.rs",
    ),
    (
        Code::TorchError,
        "a runtime failure, tested in tests/run.rs",
    ),
    (Code::RunIo, "a runtime failure, tested in tests/run.rs"),
    (
        Code::RunDirTaken,
        "a runtime failure, tested in tests/resume.rs",
    ),
    (
        Code::CheckpointDamaged,
        "a runtime warning, tested in tests/resume.rs",
    ),
    (
        Code::StaleLock,
        "a runtime warning, tested in tests/resume.rs",
    ),
    (
        Code::RuntimeKilled,
        "a runtime failure, tested in tests/signals.rs",
    ),
    (
        Code::RankFailed,
        "a runtime failure, tested in tests/ddp.rs",
    ),
    (
        Code::RendezvousFailed,
        "a runtime failure, tested in tests/ddp.rs",
    ),
    (
        Code::RanksDiffer,
        "a runtime failure, tested in tests/ddp.rs",
    ),
    (
        Code::BackendUnavailable,
        "a runtime failure: NCCL needs CUDA devices",
    ),
    (
        Code::NoWeights,
        "a failure of kiln eval, tested in tests/eval.rs",
    ),
    (
        Code::WeightsMismatch,
        "a failure of kiln eval, tested in tests/eval.rs",
    ),
    (
        Code::SplitEmpty,
        "a failure of kiln eval, tested in tests/eval.rs",
    ),
    (
        Code::ExportNotEvaluable,
        "a failure of kiln eval, tested in tests/eval_weights.rs",
    ),
    (
        Code::ShorterThanTrained,
        "a runtime failure, tested in tests/extend.rs and tests/resume.rs",
    ),
    (
        Code::NotExtendable,
        "a runtime failure, tested in tests/extend.rs",
    ),
    (
        Code::RunComplete,
        "a runtime warning, tested in tests/extend.rs and tests/resume.rs",
    ),
    (
        Code::NotGenerative,
        "a failure of kiln generate, tested in tests/streams.rs",
    ),
];

/// Makes the crate root the working directory, so relative paths resolve and print the same on
/// every machine. Every test calls it; they all set the same directory.
fn at_crate_root() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).expect("cannot enter the crate root");
    });
}

fn blessing() -> bool {
    std::env::var_os("KILN_BLESS").is_some_and(|v| v == "1")
}

/// Checks `path` (relative to the crate root) from disk, with the capacities its header
/// comments give as `kiln check --device-memory` would (`# --device-memory cpu=41943040`: a
/// device and a number of bytes).
fn check(path: &Path) -> Checked {
    at_crate_root();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let device_memory = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("# --device-memory "))
        .map(|v| {
            let (device, bytes) = v.trim().split_once('=').expect("DEVICE=BYTES");
            let device = match device.strip_prefix("cuda:") {
                Some(i) => Device::Cuda(i.parse().expect("a CUDA index")),
                None => Device::Cpu,
            };
            (device, bytes.parse().expect("a number of bytes"))
        })
        .collect();
    let options = Options {
        device_memory,
        ..Options::default()
    };
    check_path(path, &FsLoader, &options)
}

/// Every diagnostic drawn as text, one blank line between them.
fn render(checked: &Checked) -> String {
    let blocks: Vec<String> = checked
        .diagnostics
        .iter()
        .map(|d| to_text(d, &checked.sources, STYLE).trim_end().to_string())
        .collect();
    if blocks.is_empty() {
        String::new()
    } else {
        blocks.join("\n\n") + "\n"
    }
}

/// Every diagnostic as `kiln check --format json` prints it, as one pretty-printed array.
fn render_json(checked: &Checked) -> String {
    let all: Vec<_> = checked
        .diagnostics
        .iter()
        .map(|d| to_json(d, &checked.sources))
        .collect();
    serde_json::to_string_pretty(&all).expect("diagnostics serialise") + "\n"
}

/// Whether `exp` keeps its drawn text as a golden.
fn keeps_text(exp: &Path) -> bool {
    let stem = exp.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    TEXT_GOLDENS.contains(&stem) || exp.starts_with(Path::new(DIR).join("multi"))
}

/// The codes of a check's diagnostics, as in `K0102`.
fn codes(checked: &Checked) -> BTreeSet<&'static str> {
    checked.diagnostics.iter().map(|d| d.code.code()).collect()
}

/// The `.exp` files directly in `dir`, sorted, as paths relative to the crate root.
fn exp_files(dir: &str) -> Vec<PathBuf> {
    at_crate_root();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list `{dir}`: {e}"))
        .map(|entry| entry.expect("cannot read a directory entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "exp"))
        .collect();
    files.sort();
    files
}

/// The code a golden file is named after: `K0102-unknown-layer.exp` is for K0102.
fn code_of(exp: &Path) -> Result<Code, String> {
    let stem = exp
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or_else(|| format!("{}: the file name is not UTF-8", exp.display()))?;
    let code_text = stem.split('-').next().unwrap_or(stem);
    let code = Code::ALL
        .iter()
        .copied()
        .find(|c| c.code() == code_text)
        .ok_or_else(|| {
            format!(
                "{}: the name must start with a diagnostic code, as in `K0102-unknown-layer.exp`",
                exp.display()
            )
        })?;
    let expected = format!("{}-{}", code.code(), code.name());
    let rest = &stem[expected.len().min(stem.len())..];
    if !stem.starts_with(&expected) || !(rest.is_empty() || rest.starts_with('-')) {
        return Err(format!(
            "{}: a golden for {} must be named `{expected}.exp` (or `{expected}-<more>.exp`)",
            exp.display(),
            code.code()
        ));
    }
    Ok(code)
}

/// Compares the output of `exp` with `<same stem>.<ext>`, or writes it when blessing. Returns a
/// description of the mismatch.
fn compare_golden(exp: &Path, ext: &str, actual: &str) -> Result<(), String> {
    let out = exp.with_extension(ext);
    if blessing() {
        std::fs::write(&out, actual)
            .unwrap_or_else(|e| panic!("cannot write `{}`: {e}", out.display()));
        return Ok(());
    }
    let expected = match std::fs::read_to_string(&out) {
        Ok(text) => text,
        Err(e) => {
            return Err(format!(
                "{}: cannot read `{}` ({e}); run with KILN_BLESS=1 to create it\n--- actual ---\n{actual}",
                exp.display(),
                out.display()
            ))
        }
    };
    if expected == actual {
        return Ok(());
    }
    Err(format!(
        "{}: the diagnostics differ from `{}` (`-` expected, `+` actual; rerun with KILN_BLESS=1 \
         to accept them after reading them)\n{}",
        exp.display(),
        out.display(),
        diff(&expected, actual)
    ))
}

/// A line diff of two texts, from their longest common subsequence of lines.
fn diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    // lcs[i][j]: length of the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut out = String::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!("  {}\n", a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!("+ {}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("- {}\n", a[i]));
            i += 1;
        }
    }
    if a == b {
        // Same lines, so the difference is in line endings or the final newline.
        out.push_str(&format!(
            "(the texts differ only in line endings or the final newline: expected {:?}, actual {:?})\n",
            &expected[expected.len().saturating_sub(20)..],
            &actual[actual.len().saturating_sub(20)..]
        ));
    }
    out
}

#[test]
fn goldens_match() {
    let files = exp_files(DIR);
    assert!(!files.is_empty(), "no golden files in `{DIR}`");
    let mut failures = Vec::new();
    for exp in &files {
        let code = match code_of(exp) {
            Ok(c) => c,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        let checked = check(exp);
        let actual = render(&checked);
        let json = render_json(&checked);
        let found = codes(&checked);
        if !found.contains(code.code()) {
            failures.push(format!(
                "{}: the file exists to provoke {} ({}), but its diagnostics are {:?}\n--- actual ---\n{actual}",
                exp.display(),
                code.code(),
                code.name(),
                found
            ));
        }
        if let Err(e) = compare_golden(exp, "json", &json) {
            failures.push(e);
        }
        if keeps_text(exp) {
            if let Err(e) = compare_golden(exp, "out", &actual) {
                failures.push(e);
            }
        } else if exp.with_extension("out").exists() {
            failures.push(format!(
                "{}: `{}` is not in TEXT_GOLDENS, so its `.out` is stale: delete it or list it",
                exp.display(),
                exp.with_extension("out").display()
            ));
        }
    }
    let listed: Vec<&&str> = TEXT_GOLDENS
        .iter()
        .filter(|s| {
            !files
                .iter()
                .any(|f| f.file_stem().is_some_and(|f| f == **s))
        })
        .collect();
    if !listed.is_empty() {
        failures.push(format!(
            "TEXT_GOLDENS names goldens that do not exist: {listed:?}"
        ));
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden files failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_code_has_a_golden() {
    let files = exp_files(DIR);
    let covered: BTreeSet<Code> = files.iter().filter_map(|f| code_of(f).ok()).collect();
    let missing: Vec<String> = Code::ALL
        .iter()
        .filter(|c| !covered.contains(c))
        .filter(|c| !NO_GOLDEN.iter().any(|(x, _)| x == *c))
        .map(|c| format!("{DIR}/{}-{}.exp", c.code(), c.name()))
        .collect();
    assert!(
        missing.is_empty(),
        "codes without a golden file; add one that provokes each:\n{}",
        missing.join("\n")
    );
    // An exception that has a golden after all should leave the list.
    for (code, why) in NO_GOLDEN {
        assert!(
            !covered.contains(code),
            "{} has a golden file but is listed as having none ({why})",
            code.code()
        );
    }
}

#[test]
fn unreadable_file_is_k0003() {
    let path = Path::new(DIR).join("no-such-file.exp");
    let checked = check(&path);
    assert_eq!(
        codes(&checked),
        BTreeSet::from([Code::Io.code()]),
        "checking a missing file"
    );
    let text = render(&checked);
    assert!(
        text.contains("K0003(unreadable-file)") && text.contains("no-such-file.exp"),
        "the report names the code and the path:\n{text}"
    );
}

#[test]
fn five_errors_in_one_pass() {
    let exp = Path::new(DIR).join("multi/five-errors.exp");
    let checked = check(&exp);
    let want = BTreeSet::from([
        Code::UnknownLayer.code(),
        Code::OutOfRange.code(),
        Code::UnknownOptimizer.code(),
        Code::ShapeMismatch.code(),
        Code::DuplicateSetting.code(),
    ]);
    let found = codes(&checked);
    let actual = render(&checked);
    assert!(
        want.is_subset(&found),
        "expected all of {want:?} in one check, found {found:?}\n--- actual ---\n{actual}"
    );
    for (ext, text) in [("out", actual), ("json", render_json(&checked))] {
        if let Err(e) = compare_golden(&exp, ext, &text) {
            panic!("{e}");
        }
    }
}
