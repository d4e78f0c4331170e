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
    /// `{"cross_entropy": {"label_smoothing": 0.0}}`, `{"nll": {"weight": [...]}}`.
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
    /// The target that contributes nothing, for the class losses.
    pub fn ignore_index(&self) -> Option<i64> {
        match self {
            Loss::CrossEntropy { ignore_index, .. } | Loss::Nll { ignore_index, .. } => {
                Some(*ignore_index)
            }
            _ => None,
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
}
