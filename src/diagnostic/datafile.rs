//! Data files read by the checker (K0220, K0221, K0414): the facts of a disagreement, and their
//! words.

use super::problem::Problem;
use super::Diagnostic;
use crate::diagnostic::problem::{Strategies, Warnings};
use crate::ir::Shape;
use crate::span::Span;

/// How a data file disagrees with the experiment (K0220).
#[derive(Clone, Debug, PartialEq)]
pub enum DataFit {
    /// An image folder whose class folders number other than the declared `classes`.
    ClassFolders {
        /// The class folders, sorted.
        folders: Vec<String>,
        /// The declared number of classes.
        declared: u64,
    },
    /// A held-out image folder whose class folders differ from the training folder's, so that
    /// a class index would name another class.
    OtherClasses {
        /// The held-out folder's classes.
        held_out: Vec<String>,
        /// The training folder's classes.
        train: Vec<String>,
        /// The training source.
        train_span: Span,
    },
    /// A sample holds a number of values other than the model's input.
    SampleSize {
        /// The per-sample shape the file declares.
        found: Vec<u64>,
        /// The model's input.
        input: Shape,
        /// The model's `input` statement.
        input_span: Option<Span>,
    },
    /// Samples of as many values as wanted, in other dimensions: reshaping them would scramble
    /// their values.
    Layout {
        /// The per-sample shape the file declares.
        found: Vec<u64>,
        /// The shape wanted: the model's input, or the source's declared `shape`.
        want: Shape,
        /// Where that shape is written.
        want_span: Option<Span>,
        /// Whether the shape wanted is the source's declared `shape`.
        declared: bool,
        /// Whether moving the samples' last dimension first fits: the data is channels last.
        channels_last: bool,
        /// Whether `found` is the samples as `layout: channels_last` arranged them.
        arranged: bool,
    },
    /// Samples of another number of values than the source's declared `shape`.
    DeclaredSize {
        /// The per-sample shape the file declares.
        found: Vec<u64>,
        /// The declared shape.
        declared: Shape,
        /// Where it is declared.
        declared_span: Option<Span>,
    },
    /// `layout: channels_last` on samples of one dimension, which have no channels to move.
    FlatLayout {
        /// The per-sample shape the file declares.
        found: Vec<u64>,
    },
    /// Two files (or arrays) of one source count different samples.
    Counts {
        /// What this file holds (`labels`, `targets`).
        what: &'static str,
        /// Its count.
        count: u64,
        /// The other file's count.
        inputs: u64,
        /// The other file, as written.
        other: String,
        /// Where the other file is named.
        other_span: Span,
    },
    /// An array holds one value, not one row per sample.
    NotPerSample {
        /// `inputs` or `targets`.
        what: &'static str,
    },
    /// An IDX file of a rank other than its role takes (images have a count and sample
    /// dimensions, labels only the count).
    Role {
        /// `images` or `labels`.
        what: &'static str,
        /// The file's dimensions, the count included.
        dims: usize,
        /// Whether the other file has this file's role's rank: the two look swapped.
        swapped: bool,
    },
    /// The file holds no samples.
    NoSamples,
    /// Class-index targets hold more than one value per sample.
    NotClassLabels {
        /// The per-sample shape of the targets.
        found: Vec<u64>,
        /// The `classes` argument, when written.
        classes: Option<Span>,
        /// Whether the targets are shaped as the token ids the model reads: a class per token.
        per_token: bool,
    },
    /// Inputs stored as floats feed a model whose first layer, an `embedding`, takes integer
    /// token ids.
    TokenFloats {
        /// The element type the header declares, in words (`32-bit floats`).
        found: String,
    },
    /// Real-valued targets of another size than declared.
    TargetSize {
        /// The per-sample shape of the targets.
        found: Vec<u64>,
        /// The declared shape.
        declared: Shape,
    },
    /// Per-token targets (`per_token: true`) that are not one class per input token.
    NotTokenClasses {
        /// The per-sample shape of the targets.
        found: Vec<u64>,
        /// The tokens of a sample: the model's input shape.
        tokens: Shape,
    },
    /// An archive has no member of that name.
    NoMember {
        /// `array` or `tensor`.
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// The names it holds.
        present: Vec<String>,
    },
    /// A CSV header has no column of that name.
    NoColumn {
        /// The name asked for.
        name: String,
        /// The header's columns.
        columns: Vec<String>,
    },
    /// Without a header, the target is not a column index below the column count.
    ColumnIndex {
        /// The `target` as written.
        target: String,
        /// The number of columns.
        columns: usize,
    },
    /// A CSV file with a single column, the target.
    OneColumn,
    /// A token stream no longer than one window and its next token.
    ShortStream {
        /// The tokens (or characters) it holds.
        tokens: u64,
        /// The window.
        block: u64,
        /// Where `block` is written.
        block_span: Span,
    },
    /// A text with more distinct characters than the embedding's vocabulary.
    Vocabulary {
        /// Its distinct characters.
        chars: u64,
        /// The embedding's vocabulary.
        vocab: u64,
        /// The embedding.
        embedding: Span,
    },
    /// A split left with no sample although its fraction is above zero.
    EmptySplit {
        /// `training`, `validation` or `test`.
        split: &'static str,
        /// Its fraction.
        fraction: f64,
        /// The samples the files hold.
        count: u64,
        /// Where the source is.
        source: Span,
    },
}

/// "[28, 28]" for a per-sample shape.
fn shape(dims: &[u64]) -> String {
    let d: Vec<String> = dims.iter().map(u64::to_string).collect();
    format!("[{}]", d.join(", "))
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// K0220, K0221 and K0414 in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    let new = |span: Span, message: String| Diagnostic::new(code, span, message);
    match problem {
        Problem::Warnings(Warnings::DataFileMissing {
            span,
            file,
            resolved,
            reason,
            base,
            nearby,
        }) => {
            let d = new(
                span,
                format!(
                    "cannot read the data file `{file}`: {reason} (looked for {})",
                    resolved.display()
                ),
            )
            .label("not found here");
            let from = super::wording::paths_from(&base);
            if nearby.is_empty() {
                d.help(format!(
                    "{from}; `kiln run` needs the file, so this is an error there"
                ))
            } else {
                let quoted: Vec<String> = nearby.iter().map(|n| format!("`{n}`")).collect();
                let d = d.help(format!(
                    "did you mean {}? {from}",
                    super::wording::or_list(&quoted)
                ));
                nearby
                    .into_iter()
                    .fold(d, |d, n| d.fix(span, format!("{n:?}")))
            }
        }
        Problem::Strategies(Strategies::DataHeader { span, file, reason }) => new(
            span,
            format!("the data file `{file}` cannot be used: {reason}"),
        )
        .label("unusable file")
        .help("check that the path names the right file, and that it is complete"),
        Problem::Strategies(Strategies::DataMismatch {
            span,
            file,
            situation,
        }) => fit(new, span, &file, situation),
        _ => unreachable!("only data file problems are worded here"),
    }
}

fn fit(new: impl Fn(Span, String) -> Diagnostic, span: Span, file: &str, s: DataFit) -> Diagnostic {
    match s {
        DataFit::SampleSize {
            found,
            input,
            input_span,
        } => {
            let values: u64 = found.iter().product();
            let d = new(
                span,
                format!(
                    "{file} holds samples of {} {}, but the model's input {input} holds {}",
                    plural(values, "value", "values"),
                    shape(&found),
                    input.numel()
                ),
            )
            .label(format!("samples of {}", shape(&found)));
            let d = match input_span {
                Some(at) => d.with(at, format!("the model takes {input}")),
                None => d,
            };
            d.help(format!(
                "make the model's input hold {values} values, for example `input {}`",
                shape(&found)
            ))
        }
        DataFit::Counts {
            what,
            count,
            inputs,
            other,
            other_span,
        } => new(
            span,
            format!("{file} holds {count} {what}, but {other} holds {inputs} samples"),
        )
        .label(format!("{count} {what}"))
        .with(other_span, format!("{inputs} samples"))
        .help("the two files must describe the same samples (both training or both test files)"),
        DataFit::NotPerSample { what } => new(
            span,
            format!("{file} holds a single value as its {what}, not one row per sample"),
        )
        .label("no samples")
        .help(format!("the {what}' first dimension counts the samples")),
        DataFit::Role {
            what,
            dims,
            swapped,
        } => {
            let want = if what == "labels" {
                "1 (one class id per sample)"
            } else {
                "at least 2 (the count, then each sample's dimensions)"
            };
            new(
                span,
                format!(
                    "{file} holds {} but IDX {what} have {want}",
                    super::counted(dims as u64, "dimension")
                ),
            )
            .label(format!("given as the {what}"))
            .help(if swapped {
                "the images and labels files look swapped: give the images first, the labels as `labels:`"
            } else {
                "name the IDX file that holds the experiment's images as the first argument and its labels as `labels:`"
            })
        }
        DataFit::NoSamples => new(span, format!("{file} holds no samples"))
            .label("no samples")
            .help("the data needs at least one sample"),
        DataFit::NotClassLabels {
            found,
            classes,
            per_token,
        } => {
            let d = new(
                span,
                format!(
                    "{file} holds targets of {} per sample, but class labels are one per sample",
                    shape(&found)
                ),
            )
            .label("not class labels");
            let d = match classes {
                Some(at) => d.with(at, "classes make the targets class indices"),
                None => d,
            };
            d.help(if per_token {
                "these targets are shaped as the token ids: add `per_token: true` to the source for a class per token"
            } else if classes.is_some() {
                "give one class index per sample, or drop `classes` for real-valued targets"
            } else {
                "give one class index per sample, or use a loss for real-valued targets such as `mse`"
            })
        }
        DataFit::Layout {
            found,
            want,
            want_span,
            declared,
            channels_last,
            arranged,
        } => {
            let whose = if declared {
                "the declared `shape`"
            } else {
                "the model's input"
            };
            let d = new(
                span,
                format!(
                    "{file} holds samples of {}{}, but {whose} is {want}: reshaping them would scramble their values",
                    shape(&found),
                    if arranged { " after `layout: channels_last`" } else { "" }
                ),
            )
            .label(format!("samples of {}", shape(&found)));
            let d = match want_span {
                Some(at) if declared => d.with(at, format!("declared as {want}")),
                Some(at) => d.with(at, format!("the model takes {want}")),
                None => d,
            };
            d.help(if channels_last && declared {
                format!(
                    "the samples are channels last: declare the shape the file stores, `shape: {}`, and add `layout: channels_last` to move the channels first as they load",
                    shape(&found)
                )
            } else if channels_last {
                "the samples are channels last: add `layout: channels_last` to the source to move the channels first as they load".to_string()
            } else if declared {
                format!(
                    "declare the shape the file stores, `shape: {}`",
                    shape(&found)
                )
            } else if arranged {
                format!(
                    "give the model the samples' shape, `input {}`, or remove `layout` to keep them as stored",
                    shape(&found)
                )
            } else {
                format!(
                    "give the model the data's shape, `input {}`, or store the samples as {want}",
                    shape(&found)
                )
            })
        }
        DataFit::DeclaredSize {
            found,
            declared,
            declared_span,
        } => {
            let values: u64 = found.iter().product();
            let d = new(
                span,
                format!(
                    "{file} holds samples of {} {}, but the declared `shape` {declared} holds {}",
                    plural(values, "value", "values"),
                    shape(&found),
                    declared.numel()
                ),
            )
            .label(format!("samples of {}", shape(&found)));
            let d = match declared_span {
                Some(at) => d.with(at, format!("declared as {declared}")),
                None => d,
            };
            d.help(format!(
                "declare the shape the file stores, `shape: {}`, or leave `shape` out",
                shape(&found)
            ))
        }
        DataFit::FlatLayout { found } => new(
            span,
            format!(
                "`layout: channels_last` moves the last dimension of each sample first, but {file} holds samples of {}",
                shape(&found)
            ),
        )
        .label("no channels to move")
        .help("declare the shape each row stores, such as `shape: [32, 32, 3]`, or remove `layout`"),
        DataFit::TokenFloats { found } => new(
            span,
            format!(
                "{file} holds {found}, but the model's first layer, an `embedding`, takes integer token ids"
            ),
        )
        .label("token ids stored as floats")
        .help("store the ids as integers (int64, int32, int16, int8 or uint8), for example `np.save(path, ids.astype(np.int64))`"),
        DataFit::TargetSize { found, declared } => new(
            span,
            format!(
                "{file} holds targets of {} per sample, but they are declared as {declared}",
                shape(&found)
            ),
        )
        .label("wrong target size")
        .help("make the declared targets' shape match the data"),
        DataFit::NotTokenClasses { found, tokens } => new(
            span,
            format!(
                "{file} holds {} per sample, but `per_token: true` needs a class per token of the input, {tokens}",
                if found.is_empty() {
                    "one target".to_string()
                } else {
                    format!("targets of {}", shape(&found))
                }
            ),
        )
        .label("not a class per token")
        .help("store one class index per token, an array shaped as the inputs, or drop `per_token` for one class per sample"),
        DataFit::NoMember {
            kind,
            name,
            present,
        } => {
            let names: Vec<String> = present.iter().map(|n| format!("`{n}`")).collect();
            let listed = if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            };
            new(
                span,
                format!("{file} has no {kind} `{name}`; it holds: {listed}"),
            )
            .label(format!("no {kind} `{name}`"))
            .help(format!("name the {kind}s with `inputs:` and `targets:`"))
        }
        DataFit::NoColumn { name, columns } => new(
            span,
            format!(
                "{file} has no column `{name}`; its columns: {}",
                columns.join(", ")
            ),
        )
        .label(format!("no column `{name}`"))
        .help("name a column the file has (`target:`, and a Parquet source's `inputs:`); a CSV file without a header row takes `header: false`"),
        DataFit::ColumnIndex { target, columns } => new(
            span,
            format!(
                "without a header row, `target` is a column index below {columns}, not `{target}`"
            ),
        )
        .label("not a column of the file")
        .help(format!(
            "write `target: \"0\"` for the first column (the file has {}), or `header: true` if the first row names the columns",
            plural(columns as u64, "column", "columns")
        )),
        DataFit::ShortStream {
            tokens,
            block,
            block_span,
        } => new(
            span,
            format!(
                "{file} holds {tokens} tokens, too few for one window of {block} and the token after it"
            ),
        )
        .label("too short")
        .with(block_span, "the window")
        .help("use a shorter `block` or more text"),
        DataFit::ClassFolders { folders, declared } => new(
            span,
            format!(
                "{file} has {} class folders ({}), but `classes` declares {declared}",
                folders.len(),
                names(&folders)
            ),
        )
        .label(format!("{} class folders", folders.len()))
        .help(format!(
            "write `classes: {}` (or leave it out: an image folder's classes are its folders), or add the missing class folders",
            folders.len()
        )),
        DataFit::OtherClasses {
            held_out,
            train,
            train_span,
        } => new(
            span,
            format!(
                "{file}'s class folders ({}) are not the training folder's ({}), so a class index would name another class",
                names(&held_out),
                names(&train)
            ),
        )
        .label("other classes")
        .with(train_span, "the training folder")
        .help("give the held-out folder the training folder's class folders, by the same names"),
        DataFit::Vocabulary {
            chars,
            vocab,
            embedding,
        } => new(
            span,
            format!(
                "{file} holds {chars} distinct characters, but the embedding's vocabulary is {vocab}"
            ),
        )
        .label(format!("{chars} characters"))
        .with(embedding, "the embedding")
        .help(format!(
            "give the embedding {chars} ids (`embedding({chars}, ...)`) and the head {chars} classes"
        )),
        DataFit::OneColumn => new(
            span,
            format!("{file} has a single column, the target, so the samples have no inputs"),
        )
        .label("no input columns")
        .help("a CSV source needs the target column and at least one input column, separated by commas"),
        DataFit::EmptySplit {
            split,
            fraction,
            count,
            source,
        } => new(
            span,
            format!(
                "the {split} split is empty: {fraction} of {} is less than one",
                plural(count, "sample", "samples")
            ),
        )
        .label(format!("no {split} samples"))
        .with(source, format!("{} in the files", plural(count, "sample", "samples")))
        .help(format!("use more samples or a larger {split} fraction")),
    }
}

/// Class names in a message: the first eight, then how many more.
fn names(list: &[String]) -> String {
    let mut shown: Vec<String> = list.iter().take(8).map(|n| format!("`{n}`")).collect();
    if list.len() > 8 {
        shown.push(format!("and {} more", list.len() - 8));
    }
    shown.join(", ")
}
