//! The optimizer's parameter groups as the plan shows them: each group's selectors, settings,
//! parameter count and tensors, then the parameters in no group with the optimizer's own
//! settings.

use serde::Serialize;

use crate::ir::{layers, tensors, Experiment, OptimizerKind};

/// One parameter group in the plan.
#[derive(Serialize, Debug, PartialEq)]
pub struct GroupRow {
    /// What it selects, as written; empty for the parameters in no group.
    pub select: Vec<String>,
    /// Its learning rate (before the schedule).
    pub lr: f64,
    /// Its weight decay.
    pub weight_decay: f64,
    /// The algorithm with the group's other settings.
    pub optimizer: OptimizerKind,
    /// Scalars it holds.
    pub params: u64,
    /// Its tensors by `state_dict` name, in the model's order.
    pub tensors: Vec<String>,
}

/// The groups of `e`'s optimizer followed by the parameters in none; empty without groups.
pub fn groups(e: &Experiment) -> Vec<GroupRow> {
    let o = &e.optimizer;
    if o.groups.is_empty() {
        return Vec::new();
    }
    let mut rows: Vec<GroupRow> = o
        .groups
        .iter()
        .map(|g| GroupRow {
            select: g.select.clone(),
            lr: g.lr,
            weight_decay: g.weight_decay,
            optimizer: g.kind.clone(),
            params: g.count,
            tensors: g.params.clone(),
        })
        .collect();
    let rest: Vec<_> = layers(&e.model.nodes)
        .into_iter()
        .flat_map(tensors)
        .filter(|t| !o.groups.iter().any(|g| g.params.contains(&t.name)))
        .collect();
    rows.push(GroupRow {
        select: Vec::new(),
        lr: o.lr,
        weight_decay: o.weight_decay,
        optimizer: o.kind.clone(),
        params: rest.iter().map(|t| t.count).sum(),
        tensors: rest.into_iter().map(|t| t.name).collect(),
    });
    rows
}
