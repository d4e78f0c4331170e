//! Reading experiment files from disk, bounded: a path that names something other than a
//! regular file (a FIFO, a device, a socket, a directory) is refused before it is opened for
//! reading, and a file larger than [`MAX_SOURCE_BYTES`] is refused without being read whole.
//! Data files are read the same way, no further than their headers ([`crate::datafile`]).

use std::fs::{File, Metadata};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::Loader;
use crate::datafile::images::{is_image, Classes, Folder};
use crate::datafile::{self, Format, Probe};
use crate::diagnostic::problem::{FileKind, Unreadable};

/// The largest experiment file Kiln reads: 16 MiB. Real experiments are a few kilobytes; the
/// limit only stops a wrong path (a log, a data file, a disk image) from filling memory.
pub const MAX_SOURCE_BYTES: u64 = 16 * 1024 * 1024;

/// The most names of a directory read to suggest a data file's intended name: a typo in a
/// directory of millions of files is not worth listing them.
const MAX_SIBLINGS: usize = 10_000;

/// Reads files from disk.
pub struct FsLoader;

impl Loader for FsLoader {
    fn read(&self, path: &Path) -> Result<Vec<u8>, Unreadable> {
        read_bounded(path, MAX_SOURCE_BYTES)
    }

    fn canonical(&self, path: &Path) -> PathBuf {
        std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
    }

    fn siblings(&self, path: &Path) -> Vec<String> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .take(MAX_SIBLINGS)
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect()
    }

    fn data_header(&self, path: &Path, format: &Format) -> Probe {
        let missing = |e: std::io::Error| {
            Probe::Missing(match e.kind() {
                std::io::ErrorKind::NotFound => "it does not exist".into(),
                std::io::ErrorKind::PermissionDenied => "permission denied".into(),
                _ => e.to_string(),
            })
        };
        let not_regular = |meta: &Metadata| {
            // As the runtime, which refuses it as a missing file (K0502).
            Probe::Missing(format!("it is {}, not a regular file", kind(meta).name()))
        };
        // The kind first, without opening, as for experiment files.
        match std::fs::metadata(path) {
            Err(e) => return missing(e),
            Ok(meta) if *format == Format::Images => {
                if !meta.is_dir() {
                    return Probe::Malformed(
                        "it is not a folder: an image source names a folder with one folder of images per class".into(),
                    );
                }
                return match image_folder(path) {
                    Ok(folder) => Probe::Read(datafile::Header::Folder(folder.classes)),
                    Err(why) => Probe::Malformed(why),
                };
            }
            Ok(meta) if meta.is_dir() && *format == Format::Text => return text_dir(path),
            Ok(meta) if meta.is_dir() && *format == Format::Parquet => return shards(path),
            Ok(meta) if !meta.is_file() => return not_regular(&meta),
            Ok(_) => {}
        }
        let mut file = match open(path) {
            Ok(f) => f,
            Err(e) => return missing(e),
        };
        let size = match file.metadata() {
            Ok(meta) if meta.is_file() => meta.len(),
            Ok(meta) => return not_regular(&meta),
            Err(e) => return missing(e),
        };
        match datafile::read_header(&mut std::io::BufReader::new(&mut file), size, format) {
            Ok(header) => Probe::Read(header),
            Err(reason) => Probe::Malformed(reason),
        }
    }
}

/// The files of a text directory, in the order they are concatenated: every regular file whose
/// name does not start with a dot, sorted by name (byte order). The one listing the checker and
/// the runtime read.
pub fn text_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    listed(dir, "")
}

/// The shards of a Parquet directory, in the order their rows are read: every regular file
/// named `*.parquet` (not starting with a dot), sorted by name.
pub fn parquet_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    listed(dir, ".parquet")
}

/// How deep an image folder's subfolders are followed: deeper is a link cycle, as likely as not.
const MAX_IMAGE_DEPTH: usize = 32;

/// An image folder (see [`crate::datafile::images`]): its class folders, sorted by name; each
/// class's images, the PNG and JPEG files of its folder and every folder below it (links
/// followed), in the order `ImageFolder` lists them (`sorted(os.walk(...))`, then each folder's
/// files sorted). Names starting with a dot are left out (`ImageFolder` would make
/// `.ipynb_checkpoints` a class). The error says why `dir` is no image folder.
pub fn image_folder(dir: &Path) -> Result<Folder, String> {
    let listing = |e: std::io::Error| format!("it cannot be listed: {e}");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(listing)? {
        let entry = entry.map_err(listing)?;
        let name = entry.file_name();
        if name.as_encoded_bytes().starts_with(b".") {
            continue;
        }
        if std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
            names.push(name.to_string_lossy().into_owned());
        }
    }
    names.sort();
    if names.is_empty() {
        return Err(
            "it holds no class folders (one folder per class, holding that class's images)".into(),
        );
    }
    let (mut images, mut counts) = (Vec::new(), Vec::new());
    for (class, name) in names.iter().enumerate() {
        let before = images.len();
        let files = image_files(&dir.join(name)).map_err(|e| e.to_string())?;
        images.extend(files.into_iter().map(|f| (f, class)));
        if images.len() == before {
            return Err(format!(
                "its class folder `{name}` holds no PNG or JPEG images"
            ));
        }
        counts.push((images.len() - before) as u64);
    }
    Ok(Folder {
        classes: Classes { names, counts },
        images,
    })
}

/// Every image of `dir` and of the folders below it (links followed, names starting with a
/// dot left out), in `sorted(os.walk(dir))` order with each folder's files sorted: the samples
/// `kiln predict` reads from a folder, flat or of class folders.
pub fn image_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut folders = Vec::new();
    walk(dir, 0, &mut folders).map_err(std::io::Error::other)?;
    folders.sort_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
    Ok(folders.into_iter().flat_map(|(_, files)| files).collect())
}

/// `dir` and every folder below it, each with its images sorted by name.
fn walk(dir: &Path, depth: usize, out: &mut Vec<(PathBuf, Vec<PathBuf>)>) -> Result<(), String> {
    if depth > MAX_IMAGE_DEPTH {
        return Err(format!(
            "its folders nest more than {MAX_IMAGE_DEPTH} deep at `{}` (a link to a folder above it?)",
            dir.display()
        ));
    }
    let listing = |e: std::io::Error| format!("`{}` cannot be listed: {e}", dir.display());
    let mut files = Vec::new();
    let mut below = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(listing)? {
        let path = entry.map_err(listing)?.path();
        if path
            .file_name()
            .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."))
        {
            continue;
        }
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => below.push(path),
            Ok(m) if m.is_file() && is_image(&path) => files.push(path),
            _ => {}
        }
    }
    files.sort();
    out.push((dir.to_path_buf(), files));
    for d in below {
        walk(&d, depth + 1, out)?;
    }
    Ok(())
}

/// The regular files of `dir` whose names end with `suffix` and do not start with a dot, sorted.
fn listed(dir: &Path, suffix: &str) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.as_encoded_bytes();
        let wanted = !name.starts_with(b".") && name.ends_with(suffix.as_bytes());
        if wanted && std::fs::metadata(entry.path())?.is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// The footers of a directory of Parquet shards, as one table: the rows summed, the columns
/// those every shard has alike.
fn shards(dir: &Path) -> Probe {
    let files = match parquet_files(dir) {
        Ok(f) if f.is_empty() => {
            return Probe::Malformed("it is a directory without `.parquet` files".into())
        }
        Ok(f) => f,
        Err(e) => return Probe::Missing(e.to_string()),
    };
    let mut table: Option<datafile::parquet::Table> = None;
    for f in &files {
        let shard = match FsLoader.data_header(f, &Format::Parquet) {
            Probe::Read(datafile::Header::Table(t)) => t,
            Probe::Malformed(why) | Probe::Missing(why) => {
                let name = f
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                return Probe::Malformed(format!("its shard `{name}` is unusable: {why}"));
            }
            _ => return Probe::Unknown,
        };
        table = Some(match table {
            None => shard,
            Some(t) if t.columns == shard.columns => datafile::parquet::Table {
                rows: t.rows + shard.rows,
                columns: t.columns,
            },
            Some(_) => {
                let name = f
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                return Probe::Malformed(format!(
                    "its shard `{name}` has other columns than the shards before it"
                ));
            }
        });
    }
    table.map_or(Probe::Unknown, |t| Probe::Read(datafile::Header::Table(t)))
}

/// What a directory of text files holds, read as one text (see [`text_files`]).
fn text_dir(dir: &Path) -> Probe {
    use datafile::text::{header, TEXT_CHECK_BYTES};
    let files = match text_files(dir) {
        Ok(f) if f.is_empty() => {
            return Probe::Malformed("it is a directory without text files".into())
        }
        Ok(f) => f,
        Err(e) => return Probe::Missing(e.to_string()),
    };
    let mut size = 0u64;
    for f in &files {
        size = size.saturating_add(std::fs::metadata(f).map_or(0, |m| m.len()));
    }
    let mut bytes = Vec::new();
    if size <= TEXT_CHECK_BYTES {
        for f in &files {
            match std::fs::read(f) {
                Ok(b) => bytes.extend_from_slice(&b),
                Err(e) => return Probe::Missing(format!("`{}` cannot be read: {e}", f.display())),
            }
        }
    }
    let read = (size <= TEXT_CHECK_BYTES).then_some(&bytes[..]);
    match header(read, size) {
        Ok(text) => Probe::Read(datafile::Header::Text(text)),
        Err(reason) => Probe::Malformed(reason),
    }
}

/// Reads the regular file at `path` if it holds at most `limit` bytes.
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, Unreadable> {
    let io = |e: std::io::Error| Unreadable::Io(e.to_string());
    // The kind first, without opening: opening a FIFO waits for a writer, and a device such as
    // `/dev/zero` never ends.
    regular(&std::fs::metadata(path).map_err(io)?, limit)?;
    let file = open(path).map_err(io)?;
    // The path may name something else by now: what was opened must be a regular file too.
    let meta = file.metadata().map_err(io)?;
    regular(&meta, limit)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // One byte past the limit tells a file that grew while read from one that fits.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let size = bytes.len() as u64;
    if size > limit {
        return Err(Unreadable::TooLarge { size, limit });
    }
    Ok(bytes)
}

/// Refuses anything but a regular file of at most `limit` bytes.
fn regular(meta: &Metadata, limit: u64) -> Result<(), Unreadable> {
    if !meta.is_file() {
        return Err(Unreadable::NotRegular(kind(meta)));
    }
    if meta.len() > limit {
        return Err(Unreadable::TooLarge {
            size: meta.len(),
            limit,
        });
    }
    Ok(())
}

/// Opens for reading without blocking, so that a FIFO put in place after the check cannot hang.
#[cfg(unix)]
fn open(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// Opens for reading.
#[cfg(not(unix))]
fn open(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

/// What a path that is not a regular file names.
fn kind(meta: &Metadata) -> FileKind {
    let t = meta.file_type();
    if t.is_dir() {
        return FileKind::Directory;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return FileKind::Fifo;
        }
        if t.is_char_device() {
            return FileKind::CharDevice;
        }
        if t.is_block_device() {
            return FileKind::BlockDevice;
        }
        if t.is_socket() {
            return FileKind::Socket;
        }
    }
    FileKind::Other
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolkit::scratch;

    #[test]
    fn a_file_at_the_limit_is_read_and_one_byte_more_is_refused() {
        let dir = scratch("fs-limit");
        let path = dir.join("a.exp");
        std::fs::write(&path, vec![b'#'; 100]).expect("write");
        assert_eq!(read_bounded(&path, 100).expect("fits").len(), 100);
        assert_eq!(
            read_bounded(&path, 99),
            Err(Unreadable::TooLarge {
                size: 100,
                limit: 99
            })
        );
    }

    #[test]
    #[cfg(unix)]
    fn devices_and_directories_are_refused_unopened() {
        assert_eq!(
            FsLoader.read(Path::new("/dev/zero")),
            Err(Unreadable::NotRegular(FileKind::CharDevice))
        );
        let dir = scratch("fs-dir");
        assert_eq!(
            FsLoader.read(&dir),
            Err(Unreadable::NotRegular(FileKind::Directory))
        );
    }

    #[test]
    fn a_missing_file_is_the_systems_reason() {
        let dir = scratch("fs-missing");
        assert!(matches!(
            FsLoader.read(&dir.join("none.exp")),
            Err(Unreadable::Io(_))
        ));
    }
}
