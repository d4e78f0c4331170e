//! Optimizers, with the update rules of `torch.optim` (single-tensor
//! implementations) so that runs match PyTorch step for step. Their state is plain tensors, so
//! checkpoints hold it and a resumed run continues exactly.

mod fused;

pub use fused::clear_grads;

use tch::{Device, Kind, Tensor};

use super::failure::At;
use kiln::diagnostic::Diagnostic;
use kiln::ir::{Optimizer, OptimizerKind};
use kiln::span::Span;

/// The settings one parameter is updated with: its parameter group's, or the optimizer's own.
#[derive(Clone, Debug, PartialEq)]
struct Settings {
    kind: OptimizerKind,
    weight_decay: f64,
    /// The group's learning rate over the optimizer's: the schedule's rate is multiplied by it,
    /// as PyTorch's schedulers scale each group's initial rate by the same factor.
    lr_scale: f64,
}

/// An optimizer with its per-parameter state.
pub struct Optim {
    config: Optimizer,
    /// Each parameter's settings, in the model's order.
    settings: Vec<Settings>,
    /// Named state tensors per parameter (`exp_avg`, `momentum_buffer`, ...).
    pub state: Vec<Vec<(&'static str, Tensor)>>,
    /// Optimizer steps taken.
    pub steps: u64,
    /// The momentum (SGD, RMSprop) or beta1 (Adam, AdamW) of the next step in place of the
    /// configured one, as `OneCycleLR` sets it; `None` keeps the configured one.
    pub momentum: Option<f64>,
    /// The fused kernels' step count, a float32 scalar on each device that holds parameters,
    /// made once and set each step on the device (a copy from the host would wait for a CUDA
    /// device every step).
    counts: Vec<(Device, Tensor)>,
}

impl Optim {
    /// A fresh optimizer for the parameters named `names`, in the model's order, each with its
    /// parameter group's settings (state is created lazily, as in PyTorch).
    pub fn new<S: AsRef<str>>(config: &Optimizer, names: &[S]) -> Optim {
        let own = Settings {
            kind: config.kind.clone(),
            weight_decay: config.weight_decay,
            lr_scale: 1.0,
        };
        let settings = names
            .iter()
            .map(|name| {
                let group = config
                    .groups
                    .iter()
                    .find(|g| g.params.iter().any(|p| p == name.as_ref()));
                group.map_or_else(
                    || own.clone(),
                    |g| Settings {
                        kind: g.kind.clone(),
                        weight_decay: g.weight_decay,
                        lr_scale: if config.lr > 0.0 {
                            g.lr / config.lr
                        } else {
                            1.0
                        },
                    },
                )
            })
            .collect();
        Optim {
            config: config.clone(),
            settings,
            state: names.iter().map(|_| Vec::new()).collect(),
            steps: 0,
            momentum: None,
            counts: Vec::new(),
        }
    }

    /// Drops the state and the count of steps, as a fresh optimizer has none.
    pub fn reset(&mut self) {
        self.state.iter_mut().for_each(Vec::clear);
        self.steps = 0;
    }

    /// The state tensors of a parameter, created as zeros when missing.
    fn slot<'a>(
        state: &'a mut Vec<(&'static str, Tensor)>,
        name: &'static str,
        like: &Tensor,
        span: Span,
    ) -> Result<&'a mut Tensor, Diagnostic> {
        if !state.iter().any(|(n, _)| *n == name) {
            state.push((name, like.f_zeros_like().at(span)?));
        }
        let i = state.iter().position(|(n, _)| *n == name).unwrap_or(0);
        Ok(&mut state[i].1)
    }

    /// One update of every parameter from its gradient, with learning rate `lr`: through
    /// ATen's fused kernels when the optimizer is `fused` (Adam, AdamW, SGD), else by the
    /// single-tensor rules below.
    pub fn step(&mut self, params: &[Tensor], lr: f64) -> Result<(), Diagnostic> {
        self.steps += 1;
        tch::no_grad(|| -> Result<(), Diagnostic> {
            if self.config.fused {
                return self.fused_step(params, lr);
            }
            for (i, p) in params.iter().enumerate() {
                self.single(i, p, lr)?;
            }
            Ok(())
        })
    }

    /// One fused update: the parameters with gradients, in buckets of the same settings,
    /// device and dtype (as `torch.optim` groups them), each bucket one call of ATen's kernel
    /// for its algorithm. RMSprop has no fused kernel and keeps its single-tensor rule.
    fn fused_step(&mut self, params: &[Tensor], base: f64) -> Result<(), Diagnostic> {
        let span = self.config.span;
        let mut buckets: Vec<(usize, Device, Kind, Vec<usize>)> = Vec::new();
        for (i, p) in params.iter().enumerate() {
            if !p.grad().defined() || i >= self.settings.len() {
                continue;
            }
            let (device, kind) = (p.device(), p.kind());
            let same = |(j, d, k, _): &&mut (usize, Device, Kind, Vec<usize>)| {
                self.settings[*j] == self.settings[i] && *d == device && *k == kind
            };
            match buckets.iter_mut().find(same) {
                Some(bucket) => bucket.3.push(i),
                None => buckets.push((i, device, kind, vec![i])),
            }
        }
        for (first, device, _, members) in buckets {
            let settings = self.settings[first].clone();
            let lr = base * settings.lr_scale;
            let wd = settings.weight_decay;
            let of = |members: &[usize]| -> Vec<Tensor> {
                members.iter().map(|&i| params[i].shallow_clone()).collect()
            };
            match settings.kind {
                OptimizerKind::Sgd {
                    momentum,
                    dampening,
                    nesterov,
                } => {
                    let momentum = self.momentum.unwrap_or(momentum);
                    let args = fused::Sgd {
                        lr,
                        momentum,
                        dampening,
                        nesterov,
                        weight_decay: wd,
                    };
                    // Buffers start as the gradients on their first step: those in one call,
                    // the others in another.
                    let (fresh, kept): (Vec<usize>, Vec<usize>) = members.iter().partition(|&&i| {
                        momentum != 0.0
                            && !self.state[i].iter().any(|(n, _)| *n == "momentum_buffer")
                    });
                    for (group, first) in [(fresh, true), (kept, false)] {
                        if group.is_empty() {
                            continue;
                        }
                        let ps = of(&group);
                        let gs: Vec<Tensor> = ps.iter().map(Tensor::grad).collect();
                        let mut bufs = Vec::new();
                        if momentum != 0.0 {
                            for &i in &group {
                                let b = Self::slot(
                                    &mut self.state[i],
                                    "momentum_buffer",
                                    &params[i],
                                    span,
                                )?;
                                bufs.push(b.shallow_clone());
                            }
                        }
                        fused::sgd(&args, &ps, &gs, &bufs, first).at(span)?;
                    }
                }
                OptimizerKind::Adam {
                    betas,
                    eps,
                    amsgrad,
                }
                | OptimizerKind::AdamW {
                    betas,
                    eps,
                    amsgrad,
                } => {
                    let args = fused::Adam {
                        decoupled: matches!(settings.kind, OptimizerKind::AdamW { .. }),
                        lr,
                        beta1: self.momentum.unwrap_or(betas.0),
                        beta2: betas.1,
                        weight_decay: wd,
                        eps,
                        amsgrad,
                    };
                    let ps = of(&members);
                    let mut t = fused::AdamTensors {
                        grads: ps.iter().map(Tensor::grad).collect(),
                        params: ps,
                        exp_avgs: Vec::new(),
                        exp_avg_sqs: Vec::new(),
                        max_exp_avg_sqs: Vec::new(),
                        step: self.count_on(device).at(span)?,
                    };
                    for &i in &members {
                        let state = &mut self.state[i];
                        let like = &params[i];
                        t.exp_avgs
                            .push(Self::slot(state, "exp_avg", like, span)?.shallow_clone());
                        t.exp_avg_sqs
                            .push(Self::slot(state, "exp_avg_sq", like, span)?.shallow_clone());
                        if amsgrad {
                            let max = Self::slot(state, "max_exp_avg_sq", like, span)?;
                            t.max_exp_avg_sqs.push(max.shallow_clone());
                        }
                    }
                    fused::adam(&args, &t).at(span)?;
                }
                OptimizerKind::RmsProp { .. } => {
                    for &i in &members {
                        self.single(i, &params[i], base)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The step count on `device`, set to this step's.
    fn count_on(&mut self, device: Device) -> Result<Tensor, tch::TchError> {
        let i = match self.counts.iter().position(|(d, _)| *d == device) {
            Some(i) => i,
            None => {
                let zero = Tensor::f_zeros([], (Kind::Float, device))?;
                self.counts.push((device, zero));
                self.counts.len() - 1
            }
        };
        self.counts[i].1.f_fill_(self.steps as f64)
    }

    /// Updates parameter `i`, `p`, by the single-tensor rule of its settings.
    fn single(&mut self, i: usize, p: &Tensor, base: f64) -> Result<(), Diagnostic> {
        let span = self.config.span;
        let t = self.steps as i32;
        let cycled = self.momentum;
        let g = p.grad();
        if !g.defined() {
            return Ok(());
        }
        let mut p = p.shallow_clone();
        let state = &mut self.state[i];
        let Some(settings) = self.settings.get(i) else {
            return Ok(());
        };
        let (wd, lr) = (settings.weight_decay, base * settings.lr_scale);
        match &settings.kind {
            OptimizerKind::Sgd {
                momentum,
                dampening,
                nesterov,
            } => {
                let momentum = &cycled.unwrap_or(*momentum);
                let mut d = if wd != 0.0 {
                    g.f_add(&p.f_mul_scalar(wd).at(span)?).at(span)?
                } else {
                    g.shallow_clone()
                };
                if *momentum != 0.0 {
                    let first = !state.iter().any(|(n, _)| *n == "momentum_buffer");
                    let buf = Self::slot(state, "momentum_buffer", &p, span)?;
                    if first {
                        buf.f_copy_(&d).at(span)?;
                    } else {
                        buf.f_mul_scalar_(*momentum).done_at(span)?;
                        buf.f_add_(&d.f_mul_scalar(1.0 - dampening).at(span)?)
                            .done_at(span)?;
                    }
                    d = if *nesterov {
                        d.f_add(&buf.f_mul_scalar(*momentum).at(span)?).at(span)?
                    } else {
                        buf.shallow_clone()
                    };
                }
                p.f_sub_(&d.f_mul_scalar(lr).at(span)?).done_at(span)?;
            }
            OptimizerKind::Adam {
                betas,
                eps,
                amsgrad,
            }
            | OptimizerKind::AdamW {
                betas,
                eps,
                amsgrad,
            } => {
                let decoupled = matches!(settings.kind, OptimizerKind::AdamW { .. });
                let g = if wd != 0.0 && !decoupled {
                    g.f_add(&p.f_mul_scalar(wd).at(span)?).at(span)?
                } else {
                    g
                };
                if wd != 0.0 && decoupled {
                    p.f_mul_scalar_(1.0 - lr * wd).done_at(span)?;
                }
                let (b1, b2) = (cycled.unwrap_or(betas.0), betas.1);
                let m = Self::slot(state, "exp_avg", &p, span)?;
                m.f_lerp_(&g, 1.0 - b1).done_at(span)?;
                let m = m.shallow_clone();
                let v = Self::slot(state, "exp_avg_sq", &p, span)?;
                // b2 * v + (1 - b2) * g^2, in one kernel.
                v.f_lerp_(&g.f_square().at(span)?, 1.0 - b2).done_at(span)?;
                let mut v = v.shallow_clone();
                if *amsgrad {
                    let max = Self::slot(state, "max_exp_avg_sq", &p, span)?;
                    let new_max = max.f_maximum(&v).at(span)?;
                    max.f_copy_(&new_max).at(span)?;
                    v = max.shallow_clone();
                }
                let bc1 = 1.0 - b1.powi(t);
                let bc2 = 1.0 - b2.powi(t);
                // p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), with one temporary:
                // the denominator, scaled by -bc1 / lr so that one addcdiv applies it.
                let mut denom = v.f_sqrt().at(span)?;
                denom.f_div_scalar_(bc2.sqrt()).done_at(span)?;
                denom.f_add_scalar_(*eps).done_at(span)?;
                denom.f_mul_scalar_(-bc1 / lr).done_at(span)?;
                p.f_addcdiv_(&m, &denom).done_at(span)?;
            }
            OptimizerKind::RmsProp {
                alpha,
                eps,
                momentum,
                centered,
            } => {
                let momentum = &cycled.unwrap_or(*momentum);
                let g = if wd != 0.0 {
                    g.f_add(&p.f_mul_scalar(wd).at(span)?).at(span)?
                } else {
                    g
                };
                let sq = Self::slot(state, "square_avg", &p, span)?;
                sq.f_mul_scalar_(*alpha).done_at(span)?;
                sq.f_addcmul_(&g, &g.f_mul_scalar(1.0 - alpha).at(span)?)
                    .done_at(span)?;
                let sq = sq.shallow_clone();
                let avg = if *centered {
                    let ga = Self::slot(state, "grad_avg", &p, span)?;
                    ga.f_lerp_(&g, 1.0 - alpha).done_at(span)?;
                    sq.f_addcmul(ga, &ga.f_neg().at(span)?)
                        .at(span)?
                        .f_sqrt()
                        .at(span)?
                        .f_add_scalar(*eps)
                        .at(span)?
                } else {
                    sq.f_sqrt().at(span)?.f_add_scalar(*eps).at(span)?
                };
                if *momentum > 0.0 {
                    let buf = Self::slot(state, "momentum_buffer", &p, span)?;
                    buf.f_mul_scalar_(*momentum).done_at(span)?;
                    buf.f_add_(&g.f_div(&avg).at(span)?).done_at(span)?;
                    p.f_sub_(&buf.f_mul_scalar(lr).at(span)?).done_at(span)?;
                } else {
                    p.f_sub_(&g.f_div(&avg).at(span)?.f_mul_scalar(lr).at(span)?)
                        .done_at(span)?;
                }
            }
        }
        Ok(())
    }
}

/// What sums a value over the processes that hold parts of the gradients (the ranks of a
/// sharded run; nothing to do elsewhere).
pub type AllSum<'a> = &'a dyn Fn(&Tensor) -> Result<(), Diagnostic>;

/// Clips gradients: by total L2 norm (`torch.nn.utils.clip_grad_norm_`), then by value. The
/// squared norm of the gradients of `params` that this process counts (`counted(i)`: all but
/// the copies of a parameter that another process of the sum counts) is summed by `sum` over the
/// processes that hold the other parts of them, so that every one clips by the norm of the whole
/// gradient.
pub fn clip(
    params: &[Tensor],
    norm: Option<f64>,
    value: Option<f64>,
    span: Span,
    sum: AllSum,
    counted: &dyn Fn(usize) -> bool,
) -> Result<(), Diagnostic> {
    tch::no_grad(|| -> Result<(), Diagnostic> {
        let grads: Vec<(usize, Tensor)> = params
            .iter()
            .map(Tensor::grad)
            .enumerate()
            .filter(|(_, g)| g.defined())
            .collect();
        if let Some(max) = norm {
            let mut total = Tensor::f_zeros(
                [],
                (
                    tch::Kind::Float,
                    grads.first().map_or(tch::Device::Cpu, |(_, g)| g.device()),
                ),
            )
            .at(span)?;
            for (_, g) in grads.iter().filter(|(i, _)| counted(*i)) {
                let n = g.f_norm().at(span)?.f_to_device(total.device()).at(span)?;
                total = total.f_add(&n.f_mul(&n).at(span)?).at(span)?;
            }
            sum(&total)?;
            let total = total.f_sqrt().at(span)?;
            let coef = total
                .f_add_scalar(1e-6)
                .at(span)?
                .f_reciprocal()
                .at(span)?
                .f_mul_scalar(max)
                .at(span)?
                .f_clamp_max(1.0)
                .at(span)?;
            for (_, g) in &grads {
                let mut g = g.shallow_clone();
                g.f_mul_(&coef.f_to_device(g.device()).at(span)?)
                    .done_at(span)?;
            }
        }
        if let Some(v) = value {
            for (_, g) in &grads {
                let mut g = g.shallow_clone();
                g.f_clamp_(-v, v).done_at(span)?;
            }
        }
        Ok(())
    })
}

/// Dynamic loss scaling for fp16, as `torch.amp.GradScaler` does it: the loss is multiplied by a
/// scale before backward; gradients are divided by it before the step; a step whose gradients
/// overflowed is skipped and the scale halved; after 2,000 good steps in a row it doubles.
pub struct LossScaler {
    scale: f64,
    good: u32,
    enabled: bool,
}

impl LossScaler {
    /// Steps without overflow before the scale grows.
    const GROWTH_INTERVAL: u32 = 2000;

    /// A scaler starting at 2^16; a disabled one scales by 1 and never skips.
    pub fn new(enabled: bool) -> LossScaler {
        LossScaler {
            scale: if enabled { 65536.0 } else { 1.0 },
            good: 0,
            enabled,
        }
    }

    /// The factor the loss is multiplied by.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Divides the gradients by the scale; returns whether the step should be taken: whether
    /// every gradient is finite, over the processes `sum` adds up (those holding the other parts
    /// of the gradients).
    pub fn unscale(
        &mut self,
        params: &[Tensor],
        span: Span,
        sum: AllSum,
    ) -> Result<bool, Diagnostic> {
        if !self.enabled {
            return Ok(true);
        }
        let finite = tch::no_grad(|| -> Result<bool, Diagnostic> {
            // The count of gradients with a value that is not finite, kept on the device and
            // read once.
            let device = params.first().map_or(Device::Cpu, Tensor::device);
            let mut overflowed = Tensor::f_zeros([], (Kind::Float, device)).at(span)?;
            for p in params {
                let mut g = p.grad();
                if !g.defined() {
                    continue;
                }
                g.f_div_scalar_(self.scale).done_at(span)?;
                let bad = g
                    .f_isfinite()
                    .and_then(|t| t.f_all())
                    .and_then(|t| t.f_logical_not())
                    .and_then(|t| t.f_to_kind(Kind::Float))
                    .and_then(|t| t.f_to_device(device))
                    .at(span)?;
                overflowed = overflowed.f_add(&bad).at(span)?;
            }
            sum(&overflowed)?;
            Ok(overflowed.f_double_value(&[]).at(span)? == 0.0)
        })?;
        Ok(self.update(finite))
    }

    /// Updates the scale after a step whose gradients were (or were not) all finite.
    fn update(&mut self, finite: bool) -> bool {
        if finite {
            self.good += 1;
            if self.good >= Self::GROWTH_INTERVAL {
                self.scale *= 2.0;
                self.good = 0;
            }
        } else {
            self.scale /= 2.0;
            self.good = 0;
        }
        finite
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loss_scale_halves_on_overflow_and_grows_after_good_steps() {
        let mut s = LossScaler::new(true);
        assert_eq!(s.scale(), 65536.0);
        assert!(!s.update(false));
        assert_eq!(s.scale(), 32768.0);
        for _ in 0..LossScaler::GROWTH_INTERVAL {
            assert!(s.update(true));
        }
        assert_eq!(s.scale(), 65536.0);
    }

    #[test]
    fn unscaling_divides_gradients_and_detects_overflow() {
        let p = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
        (&p * 4.0).sum(tch::Kind::Float).backward();
        let mut s = LossScaler::new(true);
        s.scale = 2.0;
        assert!(s
            .unscale(std::slice::from_ref(&p), Span::default(), &|_| Ok(()))
            .unwrap());
        assert_eq!(Vec::<f32>::try_from(p.grad()).unwrap(), vec![2.0, 2.0]);
        let q = Tensor::from_slice(&[f32::MAX]).set_requires_grad(true);
        // d(q^2)/dq = 2q overflows f32.
        (&q * &q).sum(tch::Kind::Float).backward();
        assert!(!s
            .unscale(std::slice::from_ref(&q), Span::default(), &|_| Ok(()))
            .unwrap());
        assert_eq!(s.scale(), 1.0);
    }

    #[test]
    fn a_disabled_scaler_changes_nothing() {
        let mut s = LossScaler::new(false);
        assert_eq!(s.scale(), 1.0);
        assert!(s.unscale(&[], Span::default(), &|_| Ok(())).unwrap());
    }
}
