//! Data files named by a source: resolved against the `.exp` file's folder, read whole (gunzipped
//! when they are gzip), and the failures that name them.

use std::io::Read;
use std::path::{Path, PathBuf};

use kiln::diagnostic::Code;
use kiln::span::Span;

use super::{fmt_names, invalid};
use kiln::diagnostic::Diagnostic;

/// A data file named by the source: as written, and resolved against the `.exp` file's folder.
pub(super) struct DataFile {
    /// The path as the experiment writes it.
    shown: String,
    /// The path to open.
    pub(super) path: PathBuf,
    /// The directory relative paths resolve against.
    base: PathBuf,
}

impl DataFile {
    pub(super) fn new(base: &Path, shown: &str) -> DataFile {
        DataFile {
            shown: shown.to_string(),
            path: base.join(shown),
            base: base.to_path_buf(),
        }
    }

    /// The name in messages: `` `mnist/train.idx` ``.
    pub(super) fn name(&self) -> String {
        format!("`{}`", self.shown)
    }

    /// K0502 for this file.
    fn missing(&self, why: &str, span: Span) -> Diagnostic {
        let resolved = std::path::absolute(&self.path).unwrap_or_else(|_| self.path.clone());
        let label = if why == "it does not exist" {
            "file not found"
        } else {
            "file cannot be read"
        };
        let base = std::path::absolute(&self.base).unwrap_or_else(|_| self.base.clone());
        Diagnostic::new(
            Code::DataMissing,
            span,
            format!(
                "cannot read the data file {}: {why} (looked for {})",
                self.name(),
                resolved.display()
            ),
        )
        .label(label)
        .help(format!(
            "paths are relative to the directory of the .exp file that declares the source ({})",
            base.display()
        ))
    }

    /// Why the file cannot be read, from an IO error.
    fn reason(error: &std::io::Error) -> String {
        match error.kind() {
            std::io::ErrorKind::NotFound => "it does not exist".into(),
            std::io::ErrorKind::PermissionDenied => "permission denied".into(),
            _ => error.to_string(),
        }
    }

    /// The whole file.
    pub(super) fn read(&self, span: Span) -> Result<Vec<u8>, Diagnostic> {
        if self.path.is_dir() {
            return Err(self.missing("it is a directory", span));
        }
        std::fs::read(&self.path).map_err(|e| self.missing(&Self::reason(&e), span))
    }

    /// Checks that the file can be opened, for readers that open it themselves.
    pub(super) fn check_readable(&self, span: Span) -> Result<(), Diagnostic> {
        if self.path.is_dir() {
            return Err(self.missing("it is a directory", span));
        }
        std::fs::File::open(&self.path)
            .map(drop)
            .map_err(|e| self.missing(&Self::reason(&e), span))
    }
}

/// Decompresses `bytes` when they start with the gzip magic (whatever the file's extension).
pub(super) fn gunzip(bytes: Vec<u8>, file: &DataFile, span: Span) -> Result<Vec<u8>, Diagnostic> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    // The trailer holds the size modulo 2^32: a hint, capped by deflate's best ratio.
    let hint = match bytes.len().checked_sub(4).and_then(|at| bytes.get(at..)) {
        Some(t) => u32::from_le_bytes([t[0], t[1], t[2], t[3]]) as usize,
        None => 0,
    };
    let mut out = Vec::with_capacity(hint.min(bytes.len().saturating_mul(1032)));
    flate2::read::MultiGzDecoder::new(bytes.as_slice())
        .read_to_end(&mut out)
        .map_err(|e| {
            invalid(
                span,
                format!("{} is gzipped but cannot be decompressed: {e}", file.name()),
                "corrupt gzip data",
                "the file is probably truncated or damaged; download or copy it again",
            )
        })?;
    Ok(out)
}

/// A missing array or tensor: K0503 naming the key and the keys present.
pub(super) fn missing_key(
    file: &DataFile,
    what: &str,
    key: &str,
    present: &[String],
    span: Span,
) -> Diagnostic {
    let mut present = present.to_vec();
    present.sort();
    let plural = if present.len() == 1 { "" } else { "s" };
    invalid(
        span,
        format!(
            "{} has no {what} `{key}`; its {what}{plural}: {}",
            file.name(),
            fmt_names(&present)
        ),
        format!("no {what} `{key}`"),
        format!("name the {what}s with `inputs:` and `targets:`"),
    )
}
