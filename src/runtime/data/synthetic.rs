//! Synthetic sources: samples drawn from torch's generator, as `torch.randn` and friends, and
//! sequence tasks whose classes are computed from the drawn token ids.

use kiln::ir::{Generator, SequenceTask};
use kiln::span::Span;
use tch::{Device, Kind, Tensor};

use super::error::{At, DataError};
use super::{fmt_shape, invalid, Raw};

/// Draws `count` samples of each generator after `tch::manual_seed(seed)`.
pub(super) fn read(
    inputs: &Generator,
    targets: &Generator,
    count: u64,
    seed: u64,
    span: Span,
) -> Result<Raw, DataError> {
    tch::manual_seed(seed as i64);
    let x = generate(inputs, count, span)?;
    let y = match targets {
        Generator::Task(task) => classes(*task, inputs, &x, span)?,
        g => generate(g, count, span)?,
    };
    Ok(Raw::new(
        x,
        y,
        "the synthetic inputs".into(),
        "the synthetic targets".into(),
    ))
}

/// `count` samples, as `torch.randn(count, *shape)` and friends.
fn generate(g: &Generator, count: u64, span: Span) -> Result<Tensor, DataError> {
    let too_many = || {
        invalid(
            span,
            format!(
                "{count} synthetic samples of {} are too many values",
                fmt_shape(g.shape())
            ),
            "too many values",
            "use fewer samples",
        )
    };
    let n = i64::try_from(count).map_err(|_| too_many())?;
    let mut size = vec![n];
    size.extend_from_slice(g.shape());
    size.iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(too_many)?;
    let options = (Kind::Float, Device::Cpu);
    let t = match *g {
        Generator::Normal { mean, std, .. } => {
            let t = Tensor::f_randn(size.as_slice(), options).at(span)?;
            if std == 1.0 && mean == 0.0 {
                t
            } else {
                t.f_mul_scalar(std).at(span)?.f_add_scalar(mean).at(span)?
            }
        }
        Generator::Uniform { low, high, .. } => {
            let t = Tensor::f_rand(size.as_slice(), options).at(span)?;
            if low == 0.0 && high == 1.0 {
                t
            } else {
                t.f_mul_scalar(high - low)
                    .at(span)?
                    .f_add_scalar(low)
                    .at(span)?
            }
        }
        Generator::Randint { high, .. } => {
            let high = i64::try_from(high).map_err(|_| {
                invalid(
                    span,
                    format!("`randint({high})` is beyond 64-bit integers"),
                    "bound too large",
                    "use a smaller bound",
                )
            })?;
            Tensor::f_randint(high, size.as_slice(), (Kind::Int64, Device::Cpu)).at(span)?
        }
        Generator::Task(task) => return Err(task_inputs(task, span)),
    };
    Ok(t)
}

/// The classes of each sequence of ids `x` (`[count, S]`, drawn by `inputs`) under `task`:
/// `majority` is the most frequent id (the smallest on ties), `first` is `x[0]`, `argmax` is
/// the position of the largest id (the first on ties), as `torch.argmax` breaks ties; per
/// token (`[count, S]`), `copy` is `x`, `reverse` is `x` flipped and `sort` is `x` sorted
/// ascending.
fn classes(
    task: SequenceTask,
    inputs: &Generator,
    x: &Tensor,
    span: Span,
) -> Result<Tensor, DataError> {
    let &Generator::Randint { high, ref shape } = inputs else {
        return Err(task_inputs(task, span));
    };
    if shape.len() != 1 {
        return Err(task_inputs(task, span));
    }
    match task {
        SequenceTask::Majority => {
            let vocab = i64::try_from(high).map_err(|_| task_inputs(task, span))?;
            x.f_one_hot(vocab)
                .at(span)?
                .f_sum_dim_intlist(Some([1i64].as_slice()), false, None::<Kind>)
                .at(span)?
                .f_argmax(1, false)
                .at(span)
        }
        SequenceTask::First => x.f_select(1, 0).at(span)?.f_contiguous().at(span),
        SequenceTask::Argmax => x.f_argmax(1, false).at(span),
        SequenceTask::Copy => Ok(x.copy()),
        SequenceTask::Reverse => x.f_flip([1]).at(span),
        SequenceTask::Sort => Ok(x.f_sort(1, false).at(span)?.0),
    }
}

/// Sequence-task targets over inputs that are not `randint(V, shape: [S])` (the checker
/// rejects these first).
fn task_inputs(task: SequenceTask, span: Span) -> DataError {
    invalid(
        span,
        format!(
            "`{}()` targets need inputs drawn by `randint(V, shape: [S])`",
            task.name()
        ),
        "needs a sequence of token ids",
        "draw the inputs with `randint(V, shape: [S])`",
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all_train, data, floats, ints};
    use super::super::{load, DType, Source, Targets};
    use super::*;
    use std::path::Path;

    #[test]
    fn synthetic_follows_torch_and_the_seed() {
        // The only test that draws from torch's global generator.
        let source = Source::Synthetic {
            inputs: Generator::Normal {
                shape: vec![3, 4].into(),
                mean: 2.0,
                std: 0.5,
            },
            targets: Generator::Randint {
                shape: vec![].into(),
                high: 5,
            },
            count: 50,
        };
        let d = data(source, Targets::Classes(Some(5)), (0.6, 0.2, 0.2));
        let s = load(&d, &[12], DType::Float, Path::new("."), 9).unwrap();
        assert_eq!(s.train.inputs.size(), vec![30, 12]);
        assert_eq!(s.val.as_ref().unwrap().len(), 10);
        assert_eq!(s.test.as_ref().unwrap().len(), 10);
        let t = &s.train.targets;
        assert_eq!(t.kind(), Kind::Int64);
        assert!(ints(t).iter().all(|&v| (0..5).contains(&v)));
        // As torch.randn(50, 3, 4) * 0.5 + 2 then torch.randint(5, (50,)) after manual_seed(9).
        tch::manual_seed(9);
        let x = Tensor::randn([50, 3, 4], (Kind::Float, Device::Cpu)) * 0.5 + 2.0;
        let y = Tensor::randint(5, [50], (Kind::Int64, Device::Cpu));
        let all = load(
            &data(d.source.clone(), Targets::Classes(Some(5)), all_train()),
            &[12],
            DType::Float,
            Path::new("."),
            9,
        )
        .unwrap();
        assert_eq!(floats(&all.train.inputs), floats(&x));
        assert_eq!(ints(&all.train.targets), ints(&y));
        let again = load(&d, &[12], DType::Float, Path::new("."), 9).unwrap();
        assert_eq!(floats(&again.train.inputs), floats(&s.train.inputs));

        // Uniform values in [low, high), randint token ids.
        let source = Source::Synthetic {
            inputs: Generator::Randint {
                shape: vec![8].into(),
                high: 100,
            },
            targets: Generator::Uniform {
                shape: vec![2].into(),
                low: -1.0,
                high: 3.0,
            },
            count: 20,
        };
        let d = data(source, Targets::Values(vec![2].into()), all_train());
        let s = load(&d, &[8], DType::Int, Path::new("."), 1).unwrap();
        assert_eq!(s.train.inputs.kind(), Kind::Int64);
        assert!(ints(&s.train.inputs).iter().all(|&v| (0..100).contains(&v)));
        assert_eq!(s.train.targets.size(), vec![20, 2]);
        assert!(floats(&s.train.targets)
            .iter()
            .all(|&v| (-1.0..3.0).contains(&v)));

        // Sequence tasks: classes computed from each drawn sequence, as defined.
        for task in SequenceTask::ALL {
            let source = Source::Synthetic {
                inputs: Generator::Randint {
                    shape: vec![6].into(),
                    high: 4,
                },
                targets: Generator::Task(*task),
                count: 200,
            };
            let targets = if task.per_token() {
                Targets::Tokens {
                    classes: None,
                    shape: vec![6].into(),
                }
            } else {
                Targets::Classes(None)
            };
            let d = data(source, targets, all_train());
            let s = load(&d, &[6], DType::Int, Path::new("."), 3).unwrap();
            let (per, size) = if task.per_token() {
                (6, vec![200, 6])
            } else {
                (1, vec![200])
            };
            assert_eq!(s.train.targets.size(), size);
            let (x, y) = (ints(&s.train.inputs), ints(&s.train.targets));
            for (seq, classes) in x.chunks(6).zip(y.chunks(per)) {
                let mut sorted = seq.to_vec();
                sorted.sort();
                let want = match task {
                    SequenceTask::Majority => vec![(0..4)
                        .max_by_key(|t| (seq.iter().filter(|v| *v == t).count(), -t))
                        .unwrap()],
                    SequenceTask::First => vec![seq[0]],
                    SequenceTask::Argmax => {
                        let top = *seq.iter().max().unwrap();
                        vec![seq.iter().position(|v| *v == top).unwrap() as i64]
                    }
                    SequenceTask::Copy => seq.to_vec(),
                    SequenceTask::Reverse => seq.iter().rev().copied().collect(),
                    SequenceTask::Sort => sorted,
                };
                assert_eq!(classes, want, "{task:?} of {seq:?}");
            }
        }
    }
}
