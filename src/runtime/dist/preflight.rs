//! The start of a distributed run: every rank announces itself in the store (what it runs and
//! where it is), waits until every other rank has, and compares what they run with rank 0's.
//! A rank that never arrives, or one that runs something else, fails every rank with a
//! diagnostic naming it, within the timeout, before any gradient is exchanged.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::c10d::Store;
use super::rank::Rank;
use crate::runtime::checkpoint::Fingerprint;
use crate::runtime::fingerprint::differences;
use kiln::diagnostic::problem::Running;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::Experiment;
use kiln::span::Span;

/// What a rank announces at the rendezvous.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Announce {
    /// The experiment file's name, as given on the command line.
    pub file: String,
    /// The world size this rank was started with.
    pub world: usize,
    /// What its experiment computes and how it is set up (as a resume compares it).
    pub fingerprint: Fingerprint,
    /// Its parameters' names and shapes.
    pub shapes: Vec<(String, Vec<i64>)>,
    /// The step it resumes from, when it resumes.
    pub resume_step: Option<u64>,
    /// Its machine's name.
    pub host: String,
    /// Its process id.
    pub pid: u32,
}

impl Announce {
    /// This machine's name.
    pub fn hostname() -> String {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default()
    }

    /// Whether the process that made this announcement is known to be gone: it ran on this
    /// machine and has exited (or is a zombie not yet reaped).
    pub fn gone(&self) -> bool {
        if self.host != Self::hostname() {
            return false;
        }
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            // The state follows the command name, which is in parentheses.
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
            Err(_) => true,
        }
    }
}

/// The store key of rank `r`'s announcement.
fn key(me: &Rank, r: usize) -> String {
    format!("kiln/{}/rank/{r}", me.restart)
}

/// Announces `mine` and waits until every rank has announced, until `deadline`; returns every
/// rank's announcement in rank order.
pub fn rendezvous(
    store: &Store,
    me: &Rank,
    mine: &Announce,
    deadline: Instant,
    timeout: Duration,
    span: Span,
) -> Result<Vec<Announce>, Diagnostic> {
    let failed = |missing: Vec<usize>, detail: Option<String>| {
        Problem::Running(Running::RendezvousFailed {
            span,
            rank: me.rank,
            missing,
            address: me.address(),
            timeout_s: timeout.as_secs(),
            detail,
        })
        .diagnostic()
    };
    let text = serde_json::to_vec(mine).map_err(|e| failed(vec![], Some(e.to_string())))?;
    store
        .set(&key(me, me.rank), &text)
        .map_err(|e| failed(vec![], Some(e.0)))?;
    let keys: Vec<String> = (0..me.world).map(|r| key(me, r)).collect();
    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
    // The ranks not seen yet, kept from one look to the next: when rank 0 gives up waiting, it
    // takes the store with it, and a rank still waiting names the ranks missing at its last look.
    let mut missing: Vec<usize> = (0..me.world).filter(|&r| r != me.rank).collect();
    loop {
        let mut still = Vec::new();
        for &r in &missing {
            match store.check(&[names[r]]) {
                Ok(true) => {}
                Ok(false) => still.push(r),
                Err(e) => return Err(failed(missing, Some(e.0))),
            }
        }
        missing = still;
        if missing.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(failed(missing, None));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut all = Vec::with_capacity(me.world);
    for k in &names {
        let bytes = store.get(k).map_err(|e| failed(vec![], Some(e.0)))?;
        let a: Announce = serde_json::from_slice(&bytes)
            .map_err(|e| failed(vec![], Some(format!("`{k}` holds no announcement: {e}"))))?;
        all.push(a);
    }
    // The store lives in rank 0's process (unless torchrun's agent serves it): rank 0 waits
    // until every rank has read the announcements, so that a rank 0 failing at the comparison
    // cannot take the store away from a rank still reading.
    store
        .set(&format!("kiln/{}/read/{}", me.restart, me.rank), b"1")
        .map_err(|e| failed(vec![], Some(e.0)))?;
    if me.serves_store() {
        let read: Vec<String> = (0..me.world)
            .map(|r| format!("kiln/{}/read/{r}", me.restart))
            .collect();
        let read: Vec<&str> = read.iter().map(String::as_str).collect();
        while !store.check(&read).map_err(|e| failed(vec![], Some(e.0)))?
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(all)
}

/// The first rank whose announcement differs from rank 0's, with each difference, worded as
/// K0516 (every rank words it alike, so every rank fails with the same diagnostic).
pub fn compare(exp: &Experiment, all: &[Announce], span: Span) -> Result<(), Diagnostic> {
    let Some(first) = all.first() else {
        return Ok(());
    };
    for (k, other) in all.iter().enumerate().skip(1) {
        let mut found = Vec::new();
        if other.world != first.world {
            found.push(format!(
                "world size: {} on rank 0, {} on rank {k}",
                first.world, other.world
            ));
        }
        let (refused, changed) = differences(exp, &first.fingerprint, &other.fingerprint);
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
        for c in refused {
            found.push(format!(
                "{}: {} on rank 0, {} on rank {k}",
                c.what,
                show(&c.was),
                show(&c.now)
            ));
        }
        found.extend(
            changed
                .into_iter()
                .map(|c| format!("{c} (rank 0 → rank {k})")),
        );
        if other.shapes != first.shapes {
            found.push(format!("parameter shapes: rank {k}'s differ from rank 0's"));
        }
        if other.resume_step != first.resume_step {
            found.push(format!(
                "resumes from step {} on rank 0, {} on rank {k}",
                show(&first.resume_step.map(|s| s.to_string())),
                show(&other.resume_step.map(|s| s.to_string()))
            ));
        }
        if found.is_empty() {
            continue;
        }
        if other.file != first.file {
            found.push(format!(
                "files: `{}` on rank 0, `{}` on rank {k}",
                first.file, other.file
            ));
        }
        return Err(Problem::Running(Running::RanksDiffer {
            span,
            rank: 0,
            other: Some(k),
            differences: found,
        })
        .diagnostic());
    }
    Ok(())
}
