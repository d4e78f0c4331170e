//! Safetensors sources: two named tensors of one file.

use kiln::span::Span;
use tch::{TchError, Tensor};

use super::error::DataError;
use super::file::{missing_key, DataFile};
use super::{cut, invalid, Raw};

/// Reads the tensors `inputs` and `targets` of a safetensors file (with libtorch's reader).
pub(super) fn read(
    file: &DataFile,
    inputs: &str,
    targets: &str,
    span: Span,
) -> Result<Raw, DataError> {
    file.check_readable(span)?;
    let mut tensors = Tensor::read_safetensors(&file.path).map_err(|e| match e {
        e @ TchError::Torch(_) => DataError::torch(e, span),
        other => invalid(
            span,
            format!(
                "{} is not a valid safetensors file: {}",
                file.name(),
                cut(&other.to_string(), 120)
            ),
            "malformed file",
            "write the file with `safetensors.torch.save_file` or `safetensors.numpy.save_file`",
        ),
    })?;
    let names: Vec<String> = tensors.iter().map(|(n, _)| n.clone()).collect();
    let mut take = |key: &str| -> Result<Tensor, DataError> {
        let at = tensors
            .iter()
            .position(|(n, _)| n == key)
            .ok_or_else(|| missing_key(file, "tensor", key, &names, span))?;
        Ok(tensors.swap_remove(at).1)
    };
    let x = take(inputs)?;
    // One tensor for both (`kiln predict` reads inputs alone).
    let y = if targets == inputs {
        x.shallow_clone()
    } else {
        take(targets)?
    };
    Ok(Raw::new(
        x,
        y,
        format!("the tensor `{inputs}` in {}", file.name()),
        format!("the tensor `{targets}` in {}", file.name()),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all_train, data, expect_failure, floats, Scratch};
    use super::super::{load, DType, Source, Targets};
    use super::*;
    use kiln::diagnostic::Code;
    use tch::{Device, Kind};

    #[test]
    fn safetensors_round_trips_and_fails() {
        let dir = Scratch::new();
        let x = Tensor::arange(12, (Kind::Float, Device::Cpu)).reshape([3, 2, 2]);
        let y = Tensor::from_slice(&[0.5f32, 1.5, 2.5]);
        Tensor::write_safetensors(
            &[("inputs", &x), ("targets", &y)],
            dir.path("d.safetensors"),
        )
        .unwrap();
        let run = |file: &str, targets: &str, t: Targets| {
            let source = Source::Safetensors {
                path: file.into(),
                inputs: "inputs".into(),
                targets: targets.into(),
            };
            load(&data(source, t, all_train()), &[4], DType::Float, &dir.0, 1)
        };
        let s = run("d.safetensors", "targets", Targets::Values(vec![].into())).unwrap();
        assert_eq!(s.train.inputs.size(), vec![3, 4]);
        assert_eq!(s.train.targets.kind(), Kind::Float);
        assert_eq!(floats(&s.train.targets), vec![0.5, 1.5, 2.5]);
        expect_failure(
            run("d.safetensors", "labels", Targets::Unknown),
            Code::DataInvalid,
            "has no tensor `labels`; its tensors: `inputs`, `targets`",
        );
        let bytes = std::fs::read(dir.path("d.safetensors")).unwrap();
        dir.write("cut.safetensors", &bytes[..bytes.len() - 8]);
        expect_failure(
            run("cut.safetensors", "targets", Targets::Unknown),
            Code::DataInvalid,
            "not a valid safetensors file",
        );
        expect_failure(
            run("gone.safetensors", "targets", Targets::Unknown),
            Code::DataMissing,
            "`gone.safetensors`",
        );
    }
}
