//! Why a file could not be read: K0003 for a file named on the command line, K0122 for a base
//! named by `extends`. The facts, and the words for them.

use crate::present::{fmt_bytes, fmt_count};

/// Why a file could not be read.
#[derive(Clone, Debug, PartialEq)]
pub enum Unreadable {
    /// The system refused (a missing file, a missing permission, ...), in its own words.
    Io(String),
    /// The path names something other than a regular file, which is never opened for reading.
    NotRegular(FileKind),
    /// The file is larger than Kiln reads.
    TooLarge {
        /// The file's size in bytes (the bytes read, `limit + 1`, when it grew while read).
        size: u64,
        /// The limit in bytes.
        limit: u64,
    },
}

/// What a path names when it is not a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A directory.
    Directory,
    /// A named pipe: reading it waits for a writer.
    Fifo,
    /// A character device such as `/dev/zero`, whose reads may never end.
    CharDevice,
    /// A block device (a disk).
    BlockDevice,
    /// A Unix socket.
    Socket,
    /// Anything else the system reports.
    Other,
}

impl FileKind {
    /// The kind in words, as in "a directory".
    pub fn name(self) -> &'static str {
        match self {
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO (named pipe)",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Socket => "a socket",
            FileKind::Other => "a special file",
        }
    }
}

impl Unreadable {
    /// Why, worded to follow "cannot read `path`: ".
    pub(super) fn reason(&self) -> String {
        match self {
            Unreadable::Io(error) => error.clone(),
            Unreadable::NotRegular(kind) => {
                format!("it is {}, not a regular file", kind.name())
            }
            Unreadable::TooLarge { size, limit } => format!(
                "it is {} bytes ({}), over the {} limit for an experiment file",
                fmt_count(*size),
                fmt_bytes(*size),
                fmt_bytes(*limit)
            ),
        }
    }

    /// The help line where it is not the code's usual one.
    pub(super) fn help(&self) -> Option<&'static str> {
        match self {
            Unreadable::Io(_) => None,
            Unreadable::NotRegular(_) => {
                Some("name a regular file: Kiln reads no directories, FIFOs, devices or sockets")
            }
            Unreadable::TooLarge { .. } => Some(
                "experiment files are a few kilobytes: check that the path names the right one",
            ),
        }
    }
}
