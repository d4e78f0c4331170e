//! A file source's data files, read no further than their headers through the [`Loader`]: that
//! each file is there (K0414 warns when it is not: it may be on the training machine), that its
//! header is one Kiln reads (K0221), and that what it declares fits the experiment (K0220): the
//! sample shape against the model's input, the counts of inputs and targets, class labels one
//! per sample, and a split that leaves each asked-for set a sample.

mod fit;
mod folders;
mod tables;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::cx::Cx;
use super::words::SOURCES;
use super::Loader;
use crate::datafile::{Array, Elem, Format, Header, Probe, Rows};
use crate::diagnostic::problem::{DataFit, Names, OutOfRange, Strategies, Warnings};
use crate::diagnostic::Problem;
use crate::ir::{count_fit, CountMisfit, Data, Layout, ReadData, Shape, Source};
use crate::span::{Sources, Span};
use crate::syntax::ast::{Statement, ValueKind};

pub(super) use fit::{fit, Wants};
pub(super) use folders::folder_classes;

/// Headers already read, by path and format: a sweep's trials read each file once.
#[derive(Default)]
pub(super) struct Headers(HashMap<(PathBuf, Format), Probe>);

/// Where the source's settings are written.
struct Spans {
    /// Each argument of the source call, by parameter name.
    args: HashMap<&'static str, Span>,
    /// The model's `input` statement.
    input: Option<Span>,
    /// The `split` statement.
    split: Option<Span>,
    /// The source's declared `shape`, when it is written and valid.
    shape: Option<Shape>,
}

impl Spans {
    /// The spans of the source of `split` (`train`, `val` or `test`): the `source` statement,
    /// or the split's own source in `split(...)`.
    fn find(stmt: &Statement, split: &str) -> Option<Spans> {
        fn find<'s>(stmts: &'s [Statement], kw: &str) -> Option<&'s Statement> {
            stmts.iter().find(|s| s.keyword.name == kw)
        }
        let body = &stmt.body.as_ref()?.statements;
        let data = &find(body, "data")?.body.as_ref()?.statements;
        let own = find(data, "split").and_then(|s| {
            let bound = Cx::default().bind(
                "split",
                s.args.as_ref(),
                s.keyword.span,
                &["train", "val", "test"],
            );
            bound.get(split).cloned()
        });
        let call = match (find(data, "source"), own) {
            (_, Some(v)) if matches!(v.kind, ValueKind::Call(..)) => v,
            (Some(source), _) if split == "train" => source.values.first()?.clone(),
            _ => return None,
        };
        let ValueKind::Call(name, args) = &call.kind else {
            return None;
        };
        let (kind, params) = SOURCES.iter().find(|(k, _)| *k == name.name)?;
        // Binding again only locates the arguments: their problems were reported already.
        let bound = Cx::default().bind(kind, Some(args), name.span, params);
        let args = params
            .iter()
            .filter_map(|p| bound.get(p).map(|v| (*p, v.span)))
            .collect();
        let input = find(body, "model")
            .and_then(|m| m.body.as_ref())
            .and_then(|b| find(&b.statements, "input"))
            .map(|s| s.span);
        let shape = bound
            .get("shape")
            .and_then(|v| Cx::default().shape(v))
            .map(Shape);
        Some(Spans {
            args,
            input,
            split: find(data, "split").map(|s| s.span),
            shape,
        })
    }
}

/// One side of a source (its inputs or its targets) as its header declares it.
#[derive(Clone)]
struct Side {
    /// How messages name it: `` `images.idx` `` or `` the array `x` of `d.npz` ``.
    name: String,
    /// Where the file (or member) is named.
    span: Span,
    /// The dimensions, the sample count first.
    shape: Vec<u64>,
    /// The element type its header declares (`None` for CSV, whose cells are text).
    elem: Option<Elem>,
}

/// Where a trial's data files are read from: the loader, the files already loaded (a source's
/// paths are relative to the file that declares it) and the headers read so far.
pub(super) struct DataFiles<'a> {
    /// Opens the files.
    pub loader: &'a dyn Loader,
    /// The `.exp` files read.
    pub sources: &'a Sources,
    /// Headers already read.
    pub headers: &'a mut Headers,
}

/// What one file source's headers declare.
pub(super) struct Declared {
    /// The split the source feeds: `train`, `val` or `test`.
    split: &'static str,
    /// Where its settings are written.
    spans: Spans,
    /// How its samples are laid out.
    layout: Layout,
    /// Its inputs.
    inputs: Side,
    /// Its targets.
    targets: Side,
    /// The number of samples; `None` when a CSV file is too large to count.
    samples: Option<u64>,
    /// A text's vocabulary size, when it was read.
    pub vocab: Option<u64>,
    /// An image folder's class names, when it was listed.
    pub classes: Option<Vec<String>>,
}

impl Declared {
    /// What the checker read, for the typed experiment (the training source's).
    pub fn read_data(&self) -> ReadData {
        ReadData {
            samples: self.samples,
            sample: self.inputs.shape[1..].to_vec(),
        }
    }

    /// Whether this is the training source.
    pub fn trains(&self) -> bool {
        self.split == "train"
    }

    /// The per-sample shape of the targets.
    pub fn target_shape(&self) -> Shape {
        dims(&self.targets.shape[1..])
    }
}

/// Reads the headers of every file source of `data` (the training source and a split's own
/// sources) and checks what needs no model: that each file is there and readable, that the
/// inputs and targets count the same samples, and that the split leaves each set a sample.
/// Synthetic data, and loaders that read no data files, give nothing.
pub(super) fn read(
    cx: &mut Cx,
    files: &mut DataFiles,
    stmt: &Statement,
    data: &Data,
) -> Vec<Declared> {
    let own = |h: &Option<crate::ir::HeldOut>| {
        h.as_ref()
            .map(|h| (h.source.clone(), h.span, h.layout.clone()))
    };
    let sources = [
        (
            "train",
            Some((data.source.clone(), data.source_span, data.layout.clone())),
        ),
        ("val", own(&data.val)),
        ("test", own(&data.test)),
    ];
    let mut declared = Vec::new();
    for (split, source) in sources {
        let Some((source, span, layout)) = source else {
            continue;
        };
        if matches!(source, Source::Synthetic { .. }) {
            continue;
        }
        let Some(spans) = Spans::find(stmt, split) else {
            continue;
        };
        let dir = files
            .sources
            .get(data.source_span.file)
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let mut reader = Reader {
            cx,
            dir,
            loader: files.loader,
            headers: files.headers,
            spans: &spans,
            fallback: span,
            vocab: None,
            classes: None,
        };
        let Some((inputs, targets)) = reader.sides(&source) else {
            continue;
        };
        let (vocab, classes) = (reader.vocab, reader.classes);
        let Some(samples) = counts(cx, &source, &inputs, &targets) else {
            continue;
        };
        if let Some(n) = samples.filter(|_| split == "train") {
            if !split_fits(cx, data, &spans, n) {
                continue;
            }
        }
        declared.push(Declared {
            split,
            spans,
            layout,
            inputs,
            targets,
            samples,
            vocab,
            classes,
        });
    }
    declared
}

/// Signed dimensions, as shapes are.
fn dims(d: &[u64]) -> Shape {
    Shape(
        d.iter()
            .map(|&x| i64::try_from(x).unwrap_or(i64::MAX))
            .collect(),
    )
}

/// Reads a source's files.
struct Reader<'a, 'c> {
    cx: &'c mut Cx,
    dir: PathBuf,
    loader: &'a dyn Loader,
    headers: &'a mut Headers,
    spans: &'a Spans,
    fallback: Span,
    /// A text's vocabulary size, once read.
    vocab: Option<u64>,
    /// An image folder's class names, once listed.
    classes: Option<Vec<String>>,
}

impl Reader<'_, '_> {
    fn span(&self, param: &str) -> Span {
        self.spans.args.get(param).copied().unwrap_or(self.fallback)
    }

    /// The header of `rel`, or `None` after reporting why there is none.
    fn open(&mut self, rel: &str, param: &str, format: Format) -> Option<Header> {
        let path = self.dir.join(rel);
        let probe = self
            .headers
            .0
            .entry((path.clone(), format))
            .or_insert_with_key(|(p, f)| self.loader.data_header(p, f))
            .clone();
        let span = self.span(param);
        match probe {
            Probe::Unknown => None,
            Probe::Missing(reason) => {
                let nearby = crate::diagnostic::nearby_paths(rel, &self.loader.siblings(&path));
                self.cx.report(Problem::Warnings(Warnings::DataFileMissing {
                    span,
                    file: rel.to_string(),
                    resolved: path,
                    reason,
                    base: self.dir.clone(),
                    nearby,
                }));
                None
            }
            Probe::Malformed(reason) => {
                self.unusable(span, rel, reason);
                None
            }
            Probe::Read(h) => Some(h),
        }
    }

    fn unusable(&mut self, span: Span, file: &str, reason: String) {
        self.cx.report(Problem::Strategies(Strategies::DataHeader {
            span,
            file: file.to_string(),
            reason,
        }));
    }

    /// One array, refused when its elements are not numbers (or, for IDX, not bytes).
    fn array(&mut self, a: Array, name: String, span: Span, file: &str, idx: bool) -> Option<Side> {
        let refused = match &a.elem {
            Elem::Other(_) => Some(format!(
                "{name} holds {}, but only real numbers are supported",
                a.elem
            )),
            Elem::Int {
                signed: false,
                bits: 8,
            } => None,
            _ if idx => Some(format!(
                "it holds {}, but Kiln reads IDX files of unsigned bytes only",
                a.elem
            )),
            _ => None,
        };
        if let Some(reason) = refused {
            self.unusable(span, file, reason);
            return None;
        }
        Some(Side {
            name,
            span,
            shape: a.shape,
            elem: Some(a.elem),
        })
    }

    /// A named member of an archive.
    fn member(
        &mut self,
        h: Header,
        file: &str,
        key: &str,
        param: &str,
        kind: &'static str,
    ) -> Option<Side> {
        let Header::Members(members) = h else {
            return None;
        };
        let span = self.span(param);
        let Some(m) = members.iter().find(|m| m.name == key) else {
            let present = members.iter().map(|m| m.name.clone()).collect();
            self.cx
                .report(Problem::Strategies(Strategies::DataMismatch {
                    span,
                    file: format!("`{file}`"),
                    situation: DataFit::NoMember {
                        kind,
                        name: key.to_string(),
                        present,
                    },
                }));
            return None;
        };
        match m.array.clone()? {
            Ok(a) => self.array(
                a,
                format!("the {kind} `{key}` of `{file}`"),
                span,
                file,
                false,
            ),
            Err(reason) => {
                self.unusable(span, file, reason);
                None
            }
        }
    }

    /// The inputs and the targets of a file source.
    fn sides(&mut self, source: &Source) -> Option<(Side, Side)> {
        let single = |files: &mut Self, rel: &str, param: &str, format: Format| {
            let idx = format == Format::Idx;
            let Header::Array(a) = files.open(rel, param, format)? else {
                return None;
            };
            let span = files.span(param);
            files.array(a, format!("`{rel}`"), span, rel, idx)
        };
        match source {
            Source::Synthetic { .. } => None,
            Source::Idx { images, labels } => {
                let x = single(self, images, "images", Format::Idx);
                let y = single(self, labels, "labels", Format::Idx);
                let (x, y) = (x?, y?);
                let images_ok = x.shape.len() >= 2;
                let labels_ok = y.shape.len() == 1;
                let swapped = y.shape.len() >= 2 && x.shape.len() == 1;
                for (side, file, ok, what) in [
                    (&x, images, images_ok, "images"),
                    (&y, labels, labels_ok, "labels"),
                ] {
                    if !ok {
                        self.cx
                            .report(Problem::Strategies(Strategies::DataMismatch {
                                span: side.span,
                                file: format!("`{file}`"),
                                situation: DataFit::Role {
                                    what,
                                    dims: side.shape.len(),
                                    swapped,
                                },
                            }));
                    }
                }
                let fine = images_ok && labels_ok;
                fine.then_some((x, y))
            }
            Source::Npy { inputs, targets } => {
                let x = single(self, inputs, "inputs", Format::Npy);
                let y = single(self, targets, "targets", Format::Npy);
                Some((x?, y?))
            }
            Source::Npz {
                path,
                inputs,
                targets,
            } => {
                let h = self.open(
                    path,
                    "path",
                    Format::Npz(vec![inputs.clone(), targets.clone()]),
                )?;
                let x = self.member(h.clone(), path, inputs, "inputs", "array");
                let y = self.member(h, path, targets, "targets", "array");
                Some((x?, y?))
            }
            Source::Safetensors {
                path,
                inputs,
                targets,
            } => {
                let h = self.open(path, "path", Format::Safetensors)?;
                let x = self.member(h.clone(), path, inputs, "inputs", "tensor");
                let y = self.member(h, path, targets, "targets", "tensor");
                Some((x?, y?))
            }
            Source::Csv {
                path,
                target,
                header,
            } => self.csv(path, target, *header),
            Source::Parquet {
                path,
                inputs,
                target,
            } => self.parquet(path, inputs, target),
            Source::Tokens {
                path, bits, block, ..
            } => {
                let Header::Array(a) = self.open(path, "path", Format::Tokens(*bits))? else {
                    return None;
                };
                self.stream(path, a.shape[0], a.elem, *block)
            }
            Source::Images { path, size, .. } => self.folder(path, size),
            Source::Text { path, block } => {
                let Header::Text(text) = self.open(path, "path", Format::Text)? else {
                    return None;
                };
                self.vocab = text.vocab.map(|v| v.len() as u64);
                let elem = Elem::Int {
                    signed: false,
                    bits: 32,
                };
                match text.chars {
                    Some(chars) => self.stream(path, chars, elem, *block),
                    None => {
                        let side = Side {
                            name: format!("`{path}`"),
                            span: self.span("path"),
                            shape: vec![u64::MAX, *block],
                            elem: Some(elem),
                        };
                        Some((side.clone(), side))
                    }
                }
            }
        }
    }

    /// A CSV file as two sides: every column but the target, and the target.
    fn csv(&mut self, path: &str, target: &str, header: bool) -> Option<(Side, Side)> {
        let Header::Csv(csv) = self.open(path, "path", Format::Csv)? else {
            return None;
        };
        let columns = csv.first.len();
        let at = self.span("target");
        let found = if header {
            csv.first.iter().any(|c| c == target)
        } else {
            target.trim().parse::<usize>().is_ok_and(|i| i < columns)
        };
        if !found {
            let situation = if header {
                DataFit::NoColumn {
                    name: target.to_string(),
                    columns: csv.first.clone(),
                }
            } else {
                DataFit::ColumnIndex {
                    target: target.to_string(),
                    columns,
                }
            };
            self.cx
                .report(Problem::Strategies(Strategies::DataMismatch {
                    span: at,
                    file: format!("`{path}`"),
                    situation,
                }));
            return None;
        }
        let span = self.span("path");
        if columns < 2 {
            self.cx
                .report(Problem::Strategies(Strategies::DataMismatch {
                    span,
                    file: format!("`{path}`"),
                    situation: DataFit::OneColumn,
                }));
            return None;
        }
        // The count is left unknown (`u64::MAX` marks it) when the file is too large to count.
        let rows = match csv.rows {
            Rows::Exact(n) => n.saturating_sub(u64::from(header)),
            Rows::AtLeast(_) => u64::MAX,
        };
        let name = format!("`{path}`");
        Some((
            Side {
                name: name.clone(),
                span,
                shape: vec![rows, columns as u64 - 1],
                elem: None,
            },
            Side {
                name,
                span,
                shape: vec![rows],
                elem: None,
            },
        ))
    }
}

/// The sample count the inputs and the targets agree on (`None` inside when a CSV file is too
/// large to count), or `None` after reporting that they do not.
fn counts(cx: &mut Cx, source: &Source, x: &Side, y: &Side) -> Option<Option<u64>> {
    let mismatch = |cx: &mut Cx, side: &Side, situation: DataFit| {
        cx.report(Problem::Strategies(Strategies::DataMismatch {
            span: side.span,
            file: side.name.clone(),
            situation,
        }));
    };
    let n = match count_fit(&x.shape, &y.shape) {
        Ok(n) => n,
        Err(CountMisfit::NotPerSample { inputs }) => {
            let (side, what) = if inputs {
                (x, "inputs")
            } else {
                (y, "targets")
            };
            mismatch(cx, side, DataFit::NotPerSample { what });
            return None;
        }
        Err(CountMisfit::Differ { inputs, targets }) => {
            let what = if matches!(source, Source::Idx { .. }) {
                "labels"
            } else {
                "targets"
            };
            mismatch(
                cx,
                y,
                DataFit::Counts {
                    what,
                    count: targets,
                    inputs,
                    other: x.name.clone(),
                    other_span: x.span,
                },
            );
            return None;
        }
        Err(CountMisfit::NoSamples) => {
            mismatch(cx, x, DataFit::NoSamples);
            return None;
        }
    };
    Some((n != u64::MAX).then_some(n))
}

/// Whether the split leaves every asked-for set a sample, counted as the runtime splits
/// (`Split::counts`). A training split smaller than the batch
/// is left alone: the runtime trains on it in one smaller batch.
fn split_fits(cx: &mut Cx, data: &Data, spans: &Spans, n: u64) -> bool {
    let split = &data.split;
    let (train, val, test) = split.counts(n);
    if !data.trains_on(train) {
        // Every batch of an epoch would be partial, and dropped.
        cx.report(Problem::Names(Names::OutOfRange {
            span: data.batch_span,
            situation: OutOfRange::BatchOverSamples {
                batch: data.batch,
                train,
                count: n,
                source: data.source_span,
            },
        }));
        return false;
    }
    let at = spans.split.unwrap_or(data.source_span);
    for (name, fraction, got) in [
        ("training", split.train, train),
        ("validation", split.val, val),
        ("test", split.test, test),
    ] {
        if fraction > 0.0 && got == 0 {
            cx.report(Problem::Strategies(Strategies::DataMismatch {
                span: at,
                file: String::new(),
                situation: DataFit::EmptySplit {
                    split: name,
                    fraction,
                    count: n,
                    source: data.source_span,
                },
            }));
            return false;
        }
    }
    true
}
