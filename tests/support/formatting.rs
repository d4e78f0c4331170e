//! The formatter's promises, checked on any text: formatting twice changes nothing, every
//! comment is kept in order, and the file means what it meant.

use kiln::check::Checked;
use kiln::syntax::format;

/// What a file means: its diagnostics' codes and severities (sorted: two diagnostics at the
/// same place may swap when the text before them changes), and the plan of each trial.
pub fn meaning(checked: &Checked) -> (Vec<String>, Vec<String>) {
    let mut codes: Vec<String> = checked
        .diagnostics
        .iter()
        .map(|d| format!("{:?} {:?}", d.code, d.severity()))
        .collect();
    codes.sort();
    let plans = checked
        .trials
        .iter()
        .map(|t| serde_yaml::to_string(&kiln::plan::plan(t)).expect("plan as YAML"))
        .collect();
    (codes, plans)
}

/// The comments of a file, in order, without the space after them (`#` in strings is no comment).
pub fn comments(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut in_string = false;
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => in_string = !in_string,
            '\\' if in_string => {
                chars.next();
            }
            '\n' => in_string = false,
            '#' if !in_string => {
                let end = text[i..].find(['\n', '\r']).map_or(text.len(), |n| i + n);
                found.push(text[i..end].trim_end());
                while chars.clone().next().is_some_and(|(j, _)| j < end) {
                    chars.next();
                }
            }
            _ => {}
        }
    }
    found
}

/// Formats `text`, checks that formatting again changes nothing and that the comments are kept,
/// and returns the formatted text.
pub fn formatted(name: &str, text: &str) -> String {
    let once = format(text).unwrap_or_else(|d| panic!("{name}: does not format: {}", d.message));
    let twice = format(&once).unwrap_or_else(|d| panic!("{name}: output does not parse: {d:?}"));
    assert_eq!(once, twice, "{name}: formatting is not idempotent");
    assert_eq!(comments(text), comments(&once), "{name}: comments changed");
    assert!(once.is_empty() || once.ends_with('\n') && !once.ends_with("\n\n"));
    for line in once.lines() {
        assert_eq!(line, line.trim_end(), "{name}: trailing space");
    }
    once
}
