//! The `parallel` setting: the strategy (data parallel, model parallel by placement, pipeline,
//! distributed data parallel, fully sharded data parallel, a mesh of process dimensions) and its
//! arguments. `ddp(world_size: N)` is the mesh `mesh(data: N)`, `fsdp(world_size: N)` the mesh
//! `mesh(fsdp: N)`: all three are [`Parallel::Distributed`].

use super::cx::Cx;
use super::read::{callee, Called};
use super::words::{Strategy, STRATEGIES};
use crate::diagnostic::problem::{Expected, Inconsistent, Names, OutOfRange, Strategies};
use crate::diagnostic::{Code, Problem};
use crate::ir::{Backend, Device, Parallel, PipelineSchedule, Sharding};
use crate::span::Span;
use crate::syntax::ast::{Statement, Unit, Value, ValueKind};

/// The most data-parallel replicas on one machine.
const MAX_REPLICAS: u64 = 1024;

/// The most ranks a mesh may have.
const MAX_RANKS: u64 = 1 << 20;

/// The parallel strategy, with the spans other checks point at.
pub struct ParallelIn {
    /// The typed strategy (pipeline boundaries are filled in later).
    pub parallel: Parallel,
    /// The `parallel` statement.
    pub span: Span,
    /// What sets the data-parallel size.
    pub dp_span: Option<Span>,
    /// The pipeline's `micro_batches`.
    pub micro_batches_span: Option<Span>,
    /// The pipeline's `stages`.
    pub stages_span: Option<Span>,
    /// The ddp `backend`.
    pub backend_span: Option<Span>,
    /// The mesh's `tensor` degree.
    pub tensor_span: Option<Span>,
}

impl ParallelIn {
    /// A strategy without spans (the default).
    pub fn plain(parallel: Parallel) -> ParallelIn {
        ParallelIn {
            parallel,
            span: Span::default(),
            dp_span: None,
            micro_batches_span: None,
            stages_span: None,
            backend_span: None,
            tensor_span: None,
        }
    }
}

/// How long a distributed run waits for its other ranks unless `timeout` says otherwise.
pub const DDP_TIMEOUT_S: u64 = 60;

/// `n` replicas or ranks when at most `max`; more is reported at `span`.
fn at_most(cx: &mut Cx, span: Span, n: u64, max: u64) -> Option<u64> {
    if n > max {
        cx.report(Problem::Names(Names::OutOfRange {
            span,
            situation: OutOfRange::TooManyReplicas { replicas: n, max },
        }));
        return None;
    }
    Some(n)
}

/// Reads a time as a whole number of seconds: `20s`, `2 min`, or a bare number of seconds.
fn seconds(cx: &mut Cx, value: &Value) -> Option<u64> {
    if let ValueKind::Number {
        value: x,
        integer: true,
        unit: None | Some(Unit::Seconds(_)),
    } = &value.kind
    {
        let scale = match &value.kind {
            ValueKind::Number {
                unit: Some(Unit::Seconds(m)),
                ..
            } => *m,
            _ => 1,
        };
        if *x >= 1.0 && *x * scale as f64 <= u32::MAX as f64 {
            return Some(*x as u64 * scale);
        }
    }
    cx.wrong_type(value, Expected::Seconds);
    None
}

/// Checks `parallel STRATEGY(args)`.
pub fn check_parallel(cx: &mut Cx, stmt: &Statement, default: Device) -> Option<ParallelIn> {
    let Called {
        word: kind,
        tag: strategy,
        params,
        args,
        value: v,
    } = callee(
        cx,
        stmt,
        Code::UnknownStrategy,
        "parallel strategy",
        STRATEGIES,
    )?;
    let b = cx.bind(kind, args, v.span, params);
    let mut out = ParallelIn::plain(Parallel::None);
    out.span = stmt.span;
    out.parallel = match strategy {
        Strategy::None => Parallel::None,
        Strategy::Model => Parallel::Model,
        Strategy::Data => {
            let devices = match (b.get("devices"), b.get("replicas")) {
                (Some(d), Some(r)) => {
                    cx.report(Problem::Strategies(Strategies::Inconsistent {
                        span: r.span,
                        situation: Inconsistent::DevicesAndReplicas { devices: d.span },
                    }));
                    return None;
                }
                (Some(d), None) => {
                    out.dp_span = Some(d.span);
                    let ValueKind::List(items) = &d.kind else {
                        cx.wrong_type(d, Expected::DeviceList);
                        return None;
                    };
                    // A device listed twice holds two replicas (`[cuda:0, cuda:0]`).
                    let devices: Vec<Device> =
                        items.iter().map(|i| cx.device(i)).collect::<Option<_>>()?;
                    if devices.is_empty() {
                        cx.report(Problem::Names(Names::OutOfRange {
                            span: d.span,
                            situation: OutOfRange::NoDevices,
                        }));
                        return None;
                    }
                    devices
                }
                (None, Some(r)) => {
                    out.dp_span = Some(r.span);
                    let n = cx.uint_min(r, "the number of replicas", 1)?;
                    let n = at_most(cx, r.span, n, MAX_REPLICAS)?;
                    // Every replica on the experiment's device.
                    vec![default; n as usize]
                }
                (None, None) => {
                    cx.missing("data", "devices", b.span);
                    return None;
                }
            };
            Parallel::Data {
                devices,
                span: out.dp_span.unwrap_or(stmt.span),
            }
        }
        Strategy::Pipeline => {
            let stages = b
                .get("stages")
                .map(|v| (cx.uint_min(v, "the number of stages", 1), v.span));
            let micro = b
                .get("micro_batches")
                .map(|v| (cx.uint_min(v, "the number of micro-batches", 1), v.span));
            let schedule = b.get("schedule").map_or(Some("gpipe"), |v| {
                cx.choice(v, "pipeline schedule", &["gpipe", "1f1b"])
            });
            let Some((stages, stages_span)) = stages else {
                cx.missing("pipeline", "stages", b.span);
                return None;
            };
            let stages = stages?;
            out.stages_span = Some(stages_span);
            if stages < 2 {
                cx.report(Problem::Strategies(Strategies::PipelineOneStage {
                    span: stages_span,
                    stages,
                }));
                return None;
            }
            let (micro, micro_span) = micro.unwrap_or((Some(stages), b.span));
            out.micro_batches_span = Some(micro_span);
            Parallel::Pipeline {
                stages,
                micro_batches: micro?,
                schedule: if schedule? == "gpipe" {
                    PipelineSchedule::GPipe
                } else {
                    PipelineSchedule::OneFOneB
                },
                boundaries: vec![],
            }
        }
        Strategy::Ddp | Strategy::Fsdp => {
            let backend = b
                .get("backend")
                .map_or(Some("gloo"), |v| cx.choice(v, "backend", &["gloo", "nccl"]));
            out.backend_span = b.get("backend").map(|v| v.span);
            let Some(ws) = b.get("world_size") else {
                cx.report(Problem::Strategies(Strategies::DdpWithoutWorldSize {
                    span: b.span,
                }));
                return None;
            };
            out.dp_span = Some(ws.span);
            let world_size = cx.uint_min(ws, "the world size", 1);
            let timeout_s = b
                .get("timeout")
                .map_or(Some(DDP_TIMEOUT_S), |v| seconds(cx, v));
            let sharding = match strategy {
                Strategy::Fsdp => Some(Sharding {
                    reshard_after_forward: b
                        .get("reshard_after_forward")
                        .map_or(Some(true), |v| cx.boolean(v))?,
                }),
                Strategy::Ddp
                | Strategy::None
                | Strategy::Data
                | Strategy::Model
                | Strategy::Pipeline
                | Strategy::Mesh => None,
            };
            Parallel::Distributed {
                backend: if backend? == "nccl" {
                    Backend::Nccl
                } else {
                    Backend::Gloo
                },
                world_size: world_size?,
                timeout_s: timeout_s?,
                span: stmt.span,
                sharding,
                tensor: 1,
            }
        }
        Strategy::Mesh => {
            let mut degree = |name: &str, what: &str| match b.get(name) {
                Some(v) => cx.uint_min(v, what, 1).map(|d| (d, Some(v.span))),
                None => Some((1, None)),
            };
            let data = degree("data", "the data-parallel degree");
            let fsdp = degree("fsdp", "the fsdp degree");
            let tensor = degree("tensor", "the tensor-parallel degree");
            let backend = b
                .get("backend")
                .map_or(Some("gloo"), |v| cx.choice(v, "backend", &["gloo", "nccl"]));
            out.backend_span = b.get("backend").map(|v| v.span);
            let timeout_s = b
                .get("timeout")
                .map_or(Some(DDP_TIMEOUT_S), |v| seconds(cx, v));
            let reshard = b
                .get("reshard_after_forward")
                .map_or(Some(true), |v| cx.boolean(v));
            let ((data, data_span), (fsdp, fsdp_span), (tensor, tensor_span)) =
                (data?, fsdp?, tensor?);
            out.tensor_span = tensor_span;
            out.dp_span = fsdp_span.or(data_span).or(Some(v.span));
            // Data replication with sharding (hybrid sharding) is not run.
            if let (Some(d), Some(f)) = (data_span.filter(|_| data > 1), fsdp_span) {
                if fsdp > 1 {
                    cx.report(Problem::Strategies(Strategies::MeshNotRun {
                        span: f,
                        what: "data replication together with fsdp (hybrid sharding)".into(),
                        other: Some(d),
                    }));
                    return None;
                }
            }
            let world = data.saturating_mul(fsdp).saturating_mul(tensor);
            let world = at_most(cx, v.span, world, MAX_RANKS)?;
            Parallel::Distributed {
                backend: if backend? == "nccl" {
                    Backend::Nccl
                } else {
                    Backend::Gloo
                },
                world_size: world,
                timeout_s: timeout_s?,
                span: stmt.span,
                sharding: fsdp_span.map(|_| Sharding {
                    reshard_after_forward: reshard.unwrap_or(true),
                }),
                tensor,
            }
        }
    };
    Some(out)
}
