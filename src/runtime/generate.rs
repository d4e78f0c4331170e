//! `kiln generate`: text (or token ids) sampled from a causal language model a run trained, one
//! token at a time, as nanoGPT's `sample.py` does: the scores of the last position of the
//! context (its last `block` tokens) divided by the temperature, cut to the `top_k` largest,
//! turned into probabilities and drawn from with torch's generator seeded with `--seed`.
//!
//! The model reads windows of exactly `block` ids, so a shorter context is padded on the right;
//! with causal attention a position's scores do not depend on the positions after it, so the
//! padding changes nothing. A text's ids are decoded with the vocabulary the run saved
//! (`vocab.json`); a `tokens` model's are printed as numbers.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use tch::{Kind, Tensor};

use super::data::encode;
use super::eval::{show, usage};
use super::failure::At;
use super::trained;
use kiln::check::Checked;
use kiln::diagnostic::problem::Running;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{layers, DType, Experiment, LayerKind, Targets};

/// Options of `kiln generate`.
#[derive(clap::Args, Debug, Clone)]
pub struct GenerateOptions {
    /// The run directory of a causal language model.
    pub run_dir: PathBuf,
    /// The text to continue (for a `tokens` model, ids separated by spaces); by default a
    /// newline (or id 0 when the vocabulary has none).
    #[arg(long)]
    pub prompt: Option<String>,
    /// Tokens to generate.
    #[arg(long, default_value_t = 500)]
    pub tokens: usize,
    /// Divides the scores before sampling: below 1 more likely tokens, above 1 more varied.
    #[arg(long, default_value_t = 1.0, value_parser = positive)]
    pub temperature: f64,
    /// Sample among the `K` most likely tokens only.
    #[arg(long, value_name = "K", value_parser = clap::builder::RangedU64ValueParser::<i64>::new().range(1..))]
    pub top_k: Option<i64>,
    /// Seed of torch's generator for the draws.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// The experiment file to use instead of the run's own copy.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The trial of an experiment with sweeps (1-based).
    #[arg(long, value_name = "K", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub trial: Option<usize>,
    /// libtorch's intra-op threads.
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: Option<usize>,
}

/// A number above 0.
fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
        _ => Err(format!("`{text}` is not a number above 0")),
    }
}

/// Runs `kiln generate`; returns the exit status.
pub fn generate_main(opts: &GenerateOptions) -> i32 {
    if let Some(n) = opts.threads {
        tch::set_num_threads(n as i32);
    }
    let (checked, index) = match trained::open(&opts.run_dir, opts.file.as_deref(), opts.trial) {
        Ok(c) => c,
        Err(status) => return status,
    };
    let exp = &checked.trials[index];
    match generate(exp, &checked, opts) {
        Ok(()) => 0,
        Err(Failure::Diagnostic(d)) => show(&checked, &[d], false, 1),
        Err(Failure::Usage(message)) => usage(&message),
    }
}

/// What stopped a generation.
enum Failure {
    Diagnostic(Diagnostic),
    Usage(String),
}

impl From<Diagnostic> for Failure {
    fn from(d: Diagnostic) -> Failure {
        Failure::Diagnostic(d)
    }
}

/// Refuses (K0526) a model that is not a causal language model over token ids.
fn generative(exp: &Experiment) -> Result<i64, Diagnostic> {
    let refuse = |span, why: &str, help: &str| {
        Problem::Running(Running::NotGenerative {
            span,
            why: why.to_string(),
            help: help.to_string(),
        })
        .diagnostic()
    };
    let all = layers(&exp.model.nodes);
    let first = all.first().map_or(exp.span, |l| l.span);
    if exp.model.input_dtype != DType::Int || exp.model.input.len() != 1 {
        return Err(refuse(
            first,
            "its input is not a sequence of token ids",
            "start the model with `input [S]` and an `embedding`",
        ));
    }
    if !matches!(exp.data.targets, Targets::Tokens { .. }) {
        return Err(refuse(
            exp.data.source_span,
            "its targets are not a class per token",
            "train on a token stream (`tokens(...)`, `text(...)`), whose targets are the next tokens",
        ));
    }
    for l in &all {
        let causal = match &l.kind {
            LayerKind::Attention { causal, .. } | LayerKind::TransformerBlock { causal, .. } => {
                *causal
            }
            _ => true,
        };
        if !causal {
            return Err(refuse(
                l.span,
                &format!("its layer `{}` attends to later positions", l.name),
                "give every `attention` and `transformer_block` `causal: true`, and train again",
            ));
        }
    }
    Ok(exp.model.input[0])
}

/// The run's vocabulary (`vocab.json`), for a text model.
fn vocabulary(dir: &Path) -> Result<Option<Vec<char>>, Failure> {
    let path = dir.join(kiln::rundir::VOCAB);
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(None);
    };
    let chars: Vec<String> = serde_json::from_slice(&bytes)
        .map_err(|e| Failure::Usage(format!("`{}` cannot be read: {e}", path.display())))?;
    chars
        .iter()
        .map(|c| {
            let mut it = c.chars();
            match (it.next(), it.next()) {
                (Some(ch), None) => Ok(ch),
                _ => Err(Failure::Usage(format!(
                    "`{}` holds {c:?}, not one character",
                    path.display()
                ))),
            }
        })
        .collect::<Result<Vec<char>, Failure>>()
        .map(Some)
}

/// The prompt's ids.
fn prompt_ids(
    prompt: Option<&str>,
    vocab: Option<&[char]>,
    size: i64,
) -> Result<Vec<i64>, Failure> {
    match (prompt, vocab) {
        (None, Some(v)) => Ok(vec![v.binary_search(&'\n').map_or(0, |i| i as i64)]),
        (None, None) => Ok(vec![0]),
        (Some(text), Some(v)) => {
            let ids = encode(text, v).map_err(|c| {
                Failure::Usage(format!(
                    "the prompt holds the character {c:?}, which the run's text does not"
                ))
            })?;
            if ids.is_empty() {
                return Err(Failure::Usage("the prompt is empty".into()));
            }
            Ok(ids)
        }
        (Some(text), None) => {
            let ids = text
                .split_whitespace()
                .map(|w| match w.parse::<i64>() {
                    Ok(id) if (0..size).contains(&id) => Ok(id),
                    _ => Err(Failure::Usage(format!(
                        "the prompt's `{w}` is not a token id in [0, {size})"
                    ))),
                })
                .collect::<Result<Vec<i64>, Failure>>()?;
            if ids.is_empty() {
                return Err(Failure::Usage("the prompt holds no token id".into()));
            }
            Ok(ids)
        }
    }
}

/// Loads the run's model and prints the prompt and the tokens drawn after it.
fn generate(exp: &Experiment, checked: &Checked, opts: &GenerateOptions) -> Result<(), Failure> {
    let block = generative(exp)?;
    let model = trained::model(exp, checked, &opts.run_dir)?;
    let vocab = vocabulary(&opts.run_dir)?;
    let size = exp.model.output.last().copied().unwrap_or(0);
    let mut context = prompt_ids(opts.prompt.as_deref(), vocab.as_deref(), size)?;
    let mut out = std::io::stdout().lock();
    let word = |id: i64| match &vocab {
        Some(v) => v.get(id as usize).map_or_else(String::new, char::to_string),
        None => format!("{id} "),
    };
    let prompt: String = context.iter().map(|&id| word(id)).collect();
    let _ = write!(out, "{prompt}");
    tch::manual_seed(opts.seed as i64);
    let span = exp.span;
    let device = model.input_device();
    tch::no_grad(|| -> Result<(), Failure> {
        for _ in 0..opts.tokens {
            let from = context.len().saturating_sub(block as usize);
            let window = &context[from..];
            let mut ids = window.to_vec();
            ids.resize(block as usize, 0);
            let x = Tensor::f_from_slice(&ids)
                .and_then(|t| t.f_reshape([1, block]))
                .and_then(|t| t.f_to_device(device))
                .at(span)?;
            let scores = model.forward(&x, false)?;
            let last = scores
                .f_select(0, 0)
                .and_then(|s| s.f_select(0, window.len() as i64 - 1))
                .and_then(|s| s.f_to_kind(Kind::Float))
                .and_then(|s| s.f_div_scalar(opts.temperature))
                .at(span)?;
            let next = draw(&last, opts.top_k).at(span)?;
            context.push(next);
            let _ = write!(out, "{}", word(next));
            let _ = out.flush();
        }
        Ok(())
    })?;
    let _ = writeln!(out);
    Ok(())
}

/// One id drawn from `scores` (`[V]`): among the `top_k` largest when given.
fn draw(scores: &Tensor, top_k: Option<i64>) -> Result<i64, tch::TchError> {
    let scores = match top_k {
        Some(k) if k < scores.size()[0] => {
            let (values, _) = scores.f_topk(k, 0, true, true)?;
            let kth = values.f_select(0, k - 1)?;
            let below = scores.f_lt_tensor(&kth)?;
            scores.f_masked_fill(&below, f64::NEG_INFINITY)?
        }
        _ => scores.shallow_clone(),
    };
    let probs = scores.f_softmax(0, Kind::Float)?;
    probs.f_multinomial(1, false)?.f_int64_value(&[0])
}
