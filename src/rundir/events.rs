//! TensorBoard's event file in a run directory (`events.out.tfevents.<secs>.<host>.<pid>`), so that
//! `tensorboard --logdir runs` shows runs and sweeps side by side: the training loss and learning
//! rate per step, each epoch's training figures and each evaluation's metrics, as scalars.
//!
//! The file is a TFRecord stream (each record `u64 length | u32 masked CRC-32C of the length |
//! data | u32 masked CRC-32C of the data`, little-endian) of `Event` protobuf messages, the first
//! naming the format (`brain.Event:2`). Each process that writes a run opens a file of its own
//! (a resumed run a new one, never appending to another's); a resume first writes a
//! `SessionLog START` at the first step it takes, which makes TensorBoard drop the steps from
//! there on that the interrupted process had written, as `steps.jsonl` and `metrics.jsonl` drop
//! theirs.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;

/// `tensorflow.Event`, the fields Kiln writes.
#[derive(Clone, PartialEq, Message)]
struct Event {
    #[prost(double, tag = "1")]
    wall_time: f64,
    #[prost(int64, tag = "2")]
    step: i64,
    #[prost(oneof = "What", tags = "3, 5, 7")]
    what: Option<What>,
}

/// `Event.what`.
#[derive(Clone, PartialEq, prost::Oneof)]
enum What {
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
    #[prost(message, tag = "7")]
    SessionLog(SessionLog),
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, Message)]
struct Summary {
    #[prost(message, repeated, tag = "1")]
    value: Vec<Value>,
}

/// `tensorflow.Summary.Value` with a `simple_value`.
#[derive(Clone, PartialEq, Message)]
struct Value {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(float, tag = "2")]
    simple_value: f32,
}

/// `tensorflow.SessionLog`: only its status.
#[derive(Clone, PartialEq, Message)]
struct SessionLog {
    /// `SessionStatus`: 1 is `START`.
    #[prost(int32, tag = "1")]
    status: i32,
}

/// TFRecord's masked CRC-32C.
fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// `data` framed as one TFRecord.
fn record(data: &[u8], out: &mut Vec<u8>) {
    let len = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One process's event file in a run directory, with the records not yet written.
#[derive(Debug)]
pub struct Events {
    path: PathBuf,
    pending: Vec<u8>,
}

impl Events {
    /// Creates this process's event file in `dir` with its version record and, for a resumed
    /// run, a `SessionLog START` at `resumed_at`, the first step it takes.
    pub fn create(dir: &Path, resumed_at: Option<u64>) -> std::io::Result<Events> {
        let secs = now() as u64;
        let host = hostname();
        let pid = std::process::id();
        let mut k = 0;
        let (path, mut file) = loop {
            let name = match k {
                0 => format!("events.out.tfevents.{secs}.{host}.{pid}"),
                _ => format!("events.out.tfevents.{secs}.{host}.{pid}.{k}"),
            };
            let path = dir.join(name);
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => break (path, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && k < 100 => k += 1,
                Err(e) => return Err(e),
            }
        };
        let mut events = Events {
            path,
            pending: Vec::new(),
        };
        events.push(0, What::FileVersion("brain.Event:2".into()));
        if let Some(step) = resumed_at {
            events.push(step, What::SessionLog(SessionLog { status: 1 }));
        }
        file.write_all(&events.pending)?;
        file.sync_all()?;
        events.pending.clear();
        Ok(events)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn push(&mut self, step: u64, what: What) {
        let event = Event {
            wall_time: now(),
            step: i64::try_from(step).unwrap_or(i64::MAX),
            what: Some(what),
        };
        record(&event.encode_to_vec(), &mut self.pending);
    }

    /// Buffers scalars at `step`, one event with every `(tag, value)`; non-finite values are
    /// written as they are (TensorBoard shows them as gaps).
    pub fn scalars(&mut self, step: u64, values: &[(&str, f64)]) {
        if values.is_empty() {
            return;
        }
        let value = values
            .iter()
            .map(|(tag, v)| Value {
                tag: (*tag).to_string(),
                simple_value: *v as f32,
            })
            .collect();
        self.push(step, What::Summary(Summary { value }));
    }

    /// Appends the buffered events to the file.
    pub fn flush(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut file = OpenOptions::new().append(true).open(&self.path)?;
        file.write_all(&self.pending)?;
        self.pending.clear();
        Ok(())
    }

    /// Drops the buffered events (a resume's truncation).
    pub fn discard(&mut self) {
        self.pending.clear();
    }
}

/// This machine's name, for the file name as TensorBoard's writers make it.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer it is given.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name: String = String::from_utf8_lossy(&buf[..end])
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if ok && !name.is_empty() {
        name
    } else {
        "localhost".into()
    }
}

/// Reads back the records of an event file, checking both CRCs of each (for tests).
#[cfg(test)]
fn read_records(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let len_bytes = bytes.get(at..at + 8).ok_or("truncated length")?;
        let crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().map_err(|_| "crc")?);
        if crc != masked_crc(len_bytes) {
            return Err(format!("bad length CRC at byte {at}"));
        }
        let len = u64::from_le_bytes(len_bytes.try_into().map_err(|_| "len")?) as usize;
        let data = bytes.get(at + 12..at + 12 + len).ok_or("truncated data")?;
        let crc = u32::from_le_bytes(
            bytes[at + 12 + len..at + 16 + len]
                .try_into()
                .map_err(|_| "crc")?,
        );
        if crc != masked_crc(data) {
            return Err(format!("bad data CRC at byte {}", at + 12));
        }
        out.push(data.to_vec());
        at += 16 + len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TFRecord's mask of CRC-32C's check value 0xE3069283: rotated right by 15 bits is
    /// 0x2507C60D, plus 0xa282ead8 is 0xC78AB0E5.
    const MASKED_CHECK: u32 = 0xC78A_B0E5;

    #[test]
    fn the_masked_crc_is_tfrecord_s() {
        // CRC-32C of "123456789" is 0xE3069283 (the standard check value); masked by TFRecord's
        // rule, ((c >> 15) | (c << 17)) + 0xa282ead8, worked out by hand.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(masked_crc(b"123456789"), MASKED_CHECK);
    }

    #[test]
    fn events_read_back_with_their_framing_and_fields() {
        let dir = crate::toolkit::scratch("events");
        let mut e = Events::create(&dir, Some(7)).expect("created");
        e.scalars(8, &[("train/loss", 0.5), ("train/lr", 1e-3)]);
        e.flush().expect("flushed");
        let name = e.path().file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(name.starts_with("events.out.tfevents."), "{name}");
        let records = read_records(&std::fs::read(e.path()).expect("read")).expect("framing");
        assert_eq!(records.len(), 3);
        let events: Vec<Event> = records
            .iter()
            .map(|r| Event::decode(r.as_slice()).expect("an Event"))
            .collect();
        assert_eq!(
            events[0].what,
            Some(What::FileVersion("brain.Event:2".into()))
        );
        assert_eq!(events[1].step, 7);
        assert_eq!(
            events[1].what,
            Some(What::SessionLog(SessionLog { status: 1 }))
        );
        assert_eq!(events[2].step, 8);
        let Some(What::Summary(s)) = &events[2].what else {
            panic!("a summary: {:?}", events[2]);
        };
        assert_eq!(s.value[0].tag, "train/loss");
        assert_eq!(s.value[0].simple_value, 0.5);
        assert_eq!(s.value[1].simple_value, 1e-3f32);
        // A second writer in the same directory and second never shares the file.
        let other = Events::create(&dir, None).expect("second");
        assert_ne!(other.path(), e.path());
    }
}
