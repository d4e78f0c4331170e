//! A process's peak host memory over a baseline, for `bench/fsdp_memory.sh`, when
//! `KILN_MEMORY_PROFILE` is set: the resident set before the model is built (plus what loading
//! the data adds: the plan does not count host data) is the baseline; once the strategy has
//! taken the model over (fsdp frees the whole model each rank built, keeping its shards), the
//! allocator's free memory is returned to the system and the kernel's high-water mark restarted;
//! the mark is read after every step (so what the run does once training ends, its final weights
//! and checkpoint, is left out), and when the run ends each rank prints its peak over the
//! baseline beside the plan's total.
//!
//! Beside the resident set, the bytes of the CPU tensors alive at once (Kiln's host allocator,
//! `shim/host.cpp`, counts them from the baseline on): their peak is what the plan's arithmetic
//! estimates, the resident set's is that plus what the C allocator keeps around them. The same
//! allocator maps large blocks from the system for every run on the CPU
//! ([`super::host_alloc::map_large_blocks`]), so that the two stay close.
//!
//! Linux only (`/proc/self`); elsewhere nothing is measured.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use super::hooks::{Cx, Flow, Hook, StepReport};
use super::host_alloc::{count, counted, reset_peak};
use kiln::diagnostic::Diagnostic;

/// The resident set's current size and high-water mark, in bytes.
fn resident() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The measure of one process, when asked for.
pub struct HostMemory {
    /// Bytes resident that the plan does not count.
    baseline: u64,
    /// When the peak was restarted.
    since: Option<Instant>,
    /// Bytes of tensors that the plan does not count (the data's).
    data_tensors: u64,
    /// The high-water marks after the last step: the resident set's and the tensors'.
    peak: Rc<Cell<(u64, u64)>>,
}

/// Reads the high-water marks after every step.
struct Watch(Rc<Cell<(u64, u64)>>);

impl Hook for Watch {
    fn after_step(&mut self, _cx: &mut Cx, _s: &StepReport) -> Result<Flow, Diagnostic> {
        if let Some((_, peak)) = resident() {
            self.0.set((peak, counted().1));
        }
        Ok(Flow::Continue)
    }
}

impl HostMemory {
    /// Starts the measure before the model is built, when `KILN_MEMORY_PROFILE` is set.
    pub fn start() -> Option<HostMemory> {
        std::env::var_os("KILN_MEMORY_PROFILE")?;
        let baseline = resident()?.0;
        count();
        Some(HostMemory {
            baseline,
            since: None,
            data_tensors: 0,
            peak: Rc::default(),
        })
    }

    /// Runs `f` (loading the data), counting what it adds to the resident set in the baseline.
    pub fn outside_plan<T>(this: &mut Option<HostMemory>, f: impl FnOnce() -> T) -> T {
        let Some(m) = this else { return f() };
        let before = (resident().map_or(0, |r| r.0), counted().0);
        let out = f();
        m.baseline += resident().map_or(0, |r| r.0).saturating_sub(before.0);
        m.data_tensors += counted().0.saturating_sub(before.1);
        out
    }

    /// Training starts: the allocator returns its free memory to the system and the kernel's
    /// high-water mark restarts from what is resident now.
    pub fn restart(&mut self) {
        // SAFETY: `malloc_trim` only returns free memory of the allocator to the system.
        unsafe { libc::malloc_trim(0) };
        // Writing 5 to `clear_refs` resets the peak resident set size (Linux 4.0+).
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        reset_peak();
        self.since = Some(Instant::now());
    }

    /// The hook that reads the high-water mark after every step.
    pub fn watch(&self) -> Box<dyn Hook> {
        Box::new(Watch(Rc::clone(&self.peak)))
    }

    /// Prints rank `rank`'s peak over the baseline from the restart to the last step against
    /// `plan` (the plan's total for the rank's device), then the peak of the tensors alive at
    /// once (the data's left out) against the plan's tensors (its total less the allocator's
    /// `margin`).
    pub fn report(&self, rank: usize, plan: u64, margin: u64) {
        let (peak, tensors) = self.peak.get();
        let tensors = tensors.saturating_sub(self.data_tensors);
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let against = |b: u64, plan: u64| 100.0 * (b as f64 / plan.max(1) as f64 - 1.0);
        let over = peak.saturating_sub(self.baseline);
        let planned_tensors = plan.saturating_sub(margin);
        eprintln!(
            "memory profile: rank {rank}: peak {:.1} MiB over a baseline of {:.1} MiB, plan {:.1} MiB ({:+.1}%), over {:.1} s; tensors alive at once: {:.1} MiB against the plan's tensors {:.1} MiB ({:+.1}%)",
            mib(over),
            mib(self.baseline),
            mib(plan),
            against(over, plan),
            self.since.map_or(0.0, |t| t.elapsed().as_secs_f64()),
            mib(tensors),
            mib(planned_tensors),
            against(tensors, planned_tensors),
        );
    }
}
