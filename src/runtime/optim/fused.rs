//! ATen's fused optimizer kernels (`shim/optim.cpp`): Adam, AdamW and SGD update every
//! parameter of one device, dtype and group in one call, as `torch.optim`'s `fused=True` does,
//! instead of the handful of element-wise operations per parameter of the single-tensor rules.

use std::ffi::{c_char, c_int, c_void, CStr};

use tch::{TchError, Tensor};

mod ffi {
    use std::ffi::{c_char, c_int, c_void};

    extern "C" {
        pub fn kiln_optim_last_error() -> *const c_char;
        pub fn kiln_fused_adam(
            decoupled: c_int,
            params: *const *mut c_void,
            grads: *const *mut c_void,
            exp_avgs: *const *mut c_void,
            exp_avg_sqs: *const *mut c_void,
            max_exp_avg_sqs: *const *mut c_void,
            steps: *const *mut c_void,
            n: usize,
            lr: f64,
            beta1: f64,
            beta2: f64,
            weight_decay: f64,
            eps: f64,
            amsgrad: c_int,
        ) -> c_int;
        pub fn kiln_clear_grads(params: *const *mut c_void, n: usize) -> c_int;
        pub fn kiln_fused_sgd(
            params: *const *mut c_void,
            grads: *const *mut c_void,
            bufs: *const *mut c_void,
            n: usize,
            weight_decay: f64,
            momentum: f64,
            lr: f64,
            dampening: f64,
            nesterov: c_int,
            first: c_int,
        ) -> c_int;
    }
}

/// The handles of `ts`, as the shim takes them.
fn handles(ts: &[Tensor]) -> Vec<*mut c_void> {
    ts.iter().map(|t| t.as_ptr() as *mut c_void).collect()
}

/// The shim's status as a result, with libtorch's message on failure.
fn status(code: c_int) -> Result<(), TchError> {
    if code == 0 {
        return Ok(());
    }
    // SAFETY: the shim returns a pointer to its thread-local, NUL-terminated message.
    let text = unsafe { CStr::from_ptr(ffi::kiln_optim_last_error() as *const c_char) };
    Err(TchError::Torch(text.to_string_lossy().into_owned()))
}

/// Unsets the gradients of `params` (`p.grad = None`): the next backward pass stores each
/// gradient as computed instead of adding it into a zeroed one.
pub fn clear_grads(params: &[Tensor]) -> Result<(), TchError> {
    let ps = handles(params);
    // SAFETY: `ps` holds live tensor handles for the duration of the call.
    status(unsafe { ffi::kiln_clear_grads(ps.as_ptr(), ps.len()) })
}

/// One Adam or AdamW step's settings.
pub(super) struct Adam {
    /// AdamW's decoupled weight decay, or Adam's L2 penalty.
    pub decoupled: bool,
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub weight_decay: f64,
    pub eps: f64,
    pub amsgrad: bool,
}

/// The tensors of one fused Adam call: parameters of one device and dtype with their gradients
/// and state, and the step count as a float32 scalar on their device.
pub(super) struct AdamTensors {
    pub params: Vec<Tensor>,
    pub grads: Vec<Tensor>,
    pub exp_avgs: Vec<Tensor>,
    pub exp_avg_sqs: Vec<Tensor>,
    /// Empty without `amsgrad`.
    pub max_exp_avg_sqs: Vec<Tensor>,
    pub step: Tensor,
}

/// `torch._fused_adam_` / `torch._fused_adamw_` over `t`.
pub(super) fn adam(a: &Adam, t: &AdamTensors) -> Result<(), TchError> {
    let n = t.params.len();
    let (p, g, m, v, vmax) = (
        handles(&t.params),
        handles(&t.grads),
        handles(&t.exp_avgs),
        handles(&t.exp_avg_sqs),
        handles(&t.max_exp_avg_sqs),
    );
    let steps = vec![t.step.as_ptr() as *mut c_void; n];
    if g.len() != n || m.len() != n || v.len() != n || (a.amsgrad && vmax.len() != n) {
        return Err(TchError::Torch(
            "fused Adam: lists of different lengths".into(),
        ));
    }
    // SAFETY: every pointer is a live tensor handle of the lists above, which outlive the call;
    // the shim reads `n` of each (`max_exp_avg_sqs` only with `amsgrad`).
    status(unsafe {
        ffi::kiln_fused_adam(
            c_int::from(a.decoupled),
            p.as_ptr(),
            g.as_ptr(),
            m.as_ptr(),
            v.as_ptr(),
            vmax.as_ptr(),
            steps.as_ptr(),
            n,
            a.lr,
            a.beta1,
            a.beta2,
            a.weight_decay,
            a.eps,
            c_int::from(a.amsgrad),
        )
    })
}

/// One SGD step's settings.
pub(super) struct Sgd {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
}

/// `torch._fused_sgd_` over `params` with their gradients and, when `s.momentum` is not 0,
/// their momentum buffers, which the first step (`first`) fills with the gradients.
pub(super) fn sgd(
    s: &Sgd,
    params: &[Tensor],
    grads: &[Tensor],
    bufs: &[Tensor],
    first: bool,
) -> Result<(), TchError> {
    let n = params.len();
    if grads.len() != n || (s.momentum != 0.0 && bufs.len() != n) {
        return Err(TchError::Torch(
            "fused SGD: lists of different lengths".into(),
        ));
    }
    let (p, g, b) = (handles(params), handles(grads), handles(bufs));
    // SAFETY: as in `adam`; the shim reads `bufs` only when `momentum` is not 0.
    status(unsafe {
        ffi::kiln_fused_sgd(
            p.as_ptr(),
            g.as_ptr(),
            b.as_ptr(),
            n,
            s.weight_decay,
            s.momentum,
            s.lr,
            s.dampening,
            c_int::from(s.nesterov),
            c_int::from(first),
        )
    })
}
