//! Problems as facts. A [`Problem`] holds what was found (spans, names, candidates, numbers,
//! shapes) and nothing worded; [`Problem::diagnostic`] (in `wording.rs`) is the one place that
//! turns it into a sentence, labels, a help line and fixes.

pub use super::compress::{
    GroupedLayer, NoSpeedup, TargetNeed, WeightOnly, INT4_GROUP_SIZES, LARGE_BATCH,
    SMALL_LAYER_WEIGHTS,
};
pub use super::consistency::{Interval, Outlasts, TrainingLength};
pub use super::datafile::DataFit;
pub use super::evaluation::{Mismatch, NoWeights};
pub use super::extend::{Extension, Lengths};
pub use super::keywords::{Home, KeywordHint};
pub use super::runs::{Change, Resume, Taken};
pub use super::runtime::{Death, KilledRun, RunStage, Torch, Unavailable};
pub use super::schedule::Sequence;
pub use super::shapes::Window;
pub use super::situation::{
    Arguments, Declared, Expected, Form, Ignored, Inconsistent, LossShape, Misplaced, NoOp,
    OutOfRange, Producer, Range, Sweep, Unknown,
};
pub use super::syntax::{Habit, Within};
pub use super::unreadable::{FileKind, Unreadable};

mod names;
mod reading;
mod running;
mod shapes;
mod strategies;
mod warnings;

pub use names::Names;
pub use reading::Reading;
pub use running::Running;
pub use shapes::Shapes;
pub use strategies::Strategies;
pub use warnings::Warnings;

/// One problem, as facts, in the stage that finds it. Each stage's variants are one [`Code`]
/// each; see `docs/diagnostics.md`, whose sections are these stages.
///
/// [`Code`]: super::Code
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// Reading and parsing: the file itself (K00xx).
    Reading(Reading),
    /// Names, values and structure: what a statement says (K01xx).
    Names(Names),
    /// Strategies and arithmetic: settings that must agree with each other (K02xx).
    Strategies(Strategies),
    /// Shapes and types: tensors flowing through the model (K03xx).
    Shapes(Shapes),
    /// Warnings: what runs but is likely not meant (K04xx; a few are errors).
    Warnings(Warnings),
    /// Running: what only a run finds (K05xx).
    Running(Running),
}
