//! Augmentation of training images, drawn anew every epoch: a random crop of the image's size
//! from the image padded by `crop` pixels on each side (torchvision's `RandomCrop(size,
//! padding=crop)`, the padding a zero pixel), and a left-right mirror with probability 1/2
//! (`RandomHorizontalFlip()`).
//!
//! Each sample's draws come from SplitMix64 seeded with the epoch's seed and the sample's index
//! in the split, never from torch's generator: they depend on neither the batch size nor the
//! order, so a resumed run and a run on several replicas see the same images as one
//! uninterrupted run. A batch is cropped and mirrored with two `gather`s on the device that
//! holds it.

use tch::{TchError, Tensor};

use super::split::SplitMix64;

/// The augmentation of a training split of images `[N, C, H, W]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Augmentation {
    /// Pixels of padding on each side before the crop; 0 for no crop.
    pub crop: i64,
    /// Whether images are mirrored with probability 1/2.
    pub flip: bool,
    /// Per channel, what a zero pixel became as the data was loaded (scaled, normalised): the
    /// padding's value.
    pub fill: Vec<f32>,
}

/// One sample's draws: the crop's offsets (rows, columns) into the padded image, and whether
/// it is mirrored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Draw {
    pub dy: i64,
    pub dx: i64,
    pub mirror: bool,
}

impl Augmentation {
    /// The draws of sample `id` in the epoch whose seed is `seed`.
    pub fn draw(&self, seed: u64, id: i64) -> Draw {
        let mut rng = SplitMix64(seed ^ (id as u64).wrapping_mul(0xA24B_AED4_963E_E407));
        let offsets = (2 * self.crop + 1) as u64;
        let dy = rng.below(offsets) as i64;
        let dx = rng.below(offsets) as i64;
        let mirror = self.flip && rng.next() >> 63 == 1;
        Draw { dy, dx, mirror }
    }

    /// The batch `x` (`[B, C, H, W]`, the samples `ids`) augmented with the draws of `seed`.
    pub fn apply(&self, x: &Tensor, ids: &[i64], seed: u64) -> Result<Tensor, TchError> {
        let (b, c, h, w) = x.size4()?;
        let p = self.crop;
        let draws: Vec<Draw> = ids.iter().map(|&id| self.draw(seed, id)).collect();
        let device = x.device();
        let x = if p > 0 {
            // The padded batch: every pixel the fill, the images copied into the middle.
            let fill = Tensor::f_from_slice(&self.fill)?
                .f_to_kind(x.kind())?
                .f_view([1, c, 1, 1])?
                .f_to_device(device)?;
            let padded = fill
                .f_expand([b, c, h + 2 * p, w + 2 * p], false)?
                .f_contiguous()?;
            padded.f_narrow(2, p, h)?.f_narrow(3, p, w)?.f_copy_(x)?;
            let rows: Vec<i64> = draws
                .iter()
                .flat_map(|d| (0..h).map(move |y| d.dy + y))
                .collect();
            let rows = Tensor::f_from_slice(&rows)?
                .f_view([b, 1, h, 1])?
                .f_to_device(device)?
                .f_expand([b, c, h, w + 2 * p], false)?;
            padded.f_gather(2, &rows, false)?
        } else {
            x.shallow_clone()
        };
        let cols: Vec<i64> = draws
            .iter()
            .flat_map(|d| (0..w).map(move |j| if d.mirror { d.dx + w - 1 - j } else { d.dx + j }))
            .collect();
        let cols = Tensor::f_from_slice(&cols)?
            .f_view([b, 1, 1, w])?
            .f_to_device(device)?
            .f_expand([b, c, h, w], false)?;
        x.f_gather(3, &cols, false)
    }
}

/// How an image folder's bytes become the model's inputs, batch by batch: divided by the
/// source's `scale`, then `normalize`d, the operations (and so the values) the other sources
/// apply once when they load. Kept as bytes, a folder takes a quarter of the memory.
#[derive(Debug)]
pub struct Pixels {
    /// What the bytes are divided by (`scale`); `None` keeps them as they are.
    pub scale: Option<f64>,
    /// `normalize`'s means and standard deviations, shaped to broadcast over a batch (CPU).
    pub normalize: Option<(Tensor, Tensor)>,
}

impl Clone for Pixels {
    fn clone(&self) -> Pixels {
        Pixels {
            scale: self.scale,
            normalize: self
                .normalize
                .as_ref()
                .map(|(m, s)| (m.shallow_clone(), s.shallow_clone())),
        }
    }
}

impl Pixels {
    /// A batch of bytes as the model's floats, in one new tensor (the division and the
    /// normalisation in place).
    pub fn floats(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let mut x = x.f_to_kind(tch::Kind::Float)?;
        if let Some(divisor) = self.scale {
            let _ = x.f_div_scalar_(divisor)?;
        }
        if let Some((mean, std)) = &self.normalize {
            let device = x.device();
            let _ = x.f_sub_(&mean.f_to_device(device)?)?;
            let _ = x.f_div_(&std.f_to_device(device)?)?;
        }
        Ok(x)
    }
}

/// The padding's value per channel: a zero pixel (zero however it is scaled) normalised (`(0 -
/// mean) / std`, per channel or one for all), as torchvision pads before `ToTensor` and
/// `Normalize`.
pub fn zero_pixel(channels: usize, normalize: Option<&kiln::ir::Normalize>) -> Vec<f32> {
    let Some(n) = normalize else {
        return vec![0.0; channels];
    };
    (0..channels)
        .map(|c| {
            let pick = |v: &[f64]| v.get(c).or(v.first()).copied().unwrap_or(0.0);
            // In float32, as the loaded pixels were normalised.
            let (mean, std) = (pick(&n.mean) as f32, pick(&n.std) as f32);
            (0.0 - mean) / std
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::floats;
    use super::*;
    use std::collections::HashSet;

    /// Sample `x` (`[C, H, W]` values) augmented by hand: padded with `fill`, cropped at the
    /// draw's offsets, mirrored.
    fn by_hand(a: &Augmentation, x: &[f32], (c, h, w): (i64, i64, i64), d: Draw) -> Vec<f32> {
        let p = a.crop;
        let mut out = Vec::new();
        for ch in 0..c {
            for y in 0..h {
                for j in 0..w {
                    let col = if d.mirror { w - 1 - j } else { j };
                    let (sy, sx) = (y + d.dy - p, col + d.dx - p);
                    out.push(if (0..h).contains(&sy) && (0..w).contains(&sx) {
                        x[(ch * h * w + sy * w + sx) as usize]
                    } else {
                        a.fill[ch as usize]
                    });
                }
            }
        }
        out
    }

    #[test]
    fn a_batch_is_each_sample_padded_cropped_and_mirrored_by_its_draws() {
        let a = Augmentation {
            crop: 2,
            flip: true,
            fill: vec![-0.5, 0.25],
        };
        let (b, c, h, w) = (6i64, 2i64, 5i64, 4i64);
        let x = Tensor::f_arange(b * c * h * w, (tch::Kind::Float, tch::Device::Cpu))
            .unwrap()
            .view([b, c, h, w]);
        let ids = [3i64, 0, 17, 5, 9, 1];
        let out = a.apply(&x, &ids, 42).unwrap();
        assert_eq!(out.size(), [b, c, h, w]);
        for (i, &id) in ids.iter().enumerate() {
            let want = by_hand(&a, &floats(&x.get(i as i64)), (c, h, w), a.draw(42, id));
            assert_eq!(floats(&out.get(i as i64)), want, "sample {id}");
        }
        // A sample's draws do not depend on its batch.
        let alone = a.apply(&x.narrow(0, 2, 1), &[17], 42).unwrap();
        assert_eq!(floats(&alone), floats(&out.get(2)));
        // Only flipping: the image mirrored or kept.
        let flip = Augmentation {
            crop: 0,
            ..a.clone()
        };
        let out = flip.apply(&x, &ids, 7).unwrap();
        for (i, &id) in ids.iter().enumerate() {
            let d = flip.draw(7, id);
            assert_eq!((d.dy, d.dx), (0, 0));
            let want = by_hand(&flip, &floats(&x.get(i as i64)), (c, h, w), d);
            assert_eq!(floats(&out.get(i as i64)), want);
        }
    }

    #[test]
    fn draws_cover_every_offset_mirror_half_and_change_with_the_epoch() {
        let a = Augmentation {
            crop: 4,
            flip: true,
            fill: vec![0.0],
        };
        let draws: Vec<Draw> = (0..4000).map(|id| a.draw(11, id)).collect();
        let offsets: HashSet<(i64, i64)> = draws.iter().map(|d| (d.dy, d.dx)).collect();
        assert_eq!(offsets.len(), 81, "every offset of a 9 × 9 range");
        let mirrored = draws.iter().filter(|d| d.mirror).count();
        assert!(
            (1800..2200).contains(&mirrored),
            "{mirrored} of 4000 mirrored"
        );
        let again: Vec<Draw> = (0..4000).map(|id| a.draw(11, id)).collect();
        assert_eq!(draws, again, "the same seed, the same draws");
        let other: Vec<Draw> = (0..4000).map(|id| a.draw(12, id)).collect();
        let same = draws.iter().zip(&other).filter(|(x, y)| x == y).count();
        assert!(same < 200, "{same} of 4000 draws repeat in another epoch");
        let plain = Augmentation { flip: false, ..a };
        assert!((0..100).all(|id| !plain.draw(11, id).mirror));
    }

    #[test]
    fn padding_is_a_zero_pixel_normalised() {
        let n = kiln::ir::Normalize {
            mean: vec![0.5, 0.25, 0.1],
            std: vec![0.5, 0.5, 0.2],
        };
        assert_eq!(zero_pixel(3, Some(&n)), vec![-1.0, -0.5, -0.5]);
        let one = kiln::ir::Normalize {
            mean: vec![0.2860],
            std: vec![0.3530],
        };
        assert_eq!(zero_pixel(2, Some(&one)), vec![-0.2860f32 / 0.3530; 2]);
        assert_eq!(zero_pixel(1, None), vec![0.0]);
    }
}
