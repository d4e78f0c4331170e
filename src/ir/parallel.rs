//! The parallel plan of one process of a run: which strategy computes a batch's gradients, with
//! its degrees (replicas, stages, ranks) and where this process stands among the ranks. It is
//! computed once, from the checked `parallel` statement and the launcher's rank variables, and
//! the runtime reads every parallel fact from it.

use super::{Backend, Device, Parallel, PipelineSchedule, Sharding};
use crate::span::Span;

/// Where this process stands among the ranks of a distributed run, as its launcher says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ranks {
    /// This process's rank, 0 to `world - 1`.
    pub rank: usize,
    /// Its rank among the ranks on its machine (which CUDA device NCCL gives it).
    pub local_rank: usize,
    /// How many ranks were started.
    pub world: usize,
}

impl Ranks {
    /// A process that is the only one.
    pub const ALONE: Ranks = Ranks {
        rank: 0,
        local_rank: 0,
        world: 1,
    };
}

/// How ranks share a global batch of `n` samples: cut as one process accumulating over
/// `world · accumulate` micro-batches cuts it (`Tensor.chunk`'s cut: `⌈n/(W·A)⌉` rows each, the
/// last fewer, and fewer micro-batches than `W·A` when `n` is small; `accumulate` at most `n`),
/// rank `r` taking the `A` from the `r·A`-th. Each of the `W·A` slots is `(start, rows)`, or
/// `None` where the cut leaves it out (the rank runs a stand-in row of weight 0 there, so that
/// every rank runs `A` micro-batches).
pub fn rank_micro_batches(n: u64, world: u64, accumulate: u64) -> Vec<Option<(u64, u64)>> {
    let n = n.max(1);
    let parts = world.max(1) * accumulate.min(n).max(1);
    let size = n.div_ceil(parts);
    (0..parts)
        .map(|j| (j * size < n).then(|| (j * size, size.min(n - j * size))))
        .collect()
}

/// The one strategy that computes the gradients of a batch, with its degrees.
#[derive(Clone, Debug, PartialEq)]
pub enum Parallelism {
    /// The model on its own devices, each layer where it is placed: one device, or model
    /// parallel by placement.
    Local,
    /// Data parallel in this process: one replica per device (a device listed twice holds two),
    /// replica 0 (which holds the optimizer) first, the batch split between them.
    Replicas {
        /// The replicas' devices as written.
        devices: Vec<Device>,
        /// The devices list or replica count, where a missing device points.
        span: Span,
    },
    /// Pipeline parallel: consecutive stages, each on its own device, fed micro-batches.
    Pipeline {
        /// The first top-level node of each stage (as many stages as entries).
        boundaries: Vec<usize>,
        /// Micro-batches per batch.
        micro_batches: u64,
        /// `gpipe` or `1f1b`.
        schedule: PipelineSchedule,
    },
    /// Distributed data parallel: one replica per process, gradients averaged by c10d; or, with
    /// `sharding` (`parallel fsdp`), each process holding a shard of the model.
    Ddp {
        /// The processes the experiment asks for.
        world_size: u64,
        /// `gloo` or `nccl`, as the experiment asks.
        backend: Backend,
        /// Seconds a rendezvous or a collective may wait for the other ranks.
        timeout_s: u64,
        /// The `parallel` statement, where distributed failures point.
        span: Span,
        /// How the ranks shard the model (`fsdp`); `None` under `ddp`.
        sharding: Option<Sharding>,
        /// The tensor-parallel degree: consecutive ranks of this many split the layers tensor
        /// parallel splits (1: none).
        tensor: u64,
    },
}

/// How one process of a run spreads its work.
#[derive(Clone, Debug, PartialEq)]
pub struct ParallelPlan {
    /// The strategy and its degrees.
    pub strategy: Parallelism,
    /// Where this process stands: [`Ranks::ALONE`] unless a launcher started it as a rank.
    pub ranks: Ranks,
}

impl ParallelPlan {
    /// The plan of the checked `parallel` statement for a process standing at `ranks` (`None`
    /// when no launcher started it as a rank).
    pub fn new(parallel: &Parallel, ranks: Option<Ranks>) -> ParallelPlan {
        let strategy = match parallel {
            Parallel::None | Parallel::Model => Parallelism::Local,
            Parallel::Data { devices, span } => Parallelism::Replicas {
                devices: devices.clone(),
                span: *span,
            },
            Parallel::Pipeline {
                boundaries,
                micro_batches,
                schedule,
                ..
            } => Parallelism::Pipeline {
                boundaries: boundaries.clone(),
                micro_batches: *micro_batches,
                schedule: *schedule,
            },
            Parallel::Distributed {
                backend,
                world_size,
                timeout_s,
                span,
                sharding,
                tensor,
            } => Parallelism::Ddp {
                world_size: *world_size,
                backend: *backend,
                timeout_s: *timeout_s,
                span: *span,
                sharding: *sharding,
                tensor: *tensor,
            },
        };
        ParallelPlan {
            strategy,
            ranks: ranks.unwrap_or(Ranks::ALONE),
        }
    }

    /// Whether this process writes the run directory: rank 0 alone does.
    pub fn writes(&self) -> bool {
        self.ranks.rank == 0
    }
}
