//! What a run computes (its fingerprint, which a resume may not change, and the settings it
//! may change) and the data's digest: compared on resume and by the ranks of a distributed run.

use tch::{TchError, Tensor};

use super::checkpoint::Fingerprint;
use super::data::Splits;
use kiln::diagnostic::problem::Change;
use kiln::ir::{Compression, Experiment, Parallel};

/// What the run in `e` computes and how it is set up, compared on resume; `data` is the loaded
/// data's digest ([`data_digest`]). Values read like the language (`adamw(eps: 1e-8, ...)`,
/// `3000 steps`), so a refused resume names its differences plainly.
pub fn fingerprint(e: &Experiment, data: &str) -> Fingerprint {
    let t = &e.train;
    let compression: Vec<String> = e
        .compression
        .iter()
        .map(|c| match c {
            Compression::Prune {
                targets,
                method,
                amount,
                schedule,
                ..
            } => format!(
                "prune {} of {} by {} {}",
                amount,
                names(targets),
                words(method),
                words(schedule)
            ),
            Compression::Quantize {
                targets, scheme, ..
            } => format!("quantize {} to {}", names(targets), words(scheme)),
        })
        .collect();
    // A sharded run that computes as one process does is fingerprinted as one process: its
    // micro-batches are one process's, the ranks' rows together.
    let micro = match sharding(e) {
        Some(_) => t.micro_batch * e.parallel.data_parallel_size(),
        None => t.micro_batch,
    };
    let computes = [
        (
            "input",
            format!("{} {:?}", e.model.input, e.model.input_dtype),
        ),
        (
            "optimizer",
            format!(
                "{}, weight_decay {}{}",
                words(&e.optimizer.kind),
                e.optimizer.weight_decay,
                e.optimizer
                    .groups
                    .iter()
                    .map(|g| format!(
                        "; group of {}: {}, lr {}, weight_decay {}",
                        g.select.join(", "),
                        words(&g.kind),
                        g.lr,
                        g.weight_decay
                    ))
                    .collect::<String>()
            ),
        ),
        ("loss", words(&t.loss)),
        ("data source", words(&e.data.source)),
        ("data", data.to_string()),
        ("normalize", words(&e.data.normalize)),
        ("targets", words(&e.data.targets)),
        ("split", words(&e.data.split)),
        ("seed", e.seed.to_string()),
        (
            "batch",
            format!(
                "{} (micro-batches of {}, accumulate {})",
                e.data.batch, micro, t.accumulate
            ),
        ),
        (
            "shuffle",
            // `drop_last` changes the batches an epoch trains on; said only when set, so that
            // the fingerprints of earlier runs stay the same.
            format!(
                "{}{}",
                e.data.shuffle,
                if e.data.drop_last { ", drop_last" } else { "" }
            ),
        ),
        ("precision", t.precision.to_string()),
        ("strategy", strategy(e)),
        ("compression", compression.join("; ")),
        (
            "clip",
            format!(
                "clip_norm {}, clip_value {}",
                words(&t.clip_norm),
                words(&t.clip_value)
            ),
        ),
    ];
    let mut settings = vec![
        ("learning rate", e.optimizer.lr.to_string()),
        ("schedule", words(&e.schedule)),
        ("length", words(&t.length)),
        ("eval_every", words(&t.eval_every)),
        ("metrics", words(&t.metrics)),
        ("checkpoint", words(&t.checkpoint)),
        ("early_stop", words(&t.early_stop)),
    ];
    if let Some((name, ranks)) = sharding(e) {
        settings.push((name, ranks));
    }
    let tensor = e.parallel.tensor_degree();
    if tensor > 1 {
        settings.push(("tensor parallel", format!("{tensor} ranks")));
    }
    let own = |v: &[(&str, String)]| {
        v.iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect()
    };
    Fingerprint {
        layers: kiln::ir::layers(&e.model.nodes)
            .iter()
            .map(|l| {
                format!(
                    "{} {} {} {}",
                    l.name,
                    l.kind.kind().name(),
                    l.output,
                    l.params
                )
            })
            .collect(),
        computes: own(&computes),
        settings: own(&settings),
    }
}

/// The strategy as what the run computes. A distributed run (`ddp`, `fsdp`) computes every
/// step's gradient as one process on the whole batch does, unless how the batch is split between
/// the ranks matters (batch norm; dropout whose masks are not placed by rows): then it is a run
/// without a strategy, and its ranks a setting ([`sharding`]) that a resume may change (another
/// world size, or none). Tensor parallel computes what its data ranks compute with every layer
/// whole ([`data_only`]), so its degree is a setting too. Other strategies are what they say.
fn strategy(e: &Experiment) -> String {
    match (&data_only(&e.parallel), kiln::ir::split_matters(e)) {
        (Parallel::Distributed { .. }, false) => words(&Parallel::None),
        (
            Parallel::Distributed {
                sharding: Some(_), ..
            },
            true,
        ) => fsdp_words(&data_only(&e.parallel)),
        (other, _) => words(other),
    }
}

/// The strategy without its tensor dimension: the mesh of its data ranks (no strategy when
/// there is one).
fn data_only(parallel: &Parallel) -> Parallel {
    match parallel {
        Parallel::Distributed {
            world_size, tensor, ..
        } if *tensor > 1 => match world_size / tensor {
            1 => Parallel::None,
            data => {
                let mut p = parallel.clone();
                if let Parallel::Distributed {
                    world_size, tensor, ..
                } = &mut p
                {
                    (*world_size, *tensor) = (data, 1);
                }
                p
            }
        },
        other => other.clone(),
    }
}

/// The ranks of a run whose strategy is a setting ([`strategy`]): `("sharding", fsdp(...))`
/// or `("data parallel", ddp(...))`.
fn sharding(e: &Experiment) -> Option<(&'static str, String)> {
    let parallel = data_only(&e.parallel);
    match &parallel {
        Parallel::Distributed {
            sharding: Some(_), ..
        } if !kiln::ir::split_matters(e) => Some(("sharding", fsdp_words(&parallel))),
        Parallel::Distributed { sharding: None, .. } if !kiln::ir::split_matters(e) => {
            Some(("data parallel", words(&parallel)))
        }
        Parallel::None
        | Parallel::Model
        | Parallel::Data { .. }
        | Parallel::Pipeline { .. }
        | Parallel::Distributed { .. } => None,
    }
}

/// `fsdp(backend: gloo, world_size: 2, reshard_after_forward: true)`.
fn fsdp_words(parallel: &Parallel) -> String {
    match parallel {
        Parallel::Distributed {
            backend,
            world_size,
            sharding: Some(s),
            ..
        } => format!(
            "fsdp(backend: {}, world_size: {world_size}, reshard_after_forward: {})",
            words(backend),
            s.reshard_after_forward
        ),
        other => words(other),
    }
}

/// The layers named by compression targets, as `fc1, fc2.weight`.
fn names(targets: &[kiln::ir::Target]) -> String {
    targets
        .iter()
        .map(|t| match &t.param {
            Some(p) => format!("{}.{p}", t.layer),
            None => t.layer.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The loaded data's digest: each split's size and the CRC-32 of its inputs' and targets' bytes,
/// in order, so a resume notices changed data, even in a file of the same name.
pub fn data_digest(splits: &Splits) -> Result<String, TchError> {
    let mut parts = Vec::new();
    for (name, set) in [
        ("train", Some(&splits.train)),
        ("val", splits.val.as_ref()),
        ("test", splits.test.as_ref()),
    ] {
        let Some(set) = set else { continue };
        let mut hasher = crc32fast::Hasher::new();
        for t in [&set.inputs, &set.targets] {
            hash_tensor(t, &mut hasher)?;
        }
        parts.push(format!(
            "{name} {} samples {:08x}",
            set.len(),
            hasher.finalize()
        ));
    }
    Ok(parts.join(", "))
}

/// Feeds a tensor's bytes to `hasher`, a slice of rows at a time (the data may be large).
fn hash_tensor(t: &Tensor, hasher: &mut crc32fast::Hasher) -> Result<(), TchError> {
    let rows = t.size().first().copied().unwrap_or(0);
    let per_row = t.numel() / usize::try_from(rows.max(1)).unwrap_or(1);
    let chunk = i64::try_from((1 << 20) / per_row.max(1))
        .unwrap_or(1)
        .max(1);
    let elt = t.f_kind()?.elt_size_in_bytes();
    let mut buf = Vec::new();
    let mut start = 0;
    while start < rows {
        let len = chunk.min(rows - start);
        let part = t.f_narrow(0, start, len)?.f_contiguous()?;
        let numel = part.numel();
        buf.resize(numel * elt, 0);
        part.f_copy_data_u8(&mut buf, numel)?;
        hasher.update(&buf);
        start += len;
    }
    Ok(())
}

/// A setting as the language would write it: `name(key: value, ...)` for a variant with fields,
/// `3000 steps` for a quantity, `none` for nothing.
pub fn words<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value).map_or_else(|e| format!("<{e}>"), |v| spoken(&v))
}

/// A JSON value as [`words`] writes it.
fn spoken(v: &serde_json::Value) -> String {
    use serde_json::Value;
    let fields = |m: &serde_json::Map<String, Value>| {
        m.iter()
            .map(|(k, v)| format!("{k}: {}", spoken(v)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match v {
        Value::Null => "none".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(spoken).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) if m.len() == 1 => {
            let (k, inner) = m
                .iter()
                .next()
                .map_or(("", &Value::Null), |(k, v)| (k.as_str(), v));
            match inner {
                Value::Number(n) => format!("{n} {k}"),
                Value::Null => k.to_string(),
                Value::Object(f) => format!("{k}({})", fields(f)),
                other => format!("{k}({})", spoken(other)),
            }
        }
        Value::Object(m) => fields(m),
    }
}

/// Compares the checkpoint's fingerprint `old` with the experiment's `new`: every difference in
/// what the run computes (a resume is refused when there is one), and the changed settings as
/// `what: was → now` (recorded in the run's history).
pub fn differences(
    e: &Experiment,
    old: &Fingerprint,
    new: &Fingerprint,
) -> (Vec<Change>, Vec<String>) {
    let layers = kiln::ir::layers(&e.model.nodes);
    let mut refused = Vec::new();
    for i in 0..old.layers.len().max(new.layers.len()) {
        let (was, now) = (old.layers.get(i), new.layers.get(i));
        if was != now {
            refused.push(Change {
                what: format!("layer {}", i + 1),
                was: was.cloned(),
                now: now.cloned(),
                span: layers.get(i).map(|l| l.span),
            });
        }
    }
    let span_of = |what: &str| match what {
        "optimizer" => Some(e.optimizer.span),
        "loss" => Some(e.train.loss_span),
        "data source" | "data" | "split" | "normalize" | "targets" | "shuffle" => {
            Some(e.data.source_span)
        }
        "batch" => Some(e.data.batch_span),
        _ => None,
    };
    for (what, was, now) in pairs(&old.computes, &new.computes) {
        refused.push(Change {
            span: span_of(&what),
            what,
            was,
            now,
        });
    }
    let show = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    let changed = pairs(&old.settings, &new.settings)
        .into_iter()
        .map(|(what, was, now)| format!("{what}: {} → {}", show(was), show(now)))
        .collect();
    (refused, changed)
}

/// The entries of two `(what, value)` lists that differ, in order, as `(what, was, now)`.
fn pairs(
    old: &[(String, String)],
    new: &[(String, String)],
) -> Vec<(String, Option<String>, Option<String>)> {
    let find =
        |v: &[(String, String)], k: &str| v.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let mut keys: Vec<&String> = new.iter().map(|(k, _)| k).collect();
    keys.extend(
        old.iter()
            .map(|(k, _)| k)
            .filter(|k| find(new, k).is_none()),
    );
    keys.into_iter()
        .filter_map(|k| {
            let (was, now) = (find(old, k), find(new, k));
            (was != now).then(|| (k.clone(), was, now))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::words;
    use kiln::ir::{Duration, Schedule, Targets};

    #[test]
    fn settings_read_like_the_language() {
        assert_eq!(words(&Duration::Steps(3000)), "3000 steps");
        assert_eq!(words(&Targets::Classes(Some(10))), "10 classes");
        assert_eq!(words(&None::<f64>), "none");
        assert_eq!(words(&Schedule::Constant), "constant");
        let cosine = Schedule::Cosine {
            warmup: Some(Duration::Epochs(1)),
            min_lr: 0.5,
            start: None,
        };
        assert_eq!(words(&cosine), "cosine(min_lr: 0.5, warmup: 1 epochs)");
        assert_eq!(words(&vec![1, 2]), "[1, 2]");
    }
}
