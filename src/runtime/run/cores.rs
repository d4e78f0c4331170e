//! Whether other processes hold the cores libtorch is about to use. libtorch starts one
//! intra-op thread per core and splits each operation evenly between them, so a core that
//! another process keeps busy makes every operation wait for the thread that shares it: on a
//! loaded machine a run slows down many times over. `kiln run` says so at start, with the
//! `--threads` that fits the cores left free.

/// Samples of the running-process count taken, 10 ms apart; their median is used.
const SAMPLES: usize = 5;

/// The note for a machine where other processes hold cores: `threads` (libtorch's intra-op
/// threads) against the cores this process may use, less the processes running besides it.
/// `None` on Linux without `/proc`, or when the threads fit.
pub(super) fn oversubscribed(threads: usize) -> Option<String> {
    let cores = std::thread::available_parallelism().ok()?.get();
    let mut running = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        if i > 0 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        running.push(procs_running()?);
    }
    running.sort_unstable();
    // This process's own thread, which is running while it reads.
    let others = running[SAMPLES / 2].saturating_sub(1);
    advice(threads, cores, others)
}

/// The note for `others` running processes beside `threads` threads on `cores` cores.
fn advice(threads: usize, cores: usize, others: usize) -> Option<String> {
    let free = cores.saturating_sub(others).max(1);
    if others == 0 || threads <= free {
        return None;
    }
    Some(format!(
        "{others} other process{} running on this machine's {cores} core{}: libtorch's {threads} threads would share them and wait on each other (a run can slow down many times over); `--threads {free}` uses the cores left free",
        if others == 1 { " is" } else { "es are" },
        if cores == 1 { "" } else { "s" },
    ))
}

/// The processes (threads) running or ready to run now, from `/proc/stat`'s `procs_running`.
fn procs_running() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("procs_running "))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_names_the_threads_that_fit_the_free_cores() {
        assert_eq!(advice(2, 2, 0), None);
        assert_eq!(advice(1, 2, 1), None);
        let note = advice(2, 2, 3).expect("busy");
        assert!(
            note.starts_with("3 other processes are running on this machine's 2 cores"),
            "{note}"
        );
        assert!(
            note.ends_with("`--threads 1` uses the cores left free"),
            "{note}"
        );
        let note = advice(16, 16, 1).expect("busy");
        assert!(note.contains("1 other process is running"), "{note}");
        assert!(note.contains("`--threads 15`"), "{note}");
        assert!(procs_running().is_some_and(|n| n >= 1));
    }
}
