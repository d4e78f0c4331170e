//! `kiln eval --weights` of the `model.safetensors` that `kiln export` writes: the compressed
//! model read back as it is stored. Quantized linears run the kernels of their stored integers
//! and scales (see `compress::quant::from_stored`), every other tensor is loaded strictly, so
//! the evaluation is the one the run made of its compressed model.

use std::path::Path;

use tch::{Kind, Tensor};

use super::compress::finalize::Kernel;
use super::compress::quant::{from_stored, Stored};
use super::failure::At;
use super::model::Net;
use super::weights::{describe, load_except};
use kiln::diagnostic::problem::Running;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::Experiment;

/// The names under which an export stores a quantized linear's weight.
const PIECES: &[&str] = &[
    "weight_int8",
    "weight_int8_t",
    "weight_int4_packed",
    "weight_fp8",
];

/// Whether `tensors` are an export of a compressed model of `net`: a quantized linear's pieces
/// (`fc1.weight_int8`), or a weight the model keeps in fp32 stored in bf16 or fp16.
pub fn is_export(net: &Net, tensors: &[(String, Tensor)]) -> bool {
    tensors.iter().any(|(name, t)| {
        let local = name.rsplit_once('.').map_or(name.as_str(), |(_, l)| l);
        PIECES.contains(&local)
            || (matches!(t.kind(), Kind::BFloat16 | Kind::Half)
                && net
                    .params
                    .iter()
                    .any(|p| p.name == *name && p.tensor.kind() == Kind::Float))
    })
}

/// Makes `net` (built from the experiment, uncompressed) the exported model in `tensors`, read
/// from `path`: its quantized linears run their stored kernels; the rest is loaded strictly.
/// Pieces that are missing or do not fit are K0520, each named; a layer stored in a form that
/// cannot be read back (int4, fp8) is K0522.
pub fn load(
    net: &mut Net,
    path: &Path,
    tensors: &[(String, Tensor)],
    exp: &Experiment,
) -> Result<(), Diagnostic> {
    let mut kernels = Vec::new();
    let mut taken = Vec::new();
    let mut mismatches = Vec::new();
    for (layer, device) in net.linears() {
        let param = |local: &str| {
            let name = format!("{layer}.{local}");
            net.params.iter().find(|p| p.name == name)
        };
        let Some(weight) = param("weight") else {
            continue;
        };
        let (n, k) = weight.tensor.size2().at(exp.span)?;
        let bias = param("bias").is_some();
        match from_stored(&layer, (n, k, bias), tensors, device, &describe).at(exp.span)? {
            Ok(Stored::Plain) => {}
            Ok(Stored::Kernel(q)) => {
                taken.push(format!("{layer}.weight"));
                taken.push(format!("{layer}.bias"));
                kernels.push((layer, q));
            }
            Ok(Stored::Unsupported(tensor)) => {
                return Err(Problem::Running(Running::ExportNotEvaluable {
                    span: exp.span,
                    path: path.to_path_buf(),
                    tensor: Some(tensor),
                })
                .diagnostic())
            }
            Err(wrong) => {
                taken.push(format!("{layer}.weight"));
                taken.push(format!("{layer}.bias"));
                mismatches.extend(wrong);
            }
        }
    }
    load_except(net, path, tensors, exp, false, (&taken, mismatches))?;
    for (layer, q) in kernels {
        net.swap_linear(&layer, Box::new(Kernel(q)));
    }
    Ok(())
}
