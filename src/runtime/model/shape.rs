//! `reshape` (flatten and mean are single calls in the dispatch).

use tch::Tensor;

use super::LayerRun;
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;

/// Reshapes every sample to `shape`, keeping the batch dimension.
pub(super) fn reshape(l: &LayerRun, shape: &[i64], x: &Tensor) -> Result<Tensor, Diagnostic> {
    let mut dims = vec![-1];
    dims.extend(shape);
    x.f_reshape(dims.as_slice()).at(l.span)
}
