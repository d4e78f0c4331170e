//! Diagnostics as plain data.
//!
//! The checker finds [`Problem`]s: one variant per [`Code`], holding facts (spans, names,
//! candidates, numbers, shapes). [`Problem::diagnostic`] words each one, in one place, as a
//! [`Diagnostic`]: a message, a primary span with its label, secondary labels, a help line and
//! [`Fix`]es an editor can apply. They become text (miette reports, JSON) only in [`render`], at
//! the edge of the program.

mod arguments;
mod codes;
mod compress;
mod consistency;
mod datafile;
mod distributed;
mod evaluation;
mod extend;
mod groups;
mod keywords;
pub mod problem;
mod pruning;
mod ranges;
pub mod render;
mod runs;
mod runtime;
mod schedule;
mod shapes;
mod situation;
mod strategy;
mod syntax;
mod unreadable;
mod wording;
pub use wording::paths_from;

pub use codes::Code;
pub use problem::Problem;

use crate::span::Span;

/// Whether a diagnostic stops the experiment from running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The experiment cannot run.
    Error,
    /// The experiment runs, but probably not as meant.
    Warning,
}

/// A span with a short text shown under it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Label {
    /// Where the label points.
    pub span: Span,
    /// What it says there.
    pub text: String,
}

/// A replacement that fixes a problem: write `replacement` over `span`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fix {
    /// The text to replace.
    pub span: Span,
    /// What to write there.
    pub replacement: String,
}

/// One problem found in a source file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Diagnostic {
    /// What kind of problem it is.
    pub code: Code,
    /// One terse sentence.
    pub message: String,
    /// The span the problem is at, with its label.
    pub primary: Label,
    /// Other places that explain the problem ("defined here").
    pub secondary: Vec<Label>,
    /// How to fix it.
    pub help: Option<String>,
    /// Extra context, such as the sweep trial the problem occurs in.
    pub note: Option<String>,
    /// Edits that fix the problem, for editors to apply.
    pub fixes: Vec<Fix>,
}

impl Diagnostic {
    /// A new diagnostic of `code` at `span`; the label defaults to the message.
    pub fn new(code: Code, span: Span, message: impl Into<String>) -> Diagnostic {
        let message = message.into();
        Diagnostic {
            code,
            primary: Label {
                span,
                text: String::new(),
            },
            message,
            secondary: Vec::new(),
            help: None,
            note: None,
            fixes: Vec::new(),
        }
    }

    /// Sets the primary label's text.
    pub fn label(mut self, text: impl Into<String>) -> Diagnostic {
        self.primary.text = text.into();
        self
    }

    /// Adds a secondary label.
    pub fn with(mut self, span: Span, text: impl Into<String>) -> Diagnostic {
        self.secondary.push(Label {
            span,
            text: text.into(),
        });
        self
    }

    /// Sets the help line.
    pub fn help(mut self, text: impl Into<String>) -> Diagnostic {
        self.help = Some(text.into());
        self
    }

    /// Adds a fix: `replacement` written over `span`.
    pub fn fix(mut self, span: Span, replacement: impl Into<String>) -> Diagnostic {
        self.fixes.push(Fix {
            span,
            replacement: replacement.into(),
        });
        self
    }

    /// The severity of its code.
    pub fn severity(&self) -> Severity {
        self.code.severity()
    }

    /// Whether it is an error.
    pub fn is_error(&self) -> bool {
        self.severity() == Severity::Error
    }
}

/// Sorts diagnostics by file and position and drops exact repeats (sweeps check each trial, and
/// the same problem in every trial is reported once).
pub fn normalize(diags: &mut Vec<Diagnostic>) {
    diags.sort_by(|a, b| {
        (a.primary.span, a.code, &a.message).cmp(&(b.primary.span, b.code, &b.message))
    });
    diags.dedup_by(|a, b| {
        a.primary.span == b.primary.span && a.code == b.code && a.message == b.message
    });
}

/// A count and its noun, singular for one: `1 score`, `2 scores`, `3 classes`.
pub fn counted<N: std::fmt::Display + PartialEq + From<u8>>(n: N, noun: &str) -> String {
    if n == N::from(1) {
        format!("{n} {noun}")
    } else if noun.ends_with(['s', 'x']) || noun.ends_with("ch") || noun.ends_with("sh") {
        format!("{n} {noun}es")
    } else {
        format!("{n} {noun}s")
    }
}

/// Every one of `candidates` closest to `name`, when they are close enough to be a likely typo:
/// all the equally close ones, in alphabetical order. A singular written for a plural (or the
/// reverse, `weights` for `weight`) counts as one edit.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    let name = name.to_lowercase();
    let mut best = limit + 1;
    let mut found: Vec<&str> = Vec::new();
    for c in candidates {
        let lower = c.to_lowercase();
        let mut d = edit_distance(&name, &lower);
        if d > 1 && singular(&name) == singular(&lower) {
            d = 1;
        }
        if d > limit {
            continue;
        }
        if d < best {
            best = d;
            found.clear();
        }
        if d == best {
            found.push(c);
        }
    }
    found.sort_unstable();
    found.dedup();
    found
}

/// The names among `siblings` (the entries of the directory `rel` names its file in) that
/// `rel` may have meant, written as `rel` would be.
pub fn nearby_paths(rel: &str, siblings: &[String]) -> Vec<String> {
    let (dir, name) = match rel.rfind('/') {
        Some(i) => rel.split_at(i + 1),
        None => ("", rel),
    };
    did_you_mean(name, siblings.iter().map(String::as_str))
        .into_iter()
        .filter(|n| *n != name)
        .map(|n| format!("{dir}{n}"))
        .collect()
}

/// A word without its plural ending: `biases` -> `bias`, `weights` -> `weight`.
fn singular(word: &str) -> &str {
    match word.strip_suffix("es") {
        Some(stem)
            if stem.ends_with(['s', 'x']) || stem.ends_with("ch") || stem.ends_with("sh") =>
        {
            stem
        }
        _ => word.strip_suffix('s').unwrap_or(word),
    }
}

/// Levenshtein distance over characters, with adjacent transpositions counted as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev2 = vec![0usize; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                cur[j] = cur[j].min(prev2[j - 2] + 1);
            }
        }
        prev2 = std::mem::replace(&mut prev, cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_find_typos() {
        let kinds = ["linear", "conv2d", "relu", "dropout"];
        assert_eq!(did_you_mean("linaer", kinds), ["linear"]);
        assert_eq!(did_you_mean("Relu", kinds), ["relu"]);
        assert!(did_you_mean("xyz", kinds).is_empty());
        assert!(did_you_mean("fp64", ["fp32", "bf16", "fp16"]).is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(counted(1u64, "score"), "1 score");
        assert_eq!(counted(3i64, "class"), "3 classes");
        assert_eq!(counted(0usize, "micro-batch"), "0 micro-batches");
    }

    #[test]
    fn suggestions_list_every_equally_close_name() {
        assert_eq!(did_you_mean("fc", ["fc1", "fc2", "conv"]), ["fc1", "fc2"]);
        assert_eq!(did_you_mean("fc3", ["fc2", "fc1", "fc10"]), ["fc1", "fc2"]);
    }

    #[test]
    fn suggestions_know_plurals() {
        assert_eq!(did_you_mean("biases", ["bias", "weight"]), ["bias"]);
        assert_eq!(did_you_mean("metric", ["metrics", "loss"]), ["metrics"]);
        assert_eq!(did_you_mean("weights", ["weight", "bias"]), ["weight"]);
    }
}
