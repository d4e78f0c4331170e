//! The mistakes corpus: realistic mistakes, one per file, and unusual files that are valid.
//!
//! Every `tests/mistakes/*.exp` is an otherwise valid experiment with one mistake in it, the kind
//! people make when they come from YAML or JSON configs, PyTorch scripts, torchrun or Lightning.
//! Its first line says what is wrong and where the user will have to edit, in a fixed form:
//!
//! ```text
//! # expect K0303 line 31: binary classifier: `bce_with_logits` on 1 output with class-index targets
//! ```
//!
//! A mistake is caught when a diagnostic with that code has its primary span on that line of that
//! file. At least [`MIN_CAUGHT`] of the mistakes must be caught; every miss is listed. Every
//! `tests/mistakes/valid/*.exp` is unusual but valid (odd layouts, unicode, every strategy,
//! compression combinations, positional names, placement precedence) and must check with no
//! diagnostic at all, not even a warning; so must the bases the corpus extends
//! (`tests/mistakes/bases/`, `tests/mistakes/valid/bases/`). The small data files the corpus
//! reads are in `tests/mistakes/data/`, written by its `make.py`.

use std::path::{Path, PathBuf};
use std::sync::Once;

use kiln::check::{check_path, Checked, FsLoader, Options};
use kiln::diagnostic::Code;

/// The mistakes, relative to the crate root.
const MISTAKES: &str = "tests/mistakes";

/// The unusual but valid files.
const VALID: &str = "tests/mistakes/valid";

/// Folders of bases that the corpus extends; they must check clean too.
const BASES: &[&str] = &["tests/mistakes/bases", "tests/mistakes/valid/bases"];

/// The fewest mistakes the corpus may hold.
const MIN_MISTAKES: usize = 60;

/// The fewest valid files the corpus may hold.
const MIN_VALID: usize = 15;

/// The share of mistakes that must be caught at the expected line.
const MIN_CAUGHT: f64 = 0.98;

/// Makes the crate root the working directory, so relative paths resolve as in `tests/golden.rs`.
fn at_crate_root() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).expect("cannot enter the crate root");
    });
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

/// Checks `path` (relative to the crate root) from disk.
fn check(path: &Path) -> Checked {
    at_crate_root();
    check_path(path, &FsLoader, &Options::default())
}

/// What a mistake file's header expects.
#[derive(Debug)]
struct Expectation {
    /// The code, as in `K0303`.
    code: String,
    /// The 1-based line the user will have to edit.
    line: usize,
}

/// Reads the header `# expect KNNNN line N: what the user did wrong` of a mistake file.
fn expectation(path: &Path) -> Result<Expectation, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    let first = text.lines().next().unwrap_or("");
    let bad = |why: &str| {
        format!(
            "{}: {why}; the first line must read `# expect KNNNN line N: what is wrong`, found `{first}`",
            path.display()
        )
    };
    let rest = first
        .strip_prefix("# expect ")
        .ok_or_else(|| bad("no `# expect ` header"))?;
    let (code, rest) = rest
        .split_once(" line ")
        .ok_or_else(|| bad("no ` line `"))?;
    let (line, what) = rest
        .split_once(": ")
        .ok_or_else(|| bad("no `: ` after the line"))?;
    let code_ok =
        code.len() == 5 && code.starts_with('K') && code[1..].chars().all(|c| c.is_ascii_digit());
    if !code_ok {
        return Err(bad("the code is not `K` and four digits"));
    }
    let line: usize = line.parse().map_err(|_| bad("the line is not a number"))?;
    if line < 2 || line > text.lines().count() {
        return Err(bad(
            "the line is the header itself or beyond the end of the file",
        ));
    }
    if what.trim().is_empty() {
        return Err(bad("the mistake is not described"));
    }
    Ok(Expectation {
        code: code.to_string(),
        line,
    })
}

/// Whether two paths name the same file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Every diagnostic of a check as `K0101@12 (message)`, with the file when it is another one.
fn reported(checked: &Checked, path: &Path) -> String {
    let all: Vec<String> = checked
        .diagnostics
        .iter()
        .map(|d| {
            let span = d.primary.span;
            let file = &checked.sources.get(span.file).path;
            let at = checked.sources.line_col(span.file, span.start).line;
            let whose = if same_file(file, path) {
                String::new()
            } else {
                format!(" in {}", file.display())
            };
            format!("{}@{at}{whose} ({})", d.code.code(), d.message)
        })
        .collect();
    if all.is_empty() {
        "nothing".to_string()
    } else {
        all.join("; ")
    }
}

/// Whether a diagnostic with the expected code has its primary span on the expected line.
fn caught(checked: &Checked, path: &Path, want: &Expectation) -> bool {
    checked.diagnostics.iter().any(|d| {
        let span = d.primary.span;
        d.code.code() == want.code
            && checked.sources.line_col(span.file, span.start).line == want.line
            && same_file(&checked.sources.get(span.file).path, path)
    })
}

#[test]
fn mistakes_are_caught_at_the_line_to_edit() {
    let files = exp_files(MISTAKES);
    assert!(
        files.len() >= MIN_MISTAKES,
        "the corpus holds {} mistakes, fewer than {MIN_MISTAKES}",
        files.len()
    );
    let mut bad_headers = Vec::new();
    let mut misses = Vec::new();
    for path in &files {
        let want = match expectation(path) {
            Ok(want) => want,
            Err(e) => {
                bad_headers.push(e);
                continue;
            }
        };
        let checked = check(path);
        if !caught(&checked, path, &want) {
            let known = Code::ALL.iter().any(|c| c.code() == want.code);
            let note = if known {
                ""
            } else {
                " (a code this checker does not have)"
            };
            misses.push(format!(
                "{:<44} expected {}@{}{note}, reported: {}",
                path.file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                want.code,
                want.line,
                reported(&checked, path)
            ));
        }
    }
    assert!(
        bad_headers.is_empty(),
        "mistake files without a readable expectation:\n{}",
        bad_headers.join("\n")
    );
    let total = files.len();
    let hits = total - misses.len();
    let ratio = hits as f64 / total as f64;
    let table = misses.join("\n");
    if ratio >= MIN_CAUGHT {
        println!("{hits} of {total} mistakes caught at the expected line; missed:\n{table}");
    }
    assert!(
        ratio >= MIN_CAUGHT,
        "{hits} of {total} mistakes ({:.1}%) caught at the expected line, fewer than {:.0}%; missed:\n{table}",
        ratio * 100.0,
        MIN_CAUGHT * 100.0
    );
}

#[test]
fn valid_files_check_clean() {
    let files = exp_files(VALID);
    assert!(
        files.len() >= MIN_VALID,
        "the corpus holds {} valid files, fewer than {MIN_VALID}",
        files.len()
    );
    let bases: Vec<PathBuf> = BASES.iter().flat_map(|dir| exp_files(dir)).collect();
    assert!(!bases.is_empty(), "the corpus's bases are missing");
    let unclean: Vec<String> = files
        .iter()
        .chain(&bases)
        .filter_map(|path| {
            let checked = check(path);
            (!checked.diagnostics.is_empty())
                .then(|| format!("{}: {}", path.display(), reported(&checked, path)))
        })
        .collect();
    assert!(
        unclean.is_empty(),
        "{} of {} valid files (bases included) do not check clean:\n{}",
        unclean.len(),
        files.len() + bases.len(),
        unclean.join("\n")
    );
}
