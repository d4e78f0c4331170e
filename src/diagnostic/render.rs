//! Turns diagnostics into text: miette's graphical reports for people, JSON for tools.

use std::fmt;

use miette::{
    GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError, MietteSpanContents,
    SourceCode, SourceSpan, SpanContents,
};
use serde::Serialize;

use super::{Diagnostic, Severity};
use crate::span::{LineCol, Sources, Span};

/// How to draw reports.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    /// Use colour (only on a terminal).
    pub color: bool,
    /// Wrap width in columns.
    pub width: usize,
}

/// Renders one diagnostic as miette draws it.
pub fn to_text(diag: &Diagnostic, sources: &Sources, style: Style) -> String {
    let theme = if style.color {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme)
        .with_width(style.width)
        .with_links(false);
    let report = Report::new(diag, sources);
    let mut out = String::new();
    if handler.render_report(&mut out, &report).is_err() {
        out = format!("{}: {}\n", diag.code.code(), diag.message);
    }
    out
}

/// The lines of a file around a diagnostic's labels. miette finds line numbers by scanning from
/// the start of its source, so handing it the whole file would make each report cost the size of
/// the file; a window keeps thousands of diagnostics in a large file linear.
struct Window<'a> {
    name: String,
    text: &'a str,
    /// Byte offset and 0-based line of the window's start in the file.
    offset: usize,
    line: usize,
}

/// Lines of context kept around the labels (miette shows one).
const CONTEXT_LINES: usize = 2;

impl<'a> Window<'a> {
    fn new(file: &'a crate::span::SourceFile, spans: impl Iterator<Item = Span>) -> Window<'a> {
        let (mut lo, mut hi) = (usize::MAX, 0);
        for s in spans {
            lo = lo.min(s.start as usize);
            hi = hi.max(s.end as usize);
        }
        let lo = lo.min(file.text.len());
        let first = file.line_of(lo).saturating_sub(CONTEXT_LINES);
        let last = file.line_of(hi.min(file.text.len())) + CONTEXT_LINES + 1;
        let (start, end) = (file.line_start(first), file.line_start(last));
        Window {
            name: file.path.display().to_string(),
            text: file.text.get(start..end).unwrap_or(""),
            offset: start,
            line: first,
        }
    }
}

impl SourceCode for Window<'_> {
    fn read_span<'b>(
        &'b self,
        span: &SourceSpan,
        before: usize,
        after: usize,
    ) -> Result<Box<dyn SpanContents<'b> + 'b>, MietteError> {
        let local = SourceSpan::new(span.offset().saturating_sub(self.offset).into(), span.len());
        let c = self.text.read_span(&local, before, after)?;
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.clone(),
            c.data(),
            SourceSpan::new((c.span().offset() + self.offset).into(), c.span().len()),
            c.line() + self.line,
            c.column(),
            c.line_count(),
        )))
    }
}

/// A diagnostic bound to its source text, in the shape miette renders.
struct Report<'a> {
    diag: &'a Diagnostic,
    source: Window<'a>,
    labels: Vec<LabeledSpan>,
    note: Option<String>,
}

impl<'a> Report<'a> {
    fn new(diag: &'a Diagnostic, sources: &'a Sources) -> Report<'a> {
        let file = sources.get(diag.primary.span.file);
        let here = diag
            .secondary
            .iter()
            .map(|l| l.span)
            .filter(|s| s.file == diag.primary.span.file);
        let source = Window::new(file, std::iter::once(diag.primary.span).chain(here));
        let mut labels = vec![LabeledSpan::new_primary_with_span(
            Some(diag.primary.text.clone()).filter(|t| !t.is_empty()),
            source_span(diag.primary.span),
        )];
        let mut elsewhere = Vec::new();
        for label in &diag.secondary {
            if label.span.file == diag.primary.span.file {
                labels.push(LabeledSpan::new_with_span(
                    Some(label.text.clone()),
                    source_span(label.span),
                ));
            } else {
                let at = sources.line_col(label.span.file, label.span.start);
                let path = sources.get(label.span.file).path.display().to_string();
                elsewhere.push(format!(
                    "{}:{}:{}: {}",
                    path, at.line, at.column, label.text
                ));
            }
        }
        let note = match (&diag.note, elsewhere.is_empty()) {
            (Some(n), true) => Some(n.clone()),
            (None, false) => Some(elsewhere.join("\n")),
            (Some(n), false) => Some(format!("{n}\n{}", elsewhere.join("\n"))),
            (None, true) => None,
        };
        Report {
            diag,
            source,
            labels,
            note,
        }
    }
}

fn source_span(span: Span) -> SourceSpan {
    SourceSpan::new((span.start as usize).into(), span.len())
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.diag.message)
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.diag.message)
    }
}

impl std::error::Error for Report<'_> {}

impl miette::Diagnostic for Report<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(format!(
            "{}({})",
            self.diag.code.code(),
            self.diag.code.name()
        )))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.diag.severity() {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        let help = match (&self.diag.help, &self.note) {
            (Some(h), Some(n)) => format!("{h}\nnote: {n}"),
            (Some(h), None) => h.clone(),
            (None, Some(n)) => format!("note: {n}"),
            (None, None) => return None,
        };
        Some(Box::new(help))
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        Some(Box::new(self.labels.iter().cloned()))
    }
}

/// A diagnostic as one JSON object, for editors and CI.
#[derive(Serialize)]
pub struct JsonDiagnostic {
    /// Path of the file the primary span is in.
    pub file: String,
    /// Stable code, as in `K0102`.
    pub code: &'static str,
    /// The code's kebab-case name.
    pub name: &'static str,
    /// `error` or `warning`.
    pub severity: Severity,
    /// The message.
    pub message: String,
    /// Byte range of the primary span.
    pub span: JsonSpan,
    /// 1-based start line and column.
    pub start: LineCol,
    /// 1-based end line and column (exclusive).
    pub end: LineCol,
    /// Every label, the primary first.
    pub labels: Vec<JsonLabel>,
    /// How to fix it.
    pub help: Option<String>,
    /// Extra context.
    pub note: Option<String>,
    /// Edits that fix the problem.
    pub fixes: Vec<JsonFix>,
}

/// One fix in JSON: replace the text from `start` to `end` with `replacement`.
#[derive(Serialize)]
pub struct JsonFix {
    /// First byte replaced.
    pub start: u32,
    /// One past the last byte replaced.
    pub end: u32,
    /// What to write there.
    pub replacement: String,
    /// 1-based line of `start`.
    pub start_line: usize,
    /// 1-based column of `start`.
    pub start_column: usize,
    /// 1-based line of `end`.
    pub end_line: usize,
    /// 1-based column of `end` (exclusive).
    pub end_column: usize,
}

/// A byte range.
#[derive(Serialize)]
pub struct JsonSpan {
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

/// One label in JSON.
#[derive(Serialize)]
pub struct JsonLabel {
    /// The file it points into.
    pub file: String,
    /// Whether it is the primary label.
    pub primary: bool,
    /// Byte range.
    pub span: JsonSpan,
    /// 1-based start.
    pub start: LineCol,
    /// 1-based end (exclusive).
    pub end: LineCol,
    /// Label text.
    pub text: String,
}

/// Converts a diagnostic to its JSON form.
pub fn to_json(diag: &Diagnostic, sources: &Sources) -> JsonDiagnostic {
    let label = |span: Span, text: &str, primary: bool| JsonLabel {
        file: sources.get(span.file).path.display().to_string(),
        primary,
        span: JsonSpan {
            start: span.start,
            end: span.end,
        },
        start: sources.line_col(span.file, span.start),
        end: sources.line_col(span.file, span.end),
        text: text.to_string(),
    };
    let p = diag.primary.span;
    let mut labels = vec![label(p, &diag.primary.text, true)];
    labels.extend(diag.secondary.iter().map(|l| label(l.span, &l.text, false)));
    JsonDiagnostic {
        file: sources.get(p.file).path.display().to_string(),
        code: diag.code.code(),
        name: diag.code.name(),
        severity: diag.severity(),
        message: diag.message.clone(),
        span: JsonSpan {
            start: p.start,
            end: p.end,
        },
        start: sources.line_col(p.file, p.start),
        end: sources.line_col(p.file, p.end),
        labels,
        help: diag.help.clone(),
        note: diag.note.clone(),
        fixes: diag
            .fixes
            .iter()
            .map(|f| {
                let (start, end) = (
                    sources.line_col(f.span.file, f.span.start),
                    sources.line_col(f.span.file, f.span.end),
                );
                JsonFix {
                    start: f.span.start,
                    end: f.span.end,
                    replacement: f.replacement.clone(),
                    start_line: start.line,
                    start_column: start.column,
                    end_line: end.line,
                    end_column: end.column,
                }
            })
            .collect(),
    }
}
