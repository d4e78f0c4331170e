//! Pooling: `max_pool1d/2d`, `avg_pool1d/2d`, `adaptive_avg_pool1d/2d`.

use super::{Check, Checked, Flow, LayerCheck};
use crate::diagnostic::problem::{Names, OutOfRange, Window};
use crate::diagnostic::Problem;
use crate::ir::Kind;
use crate::ir::{LayerKind, Pool};

/// The spatial rank of a pooling kind and how its input is described.
fn spatial(two_d: bool) -> (usize, &'static str) {
    if two_d {
        (2, "[channels, height, width]")
    } else {
        (1, "[channels, length]")
    }
}

/// The check of `kind` when it is a pooling.
pub(super) fn checker(kind: Kind) -> Option<Check> {
    Some(match kind {
        Kind::MaxPool1d => {
            Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow, true, false))
        }
        Kind::MaxPool2d => Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow, true, true)),
        Kind::AvgPool1d => {
            Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow, false, false))
        }
        Kind::AvgPool2d => {
            Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow, false, true))
        }
        Kind::AdaptiveAvgPool1d => {
            Box::new(|lc: &mut LayerCheck, flow: &Flow| check_adaptive(lc, flow, false))
        }
        Kind::AdaptiveAvgPool2d => {
            Box::new(|lc: &mut LayerCheck, flow: &Flow| check_adaptive(lc, flow, true))
        }
        _ => return None,
    })
}

/// Checks a max (`max`) or average pooling of rank 2 (`two_d`) or 1.
pub(super) fn check(lc: &mut LayerCheck, flow: &Flow, max: bool, two_d: bool) -> Option<Checked> {
    let (dims, want) = spatial(two_d);
    let kernel = lc.sizes("kernel_size", dims, 1);
    let stride = lc.sizes("stride", dims, 1);
    let padding = lc.sizes("padding", dims, 0);
    let ceil_mode = lc.bool_or("ceil_mode", false);
    let count_include_pad = lc.bool_or("count_include_pad", true);
    let Some(kernel) = kernel? else {
        lc.cx.missing(lc.kind.name(), "kernel_size", lc.bound.span);
        return None;
    };
    let pool = Pool {
        stride: stride?.unwrap_or_else(|| kernel.clone()),
        padding: padding?.unwrap_or(vec![0; dims]),
        kernel,
        ceil_mode: ceil_mode?,
        count_include_pad: count_include_pad?,
    };
    for (p, k) in pool.padding.iter().zip(&pool.kernel) {
        if 2 * p > *k {
            lc.cx.report(Problem::Names(Names::OutOfRange {
                span: lc.at("padding"),
                situation: OutOfRange::PoolPadding {
                    padding: *p,
                    kernel: *k,
                },
            }));
            return None;
        }
    }
    let shape = lc.input(flow)?;
    lc.rank(&shape, flow, want, shape.len() == dims + 1)?;
    let mut output = vec![shape[0]];
    for i in 0..dims {
        let window = Window {
            axis: i,
            rank: dims,
            input: shape[i + 1],
            kernel: pool.kernel[i],
            stride: pool.stride[i],
            padding: pool.padding[i],
            dilation: 1,
            ceil_mode: pool.ceil_mode,
        };
        output.push(lc.window(window, &shape, flow)?);
    }
    let kind = match (max, two_d) {
        (true, false) => LayerKind::MaxPool1d { pool },
        (true, true) => LayerKind::MaxPool2d { pool },
        (false, false) => LayerKind::AvgPool1d { pool },
        (false, true) => LayerKind::AvgPool2d { pool },
    };
    Some(Checked::new(kind, &shape, output))
}

/// Checks an adaptive average pooling of rank 2 (`two_d`) or 1.
pub(super) fn check_adaptive(lc: &mut LayerCheck, flow: &Flow, two_d: bool) -> Option<Checked> {
    let (dims, want) = spatial(two_d);
    let Some(size) = lc.sizes("output_size", dims, 1)? else {
        lc.cx.missing(lc.kind.name(), "output_size", lc.bound.span);
        return None;
    };
    let shape = lc.input(flow)?;
    lc.rank(&shape, flow, want, shape.len() == dims + 1)?;
    let mut output = vec![shape[0]];
    output.extend(&size);
    let kind = if two_d {
        LayerKind::AdaptiveAvgPool2d { output: size }
    } else {
        LayerKind::AdaptiveAvgPool1d { output: size }
    };
    Some(Checked::new(kind, &shape, output))
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::problem::Window;

    /// Output lengths with and without `ceil_mode`, as PyTorch 2.11's `nn.MaxPool1d` and
    /// `nn.AvgPool1d` give them: (input, kernel, stride, padding, floor, ceil).
    const TORCH: &[(i64, i64, i64, i64, i64, i64)] = &[
        (2, 3, 2, 0, 0, 1),
        (2, 3, 2, 1, 1, 2),
        (5, 2, 2, 0, 2, 3),
        (5, 3, 2, 1, 3, 3),
        (6, 3, 3, 1, 2, 3),
        (4, 3, 2, 1, 2, 3),
        (1, 2, 2, 0, 0, 1),
        (3, 4, 2, 2, 2, 3),
        // The last window would start in the right padding, so it is dropped.
        (5, 2, 2, 1, 3, 3),
    ];

    #[test]
    fn output_sizes_are_pytorchs() {
        for &(input, kernel, stride, padding, floor, ceil) in TORCH {
            for (ceil_mode, want) in [(false, floor), (true, ceil)] {
                let w = Window {
                    axis: 0,
                    rank: 1,
                    input,
                    kernel,
                    stride,
                    padding,
                    dilation: 1,
                    ceil_mode,
                };
                assert_eq!(w.output(), want, "{w:?}");
            }
        }
    }
}
