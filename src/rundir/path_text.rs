//! Paths in the YAML and JSON that Kiln writes. A path is a string when it is UTF-8, as almost
//! every path is; otherwise, since Linux allows any bytes but `/` and NUL in a file name, it is
//! written as its bytes, `{bytes: [116, 255, ...]}`, and read back exactly.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The two ways a path is written.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Written {
    /// A UTF-8 path.
    Text(String),
    /// Any other path, byte for byte.
    Bytes {
        /// The path's bytes.
        bytes: Vec<u8>,
    },
}

/// Writes `path` (for `#[serde(serialize_with = ...)]`).
pub fn serialize<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    match path.to_str() {
        Some(text) => Written::Text(text.to_string()),
        None => Written::Bytes {
            bytes: path.as_os_str().as_bytes().to_vec(),
        },
    }
    .serialize(s)
}

/// Reads a path written by [`serialize`] (for `#[serde(deserialize_with = ...)]`).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    Ok(match Written::deserialize(d)? {
        Written::Text(text) => PathBuf::from(text),
        Written::Bytes { bytes } => PathBuf::from(OsString::from_vec(bytes)),
    })
}
