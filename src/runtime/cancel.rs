//! A request to stop: a [`Cancel`] token handed to the loop, the strategies and the launcher;
//! a stop signal sets it.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// A request to stop, shared between whoever cancels (the stop-signal handler) and the loop,
/// which stops after the step in progress and writes a checkpoint. It keeps the signal that asked
/// first; later ones change nothing.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicI32>);

impl Cancel {
    /// Asks the loop to stop because this process received signal `sig`.
    pub fn cancel(&self, sig: i32) {
        let _ = self
            .0
            .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The signal that asked the loop to stop, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            sig => Some(sig),
        }
    }

    /// Whether stopping was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.signal().is_some()
    }
}
