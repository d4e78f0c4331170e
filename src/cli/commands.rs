//! The subcommands.

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::{Format, PlanFormat, EXIT_ERRORS, EXIT_OK, EXIT_USAGE};
use kiln::check::{check_path, Checked, FsLoader, Loader, Options};
use kiln::diagnostic::problem::Reading;
use kiln::diagnostic::render::{self, Style};
use kiln::diagnostic::{Code, Problem, Severity};
use kiln::ir::Device;
use kiln::span::{Sources, Span};
use kiln::syntax::ast::Unit;
use kiln::{plan, present};

/// `kiln check`.
pub fn check(
    paths: &[PathBuf],
    format: Format,
    device_memory: &[(Device, u64)],
) -> Result<i32, String> {
    let options = Options {
        device_memory: device_memory.to_vec(),
        ..Options::default()
    };
    let files = discover(paths)?;
    let results: Vec<Checked> = files.par_iter().map(|f| guarded(f, &options)).collect();
    let style = style();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let (mut errors, mut warnings, mut unreadable) = (0, 0, false);
    let mut json = Vec::new();
    for r in &results {
        for d in &r.diagnostics {
            match d.severity() {
                Severity::Error => errors += 1,
                Severity::Warning => warnings += 1,
            }
            unreadable |= d.code == Code::Io;
            match format {
                Format::Human => {
                    let _ = writeln!(out, "{}", render::to_text(d, &r.sources, style));
                }
                Format::Json => json.push(render::to_json(d, &r.sources)),
            }
        }
    }
    if let Format::Json = format {
        let _ = writeln!(out, "[");
        for (i, d) in json.iter().enumerate() {
            let comma = if i + 1 < json.len() { "," } else { "" };
            let _ = writeln!(
                out,
                "{}{comma}",
                serde_json::to_string(d).map_err(|e| e.to_string())?
            );
        }
        let _ = writeln!(out, "]");
    }
    let _ = out.flush();
    let _ = writeln!(
        std::io::stderr(),
        "checked {} file{}: {errors} error{}, {warnings} warning{}",
        files.len(),
        plural(files.len()),
        plural(errors),
        plural(warnings)
    );
    Ok(if unreadable {
        EXIT_USAGE
    } else if errors > 0 {
        EXIT_ERRORS
    } else {
        EXIT_OK
    })
}

/// `kiln plan`.
pub fn plan(
    path: &Path,
    format: PlanFormat,
    device_memory: &[(Device, u64)],
) -> Result<i32, String> {
    let options = Options {
        device_memory: device_memory.to_vec(),
        ..Options::default()
    };
    // The loader refuses what is not a regular file (K0003) without opening it.
    let checked = guarded(path, &options);
    let style = Style {
        color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        width: 100,
    };
    let mut err = std::io::stderr().lock();
    for d in &checked.diagnostics {
        let _ = writeln!(err, "{}", render::to_text(d, &checked.sources, style));
    }
    if checked.has_errors() {
        return Ok(if checked.diagnostics.iter().any(|d| d.code == Code::Io) {
            EXIT_USAGE
        } else {
            EXIT_ERRORS
        });
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for (i, trial) in checked.trials.iter().enumerate() {
        let p = plan::plan(trial);
        match format {
            PlanFormat::Text => {
                if i > 0 {
                    let _ = writeln!(out);
                }
                let _ = write!(out, "{}", present::plan::to_text(&p));
            }
            PlanFormat::Yaml => {
                let _ = writeln!(out, "---");
                let _ = write!(
                    out,
                    "{}",
                    serde_yaml::to_string(&p).map_err(|e| e.to_string())?
                );
            }
        }
    }
    Ok(EXIT_OK)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn style() -> Style {
    Style {
        color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        width: 100,
    }
}

/// Checks a file; an internal failure becomes a K0005 diagnostic instead of a crash.
fn guarded(path: &Path, options: &Options) -> Checked {
    std::panic::catch_unwind(|| check_path(path, &FsLoader, options)).unwrap_or_else(|_| {
        let mut sources = Sources::default();
        let text = FsLoader
            .read(path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let id = sources.add(path, text);
        let d = Problem::Reading(Reading::Internal {
            span: Span::new(id, 0, 0),
        })
        .diagnostic();
        Checked {
            sources,
            diagnostics: vec![d],
            trials: vec![],
            trial_count: 0,
            tree: None,
            model: vec![],
        }
    })
}

/// Files named directly, and every `.exp` file under directories, in a stable order, each
/// once however many paths reach it (two links, a file named twice). A file found in a directory
/// is named by a path without links where there is one.
pub(super) fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let mut seen = HashSet::new();
    let mut walked = HashSet::new();
    let mut add = |f: PathBuf, files: &mut Vec<PathBuf>| {
        if seen.insert(std::fs::canonicalize(&f).unwrap_or_else(|_| f.clone())) {
            files.push(f);
        }
    };
    for p in paths {
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => {
                let mut found = Vec::new();
                walk(p, &mut walked, &mut found)?;
                found.sort();
                let start = files.len();
                for (_, f) in found {
                    add(f, &mut files);
                }
                files[start..].sort();
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!("`{}` does not exist", p.display()));
            }
            // Anything else is the loader's to read or to refuse (K0003): a FIFO, a device.
            _ => add(p.clone(), &mut files),
        }
    }
    Ok(files)
}

/// What makes a directory the same however it is reached.
#[cfg(unix)]
type DirId = (u64, u64);
#[cfg(not(unix))]
type DirId = PathBuf;

#[cfg(unix)]
fn dir_id(_: &Path, meta: &std::fs::Metadata) -> DirId {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn dir_id(path: &Path, _: &std::fs::Metadata) -> DirId {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Collects the `.exp` files under `root`, each with whether a link led to it. Links to
/// directories are followed once the directories reached without links are walked, and each
/// directory is walked once, so a link to itself, to a parent or a cycle of links ends. An entry
/// whose target is missing (a dangling link, a cycle of links) is left to the loader when its
/// name ends in `.exp`, which reports it, and skipped otherwise.
fn walk(
    root: &Path,
    walked: &mut HashSet<DirId>,
    out: &mut Vec<(bool, PathBuf)>,
) -> Result<(), String> {
    let cannot = |p: &Path, e: std::io::Error| format!("cannot read `{}`: {e}", p.display());
    let mut plain = vec![root.to_path_buf()];
    let mut linked = Vec::new();
    while let Some((dir, via_link)) = plain
        .pop()
        .map(|d| (d, false))
        .or_else(|| linked.pop().map(|d| (d, true)))
    {
        let meta = std::fs::metadata(&dir).map_err(|e| cannot(&dir, e))?;
        if !walked.insert(dir_id(&dir, &meta)) {
            continue;
        }
        let mut entries = std::fs::read_dir(&dir)
            .and_then(|d| {
                d.map(|e| e.map(|e| e.path()))
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(|e| cannot(&dir, e))?;
        // Reversed onto the stacks, so that directories are walked in name order.
        entries.sort_by(|a, b| b.cmp(a));
        for path in entries {
            let is_link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink());
            let via_link = via_link || is_link;
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() && via_link => linked.push(path),
                Ok(m) if m.is_dir() => plain.push(path),
                _ if path.extension().is_some_and(|e| e == "exp") => out.push((via_link, path)),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Reads one `--device-memory` value, as in `cuda:0=80GiB`: a CUDA device or `cpu`, and a size
/// of at least one byte that fits 64 bits.
pub fn device_memory(text: &str) -> Result<(Device, u64), String> {
    let expected = "expected DEVICE=SIZE, as in cuda:0=80GiB";
    let (device, size) = text.split_once('=').ok_or(expected)?;
    let device = match device.trim().parse::<Device>() {
        Ok(Device::Auto) => return Err("`auto` is no device: name cpu or cuda:N".into()),
        Ok(d) => d,
        Err(e) => return Err(e),
    };
    let size = size.trim();
    let number = size.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let not_a_size =
        || format!("`{size}` is not a size: a number of GiB, MiB, KiB, GB, MB, KB or bytes");
    let Some(Unit::Bytes(scale)) = Unit::parse(&size[number.len()..]) else {
        return Err(not_a_size());
    };
    let number: f64 = number.trim().parse().map_err(|_| not_a_size())?;
    let bytes = number * scale as f64;
    // 2^64 is the first byte count that does not fit 64 bits; NaN is in no range.
    if !(1.0..18_446_744_073_709_551_616.0).contains(&bytes) {
        return Err(format!(
            "`{size}` is not a memory size: it must be at least 1 byte and less than 16 EiB"
        ));
    }
    Ok((device, bytes as u64))
}
