//! The one place where problems become words: [`Problem::diagnostic`].

use super::problem::{Expected, Problem, Unknown};
use super::{did_you_mean, Diagnostic};
use crate::diagnostic::problem::{Names, Reading, Running, Shapes, Strategies, Warnings};
use crate::span::Span;

impl Problem {
    /// The diagnostic the user sees: message, labels, help and fixes.
    pub fn diagnostic(self) -> Diagnostic {
        let code = self.code();
        let new = |span: Span, message: String| Diagnostic::new(code, span, message);
        match self {
            p @ Problem::Names(Names::UnknownKeyword { .. }) => super::keywords::words(p),
            Problem::Names(Names::UnknownLayer(u)) => unknown_name(code, "layer", u),
            Problem::Names(Names::UnknownOptimizer(u)) => unknown_name(code, "optimizer", u),
            Problem::Names(Names::UnknownLoss(u)) => unknown_name(code, "loss", u),
            Problem::Names(Names::UnknownSchedule(u)) => unknown_name(code, "schedule", u),
            Problem::Names(Names::UnknownMetric(u)) => unknown_name(code, "metric", u),
            Problem::Names(Names::UnknownSource { unknown, generator }) => unknown_name(
                code,
                if generator {
                    "generator"
                } else {
                    "data source"
                },
                unknown,
            ),
            Problem::Names(Names::UnknownPruneMethod(u)) => unknown_name(code, "pruning method", u),
            Problem::Names(Names::UnknownQuantScheme(u)) => {
                unknown_name(code, "quantization scheme", u)
            }
            Problem::Names(Names::UnknownStrategy(u)) => unknown_name(code, "parallel strategy", u),
            Problem::Names(Names::UnknownChoice { unknown, what }) => {
                unknown_name(code, &what, unknown)
            }
            Problem::Names(Names::UnknownParameter { unknown, callee }) => {
                let suggestions = suggest(&unknown);
                let d = new(
                    unknown.span,
                    format!("`{callee}` has no parameter `{}`", unknown.name),
                )
                .label("unknown parameter");
                if suggestions.is_empty() {
                    d.help(takes(&callee, &unknown.candidates))
                } else {
                    mean(d, unknown.span, suggestions, "")
                }
            }
            Problem::Names(Names::UnknownDevice { span, name }) => {
                let base = name.split(':').next().unwrap_or(&name);
                let suggestions: Vec<String> = if base == "gpu" {
                    vec![name.replacen("gpu", "cuda", 1)]
                } else {
                    did_you_mean(base, ["cpu", "cuda", "auto"])
                        .into_iter()
                        .map(|s| name.replacen(base, s, 1))
                        .collect()
                };
                let d = new(span, format!("unknown device `{name}`")).label("not a device");
                if suggestions.is_empty() {
                    d.help("devices are cpu, cuda, cuda:N and auto")
                } else {
                    mean(
                        d,
                        span,
                        suggestions,
                        " devices are cpu, cuda, cuda:N and auto",
                    )
                }
            }
            Problem::Names(Names::UnknownReference { unknown, suffix }) => {
                // The parameter (`.weight`, or a near miss of it) is set aside.
                let name = match unknown.name.rsplit_once('.') {
                    Some((layer, _)) if !suffix.is_empty() => layer,
                    _ => &unknown.name,
                };
                let suggestions: Vec<String> =
                    did_you_mean(name, unknown.candidates.iter().map(String::as_str))
                        .into_iter()
                        .map(|s| format!("{s}{suffix}"))
                        .collect();
                let mut sorted: Vec<&str> = unknown.candidates.iter().map(String::as_str).collect();
                sorted.sort_unstable();
                let d = new(
                    unknown.span,
                    format!("the model has no layer or block `{}`", unknown.name),
                )
                .label("not defined in the model");
                match suggestions {
                    s if !s.is_empty() => mean(d, unknown.span, s, ""),
                    _ if sorted.is_empty() => {
                        d.help("name layers with `name: layer(...)` to refer to them")
                    }
                    _ if sorted.len() <= 12 => {
                        d.help(format!("layers and blocks: {}", sorted.join(", ")))
                    }
                    _ => d.help(format!(
                        "layers and blocks include {}, ... ({} in all)",
                        sorted[..12].join(", "),
                        sorted.len()
                    )),
                }
            }
            Problem::Names(Names::DuplicateName { span, first, name }) => {
                new(span, format!("`{name}` is defined twice"))
                    .label("defined again here")
                    .with(first, "first defined here")
                    .help("give each layer and block its own name")
            }
            Problem::Names(Names::DuplicateSetting { span, first, name }) => {
                new(span, format!("`{name}` is given twice"))
                    .label("given again here")
                    .with(first, "first given here")
                    .help(format!(
                        "keep one `{name}`; Kiln never silently picks one of two values"
                    ))
            }
            Problem::Names(Names::WrongType {
                span,
                expected,
                found,
            }) => {
                if let Expected::Count {
                    setting,
                    count,
                    meant,
                    statement,
                } = expected
                {
                    return count_with_unit(code, span, setting, count, meant, statement);
                }
                let (what, example) = expected_words(&expected);
                let d = new(span, format!("expected {what}, found {found}"));
                match expected {
                    Expected::Callee { known, .. } => d
                        .label(format!("expected {what}"))
                        .help(format!("known: {}", known.join(", "))),
                    _ => d
                        .label(format!("expected {what}"))
                        .help(format!("write {example}")),
                }
            }
            p @ Problem::Reading(Reading::Syntax { .. }) => super::syntax::words(p),
            Problem::Reading(Reading::InvalidUtf8 { span, path }) => {
                new(span, format!("`{}` is not valid UTF-8", path.display()))
                    .label("invalid byte here")
                    .help("save the file as UTF-8 text")
            }
            Problem::Reading(Reading::Io { span, path, reason }) => new(
                span,
                format!("cannot read `{}`: {}", path.display(), reason.reason()),
            )
            .label("unreadable")
            .help(
                reason
                    .help()
                    .unwrap_or("check the path and its permissions"),
            ),
            Problem::Reading(Reading::TooDeep { span, max }) => {
                new(span, format!("brackets nest deeper than {max} levels"))
                    .label("this bracket is too deep")
                    .help("flatten the structure; no Kiln construct needs this depth")
            }
            Problem::Reading(Reading::Internal { span }) => new(
                span,
                "Kiln failed internally while checking this file".into(),
            )
            .label("while checking this file")
            .help("this is a bug in Kiln: please report it with the file attached"),
            Problem::Names(Names::ExperimentCount { span, first: None }) => {
                new(span, "the file declares no experiment".into())
                    .label("no `experiment` in this file")
                    .help("declare one: `experiment \"name\" { ... }`")
            }
            Problem::Names(Names::ExperimentCount {
                span,
                first: Some(first),
            }) => new(span, "the file declares more than one experiment".into())
                .label("another experiment")
                .with(first, "first experiment")
                .help("put each experiment in its own file; share settings with `extends`"),
            Problem::Names(Names::MissingSetting {
                span,
                block,
                settings,
                example,
            }) => {
                let names: Vec<String> = settings.iter().map(|s| format!("`{s}`")).collect();
                let names = names.join(" or ");
                new(span, format!("the {block} has no {names}"))
                    .label(format!("{names} missing in this block"))
                    .help(format!("add `{example}`"))
            }
            Problem::Names(Names::ExtendsNotFound { span, path, reason }) => new(
                span,
                format!("cannot read `{}`: {}", path.display(), reason.reason()),
            )
            .label("this file cannot be read")
            .help(
                reason
                    .help()
                    .unwrap_or("paths in `extends` are relative to the file that contains them"),
            ),
            Problem::Names(Names::ExtendsCycle { span, cycle }) => {
                let names: Vec<String> = cycle.iter().map(|p| p.display().to_string()).collect();
                new(span, "these files extend each other in a cycle".into())
                    .label("closes the cycle")
                    .help(format!("break the cycle: {}", names.join(" -> ")))
            }
            Problem::Names(Names::WrongArguments { span, situation }) => {
                super::arguments::words(code, span, situation)
            }
            Problem::Names(Names::OutOfRange { span, situation }) => {
                super::ranges::words(code, span, situation)
            }
            Problem::Names(Names::Misplaced { span, situation }) => {
                super::arguments::misplaced(code, span, situation)
            }
            p @ (Problem::Shapes(Shapes::ShapeMismatch { .. })
            | Problem::Shapes(Shapes::RankMismatch { .. })
            | Problem::Shapes(Shapes::LossShape { .. })
            | Problem::Shapes(Shapes::ResidualShape { .. })
            | Problem::Shapes(Shapes::ReshapeSize { .. })
            | Problem::Shapes(Shapes::DtypeMismatch { .. })
            | Problem::Shapes(Shapes::DataShape { .. })
            | Problem::Shapes(Shapes::SequenceTask { .. })
            | Problem::Shapes(Shapes::TokenTargets { .. })
            | Problem::Shapes(Shapes::EmptyDimension { .. })
            | Problem::Strategies(Strategies::HeadsIndivisible { .. })
            | Problem::Warnings(Warnings::NoOpLayer { .. })) => super::shapes::words(p),
            p @ (Problem::Strategies(Strategies::PipelineOneStage { .. })
            | Problem::Strategies(Strategies::DdpWithoutWorldSize { .. })
            | Problem::Strategies(Strategies::Fp8OnCpu { .. })
            | Problem::Strategies(Strategies::Int4NonLinear { .. })
            | Problem::Strategies(Strategies::BatchArithmetic { .. })
            | Problem::Strategies(Strategies::MicroBatches { .. })
            | Problem::Strategies(Strategies::TooManyStages { .. })
            | Problem::Strategies(Strategies::PlacementConflict { .. })
            | Problem::Strategies(Strategies::Inconsistent { .. })
            | Problem::Strategies(Strategies::BadSweep { .. })
            | Problem::Warnings(Warnings::DataParallelOneDevice { .. })
            | Problem::Warnings(Warnings::MemoryExceeded { .. })
            | Problem::Warnings(Warnings::ModelParallelOneDevice { .. })
            | Problem::Warnings(Warnings::DoubleSoftmax { .. })
            | Problem::Warnings(Warnings::IgnoredSetting { .. })
            | Problem::Warnings(Warnings::PlacementIgnored { .. })
            | Problem::Warnings(Warnings::DropoutSharedGenerator { .. })
            | Problem::Warnings(Warnings::PipelineBatchNorm { .. })
            | Problem::Strategies(Strategies::DoesNotFit { .. })
            | Problem::Warnings(Warnings::FsdpOneUnit { .. })
            | Problem::Warnings(Warnings::TensorSplitsNothing { .. })
            | Problem::Strategies(Strategies::MeshNotRun { .. })
            | Problem::Strategies(Strategies::TensorIndivisible { .. })) => {
                super::strategy::words(p)
            }
            p @ (Problem::Strategies(Strategies::Int4GroupSize { .. })
            | Problem::Strategies(Strategies::QatFp16 { .. })
            | Problem::Strategies(Strategies::CompressTargetKind { .. })
            | Problem::Strategies(Strategies::CompressConflict { .. })
            | Problem::Warnings(Warnings::QuantNoSpeedup { .. })) => super::compress::words(p),
            p @ (Problem::Strategies(Strategies::NormalizeChannels { .. })
            | Problem::Warnings(Warnings::OutlastsTraining { .. })
            | Problem::Strategies(Strategies::BatchNormOneValue { .. })) => {
                super::consistency::words(p)
            }
            p @ (Problem::Warnings(Warnings::PlateauWithoutValidation { .. })
            | Problem::Warnings(Warnings::BadSequence { .. })) => super::schedule::words(p),
            p @ (Problem::Strategies(Strategies::DataMismatch { .. })
            | Problem::Strategies(Strategies::DataHeader { .. })
            | Problem::Warnings(Warnings::DataFileMissing { .. })) => super::datafile::words(p),
            p @ (Problem::Strategies(Strategies::GroupOverlap { .. })
            | Problem::Warnings(Warnings::EmptyGroup { .. })) => super::groups::words(p),
            p @ (Problem::Strategies(Strategies::PruneLeavesNothing { .. })
            | Problem::Strategies(Strategies::CannotShrink { .. })) => super::pruning::words(p),
            p @ (Problem::Running(Running::DeviceUnavailable { .. })
            | Problem::Running(Running::DataMissing { .. })
            | Problem::Running(Running::DataInvalid { .. })
            | Problem::Running(Running::NonFiniteLoss { .. })
            | Problem::Warnings(Warnings::WeightlessBatch { .. })
            | Problem::Running(Running::OutOfMemory { .. })
            | Problem::Running(Running::Interrupted { .. })
            | Problem::Running(Running::TorchError { .. })
            | Problem::Running(Running::RunIo { .. })
            | Problem::Running(Running::RuntimeKilled { .. })) => super::runtime::words(p),

            p @ (Problem::Running(Running::ResumeIncompatible { .. })
            | Problem::Running(Running::RunDirTaken { .. })
            | Problem::Running(Running::CheckpointDamaged { .. })
            | Problem::Running(Running::StaleLock { .. })) => super::runs::words(p),

            p @ (Problem::Running(Running::RankFailed { .. })
            | Problem::Running(Running::RendezvousFailed { .. })
            | Problem::Running(Running::RanksDiffer { .. })
            | Problem::Running(Running::BackendUnavailable { .. })) => super::distributed::words(p),

            p @ (Problem::Running(Running::NoWeights { .. })
            | Problem::Running(Running::WeightsMismatch { .. })
            | Problem::Running(Running::SplitEmpty { .. })
            | Problem::Running(Running::ExportNotEvaluable { .. })
            | Problem::Running(Running::NotGenerative { .. })) => super::evaluation::words(p),

            p @ (Problem::Running(Running::ShorterThanTrained { .. })
            | Problem::Running(Running::NotExtendable { .. })
            | Problem::Running(Running::RunComplete { .. })) => super::extend::words(p),
        }
    }
}

/// The candidates closest to an unknown name, when any is close enough.
fn suggest(u: &Unknown) -> Vec<String> {
    did_you_mean(&u.name, u.candidates.iter().map(String::as_str))
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// "did you mean `a` or `b`?" as the help line (followed by `more`), with one fix per
/// suggestion: each fix is one alternative.
fn mean(d: Diagnostic, span: Span, suggestions: Vec<String>, more: &str) -> Diagnostic {
    let quoted: Vec<String> = suggestions.iter().map(|s| format!("`{s}`")).collect();
    let d = d.help(format!("did you mean {}?{more}", or_list(&quoted)));
    suggestions.into_iter().fold(d, |d, s| d.fix(span, s))
}

/// Where relative data paths resolve from, in words: the directory of the declaring file, `.`
/// for the working directory.
pub fn paths_from(base: &std::path::Path) -> String {
    let dir = if base.as_os_str().is_empty() || base == std::path::Path::new(".") {
        "the working directory".to_string()
    } else {
        base.display().to_string()
    };
    format!("paths are relative to the directory of the .exp file that declares the source, {dir}")
}

/// `a`, `a or b`, `a, b or c`.
pub(super) fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// An unknown name of the category `what`, with a fix when a candidate is close.
pub(super) fn unknown_name(code: super::Code, what: &str, u: Unknown) -> Diagnostic {
    let d = Diagnostic::new(code, u.span, format!("unknown {what} `{}`", u.name))
        .label(format!("not a known {what}"));
    let suggestions = suggest(&u);
    if suggestions.is_empty() {
        d.help(format!("expected one of: {}", u.candidates.join(", ")))
    } else {
        mean(d, u.span, suggestions, "")
    }
}

/// "`linear` takes: in, out" for a callee and its parameters.
pub(super) fn takes(callee: &str, params: &[String]) -> String {
    if params.is_empty() {
        format!("`{callee}` takes no arguments")
    } else {
        format!("`{callee}` takes: {}", params.join(", "))
    }
}

/// `epochs 500 steps`: a count written with a unit, which names the setting meant.
fn count_with_unit(
    code: super::Code,
    span: Span,
    setting: &str,
    count: u64,
    meant: &str,
    statement: Span,
) -> Diagnostic {
    let written = format!("{meant} {count}");
    let d = if meant == setting {
        Diagnostic::new(code, span, format!("`{setting}` takes a plain number"))
            .label(format!("`{setting}` already counts {setting}"))
            .help(format!("write `{written}`"))
    } else {
        Diagnostic::new(
            code,
            span,
            format!("`{setting}` counts {setting}, not {meant}"),
        )
        .label(format!("a number of {meant}"))
        .help(format!("to train for {count} {meant}, write `{written}`"))
    };
    d.fix(statement, written)
}

/// What a setting expects, and how to write it.
fn expected_words(e: &Expected) -> (String, &'static str) {
    let (what, example) = match e {
        Expected::Number => ("a number", "a number"),
        Expected::Integer => ("an integer", "an integer"),
        Expected::Boolean => ("`true` or `false`", "`true` or `false`"),
        Expected::String => ("a string", "a string"),
        Expected::Name => ("a name", "a name"),
        Expected::Device => ("a device", "a device such as `cuda:0`"),
        Expected::Shape => ("a shape such as `[28, 28]`", "a shape such as `[28, 28]`"),
        Expected::ReshapeShape => (
            "a shape",
            "the per-sample shape, as in `[1, 28, 28]`; one dimension may be -1",
        ),
        Expected::Duration => (
            "a duration such as `200 steps`",
            "a duration such as `200 steps`",
        ),
        Expected::WholeDuration => (
            "a positive whole number of steps or epochs",
            "`200 steps` or `2 epochs`",
        ),
        Expected::Steps => (
            "a number of steps",
            "the schedule in steps, as in `start: 100 steps`",
        ),
        Expected::Bytes => ("a size such as `80 GiB`", "a size such as `80 GiB`"),
        Expected::Seconds => (
            "a positive whole number of seconds",
            "a time such as `60s` or `2 min`",
        ),
        Expected::Source => (
            "a data source",
            "a source: synthetic, idx, npy, npz, csv or safetensors",
        ),
        Expected::Generator => (
            "a generator",
            "a generator such as `normal([784])` or `randint(10)`",
        ),
        Expected::Scale => (
            "a divisor or `none`",
            "`scale: 255` (bytes divided by 255) or `scale: none` (kept)",
        ),
        Expected::SplitPart => (
            "a fraction or a data source",
            "a fraction such as `0.2`, or a source such as `npy(inputs: \"x.npy\", targets: \"y.npy\")`",
        ),
        Expected::Metric => (
            "a metric",
            "a metric: accuracy, top_k(k), loss, mae, rmse or r2",
        ),
        Expected::DeviceList => ("a list of devices", "`devices: [cuda:0, cuda:1]`"),
        Expected::Betas => ("two numbers", "`betas: [beta1, beta2]`"),
        Expected::Groups => (
            "a list of parameter groups",
            "`groups: [group(biases, norms, weight_decay: 0)]`",
        ),
        Expected::Callee { what, .. } => return (what.clone(), ""),
        Expected::Count { .. } => ("a plain number", "a plain number"),
    };
    (what.to_string(), example)
}

#[cfg(test)]
mod tests {
    use super::super::problem::*;
    use super::super::{Code, Fix};
    use crate::ir::Device;
    use crate::span::{FileId, Span};

    fn at(start: usize, end: usize) -> Span {
        Span::new(FileId::default(), start, end)
    }

    fn unknown(name: &str, candidates: &[&str]) -> Unknown {
        Unknown {
            span: at(4, 4 + name.len()),
            name: name.into(),
            candidates: candidates.iter().map(|c| c.to_string()).collect(),
        }
    }

    #[test]
    fn every_wording_keeps_the_code_and_says_one_sentence() {
        let producer = Producer {
            span: at(0, 1),
            name: "`fc1`".into(),
            shape: vec![4, 6].into(),
        };
        let problems = vec![
            Problem::Names(Names::UnknownLayer(unknown("linaer", &["linear", "relu"]))),
            Problem::Names(Names::DuplicateSetting {
                span: at(10, 15),
                first: at(0, 5),
                name: "batch".into(),
            }),
            Problem::Names(Names::OutOfRange {
                span: at(0, 2),
                situation: OutOfRange::Number {
                    what: "`p`".into(),
                    range: Range::UnitOpen,
                    value: 1.5,
                },
            }),
            Problem::Strategies(Strategies::HeadsIndivisible {
                span: at(0, 1),
                heads: 4,
                producer: producer.clone(),
            }),
            Problem::Shapes(Shapes::ReshapeSize {
                span: at(0, 1),
                target: vec![5, 5].into(),
                producer,
            }),
            Problem::Warnings(Warnings::MemoryExceeded {
                span: at(0, 1),
                device: Device::Cuda(0),
                need: [1, 2, 3, 4],
                total: 10,
                capacity: 5,
                batch: None,
                recompute: Some((vec!["encoder".into()], 4)),
            }),
            Problem::Running(Running::DeviceUnavailable {
                span: at(0, 1),
                situation: Unavailable::Fp16OnCpu,
            }),
            Problem::Running(Running::ResumeIncompatible {
                span: at(0, 1),
                situation: Resume::Changed {
                    changes: vec![Change {
                        what: "seed".into(),
                        was: Some("1".into()),
                        now: Some("2".into()),
                        span: None,
                    }],
                },
            }),
            Problem::Running(Running::RunIo {
                span: at(0, 1),
                action: "write".into(),
                path: Some("runs/x/report.yaml".into()),
                error: "disk full".into(),
                stage: RunStage::Record,
            }),
        ];
        for p in problems {
            let code = p.code();
            let d = p.clone().diagnostic();
            assert_eq!(d.code, code, "{p:?}");
            assert!(!d.message.is_empty() && !d.message.contains(". "), "{d:?}");
            assert!(d.help.is_some(), "{d:?}");
        }
    }

    #[test]
    fn suggestions_come_with_fixes() {
        let d =
            Problem::Names(Names::UnknownOptimizer(unknown("adma", &["sgd", "adam"]))).diagnostic();
        assert_eq!(d.code, Code::UnknownOptimizer);
        assert_eq!(
            d.fixes,
            vec![Fix {
                span: at(4, 8),
                replacement: "adam".into()
            }]
        );
        let none =
            Problem::Names(Names::UnknownOptimizer(unknown("xyz", &["sgd", "adam"]))).diagnostic();
        assert!(none.fixes.is_empty());
        assert_eq!(none.help.as_deref(), Some("expected one of: sgd, adam"));
        let device = Problem::Names(Names::UnknownDevice {
            span: at(0, 5),
            name: "gpu:1".into(),
        })
        .diagnostic();
        assert_eq!(device.fixes[0].replacement, "cuda:1");
        let reference = Problem::Names(Names::UnknownReference {
            unknown: unknown("fc3.weight", &["fc1", "conv"]),
            suffix: ".weight".into(),
        })
        .diagnostic();
        assert_eq!(reference.fixes[0].replacement, "fc1.weight");
    }
}
