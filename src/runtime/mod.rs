//! The runtime: lowers a checked experiment to libtorch through tch and trains it.
//!
//! Only the `kiln-runtime` binary compiles this module (see `ARCHITECTURE.md`): `kiln` itself
//! never loads libtorch. Every tch call goes through an `f_*` function and its error is attached
//! to the span of the statement it comes from (`failure::At`).
//!
//! Runtime failures are the checker's [`kiln::diagnostic::Diagnostic`], which is larger than
//! clippy's threshold for an error variant. A failure ends the run, so the error path is cold,
//! and a boxed error would only add an allocation to it: the lint is off for the runtime.
#![allow(clippy::result_large_err)]

pub mod artifact;
pub mod budget;
pub mod cancel;
pub mod checkpoint;
pub mod compress;
pub mod compute;
pub mod cuda_memory;
pub mod data;
pub mod dist;
pub mod eval;
pub mod exported;
pub mod failure;
pub mod fingerprint;
pub mod generate;
pub mod gpu_busy;
pub mod hooks;
pub mod host_alloc;
pub mod host_memory;
pub mod launch;
#[cfg(test)]
mod layer_parity;
pub mod model;
pub mod objective;
pub mod optim;
pub mod output;
pub mod parallel;
pub mod plot;
pub mod predict;
pub mod regression;
pub mod report;
pub mod resume;
pub mod run;
pub mod schedule;
pub mod session;
pub mod state;
pub mod step;
pub mod summary;
pub mod train;
pub mod trained;
pub mod weights;
