//! Shapes and types: tensors flowing through the model (K03xx).

use crate::diagnostic::shapes::Window;
use crate::diagnostic::situation::{Declared, LossShape, Producer};
use crate::ir::{Kind, Shape};
use crate::span::Span;

/// Shapes and types: tensors flowing through the model (K03xx).
#[derive(Clone, Debug, PartialEq)]
pub enum Shapes {
    /// K0301: a layer declares a size other than the one it receives.
    ShapeMismatch {
        /// The declared size.
        span: Span,
        /// The layer kind.
        layer: String,
        /// What is declared.
        declared: Declared,
        /// What flows in.
        producer: Producer,
    },
    /// K0302: a tensor of the wrong rank.
    RankMismatch {
        /// The layer.
        span: Span,
        /// The layer kind.
        layer: Kind,
        /// The rank it takes, in words (`a 1-D`).
        wants: String,
        /// What flows in.
        producer: Producer,
    },
    /// K0303.
    LossShape {
        /// The loss.
        span: Span,
        /// The loss's name.
        loss: String,
        /// The model's output shape and where it is produced.
        output: (Shape, Span),
        /// Where the targets come from.
        data: Span,
        /// Which disagreement.
        situation: LossShape,
    },
    /// K0304: a residual that changes the shape, reported at the layer that produced the new shape
    /// (the one to edit).
    ResidualShape {
        /// The `residual` keyword.
        span: Span,
        /// The input shape.
        input: Shape,
        /// The block's output.
        producer: Producer,
    },
    /// K0305: a reshape that changes the element count.
    ReshapeSize {
        /// The target shape.
        span: Span,
        /// The target dimensions.
        target: Shape,
        /// What flows in.
        producer: Producer,
    },
    /// K0306: integers where floats are needed, or the reverse.
    DtypeMismatch {
        /// The layer.
        span: Span,
        /// The layer kind.
        layer: String,
        /// Whether the layer receives integers (true) or floats (false).
        integers: bool,
        /// Where the values come from.
        producer: Producer,
    },
    /// K0307: model input and data samples differ.
    DataShape {
        /// The `input` shape.
        span: Span,
        /// The model's input.
        input: Shape,
        /// The data's sample shape and where it is declared.
        data: (Shape, Span),
        /// Whether they hold as many values, in dimensions that a reshape would scramble.
        scrambled: bool,
    },
    /// K0309: sequence-task targets over inputs that are not one sequence of token ids, or
    /// that give fewer than two classes.
    SequenceTask {
        /// The targets.
        span: Span,
        /// The task's word.
        task: String,
        /// The inputs' per-sample shape and where they are written.
        inputs: (Shape, Span),
        /// Whether the inputs are integer ids.
        integers: bool,
        /// The classes the task would give.
        classes: u64,
    },
    /// K0309: a file source's per-token targets for a model that does not read token ids.
    TokenTargets {
        /// The `per_token: true` argument.
        span: Span,
        /// The model's first layer.
        first: Span,
    },
    /// K0308: a layer that shrinks a dimension to nothing.
    EmptyDimension {
        /// The layer.
        span: Span,
        /// The layer kind.
        layer: String,
        /// The sliding window over the dimension that comes out empty.
        window: Window,
        /// What flows in.
        producer: Producer,
    },
}
