//! The learning-rate schedule as the plan shows it: each schedule by its name in the language,
//! with every parameter resolved (the defaults written out), and the schedules of a
//! `sequence([...], milestones: [...])` nested under it.

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::ir::{Duration, OneCycle, Plateau, PlateauMetric, Schedule};

/// One schedule with its resolved parameters.
#[derive(Debug, PartialEq)]
pub struct ScheduleRow {
    /// The schedule's name in the language (`cosine`, `sequence`, ...).
    pub name: &'static str,
    /// Its parameters in the language's order, every default written out.
    pub params: Vec<(&'static str, Param)>,
    /// A `sequence`'s schedules, in order (empty otherwise).
    pub schedules: Vec<ScheduleRow>,
    /// Where each of a `sequence`'s schedules after the first starts (empty otherwise).
    pub milestones: Vec<String>,
}

/// A resolved parameter's value.
#[derive(Debug, PartialEq)]
pub enum Param {
    /// A number.
    Number(f64),
    /// A flag.
    Flag(bool),
    /// A length of training or a word (`500 steps`, `val_loss`).
    Text(String),
}

impl Serialize for Param {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Param::Number(x) => s.serialize_f64(*x),
            Param::Flag(b) => s.serialize_bool(*b),
            Param::Text(t) => s.serialize_str(t),
        }
    }
}

impl std::fmt::Display for Param {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Param::Number(x) => write!(f, "{x}"),
            Param::Flag(b) => write!(f, "{b}"),
            Param::Text(t) => write!(f, "{t}"),
        }
    }
}

/// As a mapping: `name`, each parameter, then a sequence's `schedules` and `milestones`.
impl Serialize for ScheduleRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("name", self.name)?;
        for (k, v) in &self.params {
            map.serialize_entry(k, v)?;
        }
        if !self.schedules.is_empty() {
            map.serialize_entry("schedules", &self.schedules)?;
            map.serialize_entry("milestones", &self.milestones)?;
        }
        map.end()
    }
}

/// `500 steps`, `1 epoch`.
fn length(d: &Duration) -> String {
    match d {
        Duration::Steps(n) => format!("{n} step{}", if *n == 1 { "" } else { "s" }),
        Duration::Epochs(n) => format!("{n} epoch{}", if *n == 1 { "" } else { "s" }),
    }
}

/// A warmup's first factor: the given `start_factor`, or, without one, what the default ramp
/// does in words (it is no `LinearLR` factor: step `t` runs at `lr * (t + 1) / L`).
fn start(factor: Option<f64>, warmup: &Duration) -> Param {
    match (factor, warmup) {
        (Some(f), _) => Param::Number(f),
        (None, Duration::Steps(n)) => {
            Param::Text(format!("none: lr / {n} at step 1, reaching lr at step {n}"))
        }
        (None, Duration::Epochs(_)) => {
            Param::Text("none: lr / L at step 1, reaching lr at step L, the warmup's last".into())
        }
    }
}

/// The row of a checked schedule.
pub fn row(s: &Schedule) -> ScheduleRow {
    use Param::{Number, Text};
    let leaf = |name, params| ScheduleRow {
        name,
        params,
        schedules: Vec::new(),
        milestones: Vec::new(),
    };
    match s {
        Schedule::Constant => leaf("constant", vec![]),
        Schedule::Step { every, gamma } => leaf(
            "step",
            vec![("every", Text(length(every))), ("gamma", Number(*gamma))],
        ),
        Schedule::Exponential { gamma } => leaf("exponential", vec![("gamma", Number(*gamma))]),
        Schedule::Cosine {
            warmup,
            min_lr,
            start: factor,
        } => {
            let mut params = vec![(
                "warmup",
                Text(warmup.as_ref().map_or_else(|| "none".into(), length)),
            )];
            params.push(("min_lr", Number(*min_lr)));
            if let Some(w) = warmup {
                params.push(("start_factor", start(*factor, w)));
            }
            leaf("cosine", params)
        }
        Schedule::Warmup {
            length: l,
            start: factor,
        } => leaf(
            "warmup",
            vec![
                ("length", Text(length(l))),
                ("start_factor", start(*factor, l)),
            ],
        ),
        Schedule::OneCycle(c) => leaf("one_cycle", one_cycle(c)),
        Schedule::Linear {
            start,
            end,
            length: l,
        } => leaf(
            "linear",
            vec![
                ("start_factor", Number(*start)),
                ("end_factor", Number(*end)),
                (
                    "length",
                    Text(
                        l.as_ref()
                            .map_or_else(|| "the whole training".into(), length),
                    ),
                ),
            ],
        ),
        Schedule::ReduceOnPlateau(p) => leaf("reduce_on_plateau", plateau(p)),
        Schedule::Sequence {
            schedules,
            milestones,
        } => ScheduleRow {
            name: "sequence",
            params: Vec::new(),
            schedules: schedules.iter().map(row).collect(),
            milestones: milestones.iter().map(length).collect(),
        },
    }
}

fn one_cycle(c: &OneCycle) -> Vec<(&'static str, Param)> {
    use Param::{Flag, Number, Text};
    let mut params = vec![
        ("max_lr", Number(c.max_lr)),
        ("pct_start", Number(c.pct_start)),
        ("div_factor", Number(c.div_factor)),
        ("final_div_factor", Number(c.final_div_factor)),
        ("three_phase", Flag(c.three_phase)),
        (
            "anneal",
            Text(if c.cosine { "cos" } else { "linear" }.into()),
        ),
        ("cycle_momentum", Flag(c.momentum.is_some())),
    ];
    if let Some((base, max)) = c.momentum {
        params.push(("base_momentum", Number(base)));
        params.push(("max_momentum", Number(max)));
    }
    params
}

fn plateau(p: &Plateau) -> Vec<(&'static str, Param)> {
    use Param::{Number, Text};
    let monitor = match p.metric {
        PlateauMetric::ValLoss => "val_loss",
        PlateauMetric::ValAccuracy => "val_accuracy",
    };
    vec![
        ("monitor", Text(monitor.into())),
        ("mode", Text(if p.maximize { "max" } else { "min" }.into())),
        ("factor", Number(p.factor)),
        ("patience", Number(p.patience as f64)),
        ("threshold", Number(p.threshold)),
        (
            "threshold_mode",
            Text(if p.relative { "rel" } else { "abs" }.into()),
        ),
        ("cooldown", Number(p.cooldown as f64)),
        ("min_lr", Number(p.min_lr)),
    ]
}
