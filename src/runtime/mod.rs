//! The runtime: lowers a checked experiment to libtorch through tch and trains it.
//!
//! Only the `kiln-runtime` binary compiles this module (see `ARCHITECTURE.md`): `kiln` itself
//! never loads libtorch. Every tch call goes through an `f_*` function and its error is attached
//! to the span of the statement it comes from (`failure::At`).

pub mod checkpoint;
pub mod data;
pub mod failure;
#[cfg(test)]
mod layer_parity;
pub mod model;
pub mod optim;
pub mod plot;
pub mod report;
pub mod run;
pub mod summary;
pub mod train;
