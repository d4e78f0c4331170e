//! Structured pruning's groups and the shrunk model, found statically.
//!
//! Pruning whole output units of a linear or a convolution (`ln_structured(dim: 0)`) removes
//! more than that layer's rows: every tensor the units flow into must lose them too. The units
//! flow forward from their producer through layers that keep them apart (activations, dropout,
//! pooling, and batch, layer and group norms, whose per-channel parameters go with them; a
//! flatten turns each channel into a block of consecutive features) until a consumer mixes them
//! (the next linear's columns, the next convolution's input channels). A residual adds two
//! tensors unit by unit, so the producers on both sides of the add form one group that is pruned
//! together. [`group`] finds a target's group, or why it cannot shrink; [`shrink`] gives the
//! model with fewer units, every size resolved again.
//!
//! Masked training zeroes the producers' rows and biases and the followers' affine parameters,
//! so a pruned unit holds a constant after its activations (`fill`, 0 unless a sigmoid or a
//! softmax sits in between); a linear consumer folds a non-zero constant into its bias.

use std::collections::HashMap;

use crate::ir::{layers, Compression, Kind, Layer, LayerKind, Node, PruneMethod};

mod resize;

pub use resize::shrink;

/// One tensor of a group's member, holding the units along one dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct Slice {
    /// The tensor's name within its layer (`weight`, `bias`, `running_mean`).
    pub tensor: &'static str,
    /// The dimension along which the units lie.
    pub dim: i64,
    /// Consecutive entries per unit along `dim` (a flattened channel's spatial size; else 1).
    pub block: i64,
    /// Whether masked training zeroes the pruned units' entries (producers' and followers'
    /// parameters; not consumers' columns nor running statistics).
    pub masked: bool,
}

/// How a member layer takes part in a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Its outputs are the units (weight rows and bias).
    Producer,
    /// Carries the units with per-channel parameters (norms, per-channel PReLU).
    Follower,
    /// Mixes the units into its outputs (a linear's columns, a convolution's input channels).
    Consumer,
}

/// One layer of a group with the tensors that lose the pruned units.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// Qualified layer name.
    pub layer: String,
    /// Its role.
    pub role: Role,
    /// Its tensors sliced along the units.
    pub tensors: Vec<Slice>,
    /// For a consumer, the value every pruned unit holds at its input in the masked model;
    /// a non-zero value is folded into the consumer's bias when the units are removed.
    pub fill: f64,
}

/// The tensors that shrink together when a structured target loses units.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// The pruned layer.
    pub target: String,
    /// Units before pruning.
    pub units: i64,
    /// Producers, followers and consumers, in model order.
    pub members: Vec<Member>,
    /// Layers the units pass through unchanged.
    pub passes: Vec<String>,
    /// Group norms among the followers, with their group counts.
    pub group_norms: Vec<(String, i64)>,
}

impl Group {
    /// The members of one role.
    pub fn role(&self, role: Role) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(move |m| m.role == role)
    }

    /// The first group norm (name, groups) whose group count does not divide `kept` units.
    pub fn indivisible(&self, kept: i64) -> Option<(&str, i64)> {
        self.group_norms
            .iter()
            .find(|(_, g)| kept % g != 0)
            .map(|(n, g)| (n.as_str(), *g))
    }
}

/// Why a group cannot shrink.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    /// The target has no output units (it is not a linear or a convolution).
    NotUnits(Kind),
    /// The units reach the model's output, whose size the data fixes.
    Output,
    /// A residual adds the model's input, which no producer can drop.
    Input,
    /// A residual adds the features of a layer whose outputs cannot be pruned.
    Fixed(Kind),
    /// A layer that cannot be sliced receives the units.
    Consumer(Kind),
    /// A layer mixes the units or reduces over them (statistics, softmax, mean, or it works
    /// along another dimension).
    Mixes(Kind),
    /// A residual adds units that lie along different dimensions on its two sides.
    Misaligned,
    /// A grouped convolution produces or consumes the units.
    Grouped,
    /// A group norm whose group count does not divide the units kept.
    GroupNorm {
        /// Its group count.
        groups: i64,
        /// Units kept.
        kept: i64,
    },
    /// Another structured target in the same group keeps a different number of units.
    Amounts {
        /// Units this target keeps.
        kept: i64,
        /// Units the other target keeps.
        other: i64,
    },
    /// A pruned unit holds a non-zero constant that cannot be folded here (a convolution's
    /// padding, average pooling's padding, a residual or a shared PReLU).
    Constant(f64),
}

/// Where the shrinking is blocked.
#[derive(Clone, Copy, Debug)]
pub enum Place<'m> {
    /// At a layer.
    Layer(&'m Layer),
    /// At a residual block (a `Node::Residual`).
    Residual(&'m Node),
}

/// A structured target that cannot shrink, with the reason and where.
#[derive(Clone, Debug)]
pub struct Refusal<'m> {
    /// The pruned layer.
    pub target: &'m Layer,
    /// Why.
    pub reason: Reason,
    /// Where.
    pub at: Place<'m>,
}

/// What flows between layers, as far as units are concerned.
#[derive(Clone, Copy, Debug)]
enum Flow {
    /// Units of a producer (a union-find variable) along `axis`, `block` entries each; pruned
    /// units hold `fill`.
    Units {
        var: usize,
        axis: usize,
        block: i64,
        fill: f64,
    },
    /// Features that cannot be pruned: the model's input (`None`) or a layer's outputs.
    Fixed(Option<Kind>),
}

/// What the walk learns about one variable.
enum Event<'m> {
    Member(Member),
    Pass(&'m Layer),
    GroupNorm(&'m Layer, i64),
    Refuse(Reason, Place<'m>),
}

#[derive(Default)]
struct Walk<'m> {
    parent: Vec<usize>,
    produced: HashMap<&'m str, usize>,
    events: Vec<(usize, Event<'m>)>,
}

fn slice(tensor: &'static str, dim: i64, block: i64, masked: bool) -> Slice {
    Slice {
        tensor,
        dim,
        block,
        masked,
    }
}

/// A norm's affine parameters that it has (`weight`, and `bias` unless it has none, as its
/// family says), sliced along `dim` with the units; masked training zeroes them.
fn affine(l: &Layer, dim: i64, block: i64) -> Vec<Slice> {
    let weights = l.kind.weights();
    ["weight", "bias"]
        .into_iter()
        .filter(|name| weights.iter().any(|w| w.local == *name))
        .map(|name| slice(name, dim, block, true))
        .collect()
}

/// `x·Φ(x)`, with erf from Abramowitz and Stegun 7.1.26 (error below 1.5e-7).
impl<'m> Walk<'m> {
    fn find(&mut self, v: usize) -> usize {
        let mut r = v;
        while self.parent[r] != r {
            r = self.parent[r];
        }
        self.parent[v] = r;
        r
    }

    fn on(&mut self, var: usize, e: Event<'m>) {
        self.events.push((var, e));
    }

    fn member(&mut self, var: usize, l: &Layer, role: Role, tensors: Vec<Slice>, fill: f64) {
        let m = Member {
            layer: l.name.clone(),
            role,
            tensors,
            fill,
        };
        self.on(var, Event::Member(m));
    }

    fn produce(&mut self, l: &'m Layer, grouped: bool) -> Flow {
        let var = self.parent.len();
        self.parent.push(var);
        self.produced.insert(&l.name, var);
        let bias = match &l.kind {
            LayerKind::Linear { bias, .. } => *bias,
            LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => conv.bias,
            _ => false,
        };
        let mut tensors = vec![slice("weight", 0, 1, true)];
        if bias {
            tensors.push(slice("bias", 0, 1, true));
        }
        self.member(var, l, Role::Producer, tensors, 0.0);
        if grouped {
            self.on(var, Event::Refuse(Reason::Grouped, Place::Layer(l)));
        }
        let axis = match l.kind {
            LayerKind::Linear { .. } => l.output.len().saturating_sub(1),
            _ => 0,
        };
        Flow::Units {
            var,
            axis,
            block: 1,
            fill: 0.0,
        }
    }

    fn nodes(&mut self, nodes: &'m [Node], mut x: Flow) -> Flow {
        for node in nodes {
            x = match node {
                Node::Layer(l) => self.layer(l, x),
                Node::Block { nodes, .. } => self.nodes(nodes, x),
                Node::Residual { nodes, .. } => {
                    let inner = self.nodes(nodes, x);
                    self.add(node, x, inner)
                }
            };
        }
        x
    }

    fn add(&mut self, node: &'m Node, a: Flow, b: Flow) -> Flow {
        match (a, b) {
            (
                Flow::Units {
                    var: va,
                    fill: fa,
                    axis: xa,
                    block: ba,
                },
                Flow::Units {
                    var: vb,
                    fill: fb,
                    axis: xb,
                    block: bb,
                },
            ) => {
                let (ra, rb) = (self.find(va), self.find(vb));
                if (xa, ba) != (xb, bb) {
                    for v in [ra, rb] {
                        self.on(v, Event::Refuse(Reason::Misaligned, Place::Residual(node)));
                    }
                    return Flow::Fixed(None);
                }
                self.parent[rb] = ra;
                let fill = fa + fb;
                if fill != 0.0 {
                    self.on(
                        ra,
                        Event::Refuse(Reason::Constant(fill), Place::Residual(node)),
                    );
                }
                match a {
                    Flow::Units { axis, block, .. } => Flow::Units {
                        var: ra,
                        axis,
                        block,
                        fill,
                    },
                    fixed => fixed,
                }
            }
            (Flow::Units { var, .. }, Flow::Fixed(k))
            | (Flow::Fixed(k), Flow::Units { var, .. }) => {
                let reason = k.map_or(Reason::Input, Reason::Fixed);
                self.on(var, Event::Refuse(reason, Place::Residual(node)));
                Flow::Fixed(k)
            }
            (Flow::Fixed(k), Flow::Fixed(_)) => Flow::Fixed(k),
        }
    }

    fn layer(&mut self, l: &'m Layer, x: Flow) -> Flow {
        let Flow::Units {
            var,
            axis,
            block,
            fill,
        } = x
        else {
            return match &l.kind {
                LayerKind::Linear { .. } => self.produce(l, false),
                LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => {
                    self.produce(l, conv.groups != 1)
                }
                LayerKind::Embedding { .. }
                | LayerKind::Positional { .. }
                | LayerKind::Attention { .. }
                | LayerKind::TransformerBlock { .. }
                | LayerKind::Reshape { .. } => Flow::Fixed(Some(l.kind.kind())),
                _ => x,
            };
        };
        let rank = l.input.len();
        let kind = l.kind.kind();
        let refuse = |w: &mut Self, r: Reason| w.on(var, Event::Refuse(r, Place::Layer(l)));
        let pass = |w: &mut Self, fill: f64| {
            w.on(var, Event::Pass(l));
            Flow::Units {
                var,
                axis,
                block,
                fill,
            }
        };
        let channel = axis == 0 && block == 1;
        match &l.kind {
            LayerKind::Linear { bias, .. } => {
                if axis + 1 == rank && fill != 0.0 && !bias {
                    refuse(self, Reason::Constant(fill));
                } else if axis + 1 == rank {
                    let t = vec![slice("weight", 1, block, false)];
                    self.member(var, l, Role::Consumer, t, fill);
                } else {
                    refuse(self, Reason::Mixes(kind));
                }
                self.produce(l, false)
            }
            LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => {
                if !channel {
                    refuse(self, Reason::Mixes(kind));
                } else if conv.groups != 1 {
                    refuse(self, Reason::Grouped);
                } else if fill != 0.0 {
                    refuse(self, Reason::Constant(fill));
                } else {
                    let t = vec![slice("weight", 1, 1, false)];
                    self.member(var, l, Role::Consumer, t, fill);
                }
                self.produce(l, conv.groups != 1)
            }
            LayerKind::BatchNorm1d { norm } | LayerKind::BatchNorm2d { norm } => {
                if !channel {
                    refuse(self, Reason::Mixes(kind));
                }
                let mut t = affine(l, 0, 1);
                if norm.track_running_stats {
                    t.extend([
                        slice("running_mean", 0, 1, false),
                        slice("running_var", 0, 1, false),
                    ]);
                }
                self.member(var, l, Role::Follower, t, fill);
                Flow::Units {
                    var,
                    axis,
                    block,
                    fill: 0.0,
                }
            }
            LayerKind::LayerNorm { norm } => {
                let first = rank.saturating_sub(norm.shape.len());
                if axis < first {
                    return pass(self, fill);
                }
                let dim = (axis - first) as i64;
                let t = affine(l, dim, block);
                self.member(var, l, Role::Follower, t, fill);
                Flow::Units {
                    var,
                    axis,
                    block,
                    fill: 0.0,
                }
            }
            LayerKind::GroupNorm { groups, .. } => {
                if !channel {
                    refuse(self, Reason::Mixes(kind));
                }
                let t = affine(l, 0, 1);
                self.member(var, l, Role::Follower, t, fill);
                self.on(var, Event::GroupNorm(l, *groups));
                Flow::Units {
                    var,
                    axis,
                    block,
                    fill: 0.0,
                }
            }
            LayerKind::Prelu { parameters, .. } => {
                if fill < 0.0 {
                    refuse(self, Reason::Constant(fill));
                }
                if *parameters > 1 && axis == 0 {
                    let t = vec![slice("weight", 0, block, false)];
                    self.member(var, l, Role::Follower, t, fill);
                    return Flow::Units {
                        var,
                        axis,
                        block,
                        fill,
                    };
                }
                pass(self, fill)
            }
            LayerKind::Elementwise(e) => pass(self, e.at(fill)),
            LayerKind::LeakyRelu { negative_slope } => pass(
                self,
                if fill > 0.0 {
                    fill
                } else {
                    negative_slope * fill
                },
            ),
            LayerKind::Elu { alpha } => pass(
                self,
                if fill > 0.0 {
                    fill
                } else {
                    alpha * fill.exp_m1()
                },
            ),
            LayerKind::Dropout { .. } => pass(self, fill),
            LayerKind::AdaptiveAvgPool1d { .. }
            | LayerKind::AdaptiveAvgPool2d { .. }
            | LayerKind::MaxPool1d { .. }
            | LayerKind::MaxPool2d { .. } => {
                if !channel {
                    refuse(self, Reason::Mixes(kind));
                }
                pass(self, fill)
            }
            LayerKind::AvgPool1d { pool } | LayerKind::AvgPool2d { pool } => {
                if !channel {
                    refuse(self, Reason::Mixes(kind));
                } else if fill != 0.0 && pool.padding.iter().any(|p| *p > 0) {
                    refuse(self, Reason::Constant(fill));
                }
                pass(self, fill)
            }
            LayerKind::Softmax { dim } | LayerKind::LogSoftmax { dim } => {
                if *dim as usize == axis {
                    refuse(self, Reason::Mixes(kind));
                    return pass(self, fill);
                }
                let n = l.input.get(*dim as usize).copied().unwrap_or(1).max(1) as f64;
                let soft = matches!(l.kind, LayerKind::Softmax { .. });
                pass(self, if soft { 1.0 / n } else { -n.ln() })
            }
            LayerKind::Flatten => {
                if rank <= 1 {
                    return pass(self, fill);
                }
                if axis != 0 {
                    refuse(self, Reason::Mixes(kind));
                }
                self.on(var, Event::Pass(l));
                let spatial = l.input[1..].iter().product::<i64>();
                Flow::Units {
                    var,
                    axis: 0,
                    block: block * spatial,
                    fill,
                }
            }
            LayerKind::Mean { dim } => {
                let d = *dim as usize;
                if d == axis {
                    refuse(self, Reason::Mixes(kind));
                }
                self.on(var, Event::Pass(l));
                Flow::Units {
                    var,
                    axis: if d < axis { axis - 1 } else { axis },
                    block,
                    fill,
                }
            }
            LayerKind::Reshape { .. }
            | LayerKind::Embedding { .. }
            | LayerKind::Positional { .. }
            | LayerKind::Attention { .. }
            | LayerKind::TransformerBlock { .. } => {
                refuse(self, Reason::Consumer(kind));
                Flow::Fixed(Some(kind))
            }
        }
    }
}

/// The group of the structured target `t` (one of the layers of `nodes`, a checked model), or
/// why it cannot shrink.
pub fn group<'m>(nodes: &'m [Node], t: &'m Layer) -> Result<Group, Refusal<'m>> {
    let all = crate::ir::layers(nodes);
    let refuse = |reason, at| Refusal {
        target: t,
        reason,
        at,
    };
    let units = match &t.kind {
        LayerKind::Linear { outputs, .. } => *outputs,
        LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => conv.outputs,
        other => return Err(refuse(Reason::NotUnits(other.kind()), Place::Layer(t))),
    };
    let mut w = Walk::default();
    let out = w.nodes(nodes, Flow::Fixed(None));
    if let (Flow::Units { var, .. }, Some(last)) = (out, all.last()) {
        w.on(var, Event::Refuse(Reason::Output, Place::Layer(last)));
    }
    let Some(&var) = w.produced.get(t.name.as_str()) else {
        return Err(refuse(Reason::NotUnits(t.kind.kind()), Place::Layer(t)));
    };
    let class = w.find(var);
    let mut g = Group {
        target: t.name.clone(),
        units,
        members: Vec::new(),
        passes: Vec::new(),
        group_norms: Vec::new(),
    };
    for (v, e) in std::mem::take(&mut w.events) {
        if w.find(v) != class {
            continue;
        }
        match e {
            Event::Member(m) => g.members.push(m),
            Event::Pass(l) => g.passes.push(l.name.clone()),
            Event::GroupNorm(l, groups) => g.group_norms.push((l.name.clone(), groups)),
            Event::Refuse(reason, at) => return Err(refuse(reason, at)),
        }
    }
    Ok(g)
}

/// Units kept out of `units` when `amount` of them are pruned, as PyTorch rounds (half to even).
pub fn kept(units: i64, amount: f64) -> i64 {
    units - (amount * units as f64).round_ties_even() as i64
}

/// The groups of every structured target of `compression` that removes output units
/// (`ln_structured` with `dim: 0` on a linear or convolution, named or in a named block), each
/// once, in the order first targeted, with the units its first target keeps; or the first
/// target that cannot shrink. The checker has refused everything else (K0214, K0216).
pub fn groups<'m>(
    nodes: &'m [Node],
    compression: &[Compression],
) -> Result<Vec<(Group, i64)>, Refusal<'m>> {
    let mut out: Vec<(Group, i64)> = Vec::new();
    for c in compression {
        let Compression::Prune {
            targets,
            method: PruneMethod::LnStructured { dim: 0, .. },
            amount,
            ..
        } = c
        else {
            continue;
        };
        for t in targets {
            let within = |name: &str| {
                name.strip_prefix(t.layer.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
            };
            for l in layers(nodes).into_iter().filter(|l| within(&l.name)) {
                let units = match &l.kind {
                    LayerKind::Linear { outputs, .. } => *outputs,
                    LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => conv.outputs,
                    _ => continue,
                };
                let g = group(nodes, l)?;
                if !out.iter().any(|(h, _)| h.members == g.members) {
                    out.push((g, kept(units, *amount)));
                }
            }
        }
    }
    Ok(out)
}
