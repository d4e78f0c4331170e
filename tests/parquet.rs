//! Parquet sources from the command line: `kiln check` reads the footer (rows, columns, their
//! types) and checks the columns against the model before a run; `kiln run` trains on a file
//! and on a directory of shards alike. The values themselves are checked against pyarrow in
//! `src/runtime/data/parquet.rs`.

mod support;

use std::path::Path;

use support::toolkit::python_json;
use support::{run, s, scratch, text, write};

fn files(dir: &Path) {
    python_json("parquet", "tests/parquet/write.py", &[s(dir)]);
}

fn experiment(source: &str, input: &str) -> String {
    format!(
        "experiment \"pq\" {{\n  seed 2\n  data {{\n    source {source}\n    split(train: 0.8, val: 0.2)\n    batch 10\n  }}\n  model {{\n    input {input}\n    fc: linear(3)\n  }}\n  device cpu\n  optimizer sgd(lr: 0.1)\n  train {{\n    steps 8\n    loss cross_entropy\n  }}\n}}\n"
    )
}

#[test]
fn the_checker_reads_the_footer_and_the_run_reads_the_columns() {
    let dir = scratch("parquet-cli");
    files(&dir);
    for path in ["table.parquet", "shards"] {
        let exp = write(
            &dir,
            "pq.exp",
            &experiment(
                &format!("parquet(\"{path}\", inputs: \"pixels\", target: \"label\", classes: 3)"),
                "[6]",
            ),
        );
        let out = run(&["plan", s(&exp)]);
        assert!(out.status.success(), "{}", text(&out));
        assert!(
            text(&out).contains("parquet: 50 samples of [6]"),
            "{}",
            text(&out)
        );
        let run_dir = dir.join(format!("run-{path}"));
        let out = run(&["run", s(&exp), "--quiet", "--run-dir", s(&run_dir)]);
        assert!(out.status.success(), "{}", text(&out));
        // `kiln predict` reads the run's input columns from Parquet (the file, or the shards) as
        // it reads the same array from `.npy`.
        let predict = |input: &Path| {
            let out = run(&["predict", s(&run_dir), "--input", s(input)]);
            assert!(out.status.success(), "{}", text(&out));
            String::from_utf8(out.stdout).expect("utf-8")
        };
        let from_parquet = predict(&dir.join(path));
        assert_eq!(from_parquet.lines().count(), 51);
        assert_eq!(from_parquet, predict(&dir.join("pixels.npy")));
    }
    // Three scalar columns make a sample of three values.
    let exp = write(
        &dir,
        "cols.exp",
        &experiment("parquet(\"table.parquet\", inputs: [\"a\", \"b\", \"c\"], target: \"label\", classes: 3)", "[3]"),
    );
    let out = run(&["plan", s(&exp)]);
    assert!(
        text(&out).contains("parquet: 50 samples of [3]"),
        "{}",
        text(&out)
    );
    // A column that is not there, and a sample size the model does not take, before any run.
    let exp = write(
        &dir,
        "bad.exp",
        &experiment(
            "parquet(\"table.parquet\", inputs: \"pixel\", target: \"label\", classes: 3)",
            "[6]",
        ),
    );
    let said = text(&run(&["check", s(&exp)]));
    assert!(said.contains("K0220") && said.contains("`pixel`"), "{said}");
    assert!(said.contains("its columns: a, b, c, pixels"), "{said}");
    let exp = write(
        &dir,
        "size.exp",
        &experiment(
            "parquet(\"table.parquet\", inputs: \"pixels\", target: \"label\", classes: 3)",
            "[5]",
        ),
    );
    let said = text(&run(&["check", s(&exp)]));
    assert!(said.contains("K0220"), "{said}");
    // A file that is not Parquet is K0221.
    std::fs::write(dir.join("fake.parquet"), b"not parquet at all").expect("write");
    let exp = write(
        &dir,
        "fake.exp",
        &experiment(
            "parquet(\"fake.parquet\", inputs: \"pixels\", target: \"label\")",
            "[6]",
        ),
    );
    let said = text(&run(&["check", s(&exp)]));
    assert!(
        said.contains("K0221") && said.contains("it is not a Parquet file"),
        "{said}"
    );
}
