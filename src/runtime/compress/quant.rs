//! Quantized weights and the linears that use them.
