//! Runtime failures: every error a run can meet becomes a [`Failure`] that carries a code, the
//! span in the `.exp` file it comes from and a help line, and turns into a [`Diagnostic`].

use kiln::diagnostic::{Code, Diagnostic};
use kiln::span::Span;

/// A run that cannot go on, with where in the experiment file it comes from.
#[derive(Debug, Clone)]
pub struct Failure {
    /// What kind of failure.
    pub code: Code,
    /// The statement it comes from.
    pub span: Span,
    /// One sentence.
    pub message: String,
    /// The label under the span.
    pub label: String,
    /// How to fix it.
    pub help: String,
}

impl Failure {
    /// A failure of `code` at `span`.
    pub fn new(code: Code, span: Span, message: impl Into<String>) -> Failure {
        Failure {
            code,
            span,
            message: message.into(),
            label: String::new(),
            help: String::new(),
        }
    }

    /// Sets the label.
    pub fn label(mut self, label: impl Into<String>) -> Failure {
        self.label = label.into();
        self
    }

    /// Sets the help line.
    pub fn help(mut self, help: impl Into<String>) -> Failure {
        self.help = help.into();
        self
    }

    /// The diagnostic the user sees.
    pub fn diagnostic(&self) -> Diagnostic {
        let d =
            Diagnostic::new(self.code, self.span, self.message.clone()).label(self.label.clone());
        if self.help.is_empty() {
            d
        } else {
            d.help(self.help.clone())
        }
    }
}

/// Attaches a span to libtorch errors: `tensor.f_matmul(&w).at(span)?`.
pub trait At<T> {
    /// Turns an error into a [`Failure`] at `span` (K0508, or K0505 when memory ran out).
    fn at(self, span: Span) -> Result<T, Failure>;

    /// As [`At::at`], dropping the value (for in-place operations that return their tensor).
    fn done_at(self, span: Span) -> Result<(), Failure>
    where
        Self: Sized,
    {
        self.at(span).map(drop)
    }
}

impl<T> At<T> for Result<T, tch::TchError> {
    fn at(self, span: Span) -> Result<T, Failure> {
        self.map_err(|e| torch_failure(&e.to_string(), span))
    }
}

/// Classifies a libtorch error message.
pub fn torch_failure(message: &str, span: Span) -> Failure {
    let first = message.lines().next().unwrap_or(message).trim();
    if message.contains("out of memory")
        || message.contains("OutOfMemory")
        || message.contains("DefaultCPUAllocator: can't allocate")
    {
        Failure::new(
            Code::OutOfMemory,
            span,
            format!("a device ran out of memory: {first}"),
        )
        .label("while running this")
        .help("lower the batch size, use `precision bf16`, or spread the model over more devices")
    } else {
        Failure::new(Code::TorchError, span, format!("libtorch failed: {first}"))
            .label("while running this")
            .help("this should have been caught by `kiln check`; please report it with the file")
    }
}
