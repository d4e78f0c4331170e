//! Compression: pruning masks and schedules, structured shrinking, quantized linears.

pub mod prune;
pub mod quant;
pub mod shrink;
