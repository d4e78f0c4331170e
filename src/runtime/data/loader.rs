//! The [`Loader`]: one epoch of batches, gathered and moved to a CUDA device by a background
//! thread, or gathered in the training thread where the data lives on the device that trains
//! (the CPU, or a CUDA device under `placement`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kiln::span::Span;
use tch::{Device, TchError, Tensor};

use super::augment::Augmentation;
use super::error::{DataError, DataKind};
use super::split::{epoch_seed, permutation};
use super::Dataset;

/// Mixed into the order's seed for the seed of an epoch's augmentation, so the two differ.
const AUGMENT_STREAM: u64 = 0x5DEE_CE66_D1CE_4E5B;

/// Batches the background thread prepares ahead of the consumer.
const AHEAD: usize = 2;

/// Builds the batches of one epoch.
struct Producer {
    data: Dataset,
    order: Arc<[i64]>,
    /// The epoch's order as an int64 tensor beside the data, copied there once, when batches
    /// are gathered in the training thread: each batch's indices are then a slice of it, with
    /// no copy from the host per step (on a CUDA device such a copy from pageable memory waits
    /// for the device).
    index: Option<Tensor>,
    batch: usize,
    device: Device,
    /// A training split's augmentation, with the epoch's seed for it.
    augment: Option<(Augmentation, u64)>,
}

impl Producer {
    /// A producer sharing this one's tensors.
    fn share(&self) -> Producer {
        Producer {
            data: self.data.shallow(),
            order: Arc::clone(&self.order),
            index: self.index.as_ref().map(Tensor::shallow_clone),
            batch: self.batch,
            device: self.device,
            augment: self.augment.clone(),
        }
    }

    /// Batch `b` of the epoch, on the device.
    fn make(&self, b: usize) -> Result<(Tensor, Tensor), TchError> {
        let start = b * self.batch;
        let end = (start + self.batch).min(self.order.len());
        let index = match &self.index {
            Some(order) => order.f_narrow(0, start as i64, (end - start) as i64)?,
            None => Tensor::f_from_slice(&self.order[start..end])?
                .f_to_device(self.data.inputs.device())?,
        };
        let (mut x, y) = self.data.gather(&index)?;
        if let Some((augment, seed)) = &self.augment {
            x = augment.apply(&x, &self.order[start..end], *seed)?;
        }
        Ok((to_device(x, self.device)?, to_device(y, self.device)?))
    }
}

/// Moves a batch to the device; the copy to a CUDA device does not wait for the device.
fn to_device(t: Tensor, device: Device) -> Result<Tensor, TchError> {
    if t.device() == device {
        return Ok(t);
    }
    match device {
        Device::Cuda(_) => {
            let kind = t.f_kind()?;
            t.f_to_device_(device, kind, true, false)
        }
        _ => t.f_to_device(device),
    }
}

/// One epoch of batches of a dataset, prepared ahead in a background thread for a CUDA device
/// when the data is in host memory.
///
/// On the CPU the batches are gathered in the training thread (a gather costs tens of
/// microseconds): a second thread running libtorch operations starts a second OpenMP thread
/// team on the same cores, and training then slowed down more than twofold, its parallel
/// operations waiting on thread wake-ups (measured with `bench/run.sh`).
///
/// The thread gathers each batch with `index_select` and moves it to the device, keeping at most
/// two batches ahead of the consumer. Dropping the loader mid-epoch stops the thread and waits
/// for it (at most the batch it is building). Failures of libtorch (a device out of memory) are
/// reported at the span given by [`Loader::at`], which should be the experiment's `batch`
/// statement; after one the iterator ends.
pub struct Loader {
    /// Batches from the thread; `None` when it could not be started or once dropped.
    batches: Option<Receiver<Result<(Tensor, Tensor), TchError>>>,
    /// Tells the thread to stop.
    stop: Arc<AtomicBool>,
    /// The thread.
    worker: Option<JoinHandle<()>>,
    /// Builds batches in `next` when no thread could be started.
    inline: Option<Producer>,
    /// The next batch index when building inline.
    next_batch: usize,
    /// Batches still to yield.
    remaining: usize,
    /// Time spent blocked waiting for the thread.
    waited: Duration,
    /// Where failures are reported.
    span: Span,
}

impl Loader {
    /// Starts an epoch of `batch`-sized batches of `dataset` (the last one may be smaller, as in
    /// PyTorch's `DataLoader`).
    ///
    /// With `shuffle`, the order is a permutation computed with a small Rust PRNG (SplitMix64,
    /// Fisher-Yates) seeded from `(order_seed, epoch)`, never torch's generator; without, the
    /// dataset's order. The first `skip` batches are skipped (resuming mid-epoch). Batches arrive
    /// on `device`. Fails only when `batch` is below 1 (at [`Span::default`]; the checker rules
    /// that out).
    pub fn new(
        dataset: &Dataset,
        batch: i64,
        shuffle: bool,
        order_seed: u64,
        epoch: u64,
        skip: usize,
        device: Device,
    ) -> Result<Loader, DataError> {
        let background = matches!(device, Device::Cuda(_)) && dataset.inputs.device() != device;
        Self::start(
            dataset, batch, false, shuffle, order_seed, epoch, skip, device, background, None,
        )
    }

    /// As [`Loader::new`], for training: with `drop_last`, the epoch's last batch is left out
    /// when it is partial (PyTorch's `DataLoader(drop_last=True)`): the samples at the end of
    /// the epoch's order that do not fill a batch are not seen this epoch; and the dataset's
    /// augmentation, if any, is drawn for the epoch (evaluation never augments).
    #[allow(clippy::too_many_arguments)]
    pub fn training(
        dataset: &Dataset,
        batch: i64,
        drop_last: bool,
        shuffle: bool,
        order_seed: u64,
        epoch: u64,
        skip: usize,
        device: Device,
    ) -> Result<Loader, DataError> {
        // Data kept on the device (`placement`) is batched there in the training thread: its
        // `index_select` is queued device work, with nothing for a thread to hide.
        let background = matches!(device, Device::Cuda(_)) && dataset.inputs.device() != device;
        let augment = dataset
            .augment
            .clone()
            .map(|a| (a, epoch_seed(order_seed ^ AUGMENT_STREAM, epoch)));
        Self::start(
            dataset, batch, drop_last, shuffle, order_seed, epoch, skip, device, background,
            augment,
        )
    }

    /// As [`Loader::training`], choosing whether a background thread prepares the batches.
    #[allow(clippy::too_many_arguments)]
    fn start(
        dataset: &Dataset,
        batch: i64,
        drop_last: bool,
        shuffle: bool,
        order_seed: u64,
        epoch: u64,
        skip: usize,
        device: Device,
        background: bool,
        augment: Option<(Augmentation, u64)>,
    ) -> Result<Loader, DataError> {
        if batch < 1 {
            return Err(DataError::new(
                DataKind::Invalid,
                Span::default(),
                format!("the batch size must be at least 1, not {batch}"),
            )
            .label("invalid batch size")
            .help("give `batch` a positive number of samples"));
        }
        let len = usize::try_from(dataset.len()).unwrap_or(0);
        let total = Self::batches(dataset.len(), batch, drop_last);
        let mut order: Vec<i64> = if shuffle {
            permutation(len, epoch_seed(order_seed, epoch))
        } else {
            (0..len as i64).collect()
        };
        order.truncate(total.saturating_mul(batch as usize));
        let index = if background || order.is_empty() {
            None
        } else {
            let on = dataset.inputs.device();
            let index = Tensor::f_from_slice(&order).and_then(|t| t.f_to_device(on));
            Some(index.map_err(|e| DataError::torch(e, Span::default()))?)
        };
        let order: Arc<[i64]> = order.into();
        let producer = Producer {
            data: dataset.shallow(),
            order,
            index,
            batch: usize::try_from(batch).unwrap_or(usize::MAX),
            device,
            augment,
        };
        let mut loader = Loader {
            batches: None,
            stop: Arc::new(AtomicBool::new(false)),
            worker: None,
            inline: None,
            next_batch: skip,
            remaining: total.saturating_sub(skip),
            waited: Duration::ZERO,
            span: Span::default(),
        };
        if loader.remaining == 0 {
            return Ok(loader);
        }
        if !background {
            loader.inline = Some(producer);
            return Ok(loader);
        }
        let (tx, rx) = sync_channel(AHEAD);
        let stop = Arc::clone(&loader.stop);
        let work = producer.share();
        let spawned = std::thread::Builder::new()
            .name("kiln-data".into())
            .spawn(move || {
                for b in skip..total {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let item = work.make(b);
                    let failed = item.is_err();
                    if tx.send(item).is_err() || failed {
                        return;
                    }
                }
            });
        match spawned {
            Ok(handle) => {
                loader.batches = Some(rx);
                loader.worker = Some(handle);
            }
            // No thread to be had: build the batches in `next` instead.
            Err(_) => loader.inline = Some(producer),
        }
        Ok(loader)
    }

    /// Reports failures at `span` (the experiment's `batch` statement).
    pub fn at(mut self, span: Span) -> Loader {
        self.span = span;
        self
    }

    /// Number of batches in the epoch: `ceil(len / batch)`, or `floor(len / batch)` with
    /// `drop_last`.
    pub fn batches(len: i64, batch: i64, drop_last: bool) -> usize {
        let (Ok(len), Ok(batch)) = (u64::try_from(len), u64::try_from(batch)) else {
            return 0;
        };
        usize::try_from(kiln::ir::steps_per_epoch(len, batch, drop_last)).unwrap_or(usize::MAX)
    }

    /// Total seconds the consumer has spent blocked waiting for a batch.
    pub fn wait_seconds(&self) -> f64 {
        self.waited.as_secs_f64()
    }

    /// Stops the thread and waits for it.
    fn shut_down(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping the receiver wakes a thread blocked on a full channel.
        self.batches = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl Iterator for Loader {
    type Item = Result<(Tensor, Tensor), DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let got = if let Some(producer) = &self.inline {
            let started = Instant::now();
            let item = producer.make(self.next_batch);
            self.waited += started.elapsed();
            self.next_batch += 1;
            Some(item)
        } else {
            let batches = self.batches.as_ref()?;
            let started = Instant::now();
            let got = batches.recv().ok();
            self.waited += started.elapsed();
            got
        };
        match got {
            Some(Ok(batch)) => {
                self.remaining -= 1;
                Some(Ok(batch))
            }
            Some(Err(error)) => {
                self.remaining = 0;
                self.shut_down();
                Some(Err(DataError::torch(error, self.span)))
            }
            None => {
                self.remaining = 0;
                self.shut_down();
                // Worded with the other K0508 failures, by `kiln::diagnostic`.
                Some(Err(DataError::new(
                    DataKind::LoaderStopped,
                    self.span,
                    "the thread preparing batches stopped before the end of the epoch",
                )))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

impl std::iter::FusedIterator for Loader {}

impl Drop for Loader {
    fn drop(&mut self) {
        self.shut_down();
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{floats, ints};
    use super::*;
    use kiln::diagnostic::Code;
    use kiln::diagnostic::Diagnostic;
    use kiln::span::FileId;
    use tch::Kind;

    fn dataset(n: i64) -> Dataset {
        Dataset::rows(
            Tensor::arange(n, (Kind::Float, Device::Cpu)).reshape([n, 1]),
            Tensor::arange(n, (Kind::Int64, Device::Cpu)),
        )
    }

    /// The sample ids of each batch.
    fn epoch(
        d: &Dataset,
        batch: i64,
        shuffle: bool,
        seed: u64,
        e: u64,
        skip: usize,
    ) -> Vec<Vec<i64>> {
        Loader::start(
            d,
            batch,
            false,
            shuffle,
            seed,
            e,
            skip,
            Device::Cpu,
            true,
            None,
        )
        .unwrap()
        .map(|b| {
            let (x, y) = b.unwrap();
            let ids = ints(&y);
            assert_eq!(
                floats(&x),
                ids.iter().map(|&v| v as f32).collect::<Vec<_>>()
            );
            assert_eq!(x.size(), vec![ids.len() as i64, 1]);
            ids
        })
        .collect()
    }

    #[test]
    fn loader_covers_the_epoch() {
        let d = dataset(103);
        assert_eq!(Loader::batches(103, 10, false), 11);
        assert_eq!(Loader::batches(100, 10, false), 10);
        assert_eq!(Loader::batches(0, 10, false), 0);
        assert_eq!(Loader::batches(5, 10, false), 1);

        let batches = epoch(&d, 10, true, 7, 0, 0);
        assert_eq!(batches.len(), 11);
        assert!(batches[..10].iter().all(|b| b.len() == 10));
        assert_eq!(batches[10].len(), 3);
        let mut all: Vec<i64> = batches.concat();
        assert_ne!(all, (0..103).collect::<Vec<_>>(), "shuffled");
        all.sort_unstable();
        assert_eq!(all, (0..103).collect::<Vec<_>>());

        // Same (seed, epoch), same order; another epoch or seed, another.
        assert_eq!(epoch(&d, 10, true, 7, 0, 0), batches);
        assert_ne!(epoch(&d, 10, true, 7, 1, 0), batches);
        assert_ne!(epoch(&d, 10, true, 8, 0, 0), batches);

        // Without shuffling, file order.
        assert_eq!(
            epoch(&d, 10, false, 7, 3, 0).concat(),
            (0..103).collect::<Vec<_>>()
        );

        // Skipping resumes mid-epoch in the same order.
        assert_eq!(epoch(&d, 10, true, 7, 0, 4), batches[4..].to_vec());
        assert!(epoch(&d, 10, true, 7, 0, 11).is_empty());
        assert!(epoch(&d, 10, true, 7, 0, 50).is_empty());

        // A batch larger than the data is one batch; an empty dataset none.
        assert_eq!(epoch(&d, 1000, false, 0, 0, 0).len(), 1);
        assert!(epoch(&dataset(0), 4, true, 0, 0, 0).is_empty());
        assert!(Loader::new(&d, 0, true, 0, 0, 0, Device::Cpu).is_err());
    }

    #[test]
    fn drop_last_leaves_out_the_partial_batch() {
        let d = dataset(103);
        assert_eq!(Loader::batches(103, 10, true), 10);
        assert_eq!(Loader::batches(100, 10, true), 10);
        assert_eq!(Loader::batches(5, 10, true), 0);
        let full = epoch(&d, 10, true, 7, 0, 0);
        let dropped: Vec<Vec<i64>> =
            Loader::start(&d, 10, true, true, 7, 0, 0, Device::Cpu, false, None)
                .unwrap()
                .map(|b| ints(&b.unwrap().1))
                .collect();
        // The same order, less the last three samples.
        assert_eq!(dropped, full[..10].to_vec());
        let plain: Vec<Vec<i64>> =
            Loader::start(&d, 10, true, false, 7, 0, 0, Device::Cpu, true, None)
                .unwrap()
                .map(|b| ints(&b.unwrap().1))
                .collect();
        assert_eq!(plain.concat(), (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn loader_stops_when_dropped() {
        let n = 200_000;
        let d = Dataset::rows(
            Tensor::zeros([n, 64], (Kind::Float, Device::Cpu)),
            Tensor::zeros([n], (Kind::Int64, Device::Cpu)),
        );
        let mut loader = Loader::start(&d, 16, false, true, 1, 0, 0, Device::Cpu, true, None)
            .unwrap()
            .at(Span::new(FileId(0), 30, 40));
        let (x, _) = loader.next().unwrap().unwrap();
        assert_eq!(x.size(), vec![16, 64]);
        // Let the thread fill the channel and block on it.
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        drop(loader);
        assert!(started.elapsed() < Duration::from_secs(2));
        // Dropped before its first batch, too.
        let loader = Loader::start(&d, 16, false, true, 1, 0, 0, Device::Cpu, true, None).unwrap();
        drop(loader);
        assert!(started.elapsed() < Duration::from_secs(2));
        // The wait is measured.
        let mut loader =
            Loader::start(&d, 16, false, false, 1, 0, 0, Device::Cpu, true, None).unwrap();
        for _ in 0..10 {
            let _ = loader.next().unwrap().unwrap();
        }
        assert!(loader.wait_seconds() >= 0.0);
    }

    #[test]
    fn loader_gathers_on_the_cpu_in_the_training_thread() {
        let d = dataset(100);
        let loader = Loader::new(&d, 16, true, 1, 0, 0, Device::Cpu).unwrap();
        assert!(loader.worker.is_none() && loader.inline.is_some());
        assert_eq!(loader.count(), 7);
    }

    #[test]
    fn batches_from_the_data_s_own_order_equal_those_gathered_from_the_host_order() {
        // Data kept on the device is batched in the training thread by slicing the epoch's
        // order copied beside the data once; host data by a thread, each batch's indices
        // copied from the host order. Same seed, same epoch, resumed mid-epoch, partial last
        // batch: the same batches, in order.
        let d = dataset(103);
        for (shuffle, drop_last, skip) in [(true, false, 0), (true, true, 2), (false, false, 5)] {
            let kept = Loader::start(
                &d,
                16,
                drop_last,
                shuffle,
                9,
                3,
                skip,
                Device::Cpu,
                false,
                None,
            )
            .unwrap();
            assert!(kept.inline.as_ref().is_some_and(|p| p.index.is_some()));
            let host = Loader::start(
                &d,
                16,
                drop_last,
                shuffle,
                9,
                3,
                skip,
                Device::Cpu,
                true,
                None,
            )
            .unwrap();
            assert!(host.worker.is_some());
            let batches = |l: Loader| -> Vec<(Vec<i64>, Vec<f64>)> {
                l.map(|b| {
                    let (x, y) = b.unwrap();
                    (ints(&y), Vec::<f64>::try_from(x.flatten(0, -1)).unwrap())
                })
                .collect()
            };
            let (a, b) = (batches(kept), batches(host));
            assert!(!a.is_empty());
            assert_eq!(
                a, b,
                "shuffle {shuffle}, drop_last {drop_last}, skip {skip}"
            );
        }
    }

    #[test]
    fn loader_builds_inline_without_a_thread() {
        // The fallback path, exercised directly.
        let d = dataset(10);
        let producer = Producer {
            data: d.shallow(),
            order: (0..10).collect::<Vec<i64>>().into(),
            index: None,
            batch: 4,
            device: Device::Cpu,
            augment: None,
        };
        let mut loader = Loader {
            batches: None,
            stop: Arc::new(AtomicBool::new(false)),
            worker: None,
            inline: Some(producer),
            next_batch: 1,
            remaining: 2,
            waited: Duration::ZERO,
            span: Span::default(),
        };
        let ids: Vec<Vec<i64>> = loader.by_ref().map(|b| ints(&b.unwrap().1)).collect();
        assert_eq!(ids, vec![vec![4, 5, 6, 7], vec![8, 9]]);
        assert!(loader.next().is_none());
    }

    #[test]
    fn loader_reports_a_failed_batch_at_its_span() {
        // Targets shorter than the inputs: the second batch's gather fails in libtorch.
        let d = Dataset::rows(
            Tensor::zeros([10, 1], (Kind::Float, Device::Cpu)),
            Tensor::zeros([5], (Kind::Int64, Device::Cpu)),
        );
        let at = Span::new(FileId(0), 30, 40);
        let mut loader = Loader::new(&d, 4, false, 0, 0, 0, Device::Cpu)
            .unwrap()
            .at(at);
        assert_eq!(loader.size_hint(), (0, Some(3)));
        assert!(loader.next().unwrap().is_ok());
        let e = loader.next().unwrap().unwrap_err();
        assert!(matches!(e.kind, DataKind::Torch(_)), "{e:?}");
        let f = Diagnostic::from(e);
        assert_eq!(f.code, Code::TorchError);
        assert_eq!(f.primary.span, at);
        assert!(loader.next().is_none());
    }
}
