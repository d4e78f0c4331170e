//! The `data` block: sources, generators, splits, batching and normalisation.

use super::cx::{Cx, Range};
use super::read::block;
use super::source::{check_source, SourceOut};
use super::split::SplitOut;
use super::words::DATA;
use crate::diagnostic::problem::{Arguments, Inconsistent, Names, OutOfRange, Strategies};
use crate::diagnostic::Problem;
use crate::ir::{DType, Data, DataPlacement, Normalize, Shape, Source};
use crate::span::Span;
use crate::syntax::ast::{Statement, ValueKind};

/// The checked data block with what the model checker needs.
pub struct DataOut {
    /// The typed data settings.
    pub data: Data,
    /// The declared per-sample input shape, when the source declares one.
    pub sample: Option<(Shape, Span)>,
    /// Input element type.
    pub dtype: DType,
    /// Exclusive bound of integer inputs.
    pub int_bound: Option<u64>,
    /// The `per_token: true` of a file source whose targets are a class per token.
    pub per_token: Option<Span>,
}

/// Checks a `data { ... }` statement.
pub fn check_data(cx: &mut Cx, stmt: &Statement) -> Option<DataOut> {
    cx.block_statement(stmt);
    let (_, seen) = block(
        cx,
        stmt,
        "data setting",
        DATA,
        &[],
        "data { source ...; batch 64 }",
    )?;
    let missing = |cx: &mut Cx, settings: &'static [&'static str], example: &'static str| {
        cx.report(Problem::Names(Names::MissingSetting {
            span: stmt.keyword.span,
            block: "data",
            settings,
            example,
        }));
    };
    let split = seen.get("split").map_or(Some(SplitOut::default()), |s| {
        super::split::check_split(cx, s)
    });
    let source = match (
        seen.get("source"),
        split.as_ref().and_then(|s| s.train.as_ref()),
    ) {
        (Some(s), Some(train)) => {
            cx.report(Problem::Strategies(Strategies::Inconsistent {
                span: train.span,
                situation: Inconsistent::TwoTrainingSources { source: s.span },
            }));
            None
        }
        (Some(s), None) => check_source(cx, s),
        (None, Some(train)) => Some(train.clone()),
        (None, None) if split.is_none() => None,
        (None, None) => {
            missing(
                cx,
                &["source"],
                "source synthetic(inputs: normal([784]), targets: randint(10), count: 1000)",
            );
            None
        }
    };
    let batch = match seen.get("batch") {
        Some(s) => cx
            .single(s)
            .and_then(|v| cx.uint_min(v, "the batch size", 1).map(|b| (b, v.span))),
        None => {
            missing(cx, &["batch"], "batch 64");
            None
        }
    };
    let shuffle = seen
        .get("shuffle")
        .map_or(Some(true), |s| cx.single(s).and_then(|v| cx.boolean(v)));
    let drop_last = seen
        .get("drop_last")
        .map_or(Some(false), |s| cx.single(s).and_then(|v| cx.boolean(v)));
    let placement = seen
        .get("placement")
        .map_or(Some(DataPlacement::Auto), |s| {
            cx.single(s)
                .and_then(|v| cx.choice(v, "data placement", &DataPlacement::WORDS))
                .and_then(DataPlacement::from_word)
        });
    let eval_batch = seen.get("eval_batch").map_or(Some(None), |s| {
        cx.single(s)
            .and_then(|v| cx.uint_min(v, "the evaluation batch size", 1))
            .map(Some)
    });
    let normalize = match seen.get("normalize") {
        None => Some(None),
        Some(s) => check_normalize(cx, s).map(Some),
    };
    let split = split?;
    let source = source?;
    let (batch, batch_span) = batch?;
    let (val, test) = (
        super::split::held_out(cx, &split.val, "val", &source),
        super::split::held_out(cx, &split.test, "test", &source),
    );
    let SourceOut {
        source,
        span: source_span,
        sample,
        dtype,
        int_bound,
        targets,
        scale,
        layout,
        per_token,
    } = source;
    if let Source::Synthetic { count, .. } = &source {
        let (train, _, _) = split.split.counts(*count);
        if train < batch {
            cx.report(Problem::Names(Names::OutOfRange {
                span: batch_span,
                situation: OutOfRange::BatchOverSamples {
                    batch,
                    train,
                    count: *count,
                    source: source_span,
                },
            }));
            return None;
        }
    }
    Some(DataOut {
        data: Data {
            source,
            source_span,
            split: split.split,
            scale,
            layout,
            val: val?,
            test: test?,
            batch,
            batch_span,
            drop_last: drop_last?,
            placement: placement?,
            eval_batch: eval_batch?.unwrap_or(batch),
            shuffle: shuffle?,
            normalize: normalize?,
            targets,
            ignore_label: None,
            token_vocab: None,
            read: None,
        },
        sample,
        dtype,
        int_bound,
        per_token,
    })
}

fn check_normalize(cx: &mut Cx, stmt: &Statement) -> Option<Normalize> {
    cx.plain_statement(stmt, true);
    let b = cx.bind(
        "normalize",
        stmt.args.as_ref(),
        stmt.keyword.span,
        &["mean", "std"],
    );
    let list = |cx: &mut Cx, p: &str, range: Range| -> Option<Vec<f64>> {
        let Some(v) = b.get(p) else {
            cx.missing("normalize", p, b.span);
            return None;
        };
        match &v.kind {
            ValueKind::List(items) => items
                .iter()
                .map(|i| cx.number_in(i, &format!("`{p}`"), range))
                .collect(),
            _ => cx.number_in(v, &format!("`{p}`"), range).map(|x| vec![x]),
        }
    };
    let mean = list(cx, "mean", Range::Any);
    let std = list(cx, "std", Range::Positive);
    let (mean, std) = (mean?, std?);
    if mean.len() != std.len() {
        cx.report(Problem::Names(Names::WrongArguments {
            span: b.span,
            situation: Arguments::NormalizeLengths {
                means: mean.len(),
                stds: std.len(),
            },
        }));
        return None;
    }
    Some(Normalize { mean, std })
}
