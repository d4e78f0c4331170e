//! What `kiln run` prints on standard error: its own lines, and diagnostics rendered for the
//! terminal.

use std::io::{IsTerminal, Write};

use kiln::check::Checked;
use kiln::diagnostic::render::{to_text, Style};
use kiln::diagnostic::Diagnostic;
use kiln::ir::Experiment;

/// Writes `text` to standard error.
pub fn eprint(text: &str) {
    let _ = write!(std::io::stderr(), "{text}");
}

/// Prints a warning of the run unless the experiment allows it (`allow`).
pub fn warn(exp: &Experiment, w: &Diagnostic, checked: &Checked) {
    if !exp.allow.iter().any(|code| code == w.code.code()) {
        eprint(&to_text(w, &checked.sources, style()));
    }
}

/// How diagnostics are rendered: in colour on a terminal unless `NO_COLOR` is set.
pub fn style() -> Style {
    Style {
        color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        width: 100,
    }
}
