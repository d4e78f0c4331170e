//! `kiln fmt` and the formatter: on every example and valid corpus file, and on fuzzed inputs,
//! formatting is idempotent, keeps every comment in order and keeps the file's meaning (its
//! diagnostics' codes and the plan of every trial); `kiln fmt --check` answers with its exit code.

mod support;

use std::path::{Path, PathBuf};

use kiln::check::{check_path, check_text, FsLoader, Loader, Options};
use kiln::datafile::{Format, Probe};
use kiln::diagnostic::problem::Unreadable;
use kiln::syntax::format;
use support::formatting::{formatted, meaning};

/// Reads the file system, except one file whose text is replaced.
struct Overlay {
    path: PathBuf,
    text: String,
}

impl Loader for Overlay {
    fn read(&self, path: &Path) -> Result<Vec<u8>, Unreadable> {
        if FsLoader.canonical(path) == self.path {
            Ok(self.text.clone().into_bytes())
        } else {
            FsLoader.read(path)
        }
    }

    fn canonical(&self, path: &Path) -> PathBuf {
        FsLoader.canonical(path)
    }

    fn data_header(&self, path: &Path, format: &Format) -> Probe {
        FsLoader.data_header(path, format)
    }
}

fn corpus() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["experiments", "tests/mistakes/valid"] {
        for entry in std::fs::read_dir(support::root().join(dir)).expect("corpus dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "exp") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() > 30, "the corpus is missing");
    files
}

#[test]
fn examples_format_idempotently_with_comments_and_meaning_kept() {
    for path in corpus() {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(&path).expect("read");
        let out = formatted(&name, &text);
        let original = check_path(&path, &FsLoader, &Options::default());
        let overlay = Overlay {
            path: FsLoader.canonical(&path),
            text: out,
        };
        let reformatted = check_path(&path, &overlay, &Options::default());
        assert!(!original.trials.is_empty(), "{name}: no trial");
        assert_eq!(meaning(&original), meaning(&reformatted), "{name}");
    }
}

#[test]
fn the_examples_are_formatted() {
    for path in support::root().join("experiments").read_dir().expect("dir") {
        let path = path.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(format(&text).ok(), Some(text), "{}", path.display());
    }
}

/// A deterministic PRNG (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n as u64) as usize
    }
}

/// Text spliced into files: layout, separators, comments, continuations.
const SPLICES: [&str; 19] = [
    "\n",
    "\n\n",
    "  ",
    " # fuzz\n",
    "# a # b\n",
    ",",
    ";",
    "\\\n",
    "(",
    ")",
    "[",
    "]",
    "\r\n",
    "\t",
    "\r",
    "\u{FEFF}",
    " \"#\" ",
    "{",
    "}",
];

#[test]
fn fuzzed_inputs_that_parse_format_idempotently_and_keep_comments_and_meaning() {
    let seeds: Vec<String> = corpus()
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("read"))
        .collect();
    let mut rng = Rng(0x6b69_6c6e_666d_7421);
    let (mut tried, mut parsed) = (0, 0);
    while tried < 3000 {
        let mut text = seeds[rng.below(seeds.len())].clone().into_bytes();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(text.len() + 1);
            match rng.below(3) {
                0 if at < text.len() => {
                    text.remove(at);
                }
                _ => {
                    let splice = SPLICES[rng.below(SPLICES.len())].as_bytes();
                    text.splice(at..at, splice.iter().copied());
                }
            }
        }
        let Ok(text) = String::from_utf8(text) else {
            continue;
        };
        tried += 1;
        if kiln::syntax::parse(kiln::span::FileId(0), &text).is_err() {
            continue;
        }
        parsed += 1;
        let out = formatted(&format!("fuzzed input {text:?}"), &text);
        assert_eq!(
            meaning(&check_text("fuzz.exp", text.clone())),
            meaning(&check_text("fuzz.exp", out.clone())),
            "meaning changed: {text:?} -> {out:?}"
        );
    }
    assert!(parsed > 300, "only {parsed} fuzzed inputs parse");
}

#[test]
fn check_exits_one_on_unformatted_files_and_fmt_rewrites_them() {
    let dir = support::scratch("fmt-check");
    let good = "experiment \"a\" {\n  seed 1  # kept\n}\n";
    let bad = "experiment \"a\" {   seed 1 ;  # kept\n  data {batch 2}}\n";
    support::write(&dir, "good.exp", good);
    std::fs::create_dir(dir.join("sub")).expect("sub");
    support::write(&dir.join("sub"), "bad.exp", bad);
    let clean = support::run(&["fmt", "--check", support::s(&dir.join("good.exp"))]);
    assert_eq!(clean.status.code(), Some(0), "{}", support::text(&clean));
    let dirty = support::run(&["fmt", "--check", support::s(&dir)]);
    assert_eq!(dirty.status.code(), Some(1), "{}", support::text(&dirty));
    assert!(String::from_utf8_lossy(&dirty.stdout).contains("bad.exp"));
    assert!(!String::from_utf8_lossy(&dirty.stdout).contains("good.exp"));
    let bad_path = dir.join("sub").join("bad.exp");
    assert_eq!(std::fs::read_to_string(&bad_path).expect("read"), bad);
    let fixed = support::run(&["fmt", support::s(&dir)]);
    assert_eq!(fixed.status.code(), Some(0), "{}", support::text(&fixed));
    assert_eq!(
        std::fs::read_to_string(&bad_path).expect("read"),
        "experiment \"a\" {\n  seed 1  # kept\n  data {\n    batch 2\n  }\n}\n"
    );
    let names: Vec<_> = std::fs::read_dir(dir.join("sub")).expect("dir").collect();
    assert_eq!(names.len(), 1, "a temporary file is left");
    let again = support::run(&["fmt", "--check", support::s(&dir)]);
    assert_eq!(again.status.code(), Some(0), "{}", support::text(&again));
}

#[test]
fn a_file_that_does_not_parse_is_reported_and_the_others_formatted() {
    let dir = support::scratch("fmt-broken");
    let broken = support::write(&dir, "a.exp", "experiment \"a\" {\n  seed (1\n");
    let fine = support::write(&dir, "b.exp", "experiment \"b\" {seed 1}\n");
    let out = support::run(&["fmt", support::s(&dir)]);
    assert_eq!(out.status.code(), Some(1), "{}", support::text(&out));
    assert!(
        support::text(&out).contains("K0"),
        "{}",
        support::text(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&broken).expect("read"),
        "experiment \"a\" {\n  seed (1\n"
    );
    assert_eq!(
        std::fs::read_to_string(&fine).expect("read"),
        "experiment \"b\" {\n  seed 1\n}\n"
    );
}

#[test]
fn fmt_spaces_every_argument_alike() {
    // A digit after an argument's colon (`train:0.8`, `lr:1e-3`) was read as one word, like a
    // device's `cuda:0`, and left without the space every other argument gets.
    let dir = support::scratch("fmt-arguments");
    let text = "experiment \"a\" {\n  data {\n    source synthetic(inputs: normal([8]), targets: randint(2), count:64)\n    split(train:0.8, val:0.2)\n    batch 8\n  }\n  model {\n    input [8]\n    linear(2)\n  }\n  device cuda:0\n  optimizer adam(lr:1e-3, weight_decay:0)\n  train {\n    steps 4\n    loss cross_entropy\n  }\n}\n";
    let file = support::write(&dir, "a.exp", text);
    let out = support::run(&["fmt", support::s(&file)]);
    assert_eq!(out.status.code(), Some(0), "{}", support::text(&out));
    let formatted = std::fs::read_to_string(&file).expect("read");
    for line in [
        "    source synthetic(inputs: normal([8]), targets: randint(2), count: 64)\n",
        "    split(train: 0.8, val: 0.2)\n",
        "  device cuda:0\n",
        "  optimizer adam(lr: 1e-3, weight_decay: 0)\n",
    ] {
        assert!(formatted.contains(line), "{line:?} not in\n{formatted}");
    }
    let again = support::run(&["fmt", "--check", support::s(&file)]);
    assert_eq!(again.status.code(), Some(0), "{}", support::text(&again));
}
