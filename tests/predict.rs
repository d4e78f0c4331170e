//! `kiln predict`: a run's predictions for the samples of a file equal PyTorch's for the same
//! weights (softmax probabilities within 1e-5), whatever format holds the samples (`.npy`, a
//! CSV file of features, IDX images), written as CSV (with the class) or `.npy`; an output that
//! exists is never overwritten, and an input Kiln cannot read is a data diagnostic.

mod support;

use std::path::Path;

use support::{kiln, run, s, scratch, text, write};

const EXP: &str = r#"experiment "p" {
  seed 1
  data { source npy("x.npy", "y.npy", classes: 3); batch 20 }
  model { input [8]; fc1: linear(16); relu; fc2: linear(3) }
  device cpu
  optimizer adam(lr: 1e-2)
  train { steps 30; loss cross_entropy }
}
"#;

/// Writes `x.npy`, `y.npy` and `x.csv` (the same samples) with numpy.
fn samples(dir: &Path) {
    let code = "import sys, numpy as np\nd = sys.argv[1]\nr = np.random.default_rng(0)\nx = r.normal(size=(200, 8)).astype(np.float32)\ny = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)\nnp.save(d + '/x.npy', x)\nnp.save(d + '/y.npy', y)\nnp.savetxt(d + '/x.csv', x, delimiter=',', header=','.join('f%d' % i for i in range(8)), comments='', fmt='%.9g')\n";
    let out = support::python_command("predict")
        .args(["-c", code, s(dir)])
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `.npy` file of float32 `[N, C]`, as numbers (the header's shape checked).
fn npy(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).expect("npy");
    let header = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    // numpy writes `(200, 3)`, libtorch `(200,3,)`.
    let text = String::from_utf8_lossy(&bytes[10..10 + header]).replace(' ', "");
    assert!(
        text.contains("'descr':'<f4'") && text.contains("'shape':(200,3"),
        "{text}"
    );
    bytes[10 + header..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn predictions_equal_pytorchs_from_every_input_format() {
    let dir = scratch("predict");
    samples(&dir);
    let exp = write(&dir, "p.exp", EXP);
    let run_dir = dir.join("run");
    let out = run(&["run", s(&exp), "--quiet", "--run-dir", s(&run_dir)]);
    assert!(out.status.success(), "{}", text(&out));
    let out = support::python_command("predict")
        .arg(support::root().join("tests/predict/reference.py"))
        .arg(&dir)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let torch = npy(&dir.join("torch.npy"));

    let predicted = dir.join("p.npy");
    let out = run(&[
        "predict",
        s(&run_dir),
        "--input",
        s(&dir.join("x.npy")),
        "--out",
        s(&predicted),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let kiln_p = npy(&predicted);
    assert_eq!(kiln_p.len(), torch.len());
    for (i, (a, b)) in kiln_p.iter().zip(&torch).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5,
            "probability {i}: kiln {a}, torch {b}"
        );
    }
    // CSV features in, CSV out on standard output: the class and the same probabilities.
    let out = kiln(&["predict", s(&run_dir), "--input", s(&dir.join("x.csv"))])
        .output()
        .expect("kiln");
    assert!(out.status.success(), "{}", text(&out));
    let csv = String::from_utf8(out.stdout).expect("utf-8");
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("class,p0,p1,p2"));
    let rows: Vec<Vec<f32>> = lines
        .map(|l| l.split(',').map(|c| c.parse().expect("number")).collect())
        .collect();
    assert_eq!(rows.len(), 200);
    for (i, row) in rows.iter().enumerate() {
        let p = &torch[i * 3..i * 3 + 3];
        let best = (0..3).fold(0, |b, j| if p[j] > p[b] { j } else { b });
        assert_eq!(row[0] as usize, best, "class of sample {i}");
        for j in 0..3 {
            assert!(
                (row[1 + j] - p[j]).abs() <= 1e-5,
                "sample {i}: {row:?} against {p:?}"
            );
        }
    }
    // An output that exists is never overwritten.
    let before = std::fs::read(&predicted).expect("p.npy");
    let out = run(&[
        "predict",
        s(&run_dir),
        "--input",
        s(&dir.join("x.npy")),
        "--out",
        s(&predicted),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("exists already"), "{}", text(&out));
    assert_eq!(std::fs::read(&predicted).expect("p.npy"), before);
    // An input of another format is a data diagnostic naming the formats it reads.
    let out = run(&["predict", s(&run_dir), "--input", s(&exp)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("K0503"), "{}", text(&out));
    assert!(
        text(&out).contains("is not a file `kiln predict` reads"),
        "{}",
        text(&out)
    );
}

#[test]
fn idx_images_are_predicted_as_the_run_read_them() {
    // A run on the real digits (IDX bytes divided by 255, then normalised). The same digits
    // given as IDX images, or as a `.npy` of their bytes, are scaled and normalised as the run
    // read them: the same predictions, most of them right.
    let dir = scratch("predict-mnist");
    let exp = support::root().join("experiments/mnist_mlp.exp");
    let run_dir = dir.join("run");
    let out = run(&[
        "run",
        s(&exp),
        "--quiet",
        "--max-steps",
        "60",
        "--run-dir",
        s(&run_dir),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let code = "import gzip, sys, numpy as np\nd = sys.argv[1]\nb = gzip.open(sys.argv[2]).read()\nnp.save(d + '/digits.npy', np.frombuffer(b, np.uint8, offset=16).reshape(-1, 28, 28))\nl = gzip.open(sys.argv[3]).read()\nnp.save(d + '/labels.npy', np.frombuffer(l, np.uint8, offset=8).astype(np.int64))\nprint(' '.join(str(v) for v in np.frombuffer(l, np.uint8, offset=8)))\n";
    let images = support::root().join("data/mnist/images.idx.gz");
    let labels = support::root().join("data/mnist/labels.idx.gz");
    let out = support::python_command("predict")
        .args(["-c", code, s(&dir), s(&images), s(&labels)])
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let labels: Vec<usize> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|v| v.parse().expect("label"))
        .collect();
    let predict = |input: &Path| {
        let out = kiln(&["predict", s(&run_dir), "--input", s(input)])
            .output()
            .expect("kiln");
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let from_idx = predict(&images);
    assert_eq!(from_idx, predict(&dir.join("digits.npy")));
    let classes: Vec<usize> = from_idx
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().expect("class").parse().expect("class"))
        .collect();
    assert_eq!(classes.len(), labels.len());
    let correct = classes.iter().zip(&labels).filter(|(a, b)| a == b).count();
    let accuracy = correct as f64 / labels.len() as f64;
    assert!(accuracy > 0.8, "accuracy over every digit: {accuracy}");
}
