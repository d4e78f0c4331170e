//! Multi-process training on PyTorch's own distributed engine, c10d: the binding to it
//! ([`c10d`]) and what Kiln builds on it.

pub mod c10d;
