//! The `kiln` binary: exit codes, output formats, and every example passing `kiln check`.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("kiln starts")
}

fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments"))
            .expect("experiments/")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "exp"))
            .collect();
    files.sort();
    files
}

#[test]
fn every_example_passes_check_and_plan() {
    let files = examples();
    assert!(
        files.len() >= 10,
        "expected the examples of the language issue"
    );
    let out = kiln(&["check", "experiments"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "kiln check experiments:\n{stdout}"
    );
    assert!(stdout.is_empty(), "no diagnostics expected, got:\n{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "checked {} files: 0 errors, 0 warnings",
            files.len()
        )),
        "{stderr}"
    );
    for f in files {
        let out = kiln(&["plan", f.to_str().expect("utf-8 path")]);
        assert_eq!(out.status.code(), Some(0), "kiln plan {}", f.display());
    }
}

/// The benchmarks' experiments (CPU and GPU) stay valid as the language changes; the GPU ones are
/// only run on a GPU machine, so checking them here is what keeps them runnable.
#[test]
fn every_benchmark_experiment_passes_check() {
    let out = kiln(&["check", "bench"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "kiln check bench:\n{stdout}");
    assert!(stdout.is_empty(), "no diagnostics expected, got:\n{stdout}");
    assert!(stderr.contains(" 0 errors, 0 warnings"), "{stderr}");
    assert!(!stderr.contains("checked 0 files"), "{stderr}");
}

#[test]
fn plan_of_the_flagship() {
    let out = kiln(&["plan", "experiments/mnist_mlp.exp"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("parameters        203,530"), "{text}");
    let layer_lines: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("fc") || l.starts_with("1 "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(layer_lines[0][..4], ["fc1", "linear", "[256]", "200,960"]);
    assert_eq!(layer_lines[1][..4], ["1", "relu", "[256]", "0"]);
    assert_eq!(layer_lines[2][..4], ["fc2", "linear", "[10]", "2,570"]);
}

#[test]
fn plan_as_yaml() {
    let out = kiln(&[
        "plan",
        "--format",
        "yaml",
        "experiments/mnist_mlp_lr_sweep.exp",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let docs: Vec<serde_yaml::Value> = text
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_yaml::from_str(d).expect("valid YAML"))
        .collect();
    // 2 batch sizes x 3 learning rates, every point planned.
    assert_eq!(docs.len(), 6);
    for d in &docs {
        assert_eq!(d["totals"]["params"].as_u64(), Some(203_530));
    }
    assert_eq!(docs[3]["batch"].as_u64(), Some(128));
}

#[test]
fn json_diagnostics_are_valid_with_one_based_positions() {
    let text = "experiment \"x\" {\n  data {\n    source synthetic(inputs: normal([784]), targets: randint(10), count: 100)\n    batch 10\n  }\n  model {\n    input [784]\n    fc: linaer(10)\n  }\n  optimizer adam(lr: -1)\n  train { steps 10; loss cross_entropy }\n}\n";
    let path = scratch("json.exp", text);
    let out = kiln(&["check", "--format", "json", path.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let diags = value.as_array().expect("an array");
    assert_eq!(diags.len(), 2, "{value:#}");
    let unknown = &diags[0];
    assert_eq!(unknown["code"], "K0102");
    assert_eq!(unknown["severity"], "error");
    assert_eq!(unknown["start"]["line"], 8);
    assert_eq!(unknown["start"]["column"], 9);
    assert_eq!(unknown["end"]["column"], 15);
    let (s, e) = (
        unknown["span"]["start"].as_u64().expect("start") as usize,
        unknown["span"]["end"].as_u64().expect("end") as usize,
    );
    assert_eq!(&text[s..e], "linaer");
    assert_eq!(unknown["help"], "did you mean `linear`?");
    assert_eq!(unknown["labels"][0]["primary"], true);
    assert_eq!(diags[1]["code"], "K0121");
    assert_eq!(diags[1]["start"]["line"], 10);
}

/// Every did-you-mean suggestion comes as a fix an editor can apply: a misspelt layer kind,
/// optimizer, loss, setting keyword and parameter name each get one whose replacement is the
/// right name, over exactly the misspelt word.
#[test]
fn json_fixes_replace_misspelt_names() {
    let text = "experiment \"x\" {\n  data {\n    source synthetic(inputs: normal([784]), targets: randint(10), count: 100)\n    batch 10\n  }\n  model {\n    input [784]\n    fc: linaer(10)\n  }\n  optimizer adma(lr: 1e-3)\n  schedule cosine(warmpu: 10 steps)\n  train {\n    steps 10\n    loss cross_entropi\n    acumulate 1\n  }\n}\n";
    let path = scratch("fixes.exp", text);
    let out = kiln(&["check", "--format", "json", path.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let diags = value.as_array().expect("an array");
    let lines: Vec<&str> = text.lines().collect();
    for (code, wrong, right) in [
        ("K0102", "linaer", "linear"),
        ("K0103", "adma", "adam"),
        ("K0104", "cross_entropi", "cross_entropy"),
        ("K0101", "acumulate", "accumulate"),
        ("K0106", "warmpu", "warmup"),
    ] {
        let d = diags
            .iter()
            .find(|d| d["code"] == code)
            .unwrap_or_else(|| panic!("no {code} in {value:#}"));
        let fixes = d["fixes"].as_array().expect("fixes is an array");
        assert_eq!(fixes.len(), 1, "{code}: {d:#}");
        let fix = &fixes[0];
        assert_eq!(fix["replacement"], right, "{code}");
        let (start, end) = (
            fix["start"].as_u64().expect("start") as usize,
            fix["end"].as_u64().expect("end") as usize,
        );
        assert_eq!(
            &text[start..end],
            wrong,
            "{code}: the fix covers the misspelt name"
        );
        // The 1-based line and columns point at the same text.
        let line = lines[fix["start_line"].as_u64().expect("line") as usize - 1];
        let (c0, c1) = (
            fix["start_column"].as_u64().expect("column") as usize - 1,
            fix["end_column"].as_u64().expect("column") as usize - 1,
        );
        assert_eq!(fix["start_line"], fix["end_line"], "{code}");
        assert_eq!(&line[c0..c1], wrong, "{code}: line and column");
        // Applying the fix writes the right name where the wrong one was.
        let fixed = format!("{}{right}{}", &text[..start], &text[end..]);
        let fixed_line = fixed
            .lines()
            .nth(fix["start_line"].as_u64().expect("line") as usize - 1);
        assert_eq!(
            fixed_line.map(|l| &l[c0..c0 + right.len()]),
            Some(right),
            "{code}"
        );
        assert_eq!(d["help"], format!("did you mean `{right}`?"), "{code}");
    }
    // A fix comes exactly with a suggestion.
    for d in diags {
        let suggests = d["help"]
            .as_str()
            .is_some_and(|h| h.starts_with("did you mean"));
        let fixes = d["fixes"].as_array().map_or(0, Vec::len);
        assert_eq!(suggests, fixes == 1, "{d:#}");
    }
}

#[test]
fn exit_codes() {
    let clean = scratch(
        "clean.exp",
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/article_adam_random.exp"),
        )
        .expect("example"),
    );
    assert_eq!(
        kiln(&["check", clean.to_str().expect("utf-8")])
            .status
            .code(),
        Some(0)
    );
    let bad = scratch("bad.exp", "experiment \"x\" { seed -1 }\n");
    assert_eq!(
        kiln(&["check", bad.to_str().expect("utf-8")]).status.code(),
        Some(1)
    );
    assert_eq!(kiln(&["check", "no/such/file.exp"]).status.code(), Some(2));
    assert_eq!(
        kiln(&["check", "--format", "xml", "experiments"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        kiln(&["check", "--device-memory", "cuda:0", "experiments"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        kiln(&["plan", bad.to_str().expect("utf-8")]).status.code(),
        Some(1)
    );
}

#[test]
fn device_memory_flag_is_an_error_when_exceeded() {
    let out = kiln(&[
        "check",
        "--device-memory",
        "cuda:0=1MiB",
        "experiments/article_model_parallel.exp",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a configuration that does not fit the given capacity fails"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("K0228(does-not-fit)"), "{text}");
    assert!(
        text.contains("cuda:0 needs 3.44 MiB, more than the 1.00 MiB `--device-memory` gives it"),
        "{text}"
    );
}

#[test]
fn human_output_is_plain_when_piped() {
    let bad = scratch("plain.exp", "experiment \"x\" { sed 1 }\n");
    let out = kiln(&["check", bad.to_str().expect("utf-8")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains('\u{1b}'),
        "no colour codes when not a terminal"
    );
    assert!(text.contains("K0101(unknown-keyword)"));
    assert!(text.contains("did you mean `seed`?"));
}

#[test]
fn json_and_yaml_outputs_name_their_fields() {
    // Every diagnostic of the goldens and the corpus, as `kiln check --format json` gives them.
    let out = kiln(&[
        "check",
        "--format",
        "json",
        "tests/diagnostics",
        "tests/mistakes",
    ]);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON array");
    assert!(all.as_array().is_some_and(|a| a.len() > 100), "{all}");
    assert_eq!(support::tuples(&all), Vec::<String>::new());
    // Every trial's plan: a sweep's values were `[name, value]` pairs.
    for file in examples() {
        let out = kiln(&["plan", file.to_str().expect("utf-8"), "--format", "yaml"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let plan = serde_yaml::Value::deserialize(doc).expect("a YAML plan");
            let json = serde_json::to_value(&plan).expect("JSON");
            assert_eq!(
                support::tuples(&json),
                Vec::<String>::new(),
                "{}",
                file.display()
            );
        }
    }
    let sweep = kiln(&[
        "plan",
        "experiments/mnist_mlp_lr_sweep.exp",
        "--format",
        "yaml",
    ]);
    let text = String::from_utf8_lossy(&sweep.stdout);
    assert!(
        text.contains("trial:\n  batch: '64'\n  lr: '3e-3'\n"),
        "{text}"
    );
}
