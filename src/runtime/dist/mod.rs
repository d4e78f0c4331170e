//! Multi-process training on PyTorch's own distributed engine, c10d: the binding to it
//! ([`c10d`]) and what Kiln builds on it: where this process stands ([`rank`]), the start-up
//! check that every rank arrived and runs the same experiment ([`preflight`]) and the units of
//! fully sharded data parallel ([`unit`]), tensor parallel's collectives ([`tensor`]).

pub mod c10d;
pub mod preflight;
pub mod rank;
pub mod tensor;
pub mod unit;
