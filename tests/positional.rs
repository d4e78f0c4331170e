//! Positional names end to end: unnamed layers are placed, pruned and quantized by their
//! positions (`0`, `encoder.0.weight`, `3.0`), the checker accepts them, `kiln plan` shows the
//! devices they resolve to, and `kiln run` compresses exactly the layers they name.

mod support;

use support::*;

/// A classifier whose layers are all unnamed but a block; `{compress}` and `{extra}` filled in.
/// Positions count every statement of a block: `0` and `1` at the top, the block `encoder`
/// (position 2, called by its name), the residual `3` holding `3.0` to `3.2`, then `4`.
fn experiment(compress: &str, extra: &str) -> String {
    format!(
        r#"
experiment "positions" {{
  seed 3
  data {{
    source synthetic(inputs: normal([32]), targets: randint(4), count: 640)
    batch 32
  }}
  model {{
    input [32]
    linear(64)
    relu
    block encoder {{
      linear(32)
      relu
    }}
    residual {{
      linear(32)
      relu
      linear(32)
    }}
    linear(4)
  }}
  device cpu
  {extra}
  optimizer adam(lr: 3e-3)
  compress {{
    {compress}
  }}
  train {{
    steps 20
    loss cross_entropy
  }}
}}
"#
    )
}

#[test]
fn positional_names_are_pruned_and_quantized_by_kiln_run() {
    let dir = scratch("positional-run");
    let exp = write(
        &dir,
        "positions.exp",
        &experiment(
            "prune 0 l1_unstructured(amount: 0.5, schedule: before)\n    \
             prune [encoder.0.weight, 3.2.weight] l1_unstructured(amount: 0.25, schedule: before)\n    \
             quantize [3.0, 4] int8",
            "place [encoder.0, 3.2] on cpu",
        ),
    );
    let o = run(&["check", s(&exp)]);
    assert!(o.status.success(), "{}", text(&o));
    // Warnings only: int8 will not speed such small layers up on the CPU (K0411).
    assert!(text(&o).contains("0 errors"), "{}", text(&o));
    assert!(!text(&o).contains("K0114"), "{}", text(&o));

    let d = dir.join("run");
    let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&d)]);
    assert!(o.status.success(), "{}", text(&o));
    let (t, _) = checkpoint_tensors(&d);
    let zeros = |name: &str| {
        t[&format!("buffer/{name}_mask")]
            .iter()
            .filter(|m| **m == 0.0)
            .count()
    };
    // 64 x 32 entries, half pruned; 32 x 64 and 32 x 32 entries, a quarter pruned.
    assert_eq!(zeros("0.weight"), 1024);
    assert_eq!(zeros("encoder.0.weight"), 512);
    assert_eq!(zeros("3.2.weight"), 256);
    // Nothing else was pruned: the residual's first linear only lost its number format.
    let masks: Vec<&String> = t.keys().filter(|k| k.ends_with("_mask")).collect();
    assert_eq!(masks.len(), 3, "{masks:?}");

    let r = report(&d);
    let layers = r["compression"]["layers"]
        .as_sequence()
        .unwrap_or_else(|| panic!("no compressed layers in {r:?}"));
    let method = |name: &str| {
        layers
            .iter()
            .find(|l| l["name"].as_str() == Some(name))
            .and_then(|l| l["method"].as_str())
            .unwrap_or_else(|| panic!("`{name}` is not in {layers:?}"))
            .to_string()
    };
    assert!(method("0").contains("50%"), "{}", method("0"));
    assert!(method("3.0").contains("int8"), "{}", method("3.0"));
    assert!(method("4").contains("int8"), "{}", method("4"));
    assert_eq!(layers.len(), 5, "{layers:?}");
}

#[test]
fn kiln_plan_shows_the_devices_positional_placements_resolve_to() {
    let dir = scratch("positional-plan");
    let exp = write(
        &dir,
        "positions.exp",
        &experiment(
            "quantize 3.0 int8",
            "parallel model\n  place encoder on cuda:0\n  place [encoder.0, 4] on cuda:1",
        ),
    );
    let o = run(&["plan", s(&exp)]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    let device = |layer: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(layer))
            .and_then(|l| l.split_whitespace().last())
            .unwrap_or_else(|| panic!("no row for `{layer}` in {out}"))
            .to_string()
    };
    // The layer's own placement wins over its block's; the rest follow the block or `device`.
    assert_eq!(device("encoder.0"), "cuda:1");
    assert_eq!(device("encoder.1"), "cuda:0");
    assert_eq!(device("3.0"), "cpu");
    assert_eq!(device("4"), "cuda:1");
}
