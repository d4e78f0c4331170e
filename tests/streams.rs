//! Token streams end to end: a character-level causal model trained on a `text(...)` source
//! learns a repeating text and `kiln generate` continues it from the vocabulary the run saved;
//! what the checker says about streams before a run (a vocabulary larger than the embedding, a
//! stream shorter than one window, a token file of an odd length); and `kiln generate` refusing a
//! model that attends to later positions (K0526). The windows themselves are checked against
//! nanoGPT's `get_batch` in `src/runtime/data/stream.rs`.

mod support;

use std::path::Path;

use support::{run, s, scratch, text, write};

/// A small causal character model over `source`, whose text has `vocab` characters.
fn experiment(source: &str, vocab: u64, causal: bool) -> String {
    format!(
        "experiment \"chars\" {{\n  seed 3\n  data {{\n    source {source}\n    split(train: 0.9, val: 0.1)\n    batch 16\n  }}\n  model {{\n    input [8]\n    embedding({vocab}, 32)\n    positional(8)\n    transformer_block(heads: 2, hidden: 64, dropout: 0, causal: {causal})\n    layernorm\n    linear({vocab})\n  }}\n  device cpu\n  optimizer adamw(lr: 3e-3)\n  train {{\n    steps 150\n    loss cross_entropy\n    eval_every 150 steps\n  }}\n}}\n"
    )
}

fn train(dir: &Path, exp: &str) -> std::path::PathBuf {
    let file = write(dir, "chars.exp", exp);
    let run_dir = dir.join("run");
    let out = run(&["run", s(&file), "--quiet", "--run-dir", s(&run_dir)]);
    assert!(out.status.success(), "{}", text(&out));
    run_dir
}

#[test]
fn a_character_model_learns_a_text_and_generates_its_continuation() {
    let dir = scratch("streams-generate");
    write(&dir, "abc.txt", &"abcde\n".repeat(400));
    let run_dir = train(&dir, &experiment("text(\"abc.txt\", block: 8)", 6, true));
    // The vocabulary, saved for decoding: sorted(set(text)).
    let vocab = std::fs::read_to_string(run_dir.join("vocab.json")).expect("vocab.json");
    assert_eq!(vocab, r#"["\n","a","b","c","d","e"]"#);
    let report = support::report(&run_dir);
    let val = report["val"]["loss"].as_f64().expect("val loss");
    assert!(val < 0.05, "a repeating text is learnt: val loss {val}");
    let generate = |seed: &str| {
        let out = run(&[
            "generate",
            s(&run_dir),
            "--prompt",
            "cd",
            "--tokens",
            "20",
            "--top-k",
            "1",
            "--seed",
            seed,
        ]);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8(out.stdout).expect("utf-8")
    };
    // The prompt, then twenty characters that continue the pattern (greedy: the top one).
    assert_eq!(generate("1"), "cde\nabcde\nabcde\nabcde\n\n");
    // Sampling from all characters is seeded: the same seed draws the same text.
    let sampled = |seed: &str| {
        let out = run(&["generate", s(&run_dir), "--tokens", "30", "--seed", seed]);
        assert!(out.status.success(), "{}", text(&out));
        out.stdout
    };
    assert_eq!(sampled("5"), sampled("5"));
    // A prompt with a character the text lacks is refused, naming it.
    let out = run(&["generate", s(&run_dir), "--prompt", "abz"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("'z'"), "{}", text(&out));
}

#[test]
fn generate_refuses_a_model_that_sees_later_positions() {
    let dir = scratch("streams-not-causal");
    write(&dir, "abc.txt", &"abcde\n".repeat(100));
    let exp = experiment("text(\"abc.txt\", block: 8)", 6, false).replace("steps 150", "steps 2");
    let run_dir = train(&dir, &exp);
    let out = run(&["generate", s(&run_dir), "--tokens", "5"]);
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out);
    assert!(said.contains("K0526"), "{said}");
    assert!(said.contains("attends to later positions"), "{said}");
    assert!(said.contains("causal: true"), "{said}");
}

#[test]
fn the_checker_reads_streams_before_a_run() {
    let dir = scratch("streams-check");
    write(&dir, "abc.txt", &"abcde\n".repeat(100));
    // Six characters, an embedding of five ids.
    let file = write(
        &dir,
        "small.exp",
        &experiment("text(\"abc.txt\", block: 8)", 5, true),
    );
    let out = run(&["check", s(&file)]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("K0220"), "{said}");
    assert!(
        said.contains("holds 6 distinct characters, but the embedding's vocabulary is 5"),
        "{said}"
    );
    // Fewer tokens than a window and the one after it.
    write(&dir, "short.txt", "abcd");
    let file = write(
        &dir,
        "short.exp",
        &experiment("text(\"short.txt\", block: 8)", 6, true),
    );
    let said = text(&run(&["check", s(&file)]));
    assert!(
        said.contains("holds 4 tokens, too few for one window of 8"),
        "{said}"
    );
    // A token file of an odd number of bytes for uint16 ids.
    std::fs::write(dir.join("odd.bin"), [1u8, 0, 2, 0, 3]).expect("write");
    let file = write(
        &dir,
        "odd.exp",
        &experiment(
            "tokens(\"odd.bin\", dtype: uint16, block: 8, vocab: 6)",
            6,
            true,
        ),
    );
    let said = text(&run(&["check", s(&file)]));
    assert!(said.contains("K0221"), "{said}");
    assert!(
        said.contains("its 5 bytes are not a whole number of 16-bit token ids"),
        "{said}"
    );
    // A stream that fits checks clean, and the plan counts its windows.
    let file = write(
        &dir,
        "ok.exp",
        &experiment("text(\"abc.txt\", block: 8)", 6, true),
    );
    let out = run(&["plan", s(&file)]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("text: 592 samples of [8]"),
        "{}",
        text(&out)
    );
}
