//! Names, values and structure: what a statement says (K01xx).

use crate::diagnostic::keywords::KeywordHint;
use crate::diagnostic::situation::{Arguments, Expected, Misplaced, OutOfRange, Unknown};
use crate::diagnostic::unreadable::Unreadable;
use crate::span::Span;
use std::path::PathBuf;

/// Names, values and structure: what a statement says (K01xx).
#[derive(Clone, Debug, PartialEq)]
pub enum Names {
    /// K0101: an unknown keyword in a block.
    UnknownKeyword {
        /// The keyword and the block's keywords.
        unknown: Unknown,
        /// Where it stands (`data setting`, `top-level statement`).
        place: String,
        /// Where it belongs instead, or the colon that made it a keyword.
        hint: Option<KeywordHint>,
    },
    /// K0102.
    UnknownLayer(Unknown),
    /// K0103.
    UnknownOptimizer(Unknown),
    /// K0104.
    UnknownLoss(Unknown),
    /// K0105: a device name that does not parse.
    UnknownDevice {
        /// Where it is written.
        span: Span,
        /// As written (`gpu:0`).
        name: String,
    },
    /// K0106: a named argument the callee does not take.
    UnknownParameter {
        /// The argument's name and the callee's parameters.
        unknown: Unknown,
        /// The layer, optimizer or setting.
        callee: String,
    },
    /// K0107.
    UnknownSchedule(Unknown),
    /// K0108.
    UnknownMetric(Unknown),
    /// K0109: an unknown data source or generator.
    UnknownSource {
        /// The name and the known ones.
        unknown: Unknown,
        /// Whether it stands where a generator goes.
        generator: bool,
    },
    /// K0110.
    UnknownPruneMethod(Unknown),
    /// K0111.
    UnknownQuantScheme(Unknown),
    /// K0112.
    UnknownStrategy(Unknown),
    /// K0113: a word that is not one of a setting's choices.
    UnknownChoice {
        /// The word and the choices.
        unknown: Unknown,
        /// What is chosen (`mode`, `pruning schedule`).
        what: String,
    },
    /// K0114: a name that is no layer, block or parameter of the model.
    UnknownReference {
        /// The name and the model's names.
        unknown: Unknown,
        /// The parameter suffix (`.weight`) the name ends in, or nearly (`.weights`): set aside
        /// while looking for a similar name, then written after it.
        suffix: String,
    },
    /// K0115: no experiment, or another one.
    ExperimentCount {
        /// The start of the file, or the extra experiment.
        span: Span,
        /// The first experiment, when there is more than one.
        first: Option<Span>,
    },
    /// K0116: a required setting is missing from a block.
    MissingSetting {
        /// The block's keyword.
        span: Span,
        /// The block (`data`, `training`, `model`).
        block: &'static str,
        /// The setting, or the settings of which one is needed (`epochs`, `steps`).
        settings: &'static [&'static str],
        /// The setting written as it could be.
        example: &'static str,
    },
    /// K0117: two layers or blocks with one name.
    DuplicateName {
        /// The second definition.
        span: Span,
        /// The first.
        first: Span,
        /// The name.
        name: String,
    },
    /// K0118: a setting, argument or list item given twice.
    DuplicateSetting {
        /// The repeat.
        span: Span,
        /// The first one.
        first: Span,
        /// What is repeated, as written (`batch`, `memory cuda:0`).
        name: String,
    },
    /// K0119: a value of the wrong type.
    WrongType {
        /// The value.
        span: Span,
        /// What was expected.
        expected: Expected,
        /// What was found (`a string`).
        found: &'static str,
    },
    /// K0120.
    WrongArguments {
        /// The arguments or statement.
        span: Span,
        /// Which situation.
        situation: Arguments,
    },
    /// K0121.
    OutOfRange {
        /// The value.
        span: Span,
        /// Which situation.
        situation: OutOfRange,
    },
    /// K0122: a base file that cannot be read.
    ExtendsNotFound {
        /// The `extends` string.
        span: Span,
        /// The path tried.
        path: PathBuf,
        /// Why.
        reason: Unreadable,
    },
    /// K0123: files extending each other.
    ExtendsCycle {
        /// The `extends` string that closes the cycle.
        span: Span,
        /// The files of the cycle, as written, the first repeated at the end.
        cycle: Vec<PathBuf>,
    },
    /// K0124.
    Misplaced {
        /// The label, block or statement.
        span: Span,
        /// Which situation.
        situation: Misplaced,
    },
}
