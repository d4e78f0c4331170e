//! The loss of the training and the metrics of its evaluations.

use serde::Serialize;

/// Loss functions.
#[derive(Clone, Debug, PartialEq)]
pub enum Loss {
    /// Cross-entropy over class logits.
    CrossEntropy {
        /// Label smoothing in [0, 1).
        label_smoothing: f64,
        /// A weight per class (`weight`), as `F.cross_entropy`'s.
        weight: Option<Vec<f64>>,
        /// Targets equal to this contribute nothing (`ignore_index`, -100 by default).
        ignore_index: i64,
    },
    /// Mean squared error.
    Mse,
    /// Mean absolute error.
    L1,
    /// Huber loss, as `F.huber_loss`: quadratic within `delta` of the target, linear beyond.
    Huber {
        /// Where the loss turns linear (`delta`, above 0; 1 by default).
        delta: f64,
    },
    /// Smooth L1 loss, as `F.smooth_l1_loss`: the Huber loss divided by `beta`, `l1` at 0.
    SmoothL1 {
        /// Where the loss turns linear (`beta`, at least 0; 1 by default).
        beta: f64,
    },
    /// Binary cross-entropy on logits.
    BceWithLogits {
        /// The weight of positive targets, one value or one per output (`pos_weight`).
        pos_weight: Option<Vec<f64>>,
    },
    /// Negative log-likelihood over log-probabilities.
    Nll {
        /// A weight per class (`weight`), as `F.nll_loss`'s.
        weight: Option<Vec<f64>>,
        /// Targets equal to this contribute nothing (`ignore_index`, -100 by default).
        ignore_index: i64,
    },
}

impl Serialize for Loss {
    /// As the loss was written, its options at their defaults left out: `"mse"`, `"nll"`,
    /// `{"cross_entropy": {"label_smoothing": 0.0}}`, `{"nll": {"weight": [...]}}`,
    /// `{"huber": {"delta": 0.5}}`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut options: Vec<(&str, serde_json::Value)> = Vec::new();
        let mut class_options = |weight: &Option<Vec<f64>>, ignore_index: i64| {
            if let Some(w) = weight {
                options.push(("weight", serde_json::json!(w)));
            }
            if ignore_index != -100 {
                options.push(("ignore_index", serde_json::json!(ignore_index)));
            }
        };
        let name = match self {
            Loss::CrossEntropy {
                label_smoothing,
                weight,
                ignore_index,
            } => {
                class_options(weight, *ignore_index);
                options.insert(0, ("label_smoothing", serde_json::json!(label_smoothing)));
                "cross_entropy"
            }
            Loss::Nll {
                weight,
                ignore_index,
            } => {
                class_options(weight, *ignore_index);
                "nll"
            }
            Loss::BceWithLogits { pos_weight } => {
                if let Some(p) = pos_weight {
                    options.push(("pos_weight", serde_json::json!(p)));
                }
                "bce_with_logits"
            }
            Loss::Mse => "mse",
            Loss::L1 => "l1",
            Loss::Huber { delta } => {
                if *delta != 1.0 {
                    options.push(("delta", serde_json::json!(delta)));
                }
                "huber"
            }
            Loss::SmoothL1 { beta } => {
                if *beta != 1.0 {
                    options.push(("beta", serde_json::json!(beta)));
                }
                "smooth_l1"
            }
        };
        if options.is_empty() {
            return s.serialize_str(name);
        }
        let fields: serde_json::Map<String, serde_json::Value> = options
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry(name, &fields)?;
        map.end()
    }
}

impl Loss {
    /// The loss's name in the language.
    pub fn name(&self) -> &'static str {
        match self {
            Loss::CrossEntropy { .. } => "cross_entropy",
            Loss::Nll { .. } => "nll",
            Loss::Mse => "mse",
            Loss::L1 => "l1",
            Loss::Huber { .. } => "huber",
            Loss::SmoothL1 { .. } => "smooth_l1",
            Loss::BceWithLogits { .. } => "bce_with_logits",
        }
    }

    /// The target that contributes nothing, for the class losses.
    pub fn ignore_index(&self) -> Option<i64> {
        match self {
            Loss::CrossEntropy { ignore_index, .. } | Loss::Nll { ignore_index, .. } => {
                Some(*ignore_index)
            }
            _ => None,
        }
    }

    /// Whether the loss compares real values with real-valued targets (`mse`, `l1`, `huber`,
    /// `smooth_l1`): the losses the regression metrics are measured with.
    pub fn regression(&self) -> bool {
        match self {
            Loss::Mse | Loss::L1 | Loss::Huber { .. } | Loss::SmoothL1 { .. } => true,
            Loss::CrossEntropy { .. } | Loss::Nll { .. } | Loss::BceWithLogits { .. } => false,
        }
    }
}

/// Metrics.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Top-1 accuracy.
    Accuracy,
    /// Top-k accuracy.
    TopK(u64),
    /// The loss.
    Loss,
    /// Mean absolute error over the split, for regression losses.
    Mae,
    /// Root mean squared error over the split, for regression losses.
    Rmse,
    /// The coefficient of determination over the split, for regression losses.
    R2,
}

impl Metric {
    /// Whether the metric is measured on real-valued targets (`mae`, `rmse`, `r2`).
    pub fn regression(&self) -> bool {
        matches!(self, Metric::Mae | Metric::Rmse | Metric::R2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_serialises_as_written_with_default_options_left_out() {
        let json = |l: &Loss| serde_json::to_string(l).expect("serialise");
        assert_eq!(json(&Loss::Huber { delta: 1.0 }), "\"huber\"");
        assert_eq!(
            json(&Loss::Huber { delta: 0.5 }),
            "{\"huber\":{\"delta\":0.5}}"
        );
        assert_eq!(json(&Loss::SmoothL1 { beta: 1.0 }), "\"smooth_l1\"");
        assert_eq!(
            json(&Loss::SmoothL1 { beta: 0.0 }),
            "{\"smooth_l1\":{\"beta\":0.0}}"
        );
        assert!(Loss::Huber { delta: 2.0 }.regression());
        assert!(!Loss::BceWithLogits { pos_weight: None }.regression());
        assert_eq!(
            serde_json::to_string(&[Metric::Mae, Metric::Rmse, Metric::R2]).expect("metrics"),
            "[\"mae\",\"rmse\",\"r2\"]"
        );
    }
}
