//! Kiln: declarative deep-learning experiments, checked statically and run on libtorch.
//!
//! The pipeline is `syntax` (text to a tree with spans) -> `check` (names, ranges, shapes,
//! strategies; every problem as a [`diagnostic::Diagnostic`]) -> [`ir`] (the typed experiment,
//! which every later stage reads) -> `plan` (its costs); [`rundir`] defines the files of a run
//! directory, which `kiln-runtime` writes and `kiln report` reads; [`supervise`] watches the
//! processes that train; [`table`] lines up the text tables of both binaries; [`lsp`] answers
//! editors. Only `cli` (in `main.rs`) and `lsp::server` talk to
//! the outside world. See `ARCHITECTURE.md`.

pub mod check;
pub mod datafile;
pub mod diagnostic;
pub mod ir;
pub mod lsp;
pub mod plan;
pub mod present;
pub mod rundir;
pub mod span;
pub mod supervise;
pub mod syntax;
pub mod table;

#[cfg(test)]
#[path = "../tests/support/toolkit.rs"]
mod toolkit;
