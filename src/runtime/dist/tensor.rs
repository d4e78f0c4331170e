//! Tensor parallel's two collectives over a c10d group, as autograd functions (`shim/tensor.cpp`):
//! [`enter`], the identity in forward whose backward sums the input's gradient over the group
//! (before a layer split by its outputs), and [`leave`], the sum over the group in forward whose
//! backward is the identity (after a layer split by its inputs), and [`gather`], every rank's part
//! side by side along the last dimension, whose backward keeps this rank's part of the gradient
//! (after a layer split by its outputs whose outputs must be whole). Every C++ failure comes back
//! as a [`CommError`].

use std::ffi::{c_int, c_void};

use tch::Tensor;

use super::c10d::{checked, CommError, Group};

extern "C" {
    fn kiln_tp_last_error() -> *const std::ffi::c_char;
    fn kiln_tp_enter(g: *mut c_void, x: *mut c_void, out: *mut *mut c_void) -> c_int;
    fn kiln_tp_leave(g: *mut c_void, x: *mut c_void, out: *mut *mut c_void) -> c_int;
    fn kiln_tp_gather(
        g: *mut c_void,
        x: *mut c_void,
        rank: i64,
        degree: i64,
        out: *mut *mut c_void,
    ) -> c_int;
}

type Apply = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void) -> c_int;

fn apply(f: Apply, group: &Group, x: &Tensor) -> Result<Tensor, CommError> {
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: the group is live; tch's handle is an `at::Tensor*`; on success the shim hands
    // back a new `at::Tensor*`, which the returned `Tensor` owns.
    let code = unsafe { f(group.0, x.as_ptr() as *mut c_void, &mut out) };
    checked(code, kiln_tp_last_error)?;
    // SAFETY: a tensor the shim allocated for us alone.
    Ok(unsafe { Tensor::from_ptr(out as *mut torch_sys::C_tensor) })
}

/// `x` as it is; in backward, its gradient summed over `group`.
pub fn enter(group: &Group, x: &Tensor) -> Result<Tensor, CommError> {
    apply(kiln_tp_enter, group, x)
}

/// `x` summed over `group`; in backward, the gradient as it is.
pub fn leave(group: &Group, x: &Tensor) -> Result<Tensor, CommError> {
    apply(kiln_tp_leave, group, x)
}

/// Every rank's `x` side by side along the last dimension, in rank order (`rank` of `degree`
/// is this one); in backward, this rank's part of the gradient.
pub fn gather(group: &Group, x: &Tensor, rank: usize, degree: usize) -> Result<Tensor, CommError> {
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: as for `apply`.
    let code = unsafe {
        kiln_tp_gather(
            group.0,
            x.as_ptr() as *mut c_void,
            rank as i64,
            degree as i64,
            &mut out,
        )
    };
    checked(code, kiln_tp_last_error)?;
    // SAFETY: a tensor the shim allocated for us alone.
    Ok(unsafe { Tensor::from_ptr(out as *mut torch_sys::C_tensor) })
}
