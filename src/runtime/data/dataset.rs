//! The loaded data: a [`Dataset`] of rows of samples, or a token stream whose samples are
//! windows of it ([`Windows`]), and the [`Splits`] of an experiment.

use tch::{Device, TchError, Tensor};

use super::augment::{Augmentation, Pixels};

/// Samples in memory on the CPU.
///
/// `inputs` is `[N, ..model input shape]` (`Kind::Float`, `Kind::Int64` for token ids, or
/// `Kind::Uint8` for images, made floats as they are gathered: [`Pixels`]);
/// `targets` is `[N]` `Int64` class indices or `[N, ..shape]` `Float` values. A token stream
/// (`windows`) holds its int64 ids once, `[L]`, as both: its samples are windows of it.
#[derive(Debug)]
pub struct Dataset {
    /// The model's inputs, one row per sample (a token stream's ids).
    pub inputs: Tensor,
    /// The targets, one row per sample (a token stream's ids).
    pub targets: Tensor,
    /// A token stream's windows; `None` for rows of samples.
    pub windows: Option<Windows>,
    /// How training batches of images are augmented; `None` for other data and held-out
    /// splits.
    pub augment: Option<Augmentation>,
    /// Images kept as bytes (`inputs` uint8): how a gathered batch becomes the model's floats;
    /// `None` for other data.
    pub pixels: Option<Pixels>,
}

/// How a token stream's samples are cut from it: sample `i` is the `block` ids from offset `i
/// · stride`, its targets the `block` ids one further on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    /// Ids per window.
    pub block: i64,
    /// Offset between consecutive samples.
    pub stride: i64,
}

impl Dataset {
    /// Rows of samples.
    pub fn rows(inputs: Tensor, targets: Tensor) -> Dataset {
        Dataset {
            inputs,
            targets,
            windows: None,
            augment: None,
            pixels: None,
        }
    }

    /// The windows of a token stream `ids` (int64 `[L]`).
    pub fn stream(ids: Tensor, block: i64, stride: i64) -> Dataset {
        Dataset {
            targets: ids.shallow_clone(),
            inputs: ids,
            windows: Some(Windows { block, stride }),
            augment: None,
            pixels: None,
        }
    }

    /// Number of samples.
    pub fn len(&self) -> i64 {
        let rows = self.inputs.size().first().copied().unwrap_or(0);
        match self.windows {
            Some(w) => w.count(rows),
            None => rows,
        }
    }

    /// A dataset sharing this one's tensors.
    pub fn shallow(&self) -> Dataset {
        Dataset {
            inputs: self.inputs.shallow_clone(),
            targets: self.targets.shallow_clone(),
            windows: self.windows,
            augment: self.augment.clone(),
            pixels: self.pixels.clone(),
        }
    }

    /// Samples `lo..hi`, sharing this one's memory.
    pub fn part(&self, lo: i64, hi: i64) -> Result<Dataset, TchError> {
        let Some(w) = self.windows else {
            return Ok(Dataset {
                augment: self.augment.clone(),
                pixels: self.pixels.clone(),
                ..Dataset::rows(
                    self.inputs.f_narrow(0, lo, hi - lo)?,
                    self.targets.f_narrow(0, lo, hi - lo)?,
                )
            });
        };
        let len = if hi > lo {
            (hi - lo - 1) * w.stride + w.block + 1
        } else {
            0
        };
        Ok(Dataset::stream(
            self.inputs.f_narrow(0, lo * w.stride, len)?,
            w.block,
            w.stride,
        ))
    }

    /// The inputs and targets of the samples `index` (an int64 tensor beside the data).
    pub fn gather(&self, index: &Tensor) -> Result<(Tensor, Tensor), TchError> {
        let Some(w) = self.windows else {
            let x = self.inputs.f_index_select(0, index)?;
            let x = match &self.pixels {
                Some(p) => p.floats(&x)?,
                None => x,
            };
            return Ok((x, self.targets.f_index_select(0, index)?));
        };
        // Each window and the id after it in one gather: `[B, block + 1]`.
        let span = Tensor::f_arange(w.block + 1, (tch::Kind::Int64, index.device()))?;
        let at = index
            .f_mul_scalar(w.stride)?
            .f_unsqueeze(1)?
            .f_add(&span.f_unsqueeze(0)?)?;
        let ids = self.inputs.f_index_select(0, &at.f_reshape([-1])?)?;
        let ids = ids.f_reshape([-1, w.block + 1])?;
        Ok((
            ids.f_narrow(1, 0, w.block)?.f_contiguous()?,
            ids.f_narrow(1, 1, w.block)?.f_contiguous()?,
        ))
    }

    /// The samples at `indices`, copied.
    pub(super) fn select(&self, indices: &[i64]) -> Result<Dataset, TchError> {
        let index = Tensor::f_from_slice(indices)?;
        Ok(Dataset {
            pixels: self.pixels.clone(),
            ..Dataset::rows(
                self.inputs.f_index_select(0, &index)?,
                self.targets.f_index_select(0, &index)?,
            )
        })
    }
}

/// The splits of the data: training always, validation and test when their fraction gives at
/// least one sample.
#[derive(Debug)]
pub struct Splits {
    /// The training samples.
    pub train: Dataset,
    /// The validation samples.
    pub val: Option<Dataset>,
    /// The test samples.
    pub test: Option<Dataset>,
    /// A text's vocabulary, its characters in id order; `None` for other sources.
    pub vocab: Option<Vec<char>>,
}

impl Splits {
    /// The splits with every tensor moved to `device`, once, for batching there.
    pub fn moved_to(self, device: Device) -> Result<Splits, TchError> {
        let move_ = |d: Dataset| -> Result<Dataset, TchError> {
            let inputs = d.inputs.f_to_device(device)?;
            // A stream's ids are one tensor, moved once.
            let targets = match d.windows {
                Some(_) => inputs.shallow_clone(),
                None => d.targets.f_to_device(device)?,
            };
            Ok(Dataset {
                inputs,
                targets,
                windows: d.windows,
                augment: d.augment,
                pixels: d.pixels,
            })
        };
        Ok(Splits {
            train: move_(self.train)?,
            val: self.val.map(move_).transpose()?,
            test: self.test.map(move_).transpose()?,
            vocab: self.vocab,
        })
    }
}

impl Windows {
    /// Windows of `block` ids at offsets `0, stride, 2·stride, ...` in a stream of `tokens`.
    pub fn count(self, tokens: i64) -> i64 {
        if tokens <= self.block {
            0
        } else {
            (tokens - self.block - 1) / self.stride + 1
        }
    }
}
