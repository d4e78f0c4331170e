//! The language server (`kiln lsp`): the checker's diagnostics, hovers, completions and
//! navigation for editors, over the Language Server Protocol.
//!
//! [`engine`] is pure: it holds the open documents and answers each request as a plain function
//! of their text and their last analysis. [`server`] is the message loop: it reads and writes
//! JSON-RPC over stdio and checks documents on a worker thread.

mod calls;
mod completion;
pub mod engine;
mod features;
mod position;
pub mod server;
mod words;

pub use position::LineIndex;
