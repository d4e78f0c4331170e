//! The checker: from files to checked experiments and diagnostics.
//!
//! It reads only the files it is given (through a [`Loader`]) and never stops at the first
//! problem: every diagnostic of a file, and of every trial of its sweeps, is reported in one pass.

mod allow;
mod compress;
mod consistency;
pub mod cx;
mod data;
mod datafiles;
mod effective;
mod experiment;
mod fs;
mod homes;
pub mod layers;
mod loss;
mod memory;
mod model;
mod optimizer;
mod parallel;
mod placement;
mod read;
mod recompute;
mod schedule;
mod shrink;
mod source;
mod split;
mod sweep;
mod ties;
mod tokens;
mod train;
pub mod words;

use std::path::{Path, PathBuf};

use crate::datafile::{Format, Probe};
use crate::diagnostic::problem::{Names, Reading, Strategies, Sweep, Unreadable};
use crate::diagnostic::{self, Code, Diagnostic, Problem};
use crate::ir::{Device, Experiment};
use crate::span::{FileId, Sources, Span};
use crate::syntax::ast::{Block, Statement, ValueKind};

pub use fs::{image_files, image_folder, parquet_files, text_files, FsLoader, MAX_SOURCE_BYTES};

/// Reads source files. The command line reads the file system; an editor reads its buffers.
pub trait Loader: Sync {
    /// The bytes of the file at `path`, or why it cannot be read.
    fn read(&self, path: &Path) -> Result<Vec<u8>, Unreadable>;

    /// One name per file, so that `extends` cycles are found however a path is written.
    fn canonical(&self, path: &Path) -> PathBuf;

    /// The header of the data file at `path`, read as `format` and no further. A loader that
    /// reads no data files (an editor's buffers, tests in memory) answers [`Probe::Unknown`],
    /// and the checker then checks nothing about the files.
    fn data_header(&self, path: &Path, format: &Format) -> Probe {
        let _ = (path, format);
        Probe::Unknown
    }

    /// The names in the directory of `path` (for a missing data file, the names it may have
    /// meant); none from a loader that reads no data files.
    fn siblings(&self, path: &Path) -> Vec<String> {
        let _ = path;
        Vec::new()
    }
}

/// Settings that come from outside the file.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Device capacities given on the command line; they override the file's `memory` lines.
    pub device_memory: Vec<(Device, u64)>,
    /// Record each trial's effective settings (`Experiment::settings`), as `kiln run` does for
    /// its report. Off otherwise: checking alone has no use for them.
    pub effective_settings: bool,
}

/// The outcome of checking one file.
pub struct Checked {
    /// Every file read (the file and its `extends` bases).
    pub sources: Sources,
    /// All diagnostics, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// One checked experiment per trial that has no errors.
    pub trials: Vec<Experiment>,
    /// How many trials the sweep grid has (1 without sweeps).
    pub trial_count: usize,
    /// The checked file's syntax tree, when it parsed (an editor navigates it).
    pub tree: Option<crate::syntax::ast::File>,
    /// The first trial's model as far as it checked: every layer whose shape the checker could
    /// infer, with its facts, however many errors the file has (an editor hovers them).
    pub model: Vec<crate::ir::Node>,
}

impl Checked {
    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Checks one file and everything it extends.
pub fn check_path(path: &Path, loader: &dyn Loader, options: &Options) -> Checked {
    let mut sources = Sources::default();
    let mut diags = Vec::new();
    let mut trials = Vec::new();
    let mut trial_count = 0;
    let mut tree = None;
    let mut model = Vec::new();
    let root = Load {
        loader,
        sources: &mut sources,
        diags: &mut diags,
        tree: &mut tree,
    }
    .experiment(path, None, &mut Vec::new());
    // An experiment without a base is checked where it stands in the tree: no copy.
    let root = match root {
        Some(Root::InTree(i)) => tree.as_ref().and_then(|t| t.statements.get(i)),
        Some(Root::Merged(ref merged)) => Some(merged),
        None => None,
    };
    if let Some(exp) = root {
        let body = exp.body.as_ref().map_or(&[][..], |b| &b.statements[..]);
        let axes = sweep::axes(body, &mut diags);
        match sweep::grid_size(&axes) {
            None => {
                let span = axes
                    .first()
                    .and_then(|a| a.values.first())
                    .map_or(exp.keyword.span, |v| v.span);
                let trials = axes
                    .iter()
                    .fold(1u64, |n, a| n.saturating_mul(a.values.len() as u64));
                diags.push(
                    Problem::Strategies(Strategies::BadSweep {
                        span,
                        situation: Sweep::TooManyTrials {
                            trials,
                            max: sweep::MAX_TRIALS as u64,
                        },
                    })
                    .diagnostic(),
                );
            }
            Some(n) => {
                trial_count = n;
                let mut per_trial: Vec<Vec<Diagnostic>> = Vec::with_capacity(n);
                let mut headers = datafiles::Headers::default();
                for i in 0..n {
                    // Without sweeps the one trial is the experiment itself: no copy.
                    let substituted;
                    let (stmt, labels) = if axes.is_empty() {
                        (exp, Vec::new())
                    } else {
                        let (statements, labels) =
                            sweep::trial(body, &axes, i, |s| sources.slice(s).to_string());
                        substituted = Statement {
                            body: exp.body.as_ref().map(|b| Block {
                                statements,
                                span: b.span,
                            }),
                            label: exp.label.clone(),
                            keyword: exp.keyword.clone(),
                            args: exp.args.clone(),
                            values: exp.values.clone(),
                            span: exp.span,
                        };
                        (&substituted, labels)
                    };
                    let mut cx = cx::Cx::default();
                    let mut files = datafiles::DataFiles {
                        loader,
                        sources: &sources,
                        headers: &mut headers,
                    };
                    let (checked, nodes) =
                        experiment::check_experiment(&mut cx, stmt, labels, &mut files, i == 0);
                    if i == 0 {
                        model = nodes;
                    }
                    let no_errors = |cx: &cx::Cx| !cx.diags.iter().any(Diagnostic::is_error);
                    // A trial with any error never runs, even when its typed form could be built.
                    if let Some(mut e) = checked.filter(|_| no_errors(&cx)) {
                        memory::check(&mut cx, &e, &options.device_memory);
                        memory::apply_overrides(&mut e, &options.device_memory);
                        if options.effective_settings {
                            e.settings = effective::settings(stmt, &sources);
                        }
                        trials.push(e);
                    }
                    allow::silence(&mut cx.diags, &cx.allowed);
                    per_trial.push(cx.diags);
                }
                merge_trials(&mut diags, per_trial, n);
            }
        }
    }
    diagnostic::normalize(&mut diags);
    Checked {
        sources,
        diagnostics: diags,
        trials,
        trial_count,
        tree,
        model,
    }
}

/// Adds each trial's diagnostics; one that only some trials have gets a note naming the first.
fn merge_trials(diags: &mut Vec<Diagnostic>, per_trial: Vec<Vec<Diagnostic>>, n: usize) {
    let key = |d: &Diagnostic| (d.primary.span, d.code, d.message.clone());
    let all: Vec<std::collections::HashSet<_>> = per_trial
        .iter()
        .map(|t| t.iter().map(key).collect())
        .collect();
    let mut seen = std::collections::HashSet::new();
    for (i, trial) in per_trial.into_iter().enumerate() {
        for mut d in trial {
            let k = key(&d);
            if !seen.insert(k.clone()) {
                continue;
            }
            if n > 1 && !all.iter().all(|s| s.contains(&k)) {
                d.note = Some(format!("in trial {} of {n}", i + 1));
            }
            diags.push(d);
        }
    }
}

/// The checked experiment statement.
enum Root {
    /// The root file's statement at this index, which has no base.
    InTree(usize),
    /// The statement merged with its bases.
    Merged(Statement),
}

/// Loads files and resolves `extends`.
struct Load<'a> {
    loader: &'a dyn Loader,
    sources: &'a mut Sources,
    diags: &'a mut Vec<Diagnostic>,
    /// Where the checked file's tree is kept.
    tree: &'a mut Option<crate::syntax::ast::File>,
}

impl Load<'_> {
    fn report(&mut self, problem: Problem) {
        self.diags.push(problem.diagnostic());
    }
    /// Reads and parses a file; `from` is the `extends` string that named it.
    fn file(
        &mut self,
        path: &Path,
        from: Option<Span>,
    ) -> Option<(FileId, crate::syntax::ast::File)> {
        let bytes = match self.loader.read(path) {
            Ok(b) => b,
            Err(reason) => {
                match from {
                    Some(span) => self.report(Problem::Names(Names::ExtendsNotFound {
                        span,
                        path: lexical(path),
                        reason,
                    })),
                    None => {
                        let id = self.sources.add(lexical(path), String::new());
                        self.report(Problem::Reading(Reading::Io {
                            span: Span::new(id, 0, 0),
                            path: lexical(path),
                            reason,
                        }));
                    }
                }
                return None;
            }
        };
        let (text, bad_at) = match String::from_utf8(bytes) {
            Ok(t) => (t, None),
            Err(e) => {
                let at = e.utf8_error().valid_up_to();
                (String::from_utf8_lossy(e.as_bytes()).into_owned(), Some(at))
            }
        };
        let id = self.sources.add(lexical(path), text);
        if let Some(at) = bad_at {
            let end = self.sources.get(id).text[at..]
                .chars()
                .next()
                .map_or(at, |c| at + c.len_utf8());
            self.report(Problem::Reading(Reading::InvalidUtf8 {
                span: Span::new(id, at, end),
                path: path.to_path_buf(),
            }));
            return None;
        }
        match crate::syntax::parse(id, &self.sources.get(id).text) {
            Ok(file) => Some((id, file)),
            Err(d) => {
                self.diags.push(*d);
                None
            }
        }
    }

    /// The file's experiment statement, with its bases merged in. The root file's tree is kept
    /// in `tree`.
    fn experiment(
        &mut self,
        path: &Path,
        from: Option<Span>,
        chain: &mut Vec<(PathBuf, PathBuf)>,
    ) -> Option<Root> {
        let canonical = self.loader.canonical(path);
        if let Some(pos) = chain.iter().position(|(c, _)| *c == canonical) {
            let as_written = lexical(path);
            let cycle: Vec<PathBuf> = chain[pos..]
                .iter()
                .map(|(_, p)| p)
                .chain([&as_written])
                .cloned()
                .collect();
            if let Some(span) = from {
                self.report(Problem::Names(Names::ExtendsCycle { span, cycle }));
            }
            return None;
        }
        let (id, file) = self.file(path, from)?;
        let is_root = chain.is_empty();
        chain.push((canonical, lexical(path)));
        let mut experiments = Vec::new();
        let mut extends: Option<&Statement> = None;
        for (i, s) in file.statements.iter().enumerate() {
            match s.keyword.name.as_str() {
                "experiment" => experiments.push((i, s)),
                "extends" => {
                    if let Some(first) = extends {
                        self.report(Problem::Names(Names::DuplicateSetting {
                            span: s.keyword.span,
                            first: first.keyword.span,
                            name: "extends".into(),
                        }));
                    } else {
                        extends = Some(s);
                    }
                }
                _ => {
                    let mut cx = cx::Cx::default();
                    cx.unknown(
                        Code::UnknownKeyword,
                        "top-level statement",
                        &s.keyword,
                        &["experiment", "extends"],
                    );
                    self.diags.extend(cx.diags);
                }
            }
        }
        let result = match experiments.as_slice() {
            [(i, one)] => match extends {
                // Without its base the experiment is incomplete: report only why the base failed.
                Some(e) => self.base(e, path, chain).map(|base| {
                    let base = match base {
                        Root::Merged(merged) => merged,
                        Root::InTree(_) => unreachable!("only the root file stays in its tree"),
                    };
                    Root::Merged(merge(base, one, id))
                }),
                None if is_root => Some(Root::InTree(*i)),
                None => Some(Root::Merged((*one).clone())),
            },
            [] => {
                let end = self.sources.get(id).text.len();
                self.report(Problem::Names(Names::ExperimentCount {
                    span: Span::new(id, 0, end.min(1)),
                    first: None,
                }));
                None
            }
            [(_, first), rest @ ..] => {
                for (_, again) in rest {
                    self.report(Problem::Names(Names::ExperimentCount {
                        span: again.keyword.span,
                        first: Some(first.keyword.span),
                    }));
                }
                None
            }
        };
        chain.pop();
        if is_root {
            *self.tree = Some(file);
        }
        result
    }

    fn base(
        &mut self,
        stmt: &Statement,
        path: &Path,
        chain: &mut Vec<(PathBuf, PathBuf)>,
    ) -> Option<Root> {
        let mut cx = cx::Cx::default();
        let value = cx.single(stmt);
        let rel = value.and_then(|v| cx.string(v));
        self.diags.extend(cx.diags);
        let (rel, span) = (rel?, value?.span);
        let base_path = path.parent().unwrap_or(Path::new("")).join(rel);
        if !matches!(value?.kind, ValueKind::Str(_)) {
            return None;
        }
        self.experiment(&base_path, Some(span), chain)
    }
}

/// A path as diagnostics show it: `.` and `dir/..` removed without asking the file system
/// (the loader resolves the real file; this only tidies the name).
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out: Vec<Component> = Vec::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(c),
            },
            _ => out.push(c),
        }
    }
    if out.is_empty() {
        PathBuf::from(".")
    } else {
        out.iter().collect()
    }
}

/// Blocks whose settings merge one by one when a file overrides its base.
const MERGED_BLOCKS: &[&str] = &["data", "train"];
/// Statements that add to the base's rather than replace them.
const ADDITIVE: &[&str] = &["place", "memory"];
/// Keywords that set the same knob: a child's `steps` replaces its base's `epochs`.
const SAME_KNOB: &[&[&str]] = &[&["epochs", "steps"]];

fn same_knob(a: &str, b: &str) -> bool {
    a == b || SAME_KNOB.iter().any(|g| g.contains(&a) && g.contains(&b))
}

/// Overrides the base experiment with the child's statements: a child statement replaces the
/// base's statements of the same keyword; `data` and `train` blocks merge setting by setting.
fn merge(base: Statement, child: &Statement, child_file: FileId) -> Statement {
    let base_body = base.body.map(|b| b.statements).unwrap_or_default();
    let mut out = child.clone();
    if let (Some(body), Some(child_body)) = (&mut out.body, &child.body) {
        body.statements = merge_statements(base_body, &child_body.statements, child_file);
    }
    out
}

fn merge_statements(
    mut base: Vec<Statement>,
    child: &[Statement],
    child_file: FileId,
) -> Vec<Statement> {
    for c in child {
        let kw = c.keyword.name.as_str();
        if ADDITIVE.contains(&kw) {
            base.push(c.clone());
            continue;
        }
        let from_base = |s: &Statement| same_knob(&s.keyword.name, kw) && s.span.file != child_file;
        match base.iter().position(from_base) {
            Some(i)
                if MERGED_BLOCKS.contains(&kw) && c.body.is_some() && base[i].body.is_some() =>
            {
                let mut merged = c.clone();
                let base_inner = base[i]
                    .body
                    .take()
                    .map(|b| b.statements)
                    .unwrap_or_default();
                if let (Some(mb), Some(cb)) = (&mut merged.body, &c.body) {
                    mb.statements = merge_statements(base_inner, &cb.statements, child_file);
                }
                base[i] = merged;
            }
            Some(i) => {
                base[i] = c.clone();
                let mut j = base.len();
                while j > i + 1 {
                    j -= 1;
                    if from_base(&base[j]) {
                        base.remove(j);
                    }
                }
            }
            None => base.push(c.clone()),
        }
    }
    base
}

/// Serves files from memory (tests, editors); paths not held read as "not found".
#[derive(Default)]
pub struct MemoryLoader {
    files: std::collections::HashMap<PathBuf, Vec<u8>>,
}

impl MemoryLoader {
    /// Holds `bytes` as the file at `path`.
    pub fn insert(&mut self, path: impl Into<PathBuf>, bytes: impl Into<Vec<u8>>) {
        self.files.insert(normalize(&path.into()), bytes.into());
    }
}

impl Loader for MemoryLoader {
    fn read(&self, path: &Path) -> Result<Vec<u8>, Unreadable> {
        self.files
            .get(&normalize(path))
            .cloned()
            .ok_or_else(|| Unreadable::Io("no such file".into()))
    }

    fn canonical(&self, path: &Path) -> PathBuf {
        normalize(path)
    }
}

/// A path with `.` dropped and `dir/..` folded away, without asking any file system.
fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Checks source text held in memory, as if it were the file at `path`.
pub fn check_text(path: &str, text: impl Into<Vec<u8>>) -> Checked {
    let mut loader = MemoryLoader::default();
    loader.insert(path, text);
    check_path(Path::new(path), &loader, &Options::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_paths_are_tidied_without_the_file_system() {
        assert_eq!(lexical(Path::new("dir/../file.exp")), Path::new("file.exp"));
        assert_eq!(lexical(Path::new("./a/./b.exp")), Path::new("a/b.exp"));
        assert_eq!(
            lexical(Path::new("../up/x/../b.exp")),
            Path::new("../up/b.exp")
        );
        assert_eq!(lexical(Path::new("/../a.exp")), Path::new("/a.exp"));
    }
}
