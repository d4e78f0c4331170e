//! Reading and parsing: the file itself (K00xx).

use crate::diagnostic::syntax::{Habit, Within};
use crate::diagnostic::unreadable::Unreadable;
use crate::span::Span;
use std::path::PathBuf;

/// Reading and parsing: the file itself (K00xx).
#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    /// K0001: the text does not follow the grammar.
    Syntax {
        /// Where parsing stopped.
        span: Span,
        /// The whole token found there (`64`, `"text"`, `\n` at the end of a line); `None` at
        /// the end of the file.
        found: Option<String>,
        /// What the grammar accepts there, already joined (`a value or `]``); empty when the
        /// parser gives no list.
        expected: String,
        /// What the parser was in the middle of.
        within: Option<Within>,
        /// A habit from another format the error shows.
        habit: Option<Habit>,
        /// Why pest gave up, when it stopped on its call limit.
        gave_up: Option<String>,
    },
    /// K0002: the file is not UTF-8.
    InvalidUtf8 {
        /// The first invalid byte.
        span: Span,
        /// The file.
        path: PathBuf,
    },
    /// K0003: a file cannot be read.
    Io {
        /// The start of the file.
        span: Span,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: Unreadable,
    },
    /// K0004: brackets nest too deep.
    TooDeep {
        /// The bracket past the limit.
        span: Span,
        /// The limit.
        max: usize,
    },
    /// K0005: Kiln failed.
    Internal {
        /// The start of the file.
        span: Span,
    },
}
