//! The open documents and their analyses; every request is answered here as a plain function.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use lsp_types::{DiagnosticRelatedInformation, DiagnosticSeverity, Location, NumberOrString, Uri};

use super::position::LineIndex;
use crate::check::{self, FsLoader, Loader, Options};
use crate::datafile::{Format, Probe};
use crate::diagnostic::problem::Unreadable;
use crate::diagnostic::Diagnostic;
use crate::ir::{self, Layer};
use crate::span::FileId;
use crate::syntax::ast;

/// One open document.
pub struct Doc {
    /// The editor's text.
    pub text: String,
    /// The editor's version of it.
    pub version: i32,
    /// Its line starts.
    pub index: LineIndex,
    /// The syntax tree of the newest analysed version that parsed (navigation uses it while
    /// the text is broken or not yet analysed; its spans are checked against the text).
    pub ast: Option<ast::File>,
    /// The newest analysis stored for it.
    pub analysis: Option<Analysis>,
    /// The layers of the last analysis of a version that parsed: those its first trial could
    /// type, whatever errors it has elsewhere.
    pub layers: Vec<Layer>,
}

/// What the checker found in one version of a document.
pub struct Analysis {
    /// The version checked.
    pub version: i32,
    /// The diagnostics as the editor shows them, each with the checker's (for its fixes).
    pub diagnostics: Vec<(lsp_types::Diagnostic, Diagnostic)>,
    /// The first trial's layers in this file as far as they checked, when it parsed.
    pub layers: Option<Vec<Layer>>,
    /// The file's syntax tree, when it parsed.
    pub tree: Option<ast::File>,
}

/// What storing an analysis replaced, to be dropped once the diagnostics are out.
#[derive(Default)]
pub struct Replaced {
    layers: Vec<Layer>,
    ast: Option<ast::File>,
    analysis: Option<Analysis>,
}

/// A document to check, with every open document's text (they override the disk).
pub struct Job {
    /// The document.
    pub uri: Uri,
    /// Its version.
    pub version: i32,
    /// Its path.
    pub path: PathBuf,
    /// Open documents by canonical path.
    pub open: HashMap<PathBuf, String>,
}

/// The open documents.
#[derive(Default)]
pub struct Engine {
    docs: HashMap<String, (Uri, Doc)>,
}

/// The path a `file:` URI names (other URIs are used as they are written).
pub fn path_of(uri: &Uri) -> PathBuf {
    let s = uri.as_str();
    let Some(rest) = s.strip_prefix("file://") else {
        return PathBuf::from(s);
    };
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    PathBuf::from(String::from_utf8_lossy(&out).into_owned())
}

/// The `file:` URI of a path.
pub fn uri_of(path: &Path) -> Option<Uri> {
    let mut s = String::from("file://");
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s.parse().ok()
}

impl Engine {
    /// Opens (or replaces) a document.
    pub fn open(&mut self, uri: Uri, version: i32, text: String) {
        let mut doc = Doc {
            index: LineIndex::new(&text),
            text,
            version,
            ast: None,
            analysis: None,
            layers: Vec::new(),
        };
        if let Some((_, old)) = self.docs.remove(uri.as_str()) {
            doc.ast = old.ast;
            doc.layers = old.layers;
        }
        self.docs.insert(uri.as_str().to_string(), (uri, doc));
    }

    /// Replaces a document's text (full synchronisation).
    pub fn change(&mut self, uri: &Uri, version: i32, text: String) {
        if let Some((_, doc)) = self.docs.get_mut(uri.as_str()) {
            doc.index = LineIndex::new(&text);
            doc.text = text;
            doc.version = version;
        }
    }

    /// Forgets a document.
    pub fn close(&mut self, uri: &Uri) {
        self.docs.remove(uri.as_str());
    }

    /// Every open document with its URI.
    pub fn docs(&self) -> impl Iterator<Item = (&Uri, &Doc)> {
        self.docs.values().map(|(u, d)| (u, d))
    }

    /// The document at `uri`, if open.
    pub fn doc(&self, uri: &Uri) -> Option<&Doc> {
        self.docs.get(uri.as_str()).map(|(_, d)| d)
    }

    /// What checking the document at `uri` needs, as it is now.
    pub fn job(&self, uri: &Uri) -> Option<Job> {
        let (uri, doc) = self.docs.get(uri.as_str())?;
        let open = self
            .docs
            .values()
            .map(|(u, d)| (FsLoader.canonical(&path_of(u)), d.text.clone()))
            .collect();
        Some(Job {
            uri: uri.clone(),
            version: doc.version,
            path: path_of(uri),
            open,
        })
    }

    /// Keeps an analysis unless a newer one is stored. Returns what it replaced (the caller
    /// drops it after publishing: freeing a large tree takes milliseconds), or the analysis
    /// itself when it was not kept.
    pub fn store(&mut self, uri: &Uri, mut analysis: Analysis) -> Result<Replaced, Analysis> {
        let Some((_, doc)) = self.docs.get_mut(uri.as_str()) else {
            return Err(analysis);
        };
        if doc
            .analysis
            .as_ref()
            .is_some_and(|a| a.version > analysis.version)
        {
            return Err(analysis);
        }
        let mut replaced = Replaced::default();
        if let Some(layers) = analysis.layers.take() {
            replaced.layers = std::mem::replace(&mut doc.layers, layers);
        }
        if let Some(tree) = analysis.tree.take() {
            replaced.ast = doc.ast.replace(tree);
        }
        replaced.analysis = doc.analysis.replace(analysis);
        Ok(replaced)
    }
}

/// Reads open documents from memory and every other file from disk.
struct Overlay<'a> {
    open: &'a HashMap<PathBuf, String>,
}

impl Loader for Overlay<'_> {
    fn read(&self, path: &Path) -> Result<Vec<u8>, Unreadable> {
        match self.open.get(&FsLoader.canonical(path)) {
            Some(text) => Ok(text.clone().into_bytes()),
            None => FsLoader.read(path),
        }
    }

    fn canonical(&self, path: &Path) -> PathBuf {
        FsLoader.canonical(path)
    }

    fn data_header(&self, path: &Path, format: &Format) -> Probe {
        FsLoader.data_header(path, format)
    }

    fn siblings(&self, path: &Path) -> Vec<String> {
        FsLoader.siblings(path)
    }
}

/// Checks a document. Also returns the rest of the checker's result, which the caller drops
/// after publishing.
pub fn analyze(job: &Job) -> (Analysis, check::Checked) {
    let mut checked =
        check::check_path(&job.path, &Overlay { open: &job.open }, &Options::default());
    // The checked file is always the first one read.
    let root = FileId(0);
    let text = job
        .open
        .get(&FsLoader.canonical(&job.path))
        .cloned()
        .unwrap_or_default();
    let index = LineIndex::new(&text);
    let range =
        |span: crate::span::Span| index.range(&text, span.start as usize, span.end as usize);
    let diagnostics = checked
        .diagnostics
        .iter()
        .map(|d| {
            let mut message = d.message.clone();
            let mut at = range(d.primary.span);
            if d.primary.span.file != root {
                // A problem in an `extends` base: shown at the top, naming its place.
                let file = checked.sources.get(d.primary.span.file);
                let lc = checked
                    .sources
                    .line_col(d.primary.span.file, d.primary.span.start);
                message = format!(
                    "{}:{}:{}: {message}",
                    file.path.display(),
                    lc.line,
                    lc.column
                );
                at = lsp_types::Range::default();
            }
            if let Some(help) = &d.help {
                message.push_str(&format!("\nhelp: {help}"));
            }
            if let Some(note) = &d.note {
                message.push_str(&format!("\nnote: {note}"));
            }
            let related: Vec<_> = d
                .secondary
                .iter()
                .filter(|l| l.span.file == root)
                .map(|l| DiagnosticRelatedInformation {
                    location: Location::new(job.uri.clone(), range(l.span)),
                    message: l.text.clone(),
                })
                .collect();
            let lsp = lsp_types::Diagnostic {
                range: at,
                severity: Some(if d.is_error() {
                    DiagnosticSeverity::ERROR
                } else {
                    DiagnosticSeverity::WARNING
                }),
                code: Some(NumberOrString::String(d.code.code().to_string())),
                source: Some("kiln".into()),
                message,
                related_information: (!related.is_empty()).then_some(related),
                ..Default::default()
            };
            (lsp, d.clone())
        })
        .collect();
    // The layers as far as they checked, even when the file has errors elsewhere; a file that
    // does not parse keeps the last ones.
    let layers = checked.tree.is_some().then(|| {
        ir::layers(&checked.model)
            .into_iter()
            .filter(|l| l.span.file == root)
            .cloned()
            .collect()
    });
    let analysis = Analysis {
        version: job.version,
        diagnostics,
        layers,
        tree: checked.tree.take(),
    };
    (analysis, checked)
}
