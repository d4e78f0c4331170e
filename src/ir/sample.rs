//! How a source's samples meet the model: the layout they are stored in, the rule that says when
//! a stored sample may be reshaped to another shape ([`sample_fit`]), and the data-versus-model
//! rules built on it: the samples against the input ([`input_fit`]) and the targets against what
//! the experiment makes of them ([`target_fit`]). The checker applies them to the files' headers,
//! the runtime to the loaded arrays, each wording the misfits as its diagnostics.

use super::{numel, Shape, Targets};

/// How a file source's samples are laid out, and how they move to the model's layout as they
/// load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// As the model takes them (channels first: `[C, H, W]`, `[C, L]`): each sample is only
    /// reshaped to the input, as the rule of [`sample_fit`] allows.
    #[default]
    AsStored,
    /// Channels last (`[H, W, C]`, `[L, C]`): each sample, of the declared `shape` when one is
    /// given and as stored otherwise, has its last dimension moved first as it loads, as
    /// `x.permute(0, k, 1, ..., k - 1)` does to a batch.
    ChannelsLast(Option<Shape>),
}

impl Layout {
    /// The per-sample shape the model receives from samples of `stored` (the shape as the file
    /// stores it, or as declared): the last dimension moved first for channels-last data.
    pub fn arranged(&self, stored: &[i64]) -> Shape {
        match (self, stored) {
            (Layout::ChannelsLast(_), [rest @ .., last]) if !rest.is_empty() => {
                let mut s = vec![*last];
                s.extend_from_slice(rest);
                Shape(s)
            }
            _ => Shape(stored.to_vec()),
        }
    }
}

/// How a data sample of one shape meets a model input of another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleFit {
    /// The sample is the input, or a row-major reshape of it that only merges or splits
    /// neighbouring dimensions, so that no value moves to another row of any dimension: `[784]`
    /// from `[28, 28]`, `[1, 28, 28]` from `[28, 28]`, `[3, 64]` from `[3, 8, 8]`.
    Fits,
    /// The same values in the same dimensions, but the channels (the input's first dimension)
    /// are the sample's last: the data is channels last.
    ChannelsLast,
    /// The same number of values in other dimensions: reshaping would scramble them.
    Transposed,
    /// Another number of values.
    Size,
}

/// Whether samples of shape `data` can feed a model whose input is `input`.
///
/// A row-major reshape keeps each value's meaning only when it merges or splits neighbouring
/// dimensions: then the running products of one shape's dimensions (`[3, 8, 8]`: 3, 24, 192)
/// include every running product of the other's (`[3, 64]`: 3, 192). `[32, 32, 3]` against `[3,
/// 32, 32]` (32, 1024, 3072 against 3, 96, 3072) holds the same number of values, but reshaping
/// it would scramble the pixels.
pub fn sample_fit(data: &[i64], input: &[i64]) -> SampleFit {
    if numel(data) != numel(input) {
        return SampleFit::Size;
    }
    if reshapes(data, input) {
        return SampleFit::Fits;
    }
    let moved = Layout::ChannelsLast(None).arranged(data);
    if reshapes(&moved, input) {
        SampleFit::ChannelsLast
    } else {
        SampleFit::Transposed
    }
}

/// Why a source's stored samples do not reach the model's input, by [`input_fit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputMisfit {
    /// The declared `shape` holds another number of values than a stored sample.
    DeclaredSize,
    /// The declared `shape` holds a stored sample's values in other dimensions; `channels_last`
    /// when they are the sample's with its channels moved.
    DeclaredOrder {
        /// Whether the declared shape is the stored one, channels last.
        channels_last: bool,
    },
    /// `layout: channels_last` on samples of fewer than two dimensions: no channels to move.
    FlatLayout,
    /// The sample the model receives holds another number of values than the input.
    Size,
    /// The sample the model receives holds the input's values in other dimensions;
    /// `channels_last` when they are the input's with its channels last.
    Order {
        /// Whether the sample is the input, channels last.
        channels_last: bool,
    },
}

/// The one rule of how a source's samples, stored as `stored`, reach a model whose input is
/// `input`: read as the declared `shape` when there is one (the same values, reshaped only as
/// [`sample_fit`] allows), arranged by the layout (channels last moved first), then reshaped to
/// the input as [`sample_fit`] allows. Used by the checker on the files' headers and by the
/// runtime on the loaded arrays.
pub fn input_fit(
    stored: &[i64],
    declared: Option<&[i64]>,
    layout: &Layout,
    input: &[i64],
) -> Result<(), InputMisfit> {
    let sample = match declared {
        Some(declared) => match sample_fit(stored, declared) {
            SampleFit::Fits => declared,
            SampleFit::Size => return Err(InputMisfit::DeclaredSize),
            fit => {
                return Err(InputMisfit::DeclaredOrder {
                    channels_last: fit == SampleFit::ChannelsLast,
                })
            }
        },
        None => stored,
    };
    if matches!(layout, Layout::ChannelsLast(_)) && sample.len() < 2 {
        return Err(InputMisfit::FlatLayout);
    }
    match sample_fit(&layout.arranged(sample), input) {
        SampleFit::Fits => Ok(()),
        SampleFit::Size => Err(InputMisfit::Size),
        fit => Err(InputMisfit::Order {
            channels_last: fit == SampleFit::ChannelsLast,
        }),
    }
}

/// Why a source's inputs and targets do not count the same samples, by [`count_fit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountMisfit {
    /// The inputs (`inputs: true`) or the targets are a single value, not one row per sample.
    NotPerSample {
        /// Whether it is the inputs.
        inputs: bool,
    },
    /// They count different samples.
    Differ {
        /// The inputs' samples.
        inputs: u64,
        /// The targets' rows.
        targets: u64,
    },
    /// They count none.
    NoSamples,
}

/// The one rule of a source's sample count, from its inputs' and targets' full shapes (the
/// first dimension counts the samples): both per sample, the same count, at least one. Used by
/// the checker on the files' headers and by the runtime on the loaded arrays.
pub fn count_fit(inputs: &[u64], targets: &[u64]) -> Result<u64, CountMisfit> {
    let Some(&n) = inputs.first() else {
        return Err(CountMisfit::NotPerSample { inputs: true });
    };
    let Some(&m) = targets.first() else {
        return Err(CountMisfit::NotPerSample { inputs: false });
    };
    if n != m {
        return Err(CountMisfit::Differ {
            inputs: n,
            targets: m,
        });
    }
    if n == 0 {
        return Err(CountMisfit::NoSamples);
    }
    Ok(n)
}

/// Why a source's targets do not fit what the experiment makes of them, by [`target_fit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetMisfit {
    /// Class labels (or targets of a class loss) that are not one value per sample.
    NotClassLabels,
    /// A class per token whose count is not the tokens'.
    NotTokenClasses,
    /// Values of another size than declared.
    Size,
}

/// The one rule of the targets' per-sample shape `per_sample` against what the experiment
/// makes of them: one class label per sample (also for undeclared targets under a class loss,
/// `class_loss`), a class per token of `tokens`, or the declared values.
pub fn target_fit(
    per_sample: &[i64],
    targets: &Targets,
    tokens: &[i64],
    class_loss: bool,
) -> Result<(), TargetMisfit> {
    let numel = |s: &[i64]| s.iter().fold(1i64, |n, d| n.saturating_mul(*d));
    let per = numel(per_sample);
    match targets {
        Targets::Classes(_) if per != 1 => Err(TargetMisfit::NotClassLabels),
        Targets::Unknown if class_loss && per != 1 => Err(TargetMisfit::NotClassLabels),
        Targets::Tokens { .. } if per != numel(tokens) => Err(TargetMisfit::NotTokenClasses),
        Targets::Values(shape) if per != numel(shape) => Err(TargetMisfit::Size),
        _ => Ok(()),
    }
}

/// Whether a row-major reshape between `a` and `b` (of as many values) only merges or splits
/// neighbouring dimensions.
fn reshapes(a: &[i64], b: &[i64]) -> bool {
    let products = |s: &[i64]| {
        let mut running = 1i64;
        let mut out: Vec<i64> = s
            .iter()
            .map(|d| {
                running = running.saturating_mul(*d);
                running
            })
            .filter(|p| *p != 1)
            .collect();
        out.dedup();
        out
    };
    let (pa, pb) = (products(a), products(b));
    let within = |small: &[i64], large: &[i64]| small.iter().all(|p| large.contains(p));
    within(&pa, &pb) || within(&pb, &pa)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshapes_that_keep_the_values_in_place_fit() {
        assert_eq!(sample_fit(&[28, 28], &[784]), SampleFit::Fits);
        assert_eq!(sample_fit(&[3072], &[3, 32, 32]), SampleFit::Fits);
        assert_eq!(sample_fit(&[28, 28], &[1, 28, 28]), SampleFit::Fits);
        assert_eq!(sample_fit(&[1, 28, 28], &[28, 28, 1]), SampleFit::Fits);
        assert_eq!(sample_fit(&[3, 32, 32], &[3, 32, 32]), SampleFit::Fits);
        assert_eq!(sample_fit(&[], &[1]), SampleFit::Fits);
        assert_eq!(sample_fit(&[3, 8, 8], &[3, 64]), SampleFit::Fits);
        assert_eq!(sample_fit(&[2, 3, 4], &[6, 4]), SampleFit::Fits);
    }

    #[test]
    fn channels_last_and_other_transposes_do_not() {
        assert_eq!(
            sample_fit(&[32, 32, 3], &[3, 32, 32]),
            SampleFit::ChannelsLast
        );
        assert_eq!(sample_fit(&[100, 8], &[8, 100]), SampleFit::ChannelsLast);
        assert_eq!(
            sample_fit(&[32, 3, 32], &[3, 32, 32]),
            SampleFit::Transposed
        );
        assert_eq!(sample_fit(&[4, 6], &[6, 4, 1]), SampleFit::ChannelsLast);
        assert_eq!(sample_fit(&[4, 6], &[3, 8]), SampleFit::Transposed);
        assert_eq!(sample_fit(&[8, 8, 3], &[3, 64]), SampleFit::ChannelsLast);
        assert_eq!(sample_fit(&[2, 12], &[6, 4]), SampleFit::Transposed);
        assert_eq!(sample_fit(&[3, 3], &[784]), SampleFit::Size);
    }

    #[test]
    fn channels_last_data_is_arranged_channels_first() {
        let l = Layout::ChannelsLast(None);
        assert_eq!(*l.arranged(&[32, 32, 3]), vec![3, 32, 32]);
        assert_eq!(*l.arranged(&[100, 8]), vec![8, 100]);
        assert_eq!(*l.arranged(&[5]), vec![5]);
        assert_eq!(*Layout::AsStored.arranged(&[32, 32, 3]), vec![32, 32, 3]);
    }

    #[test]
    fn samples_reach_the_input_through_the_declared_shape_and_the_layout() {
        let last = Layout::ChannelsLast(None);
        assert_eq!(
            input_fit(&[784], None, &Layout::AsStored, &[1, 28, 28]),
            Ok(())
        );
        assert_eq!(input_fit(&[32, 32, 3], None, &last, &[3, 32, 32]), Ok(()));
        assert_eq!(
            input_fit(&[3072], Some(&[32, 32, 3][..]), &last, &[3, 32, 32]),
            Ok(())
        );
        assert_eq!(
            input_fit(&[3072], Some(&[32, 32, 2][..]), &last, &[3, 32, 32]),
            Err(InputMisfit::DeclaredSize)
        );
        assert_eq!(
            input_fit(&[32, 32, 3], Some(&[3, 32, 32][..]), &last, &[32, 32, 3]),
            Err(InputMisfit::DeclaredOrder {
                channels_last: true
            })
        );
        assert_eq!(
            input_fit(&[12], None, &last, &[12]),
            Err(InputMisfit::FlatLayout)
        );
        assert_eq!(
            input_fit(&[32, 32, 3], None, &Layout::AsStored, &[3, 32, 32]),
            Err(InputMisfit::Order {
                channels_last: true
            })
        );
        assert_eq!(
            input_fit(&[3, 3], None, &Layout::AsStored, &[784]),
            Err(InputMisfit::Size)
        );
    }

    #[test]
    fn targets_fit_classes_tokens_and_values() {
        let classes = Targets::Classes(Some(10));
        assert_eq!(target_fit(&[], &classes, &[], false), Ok(()));
        assert_eq!(target_fit(&[1], &classes, &[], false), Ok(()));
        assert_eq!(
            target_fit(&[4], &classes, &[], false),
            Err(TargetMisfit::NotClassLabels)
        );
        assert_eq!(target_fit(&[4], &Targets::Unknown, &[], false), Ok(()));
        assert_eq!(
            target_fit(&[4], &Targets::Unknown, &[], true),
            Err(TargetMisfit::NotClassLabels)
        );
        let tokens = Targets::Tokens {
            classes: None,
            shape: Shape(vec![16]),
        };
        assert_eq!(target_fit(&[16], &tokens, &[16], false), Ok(()));
        assert_eq!(
            target_fit(&[15], &tokens, &[16], false),
            Err(TargetMisfit::NotTokenClasses)
        );
        let values = Targets::Values(Shape(vec![2, 3]));
        assert_eq!(target_fit(&[6], &values, &[], false), Ok(()));
        assert_eq!(
            target_fit(&[5], &values, &[], false),
            Err(TargetMisfit::Size)
        );
    }
}
