//! Syntax: text to a syntax tree with spans, or a syntax diagnostic.
//!
//! Parsing never panics: a nesting pre-scan refuses inputs that would make the recursive-descent
//! parser recurse too deeply, and pest's call limit bounds the work on any input.

pub mod ast;
mod errors;
mod parser;

pub use parser::parse;

/// The deepest bracket nesting the parser accepts.
pub const MAX_NESTING: usize = 64;
