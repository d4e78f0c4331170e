//! Non-finite values: NaN and infinities in what a source holds, and values that overflow 32-bit
//! floats once converted, found with libtorch when the data is loaded. Every sample of a source is
//! scanned before the data is split, so neither a training nor a validation or test sample carries
//! one into a run; the message names the file, the sample (counted from 0 in the file) and the
//! feature.

use kiln::span::Span;
use tch::{Kind, TchError, Tensor};

use super::error::{At, DataError};
use super::{first_true, fmt_shape, fmt_value, invalid, is_float, Raw};

/// The first value of a tensor that is not finite: `(flat index, value)`. Integer tensors hold
/// none.
pub(super) fn first_non_finite(t: &Tensor) -> Result<Option<(i64, f64)>, TchError> {
    let kind = t.f_kind()?;
    if !is_float(kind) {
        return Ok(None);
    }
    // libtorch's `isfinite` covers the kinds arithmetic supports; the 8-bit floats are widened.
    let t = match kind {
        Kind::Half | Kind::BFloat16 | Kind::Float | Kind::Double => t.shallow_clone(),
        _ => t.f_to_kind(Kind::Float)?,
    };
    let finite = t.f_isfinite()?;
    if finite.f_all()?.f_int64_value(&[])? != 0 {
        return Ok(None);
    }
    match first_true(&finite.f_logical_not()?)? {
        Some(at) => Ok(Some((at, t.f_reshape([-1])?.f_double_value(&[at])?))),
        None => Ok(None),
    }
}

/// A non-finite value in words: `NaN`, `+Inf`, `-Inf`.
fn non_finite(v: f64) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "+Inf"
    } else {
        "-Inf"
    }
}

/// Where flat index `at` of a tensor of samples of `shape` lies, in words: `sample 3 (counted
/// from 0 in the file), feature 17 (row 0, column 17)`. Samples of a single value (no dimension)
/// have no feature.
pub(super) fn place(raw: &Raw, at: i64, shape: &[i64]) -> String {
    let per: i64 = shape.iter().product::<i64>().max(1);
    let (sample, feature) = (at / per, at % per);
    let mut out = match raw
        .lines
        .as_ref()
        .and_then(|l| l.get(usize::try_from(sample).ok()?))
    {
        Some(line) => format!("sample {sample} (counted from 0; line {line} of the file)"),
        None => format!("sample {sample} (counted from 0 in the file)"),
    };
    if !shape.is_empty() {
        let mut index = vec![0; shape.len()];
        let mut rest = feature;
        for (d, size) in shape.iter().enumerate().rev() {
            let size = (*size).max(1);
            index[d] = rest % size;
            rest /= size;
        }
        out.push_str(&format!(", feature {feature}"));
        match index.as_slice() {
            [_] => {}
            [row, column] => out.push_str(&format!(" (row {row}, column {column})")),
            _ => out.push_str(&format!(" (at {})", fmt_shape(&index))),
        }
    }
    out
}

/// K0503 when the inputs or the targets of a source hold NaN or an infinity (unless the reader
/// vouches for them: an IDX file's bytes, a CSV file's checked cells).
pub(super) fn check_source(raw: &Raw, span: Span) -> Result<(), DataError> {
    if raw.finite {
        return Ok(());
    }
    for (t, from, what) in [
        (&raw.inputs, &raw.inputs_from, "inputs"),
        (&raw.targets, &raw.targets_from, "targets"),
    ] {
        if let Some((at, v)) = first_non_finite(t).at(span)? {
            let shape = t.size();
            return Err(invalid(
                span,
                format!(
                    "{from} holds {} at {}",
                    non_finite(v),
                    place(raw, at, shape.get(1..).unwrap_or_default())
                ),
                format!("{} in the {what}", non_finite(v)),
                "replace or remove the samples holding NaN or infinite values; training on them makes the loss NaN",
            ));
        }
    }
    Ok(())
}

/// K0503 when converting `original` (the values of `from` as the source holds them, `[N, ..]`)
/// to 32-bit floats gave `converted` an infinity: a value beyond the range of 32-bit floats.
pub(super) fn check_overflow(
    raw: &Raw,
    original: &Tensor,
    converted: &Tensor,
    from: &str,
    span: Span,
) -> Result<(), DataError> {
    if original.f_kind().at(span)? != Kind::Double {
        return Ok(());
    }
    let Some((at, _)) = first_non_finite(converted).at(span)? else {
        return Ok(());
    };
    let value = original
        .f_reshape([-1])
        .and_then(|t| t.f_double_value(&[at]))
        .at(span)?;
    let shape = original.size();
    Err(invalid(
        span,
        format!(
            "{from} holds {} at {}, beyond the range of 32-bit floats (about ±3.4e38)",
            fmt_value(value),
            place(raw, at, shape.get(1..).unwrap_or_default())
        ),
        "value overflows 32-bit floats",
        "training uses 32-bit floats; rescale the data so that every value lies well within ±3.4e38",
    ))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all_train, data, expect_failure, Scratch};
    use super::super::{load, DType, Source, Targets};
    use super::*;
    use kiln::diagnostic::Code;
    use tch::Device;

    /// Six samples of 2x3 values `0..36` (float64), with `bad` at flat index `at`.
    fn inputs_with(bad: f64, at: usize) -> Tensor {
        let mut v: Vec<f64> = (0..36).map(f64::from).collect();
        v[at] = bad;
        Tensor::from_slice(&v).reshape([6, 2, 3])
    }

    fn labels() -> Tensor {
        Tensor::from_slice(&[0i64, 1, 2, 0, 1, 2])
    }

    fn npy(dir: &Scratch, x: &Tensor, y: &Tensor, t: Targets) -> Result<(), DataError> {
        x.write_npy(dir.path("x.npy")).unwrap();
        y.write_npy(dir.path("y.npy")).unwrap();
        let source = Source::Npy {
            inputs: "x.npy".into(),
            targets: "y.npy".into(),
        };
        // Half the samples go to validation: the scan covers every split.
        load(
            &data(source, t, (0.5, 0.5, 0.0)),
            &[6],
            DType::Float,
            &dir.0,
            1,
        )
        .map(drop)
    }

    #[test]
    fn npy_nan_inf_and_overflow_name_sample_and_feature() {
        let dir = Scratch::new();
        let classes = || Targets::Classes(Some(3));
        let f = expect_failure(
            npy(&dir, &inputs_with(f64::NAN, 6 * 4 + 5), &labels(), classes()).map(|_| unreachable!()),
            Code::DataInvalid,
            "`x.npy` holds NaN at sample 4 (counted from 0 in the file), feature 5 (row 1, column 2)",
        );
        assert_eq!(f.primary.text, "NaN in the inputs");
        expect_failure(
            npy(&dir, &inputs_with(f64::INFINITY, 1), &labels(), classes()).map(|_| unreachable!()),
            Code::DataInvalid,
            "holds +Inf at sample 0 (counted from 0 in the file), feature 1 (row 0, column 1)",
        );
        expect_failure(
            npy(&dir, &inputs_with(1e300, 35), &labels(), classes()).map(|_| unreachable!()),
            Code::DataInvalid,
            "`x.npy` holds 1e300 at sample 5 (counted from 0 in the file), feature 5 (row 1, column 2), beyond the range of 32-bit floats",
        );
        // In float32 and half precision too, and in the targets.
        let x = inputs_with(f64::NEG_INFINITY, 13).to_kind(Kind::Half);
        expect_failure(
            npy(&dir, &x, &labels(), classes()).map(|_| unreachable!()),
            Code::DataInvalid,
            "holds -Inf at sample 2",
        );
        let x = inputs_with(0.0, 0).to_kind(Kind::Float);
        let y = Tensor::from_slice(&[0.5f32, 1.0, f32::NAN, 0.0, 1.0, 2.0]);
        let f = expect_failure(
            npy(&dir, &x, &y, Targets::Unknown).map(|_| unreachable!()),
            Code::DataInvalid,
            "`y.npy` holds NaN at sample 2 (counted from 0 in the file)",
        );
        assert!(!f.message.contains("feature"), "{}", f.message);
        let y = Tensor::from_slice(&[0.5f64, 1.0, 2.0, 0.0, 1.0, -1e40]);
        expect_failure(
            npy(&dir, &x, &y, Targets::Unknown).map(|_| unreachable!()),
            Code::DataInvalid,
            "`y.npy` holds -1e40 at sample 5",
        );
        // Clean data loads.
        npy(&dir, &x, &labels(), classes()).unwrap();
    }

    #[test]
    fn npz_and_safetensors_nan_name_sample_and_feature() {
        let dir = Scratch::new();
        let x = inputs_with(f64::NAN, 7).to_kind(Kind::Float);
        let y = labels();
        Tensor::write_npz(&[("inputs", &x), ("targets", &y)], dir.path("d.npz")).unwrap();
        let source = Source::Npz {
            path: "d.npz".into(),
            inputs: "inputs".into(),
            targets: "targets".into(),
        };
        expect_failure(
            load(&data(source, Targets::Classes(Some(3)), (0.5, 0.5, 0.0)), &[6], DType::Float, &dir.0, 1),
            Code::DataInvalid,
            "the array `inputs` in `d.npz` holds NaN at sample 1 (counted from 0 in the file), feature 1 (row 0, column 1)",
        );
        let x = Tensor::zeros([6, 2, 2, 2], (Kind::Float, Device::Cpu));
        let _ = x.get(3).get(1).get(0).get(1).fill_(f64::INFINITY);
        Tensor::write_safetensors(
            &[("inputs", &x), ("targets", &y)],
            dir.path("d.safetensors"),
        )
        .unwrap();
        let source = Source::Safetensors {
            path: "d.safetensors".into(),
            inputs: "inputs".into(),
            targets: "targets".into(),
        };
        expect_failure(
            load(&data(source, Targets::Classes(Some(3)), all_train()), &[8], DType::Float, &dir.0, 1),
            Code::DataInvalid,
            "the tensor `inputs` in `d.safetensors` holds +Inf at sample 3 (counted from 0 in the file), feature 5 (at [1, 0, 1])",
        );
    }

    /// Loads `text` as a CSV source with the target `label`.
    fn csv(dir: &Scratch, text: &str, t: Targets) -> Result<(), DataError> {
        dir.write("f.csv", text.as_bytes());
        let source = Source::Csv {
            path: "f.csv".into(),
            target: "label".into(),
            header: true,
        };
        load(
            &data(source, t, (0.5, 0.5, 0.0)),
            &[2],
            DType::Float,
            &dir.0,
            1,
        )
        .map(drop)
    }

    #[test]
    fn csv_non_finite_overflow_and_labels_name_their_value() {
        let dir = Scratch::new();
        let rows = |bad: &str| format!("a,b,label\n1,2,0\n3,4,1\n5,{bad},0\n7,8,1\n");
        for (bad, why) in [
            ("nan", "which is not a finite number"),
            ("-inf", "which is not a finite number"),
            ("1e39", "which overflows 32-bit floats"),
        ] {
            expect_failure(
                csv(&dir, &rows(bad), Targets::Unknown).map(|_| unreachable!()),
                Code::DataInvalid,
                &format!(
                    "line 4 of `f.csv` (sample 2, counted from 0) has `{bad}` in column `b` (feature 1), {why}"
                ),
            );
        }
        // A value within float64 but not float32 as a regression target.
        let rows = |label: &str| format!("a,b,label\n1,2,0\n3,4,{label}\n5,6,0\n");
        expect_failure(
            csv(&dir, &rows("1e39"), Targets::Values(vec![].into())).map(|_| unreachable!()),
            Code::DataInvalid,
            "the column `label` of `f.csv` holds 1e39 at sample 1 (counted from 0; line 3 of the file)",
        );
        // Labels by their real value.
        let f = expect_failure(
            csv(&dir, &rows("1e30"), Targets::Classes(Some(3))).map(|_| unreachable!()),
            Code::DataInvalid,
            "holds the label 1e30 for line 3, outside the 3 classes [0, 3)",
        );
        assert!(!f.message.contains("9223372036854775808"), "{}", f.message);
        expect_failure(
            csv(&dir, &rows("1e30"), Targets::Classes(None)).map(|_| unreachable!()),
            Code::DataInvalid,
            "holds the label 1e30 for line 3, too large to be a class index",
        );
        expect_failure(
            csv(&dir, &rows("-3.5"), Targets::Classes(Some(3))).map(|_| unreachable!()),
            Code::DataInvalid,
            "holds -3.5 for line 3, which is not a class index (not a whole number)",
        );
        expect_failure(
            csv(&dir, &rows("-3"), Targets::Classes(Some(3))).map(|_| unreachable!()),
            Code::DataInvalid,
            "holds the label -3 for line 3, outside the 3 classes",
        );
    }

    #[test]
    fn a_huge_csv_cell_is_cut_in_the_message() {
        let dir = Scratch::new();
        let cell = "x".repeat(50 << 20);
        let f = expect_failure(
            csv(&dir, &format!("a,b,label\n1,{cell},0\n"), Targets::Unknown)
                .map(|_| unreachable!()),
            Code::DataInvalid,
            &format!(
                "has `{}… (52428800 characters)` in column `b`",
                "x".repeat(40)
            ),
        );
        assert!(f.message.len() < 300, "{} bytes", f.message.len());
        // A huge header cell too, when the columns are listed.
        let f = expect_failure(
            csv(&dir, &format!("{cell},b,c\n1,2,0\n"), Targets::Unknown).map(|_| unreachable!()),
            Code::DataInvalid,
            "(52428800 characters)",
        );
        assert!(f.message.len() < 400, "{} bytes", f.message.len());
    }

    #[test]
    fn place_names_the_sample_and_the_feature() {
        let raw = Raw::new(
            Tensor::zeros([1], (Kind::Float, Device::Cpu)),
            Tensor::zeros([1], (Kind::Float, Device::Cpu)),
            String::new(),
            String::new(),
        );
        assert_eq!(place(&raw, 5, &[]), "sample 5 (counted from 0 in the file)");
        assert_eq!(
            place(&raw, 17, &[4]),
            "sample 4 (counted from 0 in the file), feature 1"
        );
        assert_eq!(
            place(&raw, 28 * 28 + 17, &[28, 28]),
            "sample 1 (counted from 0 in the file), feature 17 (row 0, column 17)"
        );
        assert_eq!(
            place(&raw, 3 * 4 * 5 + 20 + 3 * 5 + 2, &[3, 4, 5]),
            "sample 1 (counted from 0 in the file), feature 37 (at [1, 3, 2])"
        );
    }
}
