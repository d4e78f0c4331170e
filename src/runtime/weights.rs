//! Weights from outside a run, for `kiln eval`: a safetensors file loaded strictly (every
//! parameter and buffer of the model by its `state_dict` name, with its shape and dtype, as
//! `load_state_dict(strict=True)` does; a parameter pruned by `torch.nn.utils.prune` as its
//! `_orig` times its `_mask`) and a checkpoint named by its path. Every failure is a diagnostic
//! naming the file and the tensors.

use std::path::Path;

use tch::{Kind, Tensor};

use super::checkpoint::Saved;
use super::failure::At;
use super::model::Net;
use kiln::diagnostic::problem::{Mismatch, NoWeights, Running};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::Experiment;

/// Loads every parameter and buffer of `net` from `tensors`, read from the safetensors file
/// `path`. A tensor that is missing, or of another shape or dtype, is K0520 (all of them named,
/// at the first one's layer). A parameter saved after `torch.nn.utils.prune` (`weight_orig` and
/// `weight_mask` in place of `weight`) is loaded as `weight_orig * weight_mask`, the weight
/// PyTorch's forward uses. Tensors the model does not have are left out (a PyTorch `state_dict`
/// may hold `num_batches_tracked`). `compresses` says the model holds compression's masks and
/// observers, for the help.
pub fn load_strict(
    net: &Net,
    path: &Path,
    tensors: &[(String, Tensor)],
    exp: &Experiment,
    compresses: bool,
) -> Result<(), Diagnostic> {
    load_except(net, path, tensors, exp, compresses, (&[], Vec::new()))
}

/// [`load_strict`] for the tensors of `net` not in `taken` (given otherwise), with `mismatches`
/// already found in them reported first.
pub fn load_except(
    net: &Net,
    path: &Path,
    tensors: &[(String, Tensor)],
    exp: &Experiment,
    compresses: bool,
    (taken, mut mismatches): (&[String], Vec<Mismatch>),
) -> Result<(), Diagnostic> {
    let targets: Vec<(&str, &Tensor)> = net
        .params
        .iter()
        .map(|p| (p.name.as_str(), &p.tensor))
        .chain(net.buffers.iter().map(|b| (b.name.as_str(), &b.tensor)))
        .filter(|(name, _)| !taken.iter().any(|t| t == name))
        .collect();
    let mut values = Vec::new();
    for (name, t) in &targets {
        match value(tensors, name, t) {
            Ok(v) => values.push((*t, v)),
            Err(found) => mismatches.push(Mismatch {
                name: name.to_string(),
                found,
                expected: describe(t),
            }),
        }
    }
    if let Some(first) = mismatches.first() {
        return Err(Problem::Running(Running::WeightsMismatch {
            span: layer_span(exp, &first.name),
            path: path.to_path_buf(),
            mismatches,
            compresses,
            checkpoint: tensors.iter().any(|(n, _)| n.starts_with("param/")),
        })
        .diagnostic());
    }
    tch::no_grad(|| {
        for (t, v) in &values {
            t.shallow_clone().f_copy_(v).at(exp.span)?;
        }
        Ok(())
    })
}

/// What `tensors` give for the model's tensor `name`, which is like `t`: the tensor of that name,
/// or for a parameter pruned by PyTorch `name_orig * name_mask`. Otherwise what was found in
/// words (`None` for nothing).
fn value(tensors: &[(String, Tensor)], name: &str, t: &Tensor) -> Result<Tensor, Option<String>> {
    let find = |n: &str| tensors.iter().find(|(m, _)| m == n).map(|(_, t)| t);
    let fits = |s: &Tensor| s.size() == t.size() && s.kind() == t.kind();
    if let Some(s) = find(name) {
        return if fits(s) {
            Ok(s.shallow_clone())
        } else {
            Err(Some(describe(s)))
        };
    }
    let (orig, mask) = (find(&format!("{name}_orig")), find(&format!("{name}_mask")));
    match (orig, mask) {
        (None, None) => Err(None),
        (Some(o), Some(m)) if fits(o) && fits(m) => {
            // The product PyTorch's pruning hook computes before each forward.
            tch::no_grad(|| o.f_mul(m)).map_err(|e| Some(format!("not computable ({e})")))
        }
        (o, m) => {
            let part = |t: Option<&Tensor>| t.map_or_else(|| "missing".to_string(), describe);
            Err(Some(format!(
                "pruned by PyTorch with `{name}_orig` {} and `{name}_mask` {}",
                part(o),
                part(m)
            )))
        }
    }
}

/// The checkpoint at `path` (its tensors file, or its `.yaml` sidecar), verified against its
/// sidecar's size and checksum; K0519 when it cannot be read or is damaged.
pub fn read_checkpoint(path: &Path, exp: &Experiment) -> Result<Saved, Diagnostic> {
    let sidecar = path.with_extension("yaml");
    let unreadable = |detail: String| {
        Problem::Running(Running::NoWeights {
            span: exp.span,
            situation: NoWeights::Unreadable {
                path: path.to_path_buf(),
                detail,
            },
        })
        .diagnostic()
    };
    if !path.exists() {
        return Err(unreadable("it does not exist".into()));
    }
    if !sidecar.is_file() {
        return Err(unreadable(format!(
            "a checkpoint has its sidecar `{}` beside it, and this one has none (plain weights are named with `--weights`)",
            sidecar.display()
        )));
    }
    let (side, tensors) = kiln::rundir::checkpoint::verify(&sidecar)
        .map_err(|d| unreadable(format!("the checkpoint is damaged: {}", d.reason)))?;
    Ok((side, read_tensors(&tensors, exp)?))
}

/// The tensors of a safetensors file, or why they cannot be read (K0519 at `exp`).
pub fn read_tensors(path: &Path, exp: &Experiment) -> Result<Vec<(String, Tensor)>, Diagnostic> {
    let unreadable = |detail: String| {
        Problem::Running(Running::NoWeights {
            span: exp.span,
            situation: NoWeights::Unreadable {
                path: path.to_path_buf(),
                detail,
            },
        })
        .diagnostic()
    };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(unreadable("it does not exist".into()))
        }
        Err(e) => return Err(unreadable(e.to_string())),
        // A FIFO would wait for a writer and a device may never end: neither is opened.
        Ok(meta) if !meta.is_file() => return Err(unreadable("it is not a regular file".into())),
        Ok(_) => {}
    }
    Tensor::read_safetensors(path)
        .map_err(|e| unreadable(format!("it is not a safetensors file ({e})")))
}

/// The statement of the layer that owns the tensor `name` (the longest layer name that
/// prefixes it); the experiment's when none does.
fn layer_span(exp: &Experiment, name: &str) -> kiln::span::Span {
    kiln::ir::layers(&exp.model.nodes)
        .into_iter()
        .filter(|l| {
            name.strip_prefix(l.name.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
        })
        .max_by_key(|l| l.name.len())
        .map_or(exp.span, |l| l.span)
}

/// A tensor's shape and dtype in PyTorch's words: `[4, 64] float32`.
pub fn describe(t: &Tensor) -> String {
    let kind = match t.kind() {
        Kind::Float => "float32".to_string(),
        Kind::Double => "float64".to_string(),
        Kind::Half => "float16".to_string(),
        Kind::BFloat16 => "bfloat16".to_string(),
        Kind::Int64 => "int64".to_string(),
        Kind::Int => "int32".to_string(),
        Kind::Int16 => "int16".to_string(),
        Kind::Int8 => "int8".to_string(),
        Kind::Uint8 => "uint8".to_string(),
        Kind::Bool => "bool".to_string(),
        other => format!("{other:?}").to_lowercase(),
    };
    format!("{:?} {kind}", t.size())
}
