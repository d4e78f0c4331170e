//! Runtime failures are [`Problem`]s, as the checker's are, worded by `kiln::diagnostic` into
//! plain [`Diagnostic`]s: a code, the span in the `.exp` file they come from, labels and a help
//! line. This module attaches spans to libtorch errors and classifies them.

use kiln::diagnostic::problem::{Running, Torch};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::span::Span;

/// Attaches a span to libtorch errors: `tensor.f_matmul(&w).at(span)?`.
pub trait At<T> {
    /// Turns an error into a [`Diagnostic`] at `span` (K0508, or K0505 when memory ran out).
    fn at(self, span: Span) -> Result<T, Diagnostic>;

    /// As [`At::at`], dropping the value (for in-place operations that return their tensor).
    fn done_at(self, span: Span) -> Result<(), Diagnostic>
    where
        Self: Sized,
    {
        self.at(span).map(drop)
    }
}

impl<T> At<T> for Result<T, tch::TchError> {
    fn at(self, span: Span) -> Result<T, Diagnostic> {
        self.map_err(|e| torch_failure(&e.to_string(), span).diagnostic())
    }
}

/// Classifies a libtorch error message: [`Running::OutOfMemory`] when a device ran out of
/// memory, [`Running::TorchError`] otherwise.
pub fn torch_failure(message: &str, span: Span) -> Problem {
    let detail = message.lines().next().unwrap_or(message).trim().to_string();
    if message.contains("out of memory")
        || message.contains("OutOfMemory")
        || message.contains("DefaultCPUAllocator: can't allocate")
    {
        Problem::Running(Running::OutOfMemory {
            span,
            detail,
            plan: None,
            ran_out: None,
        })
    } else {
        Problem::Running(Running::TorchError {
            span,
            situation: Torch::Libtorch { detail },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::diagnostic::Code;

    #[test]
    fn libtorch_errors_are_classified() {
        let oom = torch_failure(
            "CUDA out of memory. Tried to allocate 2 GiB\nmore",
            Span::default(),
        )
        .diagnostic();
        assert_eq!(oom.code, Code::OutOfMemory);
        assert_eq!(
            oom.message,
            "a device ran out of memory: CUDA out of memory. Tried to allocate 2 GiB"
        );
        assert!(oom.help.is_some());
        let other = torch_failure("shape mismatch", Span::default()).diagnostic();
        assert_eq!(other.code, Code::TorchError);
    }
}
