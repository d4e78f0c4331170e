//! What the editor says about the words of the language: one line per keyword, the layer
//! kinds' specs and the choices' parameters, from the checker's own tables.

use crate::check::layers::{spec, Fallback};
use crate::check::words;
use crate::ir::Kind;

/// One line per keyword, as the language reference describes it.
const KEYWORDS: &[(&str, &str)] = &[
    (
        "experiment",
        "An experiment: its name, then a block of settings.",
    ),
    (
        "extends",
        "Reads a base experiment file and overrides its statements.",
    ),
    ("description", "Free text describing the experiment."),
    (
        "allow",
        "Warnings to silence, by code: `allow [K0411]` (errors cannot be allowed).",
    ),
    ("tags", "Free labels for the experiment."),
    ("seed", "The seed for every random generator."),
    (
        "data",
        "The data pipeline: source, split, batch, shuffle, normalize, drop_last, eval_batch.",
    ),
    (
        "model",
        "The model: an `input` shape, then layers, blocks and residuals.",
    ),
    (
        "device",
        "Where layers run unless placed elsewhere: cpu, cuda, cuda:N or auto.",
    ),
    (
        "place",
        "Places layers or blocks (by name) on a device: `place a b on cuda:1`.",
    ),
    (
        "memory",
        "Declares a device's memory capacity, as `memory cuda:0 80GiB`.",
    ),
    ("parallel", "How work is spread over devices and processes."),
    ("compress", "Pruning and quantization of the trained model."),
    ("optimizer", "The optimizer and its hyperparameters."),
    ("schedule", "The learning-rate schedule."),
    (
        "train",
        "The training loop: length, loss, metrics, precision, checkpoints.",
    ),
    ("input", "The per-sample input shape of the model."),
    ("block", "A named group of layers."),
    ("residual", "Layers whose output is added to their input."),
    ("prune", "Prunes the weights of the named layers."),
    ("quantize", "Quantizes the named layers."),
    (
        "source",
        "Where samples come from: a file or `synthetic(...)`.",
    ),
    ("batch", "Samples per optimizer step."),
    (
        "drop_last",
        "Leave out each epoch's last, partial training batch (false by default).",
    ),
    (
        "eval_batch",
        "Samples per evaluation batch (the training batch by default).",
    ),
    (
        "placement",
        "Where the loaded data lives while training: `auto` (the device when it fits), `device` or `host`.",
    ),
    (
        "epochs",
        "How long to train, in passes over the training split.",
    ),
    ("steps", "How long to train, in optimizer steps."),
    ("loss", "The loss function."),
    ("metrics", "What to measure on the validation split."),
];

/// The words expected at the start of a statement in the block opened by `keyword` (`None`:
/// the top level).
pub fn statements(block: Option<&str>) -> Vec<&'static str> {
    match block {
        None => vec!["experiment", "extends"],
        Some("experiment") => words::EXPERIMENT.to_vec(),
        Some("data") => words::DATA.to_vec(),
        Some("train") => words::TRAIN.to_vec(),
        Some("compress") => words::COMPRESS.to_vec(),
        Some("model" | "block" | "residual") => ["input", "block", "residual"]
            .into_iter()
            .chain(Kind::ALL.iter().map(|k| k.name()))
            .collect(),
        Some(_) => Vec::new(),
    }
}

/// The choices a keyword takes as its value, with their parameters.
pub fn choices(keyword: &str) -> Vec<(&'static str, &'static [&'static str])> {
    match keyword {
        "optimizer" => words::optimizer_names().collect(),
        "schedule" => words::schedule_names().collect(),
        "loss" => words::loss_names().collect(),
        _ => Vec::new(),
    }
}

/// The named parameters of a call to `name`: a layer kind, an optimizer, a schedule or a loss.
pub fn parameters(name: &str) -> Vec<&'static str> {
    if let Some(kind) = Kind::from_name(name) {
        return spec(kind).params.iter().map(|p| p.name).collect();
    }
    ["optimizer", "schedule", "loss"]
        .into_iter()
        .flat_map(choices)
        .find(|(n, _)| *n == name)
        .map_or_else(Vec::new, |(_, p)| p.to_vec())
}

/// The named parameters of a call to `name` written in a `keyword` statement: the keyword's
/// own choice of that name first (`schedule linear(...)` is the schedule), else as
/// [`parameters`] finds it.
pub fn parameters_in(keyword: &str, name: &str) -> Vec<&'static str> {
    match choices(keyword).into_iter().find(|(n, _)| *n == name) {
        Some((_, params)) => params.to_vec(),
        None => parameters(name),
    }
}

/// Markdown documentation of a word written in a `keyword` statement: the keyword's own choice
/// of that name first (`linear` in a `schedule` is the schedule), else as [`document`] finds it.
pub fn document_in(keyword: &str, word: &str) -> Option<String> {
    choice_document(keyword, word).or_else(|| document(word))
}

/// `**word**: schedule `word(params)``, when `word` is one of `keyword`'s choices.
fn choice_document(keyword: &str, word: &str) -> Option<String> {
    choices(keyword)
        .into_iter()
        .find(|(n, _)| *n == word)
        .map(|(_, params)| format!("**{word}**: {keyword} `{word}({})`", params.join(", ")))
}

/// Markdown documentation of a word, if it is one of the language's.
pub fn document(word: &str) -> Option<String> {
    if let Some(kind) = Kind::from_name(word) {
        let spec = spec(kind);
        let params: Vec<String> = spec
            .params
            .iter()
            .map(|p| match p.default {
                Fallback::Required => p.name.to_string(),
                Fallback::Inferred => format!("{} (inferred)", p.name),
                Fallback::Value(v) => format!("{}: {v}", p.name),
            })
            .collect();
        let mut text = format!(
            "**{word}**: layer `{word}({})`\n\nShapes: {}",
            params.join(", "),
            spec.shapes
        );
        if let Some(note) = spec.note {
            text.push_str(&format!("\n\n{note}"));
        }
        return Some(text);
    }
    if word == "group" {
        return Some(
            "**group**: a parameter group of the optimizer, `groups: [group(selectors, settings)]`: \
             layers, blocks, parameters (`fc1.bias`) or classes (biases, norms, embeddings), \
             with the optimizer's settings of their own"
                .to_string(),
        );
    }
    if let Some((class, holds)) = crate::ir::CLASSES.iter().find(|(c, _)| *c == word) {
        return Some(format!("**{class}**: parameter-group class: {holds}"));
    }
    for keyword in ["optimizer", "schedule", "loss"] {
        if let Some(text) = choice_document(keyword, word) {
            return Some(text);
        }
    }
    KEYWORDS
        .iter()
        .find(|(k, _)| *k == word)
        .map(|(k, line)| format!("**{k}**: {line}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_documented_from_the_checker_tables() {
        assert!(document("linear").unwrap().contains("layer `linear("));
        assert!(document("adam").unwrap().contains("optimizer `adam(lr"));
        assert!(document("epochs").is_some());
        assert!(document("norms").unwrap().contains("layernorm"));
        assert!(parameters("adamw").contains(&"groups"));
        assert_eq!(document("nonsense"), None);
        assert!(parameters("adam").contains(&"lr"));
        assert!(statements(Some("model")).contains(&"linear"));
        assert!(statements(Some("train")).contains(&"loss"));
    }
}
