//! Data files named by a source: resolved against the `.exp` file's folder, opened only when they
//! are regular files, read no further than their size on disk (or, gzipped, than their header
//! declares), and the failures that name them.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use kiln::span::Span;

use super::error::{DataError, DataKind};
use super::{cut, fmt_names, invalid};

/// The most names of a directory read to suggest a missing file's intended name.
const MAX_SIBLINGS: usize = 10_000;

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

    /// A file at `path`, shown as `shown` (a directory's shard).
    pub(super) fn at(path: PathBuf, shown: String) -> DataFile {
        DataFile {
            shown,
            base: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            path,
        }
    }

    /// The file itself, or when it is a directory the files `list` gives of it (each shown
    /// under the directory's name, as `plays/hamlet.txt`); a directory that cannot be listed, or
    /// lists none (`what`: the files it lacks, as `text files`), is K0503.
    pub(super) fn parts(
        &self,
        list: fn(&Path) -> std::io::Result<Vec<PathBuf>>,
        what: &str,
        span: Span,
    ) -> Result<Vec<DataFile>, DataError> {
        if !self.path.is_dir() {
            return Ok(vec![DataFile::at(self.path.clone(), self.shown.clone())]);
        }
        let listed = list(&self.path).map_err(|e| {
            invalid(
                span,
                format!("the directory {} cannot be listed: {e}", self.name()),
                "unreadable directory",
                "check the directory's permissions",
            )
        })?;
        if listed.is_empty() {
            return Err(invalid(
                span,
                format!("the directory {} holds no {what}", self.name()),
                format!("no {what}"),
                format!("put the {what} in it, or name a file"),
            ));
        }
        Ok(listed
            .into_iter()
            .map(|p| {
                let name = p
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                let shown = format!("{}/{name}", self.shown.trim_end_matches('/'));
                DataFile::at(p, shown)
            })
            .collect())
    }

    /// The name in messages: `` `mnist/train.idx` ``.
    pub(super) fn name(&self) -> String {
        format!("`{}`", self.shown)
    }

    /// K0502 for this file.
    pub(super) fn missing(&self, why: &str, span: Span) -> DataError {
        let resolved = std::path::absolute(&self.path).unwrap_or_else(|_| self.path.clone());
        let label = if why == "it does not exist" {
            "file not found"
        } else {
            "file cannot be read"
        };
        let dir = if self.base.as_os_str().is_empty() {
            Path::new(".")
        } else {
            self.base.as_path()
        };
        let base = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let siblings: Vec<String> = resolved
            .parent()
            .and_then(|d| std::fs::read_dir(d).ok())
            .into_iter()
            .flatten()
            .take(MAX_SIBLINGS)
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        let nearby = kiln::diagnostic::nearby_paths(&self.shown, &siblings);
        let from = kiln::diagnostic::paths_from(&base);
        let help = if nearby.is_empty() {
            from
        } else {
            let quoted: Vec<String> = nearby.iter().map(|n| format!("`{n}`")).collect();
            format!("did you mean {}? {from}", quoted.join(" or "))
        };
        DataError::new(
            DataKind::Missing,
            span,
            format!(
                "cannot read the data file {}: {why} (looked for {})",
                self.name(),
                resolved.display()
            ),
        )
        .label(label)
        .help(help)
        .path(resolved)
    }

    /// Why the file cannot be read, from an IO error.
    fn reason(error: &std::io::Error) -> String {
        match error.kind() {
            std::io::ErrorKind::NotFound => "it does not exist".into(),
            std::io::ErrorKind::PermissionDenied => "permission denied".into(),
            _ => error.to_string(),
        }
    }

    /// Opens the file for reading, refusing anything but a regular file (a directory, a FIFO, a
    /// device, a socket) before it is opened, so that a FIFO without a writer cannot block and
    /// `/dev/zero` cannot be read without end. Returns the file and its size on disk.
    pub(super) fn open(&self, span: Span) -> Result<(File, u64), DataError> {
        let meta =
            std::fs::metadata(&self.path).map_err(|e| self.missing(&Self::reason(&e), span))?;
        self.regular(&meta, span)?;
        // Non-blocking, in case a FIFO took the file's place since: the mode is checked again on
        // what was opened.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.path)
            .map_err(|e| self.missing(&Self::reason(&e), span))?;
        let meta = file
            .metadata()
            .map_err(|e| self.missing(&Self::reason(&e), span))?;
        self.regular(&meta, span)?;
        Ok((file, meta.len()))
    }

    /// K0502 unless `meta` is a regular file's.
    fn regular(&self, meta: &std::fs::Metadata, span: Span) -> Result<(), DataError> {
        let kind = meta.file_type();
        let what = if kind.is_file() {
            return Ok(());
        } else if kind.is_dir() {
            "it is a directory"
        } else if kind.is_fifo() {
            "it is a FIFO (a named pipe), not a regular file"
        } else if kind.is_char_device() || kind.is_block_device() {
            "it is a device, not a regular file"
        } else if kind.is_socket() {
            "it is a socket, not a regular file"
        } else {
            "it is not a regular file"
        };
        Err(self.missing(what, span))
    }

    /// The whole file, read no further than its size on disk when it was opened.
    pub(super) fn read(&self, span: Span) -> Result<Vec<u8>, DataError> {
        let (file, size) = self.open(span)?;
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(size)
            .read_to_end(&mut bytes)
            .map_err(|e| self.missing(&Self::reason(&e), span))?;
        Ok(bytes)
    }

    /// Checks that the file is a regular file that can be opened, for readers that open it
    /// themselves.
    pub(super) fn check_readable(&self, span: Span) -> Result<(), DataError> {
        self.open(span).map(drop)
    }

    /// The file as a stream of its content, gunzipped when it starts with the gzip magic
    /// (whatever its extension), read no further than its size on disk. The stream is read
    /// as far as its caller asks: a caller that knows how much data to expect asks for no more
    /// than one byte beyond it.
    pub(super) fn stream(&self, span: Span) -> Result<Stream, DataError> {
        let (file, size) = self.open(span)?;
        let mut file = BufReader::new(file.take(size));
        let gzipped = file
            .fill_buf()
            .map_err(|e| self.missing(&Self::reason(&e), span))?
            .starts_with(&[0x1f, 0x8b]);
        let reader: Box<dyn Read> = if gzipped {
            Box::new(MultiGzDecoder::new(file))
        } else {
            Box::new(file)
        };
        Ok(Stream {
            reader,
            gzipped,
            size,
        })
    }

    /// K0503 for gzip data that cannot be decompressed.
    pub(super) fn corrupt_gzip(&self, error: &std::io::Error, span: Span) -> DataError {
        invalid(
            span,
            format!(
                "{} is gzipped but cannot be decompressed: {}",
                self.name(),
                cut(&error.to_string(), 120)
            ),
            "corrupt gzip data",
            "the file is probably truncated or damaged; download or copy it again",
        )
        .path(&self.path)
    }
}

/// The content of a data file, decompressed when it is gzipped.
pub(super) struct Stream {
    /// The content.
    pub(super) reader: Box<dyn Read>,
    /// Whether the file is gzipped.
    pub(super) gzipped: bool,
    /// The file's size on disk.
    pub(super) size: u64,
}

impl Stream {
    /// Reads up to `limit` bytes, fewer only at the end of the content. Memory is reserved for
    /// at most `limit` bytes, and no more than gzip's best ratio allows the file to hold.
    pub(super) fn read_up_to(
        &mut self,
        limit: u64,
        file: &DataFile,
        span: Span,
    ) -> Result<Vec<u8>, DataError> {
        // Deflate expands a byte to at most 1032.
        let most = if self.gzipped {
            self.size.saturating_mul(1032)
        } else {
            self.size
        };
        let reserve = usize::try_from(limit.min(most)).unwrap_or(0);
        let mut out = Vec::with_capacity(reserve);
        (&mut self.reader)
            .take(limit)
            .read_to_end(&mut out)
            .map_err(|e| self.fault(&e, file, span))?;
        Ok(out)
    }

    /// The failure of a read of the content: K0503 for gzip data that cannot be decompressed,
    /// K0502 otherwise.
    pub(super) fn fault(&self, error: &std::io::Error, file: &DataFile, span: Span) -> DataError {
        if self.gzipped {
            file.corrupt_gzip(error, span)
        } else {
            file.missing(&DataFile::reason(error), span)
        }
    }
}

/// A missing array or tensor: K0503 naming the key and the keys present.
pub(super) fn missing_key(
    file: &DataFile,
    what: &str,
    key: &str,
    present: &[String],
    span: Span,
) -> DataError {
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
    .path(&file.path)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all_train, data, expect_failure, Scratch};
    use super::super::{load, DType, Source, Targets};
    use kiln::diagnostic::Code;
    use std::time::{Duration, Instant};

    fn csv_at(path: &str) -> Source {
        Source::Csv {
            path: path.into(),
            target: "label".into(),
            header: true,
        }
    }

    #[test]
    fn non_regular_files_are_refused_at_once() {
        let dir = Scratch::new();
        let fifo = dir.path("pipe.csv");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid, NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let started = Instant::now();
        // No process writes the FIFO: opening it for reading would block.
        expect_failure(
            load(
                &data(csv_at("pipe.csv"), Targets::Unknown, all_train()),
                &[2],
                DType::Float,
                &dir.0,
                1,
            ),
            Code::DataMissing,
            "it is a FIFO (a named pipe), not a regular file",
        );
        // `/dev/zero` would be read without end; absolute paths ignore the base.
        expect_failure(
            load(
                &data(csv_at("/dev/zero"), Targets::Unknown, all_train()),
                &[2],
                DType::Float,
                &dir.0,
                1,
            ),
            Code::DataMissing,
            "it is a device, not a regular file",
        );
        let images = Source::Idx {
            images: "/dev/zero".into(),
            labels: "/dev/zero".into(),
        };
        expect_failure(
            load(
                &data(images, Targets::Unknown, all_train()),
                &[2],
                DType::Float,
                &dir.0,
                1,
            ),
            Code::DataMissing,
            "it is a device",
        );
        let tensors = Source::Safetensors {
            path: "pipe.csv".into(),
            inputs: "inputs".into(),
            targets: "targets".into(),
        };
        expect_failure(
            load(
                &data(tensors, Targets::Unknown, all_train()),
                &[2],
                DType::Float,
                &dir.0,
                1,
            ),
            Code::DataMissing,
            "FIFO",
        );
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
