//! Max and average pooling (the adaptive ones are single calls in the dispatch).

use tch::Tensor;

use super::LayerRun;
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;
use kiln::ir::Pool;

/// Max pooling of rank 2 (`two_d`) or 1.
pub(super) fn max(
    l: &LayerRun,
    pool: &Pool,
    x: &Tensor,
    two_d: bool,
) -> Result<Tensor, Diagnostic> {
    let dilation = vec![1; pool.kernel.len()];
    let (k, s, p) = (
        pool.kernel.as_slice(),
        pool.stride.as_slice(),
        pool.padding.as_slice(),
    );
    if two_d {
        x.f_max_pool2d(k, s, p, dilation.as_slice(), pool.ceil_mode)
            .at(l.span)
    } else {
        x.f_max_pool1d(k, s, p, dilation.as_slice(), pool.ceil_mode)
            .at(l.span)
    }
}

/// Average pooling of rank 2 (`two_d`) or 1; padding counts in the average unless
/// `count_include_pad` is false, as in PyTorch.
pub(super) fn avg(
    l: &LayerRun,
    pool: &Pool,
    x: &Tensor,
    two_d: bool,
) -> Result<Tensor, Diagnostic> {
    let (k, s, p) = (
        pool.kernel.as_slice(),
        pool.stride.as_slice(),
        pool.padding.as_slice(),
    );
    if two_d {
        x.f_avg_pool2d(k, s, p, pool.ceil_mode, pool.count_include_pad, None::<i64>)
            .at(l.span)
    } else {
        x.f_avg_pool1d(k, s, p, pool.ceil_mode, pool.count_include_pad)
            .at(l.span)
    }
}
