//! What `kiln run`, `kiln eval` and `kiln export` share before they train, evaluate or write:
//! the parallel plan of one trial, its nodes as the plan places them and the devices checked
//! (`--device`, or a rank's CUDA device under NCCL), and from there the model, the data, the
//! run's length, compression installed as the run does it, and a checkpoint restored. The
//! commands call these in their own order (a run builds its model before it loads the data, an
//! evaluation after), so each fails first where it always did. Evaluating or exporting a run
//! reads the run's own copy of its experiment ([`run_experiment`]).

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use tch::Tensor;

use super::budget::Budget;
use super::checkpoint::Fingerprint;
use super::compress::pruner::Pruner;
use super::compress::qat;
use super::compress::timeline::Timeline;
use super::cuda_memory;
use super::data::{self, DataError, Splits};
use super::dist::rank::Rank;
use super::failure::At;
use super::fingerprint::{data_digest, differences, fingerprint};
use super::model::{self, tch_device, Net};
use super::optim::Optim;
use super::parallel::ddp::{self, Backend};
use super::parallel::strategy::Strategy;
use super::parallel::{self, Local};
use kiln::check::{check_path, Checked, FsLoader, Loader, Options};
use kiln::datafile::{Format as DataFormat, Probe};
use kiln::diagnostic::problem::{Resume, Running, Unavailable, Unreadable};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{
    Compression, DataPlacement, Experiment, Node, ParallelPlan, Parallelism, Precision,
};
use kiln::present::fmt_bytes;
use kiln::span::{Sources, Span};

/// One trial, prepared.
pub struct Session<'a> {
    /// The checked trial.
    pub exp: &'a Experiment,
    /// The sources it was checked from (relative data paths start at their files).
    sources: &'a Sources,
    /// How this process spreads its work.
    pub plan: ParallelPlan,
    /// The model's nodes, every layer on the device the plan puts it on.
    pub nodes: Cow<'a, [Node]>,
    /// The one device every layer runs on, when one is forced: `--device`, or this rank's CUDA
    /// device under NCCL.
    pub over: Option<tch::Device>,
    /// This rank of a distributed run, with the backend it reduces with.
    pub rank: Option<(Rank, Backend)>,
    /// What the run should say before it starts (rank 0 says it).
    pub notes: Vec<String>,
    /// The device the loaded splits are kept on (`placement`), or `None` to leave them where
    /// they are loaded.
    data_device: Option<tch::Device>,
}

impl<'a> Session<'a> {
    /// Prepares `exp`, checking that its devices exist here (`device` is `--device`) and, for a
    /// rank of a distributed run, that it was started as the experiment says and that its
    /// backend can run here.
    pub fn new(
        exp: &'a Experiment,
        sources: &'a Sources,
        device: Option<kiln::ir::Device>,
        rank: Option<&Rank>,
    ) -> Result<Session<'a>, Diagnostic> {
        let plan = ParallelPlan::new(&exp.parallel, rank.map(Rank::place));
        let nodes = parallel::placed(exp, &plan);
        let mut over = resolve_devices(exp, &plan, &nodes, device)?;
        let mut notes = Vec::new();
        let rank = match rank {
            Some(r) => {
                let (chosen, device) = ddp::check_rank(exp, &plan, over)?;
                let nccl = matches!(
                    plan.strategy,
                    Parallelism::Ddp {
                        backend: kiln::ir::Backend::Nccl,
                        ..
                    }
                );
                if nccl && chosen == Backend::Gloo {
                    notes.push(
                        "`--device cpu`: NCCL needs CUDA devices, so the ranks reduce with Gloo"
                            .to_string(),
                    );
                }
                over = device.or(over);
                Some((r.clone(), chosen))
            }
            None => None,
        };
        let (data_device, note) = data_placement(exp, over);
        notes.extend(note);
        Ok(Session {
            exp,
            sources,
            plan,
            nodes,
            over,
            rank,
            notes,
            data_device,
        })
    }

    /// Prepares `exp` with every layer on `over`, unchecked (an export computes on the CPU).
    pub fn on(exp: &'a Experiment, sources: &'a Sources, over: tch::Device) -> Session<'a> {
        let plan = ParallelPlan::new(&exp.parallel, None);
        let nodes = parallel::placed(exp, &plan);
        Session {
            exp,
            sources,
            plan,
            nodes,
            over: Some(over),
            rank: None,
            notes: Vec::new(),
            data_device: data_placement(exp, Some(over)).0,
        }
    }

    /// Whether this process writes the run directory.
    pub fn writes(&self) -> bool {
        self.plan.writes()
    }

    /// Where the model the loop trains is built (see [`parallel::model_device`]).
    pub fn model_device(&self) -> Option<tch::Device> {
        parallel::model_device(&self.plan, self.over)
    }

    /// The model, its weights freshly initialised from torch's generator as it stands.
    pub fn build(&self) -> Result<Net, Diagnostic> {
        model::build(&self.nodes, self.exp.train.precision, self.model_device())
    }

    /// The data, loaded and split.
    pub fn data(&self) -> Result<Splits, Diagnostic> {
        let exp = self.exp;
        let base = self
            .sources
            .get(exp.data.source_span.file)
            .path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let splits = data::load(
            &exp.data,
            &exp.model.input,
            exp.model.input_dtype,
            &base,
            exp.seed,
        )?;
        let Some(device) = self.data_device else {
            return Ok(splits);
        };
        Ok(splits
            .moved_to(device)
            .map_err(|e| DataError::torch(e, exp.data.source_span))?)
    }

    /// The run's length over the training split, and its phases; `max_steps` (`--max-steps`)
    /// stops it early, the phases keeping their lengths.
    pub fn length(
        &self,
        splits: &Splits,
        max_steps: Option<u64>,
    ) -> Result<(Budget, Timeline), Diagnostic> {
        let exp = self.exp;
        let mut budget = Budget::new(
            &exp.train,
            &exp.data,
            splits.train.len().max(0) as u64,
            max_steps,
        )?;
        let timeline = Timeline::new(exp, &budget);
        budget.stop = max_steps.map_or(timeline.end(), |m| m.min(timeline.end()));
        Ok((budget, timeline))
    }

    /// Installs the experiment's compression into `net` as a run does: fake quantization's
    /// observers, and the pruner (its masks and rewind values as buffers) when it prunes.
    pub fn compress(
        &self,
        net: &mut Net,
        timeline: Timeline,
    ) -> Result<Option<Pruner>, Diagnostic> {
        let exp = self.exp;
        qat::install(exp, net)?;
        let prunes = exp
            .compression
            .iter()
            .any(|c| matches!(c, Compression::Prune { .. }));
        if !prunes {
            return Ok(None);
        }
        Ok(Some(Pruner::new(exp, &self.nodes, net, timeline)?))
    }

    /// What the trial computes on `splits` (as checkpoints record it).
    pub fn fingerprint(&self, splits: &Splits) -> Result<Fingerprint, Diagnostic> {
        let digest = data_digest(splits).at(self.exp.data.source_span)?;
        Ok(fingerprint(self.exp, &digest))
    }

    /// Refuses (K0507) weights saved by a run whose experiment computed something else than
    /// this one does now: `print` is the fingerprint they were saved with.
    pub fn same_computation(&self, splits: &Splits, print: &Fingerprint) -> Result<(), Diagnostic> {
        let (refused, _) = differences(self.exp, print, &self.fingerprint(splits)?);
        if !refused.is_empty() {
            return Err(Problem::Running(Running::ResumeIncompatible {
                span: self.exp.span,
                situation: Resume::Changed { changes: refused },
            })
            .diagnostic());
        }
        Ok(())
    }

    /// Loads a checkpoint's tensors into `net`, the model alone on its own devices (the
    /// optimizer's state is read and set aside).
    pub fn restore(&self, net: &Net, tensors: &[(String, Tensor)]) -> Result<(), Diagnostic> {
        let names: Vec<&str> = net.params.iter().map(|p| p.name.as_str()).collect();
        let mut optim = Optim::new(&self.exp.optimizer, &names);
        Local.restore(net, &mut optim, tensors, self.exp.span)
    }
}

/// Resolves where the model runs, checking that the devices exist here.
fn resolve_devices(
    exp: &Experiment,
    plan: &ParallelPlan,
    nodes: &[Node],
    device: Option<kiln::ir::Device>,
) -> Result<Option<tch::Device>, Diagnostic> {
    if let Some(d) = device {
        let d = tch_device(d);
        check_device(d, exp.device_span, "--device")?;
        if exp.train.precision == Precision::Fp16 && d == tch::Device::Cpu {
            return Err(fp16_on_cpu(exp));
        }
        return Ok(Some(d));
    }
    // Data parallel: the model lives on the replicas' devices, whatever the placement.
    if let Parallelism::Replicas { devices, span } = &plan.strategy {
        for d in devices {
            check_device(tch_device(*d), *span, &d.to_string())?;
        }
        if exp.train.precision == Precision::Fp16
            && devices.iter().any(|d| tch_device(*d) == tch::Device::Cpu)
        {
            return Err(fp16_on_cpu(exp));
        }
        return Ok(None);
    }
    let layers = kiln::ir::layers(nodes);
    for l in &layers {
        let span = if l.device == exp.device {
            exp.device_span
        } else {
            l.span
        };
        check_device(tch_device(l.device), span, &l.device.to_string())?;
    }
    if exp.train.precision == Precision::Fp16
        && layers
            .iter()
            .any(|l| tch_device(l.device) == tch::Device::Cpu)
    {
        return Err(fp16_on_cpu(exp));
    }
    Ok(None)
}

fn fp16_on_cpu(exp: &Experiment) -> Diagnostic {
    Problem::Running(Running::DeviceUnavailable {
        span: exp.device_span,
        situation: Unavailable::Fp16OnCpu,
    })
    .diagnostic()
}

fn check_device(d: tch::Device, span: Span, named: &str) -> Result<(), Diagnostic> {
    if let tch::Device::Cuda(i) = d {
        let count = if tch::Cuda::is_available() {
            tch::Cuda::device_count() as usize
        } else {
            0
        };
        if i >= count {
            return Err(Problem::Running(Running::DeviceUnavailable {
                span,
                situation: Unavailable::Missing {
                    named: named.to_string(),
                    index: i,
                    count,
                },
            })
            .diagnostic());
        }
    }
    Ok(())
}

/// The checked experiment of the run in `dir` and its trial: the run's newest copy of its
/// experiment file (`experiment.exp`, or `experiment-N.exp` after a resume that changed it),
/// read as if it stood where the run's file stood, so relative data paths and `extends` resolve
/// as they did; or `file`, when given. Errors are usage errors.
pub fn run_experiment(dir: &Path, file: Option<&Path>) -> Result<(Checked, Option<usize>), String> {
    let source = kiln::rundir::read_source(dir).map_err(|e| e.to_string())?;
    if let Some(file) = file {
        return Ok((
            check_path(file, &FsLoader, &Options::default()),
            source.trial,
        ));
    }
    let copy = kiln::rundir::versions(dir)
        .last()
        .and_then(|name| std::fs::read(dir.join(name)).ok());
    let checked = match copy {
        Some(text) => {
            let loader = RunCopy {
                path: FsLoader.canonical(&source.file),
                text,
            };
            check_path(&source.file, &loader, &Options::default())
        }
        None => check_path(&source.file, &FsLoader, &Options::default()),
    };
    Ok((checked, source.trial))
}

/// The file system, except that the run's experiment file reads as the run's copy of it.
struct RunCopy {
    path: PathBuf,
    text: Vec<u8>,
}

impl Loader for RunCopy {
    fn read(&self, path: &Path) -> Result<Vec<u8>, Unreadable> {
        if path == self.path || FsLoader.canonical(path) == self.path {
            return Ok(self.text.clone());
        }
        FsLoader.read(path)
    }

    fn canonical(&self, path: &Path) -> PathBuf {
        FsLoader.canonical(path)
    }

    fn data_header(&self, path: &Path, format: &DataFormat) -> Probe {
        FsLoader.data_header(path, format)
    }

    fn siblings(&self, path: &Path) -> Vec<String> {
        FsLoader.siblings(path)
    }
}

/// Where the loaded splits live while training (`placement`): on the CUDA device that receives
/// the batches (the one forced here, `--device` or a rank's, else the plan's), or `None` to
/// leave them where they are loaded (always on the CPU). The plan decides where the experiment
/// declares the device's capacity; `auto` without one reads the device's total memory here,
/// and says what it chose.
fn data_placement(
    exp: &Experiment,
    over: Option<tch::Device>,
) -> (Option<tch::Device>, Option<String>) {
    let plan = kiln::plan::plan(exp);
    let row = &plan.data;
    let device = over.unwrap_or_else(|| tch_device(row.device));
    let tch::Device::Cuda(index) = device else {
        return (None, None);
    };
    if row.placement != DataPlacement::Auto || row.fits.is_some() {
        return (row.on_device.then_some(device), None);
    }
    let planned = plan.devices.iter().find(|d| d.device == row.device);
    let known = (row.bytes, planned, cuda_memory::total_bytes(index));
    let (Some(bytes), Some(planned), Some(total)) = known else {
        return (None, None);
    };
    let fits = planned.total_bytes.saturating_add(bytes) <= total;
    let note = format!(
        "placement auto: the data ({}) {} beside the plan's {} in cuda:{index}'s {}",
        fmt_bytes(bytes),
        if fits {
            "is kept on the device: it fits"
        } else {
            "stays in host memory: it does not fit"
        },
        fmt_bytes(planned.total_bytes),
        fmt_bytes(total)
    );
    (fits.then_some(device), Some(note))
}
