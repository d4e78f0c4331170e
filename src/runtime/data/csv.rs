//! CSV sources: one row of numbers per sample, the target one of the columns.

use kiln::datafile::{rows, split_cells, unquote};
use kiln::span::Span;
use rayon::prelude::*;
use tch::Tensor;

use super::error::{At, DataError};
use super::file::DataFile;
use super::{fmt_names, invalid, quote, Raw};

/// Rows of a CSV file parsed by one rayon task.
const CSV_ROWS_PER_TASK: usize = 2048;

/// The numbers of a CSV file.
#[derive(Debug)]
struct CsvData {
    /// Row-major input features, `rows x (columns - 1)`.
    features: Vec<f32>,
    /// The target of each row.
    targets: Vec<f64>,
    /// Input features per row.
    width: usize,
    /// The 1-based file line of each row.
    lines: Vec<usize>,
}

/// The features and targets of consecutive CSV rows.
type CsvChunk = (Vec<f32>, Vec<f64>);

/// Parses CSV text: every column but the target (when there is one) is an input feature.
fn parse_csv(
    text: &str,
    target: Option<&str>,
    header: bool,
    file: &DataFile,
    span: Span,
) -> Result<CsvData, DataError> {
    let name = file.name();
    let rows: Vec<(usize, &str)> = rows(text).collect();
    let Some(&(_, first)) = rows.first() else {
        return Err(invalid(
            span,
            format!("{name} is empty"),
            "no rows",
            "a CSV source needs one row per sample",
        ));
    };
    let mut cells = Vec::new();
    split_cells(first, &mut cells);
    let columns = cells.len();
    let names: Vec<String> = if header {
        cells.iter().map(|c| unquote(c).into_owned()).collect()
    } else {
        (0..columns).map(|c| c.to_string()).collect()
    };
    // Without a target, no column is one: every column is a feature.
    let column = match target {
        None => usize::MAX,
        Some(target) if header => {
        names.iter().position(|n| n == target).ok_or_else(|| {
            invalid(
                span,
                format!(
                    "{name} has no column `{target}`; its columns: {}",
                    fmt_names(&names)
                ),
                format!("no column `{target}`"),
                "name the target column with `target:`, or write `header: false` for a file without a header row",
            )
        })?
        }
        Some(target) => {
        let index = target.trim().parse::<usize>().map_err(|_| {
            invalid(
                span,
                format!(
                    "without a header row, `target` must be a column index counted from 0, not `{target}`"
                ),
                "no header to find the column in",
                "write `target: \"0\"` for the first column, or `header: true` if the first row names the columns",
            )
        })?;
        if index >= columns {
            return Err(invalid(
                span,
                format!(
                    "{name} has {columns} column{}, so it has no column {index} (counted from 0)",
                    if columns == 1 { "" } else { "s" }
                ),
                "target column out of range",
                format!("give `target` a column index below {columns}"),
            ));
        }
        index
        }
    };
    if columns < 2 && target.is_some() {
        let separator = [';', '\t', '|']
            .into_iter()
            .find(|&s| first.contains(s))
            .map(|s| {
                format!(
                    "; the file seems to separate cells with {s:?}, but only commas are supported"
                )
            })
            .unwrap_or_default();
        return Err(invalid(
            span,
            format!("{name} has a single column, the target, so the samples have no inputs"),
            "no input columns",
            format!(
                "a CSV source needs the target column and at least one input column{separator}"
            ),
        ));
    }
    let body = if header { &rows[1..] } else { &rows[..] };
    if body.is_empty() {
        return Err(invalid(
            span,
            format!("{name} has a header but no rows"),
            "no samples",
            "a CSV source needs one row per sample after the header",
        ));
    }
    let width = columns - usize::from(target.is_some());
    let counted = if header {
        "the header has"
    } else {
        "the first row has"
    };
    let parsed: Vec<Result<CsvChunk, DataError>> = body
        .par_chunks(CSV_ROWS_PER_TASK)
        .enumerate()
        .map(|(chunk_index, chunk)| {
            let mut features = Vec::with_capacity(chunk.len() * width);
            let mut targets = Vec::with_capacity(chunk.len());
            let mut cells = Vec::with_capacity(columns);
            for (row, &(line, text)) in chunk.iter().enumerate() {
                split_cells(text, &mut cells);
                if cells.len() != columns {
                    return Err(invalid(
                        span,
                        format!(
                            "line {line} of {name} has {} cells, but {counted} {columns}",
                            cells.len()
                        ),
                        format!("ragged row on line {line}"),
                        "every row needs one cell per column",
                    ));
                }
                let sample = chunk_index * CSV_ROWS_PER_TASK + row;
                for (c, cell) in cells.iter().enumerate() {
                    // Numbers may be written with blanks inside their quotes.
                    let value = unquote(cell);
                    let value = value.trim();
                    let what = if c == column {
                        "the target".to_string()
                    } else {
                        format!("feature {}", if c < column { c } else { c - 1 })
                    };
                    let place = if header {
                        format!("column `{}` ({what})", quote(&names[c]))
                    } else {
                        format!("column {c} ({what})")
                    };
                    let bad = |has: String| {
                        invalid(
                            span,
                            format!("line {line} of {name} (sample {sample}, counted from 0) has {has}"),
                            format!("bad cell on line {line}"),
                            "every cell must be a finite number that fits 32-bit floats; fill in or remove missing values",
                        )
                    };
                    let written = || format!("`{}` in {place}", quote(value));
                    let v = if value.is_empty() {
                        return Err(bad(format!("an empty cell in {place}")));
                    } else {
                        match value.parse::<f64>() {
                            Ok(v) if !v.is_finite() => {
                                return Err(bad(format!(
                                    "{}, which is not a finite number",
                                    written()
                                )))
                            }
                            // Features become 32-bit floats (targets are checked as labels or
                            // values).
                            Ok(v) if c != column && (v as f32).is_infinite() => {
                                return Err(bad(format!(
                                    "{}, which overflows 32-bit floats (about ±3.4e38 at most)",
                                    written()
                                )))
                            }
                            Ok(v) => v,
                            Err(_) => {
                                return Err(bad(format!("{}, which is not a number", written())))
                            }
                        }
                    };
                    if c == column {
                        targets.push(v);
                    } else {
                        features.push(v as f32);
                    }
                }
            }
            Ok((features, targets))
        })
        .collect();
    let mut features = Vec::with_capacity(body.len() * width);
    let mut targets = Vec::with_capacity(body.len());
    for part in parsed {
        let (f, t) = part?;
        features.extend_from_slice(&f);
        targets.extend_from_slice(&t);
    }
    Ok(CsvData {
        features,
        targets,
        width,
        lines: body.iter().map(|&(line, _)| line).collect(),
    })
}

/// Reads a CSV file of input features alone (`kiln predict`'s inputs): every column a feature,
/// the first row a header when one of its cells is not a number.
pub(super) fn read_features(file: &DataFile, span: Span) -> Result<Raw, DataError> {
    let bytes = file.read(span)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut cells = Vec::new();
    if let Some((_, first)) = rows(&text).next() {
        split_cells(first, &mut cells);
    }
    let header = cells
        .iter()
        .any(|c| unquote(c).trim().parse::<f64>().is_err());
    let data = parse_csv(&text, None, header, file, span)?;
    let n = data.lines.len() as i64;
    let x = Tensor::f_from_slice(&data.features)
        .and_then(|t| t.f_reshape([n, data.width as i64]))
        .at(span)?;
    let none = Tensor::f_zeros([n], (tch::Kind::Float, tch::Device::Cpu)).at(span)?;
    let mut raw = Raw::new(x, none, file.name(), String::new());
    raw.lines = Some(data.lines);
    raw.finite = true;
    Ok(raw)
}

/// Reads a CSV file: the `target` column (a name, or an index without a header) and the other
/// columns as input features.
pub(super) fn read(
    file: &DataFile,
    target: &str,
    header: bool,
    span: Span,
) -> Result<Raw, DataError> {
    let bytes = file.read(span)?;
    let text = String::from_utf8_lossy(&bytes);
    let data = parse_csv(&text, Some(target), header, file, span)?;
    let n = data.targets.len() as i64;
    let x = Tensor::f_from_slice(&data.features)
        .and_then(|t| t.f_reshape([n, data.width as i64]))
        .at(span)?;
    // Whole numbers are integer targets (class labels); any fraction makes them real values.
    let whole = data
        .targets
        .iter()
        .all(|v| v.fract() == 0.0 && v.abs() <= 9_007_199_254_740_992.0);
    let y = if whole {
        let ints: Vec<i64> = data.targets.iter().map(|&v| v as i64).collect();
        Tensor::f_from_slice(&ints)
    } else {
        Tensor::f_from_slice(&data.targets)
    }
    .at(span)?;
    let target_name = if header {
        format!("the column `{target}` of {}", file.name())
    } else {
        format!("column {} of {}", target.trim(), file.name())
    };
    let mut raw = Raw::new(x, y, file.name(), target_name);
    raw.lines = Some(data.lines);
    // Every cell was checked to be finite (and the features to fit 32-bit floats) as it was
    // parsed.
    raw.finite = true;
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all_train, data, expect_failure, floats, ints, Scratch};
    use super::super::{load, DType, Source, Targets};
    use kiln::diagnostic::Code;
    use tch::Kind;

    #[test]
    fn csv_with_and_without_header() {
        let dir = Scratch::new();
        dir.write(
            "h.csv",
            "\u{feff}a,\"b\",label\r\n1,2,0\r\n\r\n3.5, 4 ,1\r\n\"5\",6e0,2\r\n".as_bytes(),
        );
        let source = Source::Csv {
            path: "h.csv".into(),
            target: "label".into(),
            header: true,
        };
        let s = load(
            &data(source, Targets::Classes(Some(3)), all_train()),
            &[2],
            DType::Float,
            &dir.0,
            1,
        )
        .unwrap();
        assert_eq!(floats(&s.train.inputs), vec![1., 2., 3.5, 4., 5., 6.]);
        assert_eq!(ints(&s.train.targets), vec![0, 1, 2]);

        dir.write("n.csv", b"0.5,1,2\n1.5,3,4\n");
        let source = Source::Csv {
            path: "n.csv".into(),
            target: "0".into(),
            header: false,
        };
        let s = load(
            &data(source, Targets::Unknown, all_train()),
            &[2],
            DType::Float,
            &dir.0,
            1,
        )
        .unwrap();
        assert_eq!(s.train.targets.kind(), Kind::Float);
        assert_eq!(floats(&s.train.targets), vec![0.5, 1.5]);
        assert_eq!(floats(&s.train.inputs), vec![1., 2., 3., 4.]);
    }

    #[test]
    fn csv_failures() {
        let dir = Scratch::new();
        let run = |text: &str, target: &str, header: bool, t: Targets| {
            dir.write("f.csv", text.as_bytes());
            let source = Source::Csv {
                path: "f.csv".into(),
                target: target.into(),
                header,
            };
            load(&data(source, t, all_train()), &[2], DType::Float, &dir.0, 1)
        };
        let f = expect_failure(
            run(
                "x,y,label\n1,2,0\n3,oops,1\n",
                "label",
                true,
                Targets::Unknown,
            ),
            Code::DataInvalid,
            "line 3 of `f.csv` (sample 1, counted from 0) has `oops` in column `y` (feature 1), which is not a number",
        );
        assert_eq!(f.primary.text, "bad cell on line 3");
        expect_failure(
            run("1,2,0\n\n3,,1\n", "2", false, Targets::Unknown),
            Code::DataInvalid,
            "line 3 of `f.csv` (sample 1, counted from 0) has an empty cell in column 1 (feature 1)",
        );
        expect_failure(
            run(
                "x,y,label\n1,2,0\n3,nan,1\n",
                "label",
                true,
                Targets::Unknown,
            ),
            Code::DataInvalid,
            "not a finite number",
        );
        expect_failure(
            run("x,y,label\n1,2,0\n3,1\n", "label", true, Targets::Unknown),
            Code::DataInvalid,
            "line 3 of `f.csv` has 2 cells, but the header has 3",
        );
        expect_failure(
            run("x,y,z\n1,2,0\n", "label", true, Targets::Unknown),
            Code::DataInvalid,
            "has no column `label`; its columns: `x`, `y`, `z`",
        );
        expect_failure(
            run("1,2,0\n", "label", false, Targets::Unknown),
            Code::DataInvalid,
            "column index counted from 0, not `label`",
        );
        expect_failure(
            run("1,2,0\n", "3", false, Targets::Unknown),
            Code::DataInvalid,
            "has 3 columns, so it has no column 3",
        );
        expect_failure(
            run(
                "x,y,label\n1,2,0\n3,4,7\n",
                "label",
                true,
                Targets::Classes(Some(3)),
            ),
            Code::DataInvalid,
            "the label 7 for line 3, outside the 3 classes",
        );
        expect_failure(
            run("x;y;label\n1;2;0\n", "x;y;label", true, Targets::Unknown),
            Code::DataInvalid,
            "single column",
        );
        expect_failure(
            run("\n\n", "label", true, Targets::Unknown),
            Code::DataInvalid,
            "is empty",
        );
        expect_failure(
            run("x,y,label\n", "label", true, Targets::Unknown),
            Code::DataInvalid,
            "a header but no rows",
        );
    }

    #[test]
    fn csv_reports_the_first_bad_line_of_many() {
        let mut text = String::from("a,b,label\n");
        for i in 0..10_000 {
            let bad = i == 6000 || i == 9000;
            text.push_str(&format!(
                "{},{},{}\n",
                i,
                if bad { "x" } else { "1" },
                i % 2
            ));
        }
        let dir = Scratch::new();
        dir.write("big.csv", text.as_bytes());
        let source = Source::Csv {
            path: "big.csv".into(),
            target: "label".into(),
            header: true,
        };
        expect_failure(
            load(
                &data(source, Targets::Unknown, all_train()),
                &[2],
                DType::Float,
                &dir.0,
                1,
            ),
            Code::DataInvalid,
            "line 6002 of",
        );
    }
}
