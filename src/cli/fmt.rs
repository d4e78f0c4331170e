//! `kiln fmt`: rewrites experiment files in the canonical layout of [`kiln::syntax::format`].

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use super::{EXIT_ERRORS, EXIT_OK};
use kiln::diagnostic::render::{self, Style};
use kiln::span::Sources;

/// `kiln fmt`: formats each file in place (every `.exp` file under directories), or with
/// `check` only lists the files that would change. A path `-` reads standard input and writes
/// the formatted text to standard output.
pub fn fmt(paths: &[PathBuf], check: bool) -> Result<i32, String> {
    let mut failed = false;
    let mut changed = 0;
    let mut files = Vec::new();
    let (stdin, named): (Vec<&PathBuf>, Vec<PathBuf>) = {
        let (dash, rest): (Vec<&PathBuf>, Vec<&PathBuf>) =
            paths.iter().partition(|p| p.as_os_str() == "-");
        (dash, rest.into_iter().cloned().collect())
    };
    if !named.is_empty() {
        files = super::commands::discover(&named)?;
    }
    if !stdin.is_empty() {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        match formatted(Path::new("<stdin>"), &text) {
            Some(out) if check => {
                if out != text {
                    println!("<stdin>");
                    changed += 1;
                }
            }
            Some(out) => print!("{out}"),
            None => failed = true,
        }
    }
    for file in &files {
        let text = match std::fs::read(file) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => {
                    eprintln!("error: `{}` is not UTF-8 text", file.display());
                    failed = true;
                    continue;
                }
            },
            Err(e) => {
                eprintln!("error: cannot read `{}`: {e}", file.display());
                failed = true;
                continue;
            }
        };
        let Some(out) = formatted(file, &text) else {
            failed = true;
            continue;
        };
        if out == text {
            continue;
        }
        changed += 1;
        if check {
            println!("{}", file.display());
        } else if let Err(e) = replace(file, &out) {
            eprintln!("error: cannot write `{}`: {e}", file.display());
            failed = true;
        }
    }
    let _ = std::io::stdout().flush();
    if !paths.iter().all(|p| p.as_os_str() == "-") {
        let verb = if check {
            "would reformat"
        } else {
            "reformatted"
        };
        eprintln!("{verb} {changed} of {} file(s)", files.len());
    }
    Ok(if failed || (check && changed > 0) {
        EXIT_ERRORS
    } else {
        EXIT_OK
    })
}

/// The formatted text, or `None` after printing the syntax diagnostic of text that does not parse
/// (on standard error, which leaves standard output to the formatted text or the changed files).
fn formatted(path: &Path, text: &str) -> Option<String> {
    match kiln::syntax::format(text) {
        Ok(out) => Some(out),
        Err(d) => {
            let mut sources = Sources::default();
            sources.add(path, text.to_string());
            let style = Style {
                color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
                width: 100,
            };
            eprintln!("{}", render::to_text(&d, &sources, style));
            None
        }
    }
}

/// Replaces a file's contents at once: writes a temporary file next to it, then renames it over
/// the file, so that the file is never left half written. A link is followed, and the file it
/// names replaced.
fn replace(file: &Path, text: &str) -> std::io::Result<()> {
    let file = &std::fs::canonicalize(file)?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    let temp = dir.join(format!(".{name}.kiln-fmt-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&temp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        if let Ok(meta) = std::fs::metadata(file) {
            std::fs::set_permissions(&temp, meta.permissions())?;
        }
        std::fs::rename(&temp, file)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}
