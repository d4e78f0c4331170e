//! The effective settings of a trial: every statement of its experiment once `extends` is
//! resolved and its sweeps substituted, as `(path, value)` pairs in the order the merged
//! experiment gives them, each value on one line as the language writes it (comments and line
//! breaks left out). A run records them in its report, so `kiln compare` can show the settings
//! that differ between two runs whatever files they were written in.
//!
//! Paths name settings by their blocks (`data.batch`, `train.loss`, `optimizer`), layers by
//! their qualified names as placements and compression targets name them (`model.fc1`,
//! `model.encoder.2`), and a keyword a block repeats by its occurrence (`compress.prune[2]`).

use crate::span::Sources;
use crate::syntax::ast::{Args, Statement, Value, ValueKind};

/// The effective settings of the experiment statement `exp` (merged and substituted).
pub fn settings(exp: &Statement, sources: &Sources) -> Vec<(String, String)> {
    let mut out = vec![("experiment".to_string(), values(&exp.values, sources))];
    if let Some(body) = &exp.body {
        let statements: Vec<&Statement> = body.statements.iter().collect();
        block(&statements, "", false, sources, &mut out);
    }
    out
}

/// The settings of a block's statements under `prefix` (`data.`); `model`: the statements are
/// layers, blocks and residuals.
fn block(
    statements: &[&Statement],
    prefix: &str,
    model: bool,
    sources: &Sources,
    out: &mut Vec<(String, String)>,
) {
    let count = |kw: &str| statements.iter().filter(|s| s.keyword.name == kw).count();
    let mut seen: Vec<&str> = Vec::new();
    let mut index = 0;
    for s in statements {
        let kw = s.keyword.name.as_str();
        seen.push(kw);
        let inner: Vec<&Statement> = s.body.iter().flat_map(|b| &b.statements).collect();
        if model && kw != "input" {
            // Named as the checker names layers: a label, a block's name, or the position among
            // the block's statements (`input` aside).
            let name = match (&s.label, kw, s.values.first().map(|v| &v.kind)) {
                (Some(label), _, _) => label.name.clone(),
                (None, "block", Some(ValueKind::Path(name))) => name.clone(),
                _ => index.to_string(),
            };
            index += 1;
            let path = format!("{prefix}{name}");
            out.push((path.clone(), statement(s, sources)));
            block(&inner, &format!("{path}."), true, sources, out);
            continue;
        }
        let path = match count(kw) {
            1 => format!("{prefix}{kw}"),
            _ => format!(
                "{prefix}{kw}[{}]",
                seen.iter().filter(|k| **k == kw).count()
            ),
        };
        let own = setting(s, sources);
        if s.body.is_none() || !own.is_empty() {
            out.push((path.clone(), own));
        }
        if s.body.is_some() {
            block(&inner, &format!("{path}."), kw == "model", sources, out);
        }
    }
}

/// A layer, block or residual as written: `linear(64)`, `block encoder on cuda:1`.
fn statement(s: &Statement, sources: &Sources) -> String {
    let mut text = s.keyword.name.clone();
    if let Some(args) = &s.args {
        text += &arguments(args, sources);
    }
    let rest = values(&s.values, sources);
    if !rest.is_empty() {
        text += " ";
        text += &rest;
    }
    text
}

/// A setting's value: its values (`32`, `adam(lr: 1e-3)`), or its call with its keyword when it
/// takes arguments (`split(train: 0.8, val: 0.2)`).
fn setting(s: &Statement, sources: &Sources) -> String {
    match &s.args {
        Some(_) => statement(s, sources),
        None => values(&s.values, sources),
    }
}

fn values(values: &[Value], sources: &Sources) -> String {
    values
        .iter()
        .map(|v| value(v, sources))
        .collect::<Vec<_>>()
        .join(" ")
}

fn arguments(args: &Args, sources: &Sources) -> String {
    let items: Vec<String> = args
        .items
        .iter()
        .map(|a| match &a.name {
            Some(name) => format!("{}: {}", name.name, value(&a.value, sources)),
            None => value(&a.value, sources),
        })
        .collect();
    format!("({})", items.join(", "))
}

/// One value as the language writes it. Numbers and strings keep their text; a sweep's value
/// made by `range` or `logspace` has none and is written as the number it is.
fn value(v: &Value, sources: &Sources) -> String {
    match &v.kind {
        ValueKind::Number { value, .. } if v.span.is_empty() => format!("{value}"),
        ValueKind::Number { .. } => sources
            .slice(v.span)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        ValueKind::Str(_) => sources.slice(v.span).to_string(),
        ValueKind::Bool(b) => b.to_string(),
        ValueKind::Device(name, index) => format!("{name}:{index}"),
        ValueKind::Path(p) => p.clone(),
        ValueKind::List(items) => {
            let items: Vec<String> = items.iter().map(|i| value(i, sources)).collect();
            format!("[{}]", items.join(", "))
        }
        ValueKind::Call(name, args) => format!("{}{}", name.name, arguments(args, sources)),
        ValueKind::Arrow(a, b) => format!("{} -> {}", value(a, sources), value(b, sources)),
        ValueKind::Sweep(inner) => format!("sweep {}", value(inner, sources)),
    }
}

#[cfg(test)]
mod tests {
    use crate::check::{check_path, MemoryLoader, Options};
    use std::path::Path;

    #[test]
    fn settings_are_paths_and_values_on_one_line() {
        let mut loader = MemoryLoader::default();
        loader.insert(
            "e.exp",
            "experiment \"e\" {\n  seed 3\n  data {\n    source synthetic(inputs: normal([8]), targets: randint(2), count: 64)\n    split(train: 0.75,  # most\n      val: 0.25)\n    batch sweep [8, 16]\n  }\n  model {\n    input [8]\n    fc: linear(4)\n    relu\n    block head {\n      linear(2)\n    }\n  }\n  optimizer sgd(lr: 1e-1)\n  train {\n    steps 10\n    loss cross_entropy\n  }\n}\n",
        );
        let options = Options {
            effective_settings: true,
            ..Options::default()
        };
        let c = check_path(Path::new("e.exp"), &loader, &options);
        assert!(!c.has_errors(), "{:#?}", c.diagnostics);
        let s = &c.trials[1].settings;
        let get = |k: &str| {
            s.iter()
                .find(|(p, _)| p == k)
                .map(|(_, v)| v.as_str())
                .unwrap_or_else(|| panic!("no {k} in {s:?}"))
        };
        assert_eq!(get("experiment"), "\"e\"");
        assert_eq!(get("seed"), "3");
        assert_eq!(get("data.split"), "split(train: 0.75, val: 0.25)");
        assert_eq!(get("data.batch"), "16");
        assert_eq!(get("model.input"), "[8]");
        assert_eq!(get("model.fc"), "linear(4)");
        assert_eq!(get("model.1"), "relu");
        assert_eq!(get("model.head"), "block head");
        assert_eq!(get("model.head.0"), "linear(2)");
        assert_eq!(get("optimizer"), "sgd(lr: 1e-1)");
        assert_eq!(get("train.loss"), "cross_entropy");
    }
}
