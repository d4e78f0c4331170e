//! What every test shares, the integration tests (through `tests/support`) and the crate's own
//! unit tests alike (the library and `kiln-runtime` include this file with `#[path]`): the
//! repository's root, scratch directories and the project's Python.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh, empty scratch directory for one test, named after it. Test processes never share
/// one (the process id is part of the name); within a process, each test names its own.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// `.venv/bin/python`, which has the pinned torch; a missing one fails `test` (named in the
/// message), never skips it.
pub fn python(test: &str) -> PathBuf {
    let python = root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{test} needs PyTorch in the project's virtualenv, and `{}` is missing: run \
         `bash scripts/quickstart.sh` (or scripts/setup.sh) to create it",
        python.display()
    );
    python
}

/// One CPU thread on both sides: the same kernels in the same order.
pub const SINGLE_THREADED: [(&str, &str); 2] = [("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")];

/// `.venv/bin/python` set to run a reference script: torch on one thread (as the tests run
/// libtorch), and `tests/support` on its path for the shared `torchref` module.
pub fn python_command(test: &str) -> Command {
    let mut c = Command::new(python(test));
    c.env("PYTHONPATH", root().join("tests/support"))
        .envs(SINGLE_THREADED);
    c
}

/// Runs the reference script `script` (relative to the repository's root) with `args` through
/// [`python_command`] and returns the JSON it prints; a failing script fails `test` with its
/// standard error.
pub fn python_json(test: &str, script: &str, args: &[&str]) -> serde_json::Value {
    let out = python_command(test)
        .arg(root().join(script))
        .args(args)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "{test}: {script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the script prints JSON")
}
