//! Layers that reshape or reduce: `flatten`, `reshape`, `mean`, and the softmaxes, which take a
//! dimension like `mean` does. None has parameters.

use super::memory::{Keeps, Value};
use super::spec::{given, required, Spec};

/// `flatten`.
pub static FLATTEN: Spec = Spec {
    params: &[],
    note: None,
    shapes: "`[...]` -> `[product]`",
};

/// `reshape(shape)`.
pub static RESHAPE: Spec = Spec {
    params: &[required("shape")],
    note: None,
    shapes: "same number of values; one `-1` allowed",
};

/// `mean(dim)`.
pub static MEAN: Spec = Spec {
    params: &[required("dim")],
    note: None,
    shapes: "removes `dim`",
};

/// `softmax(dim)` and `log_softmax(dim)`.
pub static SOFTMAX: Spec = Spec {
    params: &[given("dim", "-1")],
    note: None,
    shapes: "unchanged",
};

/// `mean`'s output: the input without `dim`.
pub(super) fn mean(input: &[i64], dim: i64) -> Vec<i64> {
    let mut y = input.to_vec();
    if (dim as usize) < y.len() {
        y.remove(dim as usize);
    }
    y
}

/// `flatten` and `reshape` return views of their (contiguous) input: they keep nothing.
pub(super) fn keeps_view() -> Keeps {
    Keeps::view()
}

/// `mean` makes a new, smaller output; its backward needs only the input's sizes.
pub(super) fn keeps_mean(given: Value) -> Keeps {
    Keeps::nothing(given)
}
