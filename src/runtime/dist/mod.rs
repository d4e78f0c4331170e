//! Distributed runs: where this process stands ([`rank`]) and the start-up check that every
//! rank arrived and runs the same experiment ([`preflight`]).

pub mod c10d;
pub mod preflight;
pub mod rank;
