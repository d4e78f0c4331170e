//! [`DataError`]: every way loading data can fail, as data; it becomes a diagnostic in one place,
//! its conversion into a [`Problem`].

use std::path::{Path, PathBuf};

use kiln::diagnostic::problem::{Running, Torch};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::span::Span;
use tch::TchError;

use super::super::failure::torch_failure;

/// What kind of problem the data has.
#[derive(Debug)]
pub enum DataKind {
    /// A file cannot be read (K0502).
    Missing,
    /// The data is there but wrong (K0503): malformed, truncated, of the wrong shape or type.
    Invalid,
    /// libtorch failed while preparing the data, kept as its error: K0505 when a device ran out
    /// of memory, K0508 otherwise, decided where every libtorch error is.
    Torch(Box<TchError>),
    /// The thread preparing batches stopped before the end of the epoch (K0508, a bug; worded by
    /// `kiln::diagnostic`, which ignores the detail).
    LoaderStopped,
}

/// A problem with the data, at the statement it comes from (the experiment's `source`, or its
/// `batch` for the loader).
#[derive(Debug)]
pub struct DataError {
    /// What kind of problem.
    pub kind: DataKind,
    /// The statement it comes from.
    pub span: Span,
    /// The file it is about, when there is one (boxed, as the rest of the error, to keep a
    /// `Result` small).
    pub path: Option<Box<Path>>,
    /// What is wrong, in one sentence.
    pub detail: String,
    /// The label under the span.
    pub label: String,
    /// How to fix it.
    pub help: String,
}

impl DataError {
    /// A problem of `kind` at `span`.
    pub fn new(kind: DataKind, span: Span, detail: impl Into<String>) -> DataError {
        DataError {
            kind,
            span,
            path: None,
            detail: detail.into(),
            label: String::new(),
            help: String::new(),
        }
    }

    /// Sets the label.
    pub fn label(mut self, label: impl Into<String>) -> DataError {
        self.label = label.into();
        self
    }

    /// Sets the help line.
    pub fn help(mut self, help: impl Into<String>) -> DataError {
        self.help = help.into();
        self
    }

    /// A libtorch error at `span`.
    pub fn torch(error: TchError, span: Span) -> DataError {
        DataError::new(DataKind::Torch(Box::new(error)), span, String::new())
    }

    /// Names the file it is about.
    pub fn path(mut self, path: impl Into<PathBuf>) -> DataError {
        self.path = Some(path.into().into_boxed_path());
        self
    }
}

/// The one place a data problem becomes a [`Problem`], worded by `kiln::diagnostic`: the
/// loader's detail, label and help go with it.
impl From<DataError> for Problem {
    fn from(e: DataError) -> Problem {
        let help = (!e.help.is_empty()).then_some(e.help);
        match e.kind {
            DataKind::Missing => Problem::Running(Running::DataMissing {
                span: e.span,
                detail: e.detail,
                label: e.label,
                help,
            }),
            DataKind::Invalid => Problem::Running(Running::DataInvalid {
                span: e.span,
                detail: e.detail,
                label: (!e.label.is_empty()).then_some(e.label),
                help,
                weights: false,
            }),
            DataKind::LoaderStopped => Problem::Running(Running::TorchError {
                span: e.span,
                situation: Torch::LoaderStopped,
            }),
            // Its message says whether a device ran out of memory, as for every libtorch error.
            DataKind::Torch(error) => torch_failure(&error.to_string(), e.span),
        }
    }
}

impl From<DataError> for Diagnostic {
    fn from(e: DataError) -> Diagnostic {
        Problem::from(e).diagnostic()
    }
}

/// Attaches the data's span to libtorch errors: `tensor.f_reshape(&shape).at(span)?`.
pub trait At<T> {
    /// Turns a libtorch error into a [`DataError`] at `span`.
    fn at(self, span: Span) -> Result<T, DataError>;
}

impl<T> At<T> for Result<T, TchError> {
    fn at(self, span: Span) -> Result<T, DataError> {
        self.map_err(|e| DataError::torch(e, span))
    }
}
