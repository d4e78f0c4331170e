//! Parity with PyTorch for local (sliding-window) attention: from the same initial weights and
//! the same synthetic token sequences, `kiln run` reproduces the losses of a PyTorch training
//! loop over 50 steps, within 1e-5 relative. The models cover `window` alone in a pre-norm
//! `transformer_block`, `window` with `causal` and a padding id in a post-norm one, and `window`
//! with a padding id in a lone `attention`; with ids in `[0, 4)` and pad 0, some queries have only
//! padding within their window in most batches.
//!
//! `tests/parity/masks.py` draws the data as Kiln's `synthetic` source does, saves the initial
//! `state_dict` and trains `nn.TransformerEncoderLayer` (or `nn.MultiheadAttention`) with the
//! window as its boolean `src_mask` / `attn_mask` and AdamW.

mod support;

use serde_json::{json, Value};
use support::parity::{self, floats};

const STEPS: usize = 50;
const BATCH: usize = 16;
const VOCAB: usize = 4;
const LENGTH: usize = 8;
const LOSS_RTOL: f64 = 1e-5;
/// The models, as `.exp` model blocks named as `masks.py`'s modules.
const CASES: &[(&str, &str)] = &[
    (
        "window",
        "    embed: embedding(4, 16)\n    pos: positional(max_len: 8)\n    block: transformer_block(2, hidden: 32, dropout: 0, window: 3)\n    mean(0)\n    head: linear(8)\n",
    ),
    (
        "causal_padded",
        "    embed: embedding(4, 16, pad: 0)\n    sinusoidal\n    block: transformer_block(2, hidden: 32, dropout: 0, causal: true, norm: post, window: 2)\n    mean(0)\n    head: linear(8)\n",
    ),
    (
        "attention_padded",
        "    embed: embedding(4, 16, pad: 0)\n    pos: positional(max_len: 8)\n    attn: attention(2, window: 2)\n    norm: layernorm\n    mean(0)\n    head: linear(8)\n",
    ),
];

fn exp(name: &str, model: &str) -> String {
    format!(
        "experiment \"parity-{name}\" {{\n  seed 5\n  data {{\n    source synthetic(inputs: randint({VOCAB}, shape: [{LENGTH}]), targets: argmax(), count: {})\n    shuffle false\n    batch {BATCH}\n  }}\n  model {{\n    input [{LENGTH}]\n{model}  }}\n  device cpu\n  optimizer adamw(lr: 1e-2, weight_decay: 0.01)\n  train {{\n    steps {STEPS}\n    loss cross_entropy\n  }}\n}}\n",
        STEPS * BATCH
    )
}

#[test]
fn windowed_attention_losses_match_pytorch_step_for_step() {
    let scratch = support::scratch("mask-parity");
    let mut spec = Vec::new();
    for (name, model) in CASES {
        let dir = scratch.join(name);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        std::fs::write(dir.join("parity.exp"), exp(name, model)).expect("write .exp");
        spec.push(json!({
            "dir": dir, "model": name, "seed": 5, "vocab": VOCAB, "length": LENGTH,
            "count": STEPS * BATCH, "batch": BATCH, "steps": STEPS, "lr": 1e-2,
            "weight_decay": 0.01,
        }));
    }
    parity::reference("tests/parity/masks.py", &Value::Array(spec), &scratch);
    let mut failures = Vec::new();
    for (name, _) in CASES {
        let dir = scratch.join(name);
        let want = floats(&parity::json_file(&dir.join("reference.json"))["losses"]);
        let got = parity::train(
            &dir.join("parity.exp"),
            Some(&dir.join("init.safetensors")),
            &dir.join("run"),
        )
        .losses;
        assert_eq!((got.len(), want.len()), (STEPS, STEPS), "{name}: steps");
        let first: f64 = want[..5].iter().sum::<f64>() / 5.0;
        let last: f64 = want[STEPS - 5..].iter().sum::<f64>() / 5.0;
        assert!(
            last < 0.9 * first,
            "{name}: the loss barely moves ({first} -> {last})"
        );
        failures.extend(parity::compare(name, "loss", &got, &want, LOSS_RTOL));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&scratch);
}
