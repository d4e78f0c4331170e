//! Compression: pruning masks and schedules, structured shrinking, quantized linears, and the
//! measurements of the compressed model against the uncompressed one.

pub mod compare;
pub mod finalize;
pub mod measure;
pub mod prune;
pub mod pruner;
pub mod qat;
pub mod quant;
pub mod shrink;
pub mod timeline;
