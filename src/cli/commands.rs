//! The subcommands.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::{Format, PlanFormat, EXIT_ERRORS, EXIT_OK, EXIT_USAGE};
use kiln::check::{check_path, Checked, FsLoader, Options};
use kiln::diagnostic::render::{self, Style};
use kiln::diagnostic::{Code, Problem, Severity};
use kiln::ir::Device;
use kiln::plan;
use kiln::span::{Sources, Span};

/// `kiln check`.
pub fn check(paths: &[PathBuf], format: Format, device_memory: &[String]) -> Result<i32, String> {
    let options = Options {
        device_memory: parse_device_memory(device_memory)?,
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
pub fn plan(path: &Path, format: PlanFormat, device_memory: &[String]) -> Result<i32, String> {
    let options = Options {
        device_memory: parse_device_memory(device_memory)?,
    };
    if !path.is_file() {
        return Err(format!("`{}` is not a file", path.display()));
    }
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
                let _ = write!(out, "{}", plan::to_text(&p));
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
        let text = std::fs::read(path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let id = sources.add(path, text);
        let d = Problem::Internal {
            span: Span::new(id, 0, 0),
        }
        .diagnostic();
        Checked {
            sources,
            diagnostics: vec![d],
            trials: vec![],
            trial_count: 0,
        }
    })
}

/// Files named directly, and every `.exp` file under directories, in a stable order.
fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found = Vec::new();
            walk(p, &mut found).map_err(|e| format!("cannot read `{}`: {e}", p.display()))?;
            found.sort();
            files.extend(found);
        } else if p.exists() {
            files.push(p.clone());
        } else {
            return Err(format!("`{}` does not exist", p.display()));
        }
    }
    Ok(files)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "exp") {
            out.push(path);
        }
    }
    Ok(())
}

/// Parses `cuda:0=80GiB` flags.
fn parse_device_memory(flags: &[String]) -> Result<Vec<(Device, u64)>, String> {
    flags
        .iter()
        .map(|f| {
            let bad = || format!("`--device-memory {f}`: expected DEVICE=SIZE, as in cuda:0=80GiB");
            let (device, size) = f.split_once('=').ok_or_else(bad)?;
            let device = match device.trim().parse::<Device>() {
                Ok(Device::Auto) | Err(_) => return Err(bad()),
                Ok(d) => d,
            };
            let size = size.trim();
            let split = size
                .find(|c: char| c.is_ascii_alphabetic())
                .ok_or_else(bad)?;
            let (number, unit) = size.split_at(split);
            let number: f64 = number.trim().parse().map_err(|_| bad())?;
            let unit = kiln::syntax::ast::Unit::parse(unit.trim()).ok_or_else(bad)?;
            match unit {
                kiln::syntax::ast::Unit::Bytes(m) if number > 0.0 => {
                    Ok((device, (number * m as f64) as u64))
                }
                _ => Err(bad()),
            }
        })
        .collect()
}
