//! The lock of a run directory: `.lock`, held with an exclusive file lock by the one process that
//! writes the run. The file names its holder (pid, host, start time) while it is held and is
//! emptied when the holder lets go, so a free lock whose file still names a holder was left by a
//! process that died: a stale lock, reported to whoever takes it next. The operating system drops
//! a dead process's file locks, so a stale lock never blocks a resume.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Error, Op};

/// The lock file's name.
pub const LOCK: &str = ".lock";

/// The process holding (or that held) a run directory.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its process id.
    pub pid: u32,
    /// The host it runs on.
    pub host: String,
    /// When it took the lock (UTC, `YYYYmmdd-HHMMSS`).
    pub since: String,
}

impl Holder {
    /// This process, now.
    pub fn this_process() -> Holder {
        Holder {
            pid: std::process::id(),
            host: host_name(),
            since: super::timestamp(),
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "process {} on {} (since {})",
            self.pid, self.host, self.since
        )
    }
}

/// The host's name, as the kernel knows it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "an unknown host".into())
}

/// A run directory's lock, held until dropped.
#[derive(Debug)]
pub struct Lock {
    file: File,
}

/// Why a lock could not be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it (named when its file could be read).
    Held(Option<Holder>),
    /// The lock file could not be opened, read or written.
    Io(Error),
}

impl Lock {
    /// Takes the lock of `dir` for this process without waiting. Returns the lock and, when the
    /// lock was stale, the holder that died with it.
    pub fn take(dir: &Path) -> Result<(Lock, Option<Holder>), LockError> {
        let path = dir.join(LOCK);
        let io = |op: Op, e: std::io::Error| LockError::Io(Error::new(op, &path, e));
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io(Op::Open, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(LockError::Held(read_holder(&mut file))),
            Err(TryLockError::Error(e)) => return Err(io(Op::Open, e)),
        }
        let stale = read_holder(&mut file);
        let text = serde_yaml::to_string(&Holder::this_process())
            .map_err(|e| LockError::Io(Error::new(Op::Encode, &path, e)))?;
        file.set_len(0).map_err(|e| io(Op::Write, e))?;
        file.rewind().map_err(|e| io(Op::Write, e))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(|e| io(Op::Write, e))?;
        Ok((Lock { file }, stale))
    }
}

impl Drop for Lock {
    /// Empties the file while still holding the lock: the run ended in an orderly way.
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
    }
}

/// The holder named in a lock file; `None` when it is empty or unreadable.
fn read_holder(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.take(4096).read_to_string(&mut text).ok()?;
    serde_yaml::from_str(&text).ok()
}
