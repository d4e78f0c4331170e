//! Pooling: `max_pool1d/2d`, `avg_pool1d/2d`, `adaptive_avg_pool1d/2d`.

use super::count;
use super::memory::{Keeps, Value};
use super::spec::{given, required, Spec};
use crate::ir::{numel, Pool};

/// `max_pool1d(kernel_size, stride, padding, ceil_mode)`.
pub static MAX_POOL1D: Spec = Spec {
    params: AVG_POOL1D.params.split_at(4).0,
    note: None,
    shapes: "`[C, L]` -> `[C, L']`",
};

/// `max_pool2d`, with the parameters of `max_pool1d`.
pub static MAX_POOL2D: Spec = Spec {
    params: MAX_POOL1D.params,
    note: Some("sizes are a number or `[h, w]`"),
    shapes: "`[C, H, W]` -> `[C, H', W']`",
};

/// `avg_pool1d(kernel_size, stride, padding, ceil_mode, count_include_pad)`.
pub static AVG_POOL1D: Spec = Spec {
    params: &[
        required("kernel_size"),
        given("stride", "= kernel"),
        given("padding", "0"),
        given("ceil_mode", "false"),
        given("count_include_pad", "true"),
    ],
    note: None,
    shapes: "`[C, L]` -> `[C, L']`",
};

/// `avg_pool2d`, with the parameters of `avg_pool1d`.
pub static AVG_POOL2D: Spec = Spec {
    params: AVG_POOL1D.params,
    note: Some("sizes are a number or `[h, w]`"),
    shapes: "`[C, H, W]` -> `[C, H', W']`",
};

/// `adaptive_avg_pool1d(output_size)`.
pub static ADAPTIVE1D: Spec = Spec {
    params: &[required("output_size")],
    note: None,
    shapes: "`[C, L]` -> `[C, output_size]`",
};

/// `adaptive_avg_pool2d(output_size)`.
pub static ADAPTIVE2D: Spec = Spec {
    params: ADAPTIVE1D.params,
    note: Some("sizes are a number or `[h, w]`"),
    shapes: "`[C, H, W]` -> `[C, h, w]`",
};

/// One FLOP per value of every window.
pub(super) fn flops(pool: &Pool, output: &[i64]) -> u64 {
    count(numel(output) as f64 * numel(&pool.kernel) as f64)
}

/// Max pooling keeps its input and the int64 index of each output's maximum.
pub(super) fn keeps_max(outputs: u64, given: Value) -> Keeps {
    let indices = outputs.saturating_mul(Value::I64.bytes());
    Keeps {
        inner: indices,
        largest: indices,
        ..Keeps::input(given)
    }
}
