//! The project's Python, which has the pinned torch: the parity tests compute their references
//! with it. Only tests use it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `.venv/bin/python`; a missing one fails `test` (named in the message), never skips it.
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

/// `.venv/bin/python` set to run a reference script: torch on one thread (as the tests run
/// libtorch), and `tests/support` on its path for the shared `torchref` module.
pub fn python_command(test: &str) -> Command {
    let mut c = Command::new(python(test));
    c.env("PYTHONPATH", root().join("tests/support"))
        .envs([("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")]);
    c
}
