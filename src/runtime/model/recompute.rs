//! Activation checkpointing: a group of layers marked `recompute` keeps none of its activations
//! for backward but its input; backward runs the group again from the input and takes the
//! gradients of that run (PyTorch's `torch.utils.checkpoint`). The autograd function is C++
//! (`shim/recompute.cpp`), which calls back here for both runs of the group: the forward's,
//! without grad, and backward's, with the random generators put back as the forward found them,
//! so dropout draws the same masks and the gradients are those of the layers run once.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use tch::Tensor;
use torch_sys::C_tensor;

use super::{Lowered, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;
use kiln::span::Span;

type Run = unsafe extern "C" fn(
    *mut c_void,
    *mut C_tensor,
    *mut *mut C_tensor,
    *mut c_char,
    usize,
) -> c_int;
type Release = unsafe extern "C" fn(*mut c_void);

extern "C" {
    fn kiln_recompute_last_error() -> *const c_char;
    fn kiln_recompute(
        run: Run,
        release: Release,
        closure: *mut c_void,
        x: *mut C_tensor,
        params: *const *mut C_tensor,
        n: usize,
        y: *mut *mut C_tensor,
    ) -> c_int;
}

/// What both runs of a group need.
struct Group {
    net: *const Net,
    nodes: *const [Lowered],
    train: bool,
    /// The padding mask flowing into the group; each run starts from it.
    keep: Option<Tensor>,
    /// This thread's dropout key stream as the forward found it (a pipeline stage's): backward's
    /// run draws from it again, as libtorch's generators are put back by the shim.
    keys: (Option<u64>, Option<super::dropout::Rows>),
    /// The mask flowing out of the first run, for the layers after the group.
    after: Arc<Mutex<Option<Option<Tensor>>>>,
}

/// Runs `nodes` of `net` on `x` as one recomputed group: under grad mode its activations are
/// recomputed in backward; `keep` is the padding mask, updated as the group leaves it.
pub(super) fn run(
    net: &Net,
    nodes: &[Lowered],
    x: &Tensor,
    train: bool,
    keep: &mut Option<Tensor>,
    span: Span,
) -> Result<Tensor, Diagnostic> {
    let after = Arc::new(Mutex::new(None));
    let group = Box::new(Group {
        net,
        nodes,
        train,
        keep: keep.as_ref().map(Tensor::shallow_clone),
        keys: super::dropout::keys(),
        after: Arc::clone(&after),
    });
    let mut indices = Vec::new();
    net.group_params(nodes, &mut indices);
    let params: Vec<*mut C_tensor> = indices
        .iter()
        .map(|&i| net.params[i].tensor.as_ptr() as *mut C_tensor)
        .collect();
    let mut y: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: the closure is a `Group` the shim owns from here and hands to `release` once;
    // `x` and the parameters are live tensors for the call; the group's `net` and `nodes`
    // outlive every run of it: the runs happen within this call and within the backward pass
    // of the step that made this forward, while the model lives on unchanged.
    let code = unsafe {
        kiln_recompute(
            run_group,
            release_group,
            Box::into_raw(group) as *mut c_void,
            x.as_ptr() as *mut C_tensor,
            params.as_ptr(),
            params.len(),
            &mut y,
        )
    };
    if code != 0 || y.is_null() {
        // SAFETY: the shim's thread-local, NUL-terminated message.
        let text = unsafe { CStr::from_ptr(kiln_recompute_last_error()) };
        return Err(tch::TchError::Torch(text.to_string_lossy().into_owned())).at(span);
    }
    // SAFETY: the shim allocated `y` for the caller, who owns it from here.
    let y = unsafe { Tensor::from_ptr(y) };
    // The mask stays in the group: a second run (backward's) is told apart by it.
    let first = after
        .lock()
        .ok()
        .and_then(|a| a.as_ref().map(|k| k.as_ref().map(Tensor::shallow_clone)));
    if let Some(k) = first {
        *keep = k;
    }
    Ok(y)
}

/// One run of a group (the shim's `Run`): 0 with the output in `*y`, or -1 with a message.
unsafe extern "C" fn run_group(
    closure: *mut c_void,
    x: *mut C_tensor,
    y: *mut *mut C_tensor,
    message: *mut c_char,
    cap: usize,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `closure` is the `Group` `run` made, alive until `release_group`; its net and
        // nodes outlive the runs (see `run`); `x` is a live tensor for the call.
        let group = unsafe { &*(closure as *const Group) };
        let (net, nodes) = unsafe { (&*group.net, &*group.nodes) };
        let x = unsafe { Tensor::clone_from_ptr(x) };
        let mut keep = group.keep.as_ref().map(Tensor::shallow_clone);
        let again = group.after.lock().map_or(true, |a| a.is_some());
        let now = super::dropout::keys();
        if again {
            super::dropout::set_keys(group.keys);
        }
        let out = net.run(nodes, &x, group.train, &mut keep);
        if again {
            super::dropout::set_keys(now);
        } else if let Ok(mut first) = group.after.lock() {
            *first = Some(keep);
        }
        out.map_err(|d: Diagnostic| d.message)
    }));
    let failure = match outcome {
        Ok(Ok(mut t)) => {
            // SAFETY: `y` is the shim's out-pointer; the tensor's handle passes to the shim,
            // which deletes it, so Rust must not drop it.
            unsafe { *y = t.as_mut_ptr() };
            std::mem::forget(t);
            return 0;
        }
        Ok(Err(text)) => text,
        Err(_) => "a recomputed layer panicked".to_string(),
    };
    let bytes = failure.as_bytes();
    let n = bytes.len().min(cap);
    // SAFETY: `message` has room for `cap` bytes and a NUL after them (the shim's buffer).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), message as *mut u8, n);
        *message.add(n) = 0;
    }
    -1
}

/// Frees a group (the shim's `Release`), once nothing needs it.
unsafe extern "C" fn release_group(closure: *mut c_void) {
    // SAFETY: `closure` came from `Box::into_raw` in `run` and is released once.
    drop(unsafe { Box::from_raw(closure as *mut Group) });
}
