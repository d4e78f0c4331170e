//! The optimizer, its parameter groups and the learning-rate schedules.

use serde::Serialize;

use super::Duration;
use crate::span::Span;

/// Optimizers, with the hyper-parameters of their PyTorch namesakes.
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer {
    /// The algorithm.
    pub kind: OptimizerKind,
    /// Learning rate.
    pub lr: f64,
    /// L2 penalty (decoupled for AdamW).
    pub weight_decay: f64,
    /// The `optimizer` statement.
    pub span: Span,
    /// The learning rate's value, for NaN reports.
    pub lr_span: Span,
    /// Parameter groups with settings of their own, in the order written; a parameter in none
    /// of them takes the settings above.
    pub groups: Vec<ParamGroup>,
    /// Whether the update runs as ATen's fused kernels (`fused: true`, the default for `sgd`,
    /// `adam` and `adamw`, as `torch.optim`'s `fused=True`) rather than the single-tensor rules
    /// (`fused: false`, and `rmsprop`, which has no fused kernel).
    pub fused: bool,
}

/// A parameter group: parameters chosen by layer, block and class, with their own settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ParamGroup {
    /// The selectors as written (`biases`, `encoder`, `fc1.weight`).
    pub select: Vec<String>,
    /// The algorithm with the group's settings (the same algorithm as the optimizer's).
    pub kind: OptimizerKind,
    /// Learning rate, scaled by the schedule as the optimizer's is.
    pub lr: f64,
    /// L2 penalty (decoupled for AdamW).
    pub weight_decay: f64,
    /// The parameters it holds, by `state_dict` name, in the model's order.
    pub params: Vec<String>,
    /// Their number of scalars.
    pub count: u64,
    /// The group's `group(...)` call.
    #[serde(skip)]
    pub span: Span,
}

/// Optimizer algorithms.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Stochastic gradient descent.
    Sgd {
        /// Momentum factor.
        momentum: f64,
        /// Dampening for momentum.
        dampening: f64,
        /// Nesterov momentum.
        nesterov: bool,
    },
    /// Adam.
    Adam {
        /// Betas.
        betas: (f64, f64),
        /// Epsilon.
        eps: f64,
        /// AMSGrad variant.
        amsgrad: bool,
    },
    /// AdamW (decoupled weight decay).
    AdamW {
        /// Betas.
        betas: (f64, f64),
        /// Epsilon.
        eps: f64,
        /// AMSGrad variant.
        amsgrad: bool,
    },
    /// RMSprop.
    RmsProp {
        /// Smoothing constant.
        alpha: f64,
        /// Epsilon.
        eps: f64,
        /// Momentum factor.
        momentum: f64,
        /// Centered variant.
        centered: bool,
    },
}

impl Optimizer {
    /// The optimizer's name in the language.
    pub fn name(&self) -> &'static str {
        match self.kind {
            OptimizerKind::Sgd { .. } => "sgd",
            OptimizerKind::Adam { .. } => "adam",
            OptimizerKind::AdamW { .. } => "adamw",
            OptimizerKind::RmsProp { .. } => "rmsprop",
        }
    }

    /// Bytes of optimizer state per fp32 parameter: the most any group keeps.
    pub fn state_bytes_per_param(&self) -> u64 {
        let groups = self.groups.iter().map(|g| state_bytes(&g.kind));
        groups.fold(state_bytes(&self.kind), u64::max)
    }
}

/// Bytes of optimizer state per fp32 parameter under `kind`.
fn state_bytes(kind: &OptimizerKind) -> u64 {
    match *kind {
        OptimizerKind::Sgd { momentum, .. } => {
            if momentum > 0.0 {
                4
            } else {
                0
            }
        }
        OptimizerKind::Adam { amsgrad, .. } | OptimizerKind::AdamW { amsgrad, .. } => {
            if amsgrad {
                12
            } else {
                8
            }
        }
        OptimizerKind::RmsProp {
            momentum, centered, ..
        } => 4 + if momentum > 0.0 { 4 } else { 0 } + if centered { 4 } else { 0 },
    }
}

/// Learning-rate schedules.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// The optimizer's rate throughout.
    Constant,
    /// Multiply by `gamma` every `every`.
    Step {
        /// Interval.
        every: Duration,
        /// Factor.
        gamma: f64,
    },
    /// Multiply by `gamma` every epoch.
    Exponential {
        /// Factor.
        gamma: f64,
    },
    /// Cosine decay to `min_lr`, after an optional linear warmup.
    Cosine {
        /// Warmup length.
        warmup: Option<Duration>,
        /// Final rate.
        min_lr: f64,
        /// The warmup's first factor of the rate (`LinearLR`'s `start_factor`); `None` for the
        /// default ramp `(step + 1) / warmup`.
        #[serde(skip_serializing_if = "Option::is_none")]
        start: Option<f64>,
    },
    /// Linear warmup, then constant.
    Warmup {
        /// Warmup length.
        length: Duration,
        /// The first factor of the rate (`LinearLR`'s `start_factor`); `None` for the default
        /// ramp `(step + 1) / length`.
        #[serde(skip_serializing_if = "Option::is_none")]
        start: Option<f64>,
    },
    /// One-cycle (`OneCycleLR`): warm up to `max_lr`, then anneal.
    OneCycle(OneCycle),
    /// Linear change of the rate's factor (`LinearLR`).
    Linear {
        /// The factor at the first step.
        start: f64,
        /// The factor reached after `length`.
        end: f64,
        /// How long the change lasts; `None` for the whole training.
        length: Option<Duration>,
    },
    /// `ReduceLROnPlateau`, fed by the validation evaluations.
    ReduceOnPlateau(Plateau),
    /// Schedules one after another (`SequentialLR`): schedule `i + 1` starts at milestone `i`.
    Sequence {
        /// The schedules.
        schedules: Vec<Schedule>,
        /// Where each schedule after the first starts.
        milestones: Vec<Duration>,
    },
}

/// The settings of `one_cycle`, as `torch.optim.lr_scheduler.OneCycleLR` names them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OneCycle {
    /// Peak rate.
    pub max_lr: f64,
    /// Fraction of training spent warming up.
    pub pct_start: f64,
    /// The first rate is `max_lr / div_factor`.
    pub div_factor: f64,
    /// The last rate is the first divided by `final_div_factor`.
    pub final_div_factor: f64,
    /// Whether the rate comes back down to the first rate before the final annealing.
    pub three_phase: bool,
    /// Cosine (`true`) or linear annealing.
    pub cosine: bool,
    /// The momentum (or Adam's beta1) range cycled inversely to the rate, as `(base, max)`;
    /// `None` when momentum is not cycled.
    pub momentum: Option<(f64, f64)>,
}

/// The settings of `reduce_on_plateau`, as `torch.optim.lr_scheduler.ReduceLROnPlateau` names
/// them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plateau {
    /// The validation metric watched.
    pub metric: PlateauMetric,
    /// Whether a larger metric is better.
    pub maximize: bool,
    /// The rate is multiplied by this on a plateau.
    pub factor: f64,
    /// Evaluations without improvement tolerated.
    pub patience: u64,
    /// The least improvement that counts.
    pub threshold: f64,
    /// Whether `threshold` is relative (`rel`) or absolute (`abs`).
    pub relative: bool,
    /// Evaluations to wait after a reduction before counting again.
    pub cooldown: u64,
    /// The rate never goes below this.
    pub min_lr: f64,
}

/// What `reduce_on_plateau` watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlateauMetric {
    /// The validation loss.
    ValLoss,
    /// The validation accuracy.
    ValAccuracy,
}
