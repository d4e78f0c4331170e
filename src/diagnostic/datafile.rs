//! Data files read by the checker (K0220, K0221, K0414): the facts of a disagreement, and their
//! words.

use super::problem::Problem;
use super::Diagnostic;
use crate::ir::Shape;
use crate::span::Span;

/// How a data file disagrees with the experiment (K0220).
#[derive(Clone, Debug, PartialEq)]
pub enum DataFit {
    /// A sample holds a number of values other than the model's input.
    SampleSize {
        /// The per-sample shape the file declares.
        found: Vec<u64>,
        /// The model's input.
        input: Shape,
        /// The model's `input` statement.
        input_span: Option<Span>,
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
        Problem::DataFileMissing {
            span,
            file,
            resolved,
            reason,
        } => new(
            span,
            format!(
                "cannot read the data file `{file}`: {reason} (looked for {})",
                resolved.display()
            ),
        )
        .label("not found here")
        .help("paths are relative to the .exp file that declares the source; `kiln run` needs the file, so this is an error there"),
        Problem::DataHeader { span, file, reason } => {
            new(span, format!("the data file `{file}` cannot be used: {reason}"))
                .label("unusable file")
                .help("check that the path names the right file, and that it is complete")
        }
        Problem::DataMismatch {
            span,
            file,
            situation,
        } => fit(new, span, &file, situation),
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
        DataFit::NotClassLabels { found, classes } => {
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
            d.help("give one class index per sample, or drop `classes` for real-valued targets")
        }
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
        .help("name the target column with `target:`, or write `header: false` for a file without a header row"),
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
