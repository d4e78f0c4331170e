//! Helpers the data tests share, and the tests of [`load`](super::load) end to end (real data,
//! normalisation).

use super::*;
use kiln::diagnostic::Code;
use kiln::diagnostic::Diagnostic;
use kiln::ir::Split;
use kiln::span::FileId;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A scratch directory, removed when dropped.
pub(super) struct Scratch(pub(super) PathBuf);

impl Scratch {
    pub(super) fn new() -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "kiln-data-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub(super) fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.path(name), bytes).unwrap();
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn source_span() -> Span {
    Span::new(FileId(0), 10, 20)
}

pub(super) fn data(source: Source, targets: Targets, split: (f64, f64, f64)) -> Data {
    // IDX images are divided by 255 by default, every other format's values kept.
    let scale = matches!(source, Source::Idx { .. }).then_some(255.0);
    Data {
        source,
        source_span: source_span(),
        split: Split {
            train: split.0,
            val: split.1,
            test: split.2,
        },
        scale,
        layout: kiln::ir::Layout::AsStored,
        val: None,
        test: None,
        batch: 4,
        batch_span: Span::new(FileId(0), 30, 40),
        drop_last: false,
        placement: kiln::ir::DataPlacement::Auto,
        eval_batch: 4,
        shuffle: true,
        normalize: None,
        targets,
        ignore_label: None,
        token_vocab: None,
        read: None,
    }
}

pub(super) fn all_train() -> (f64, f64, f64) {
    (1.0, 0.0, 0.0)
}

pub(super) fn floats(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(&t.f_reshape([-1]).unwrap().f_to_kind(Kind::Float).unwrap()).unwrap()
}

pub(super) fn ints(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(&t.f_reshape([-1]).unwrap().f_to_kind(Kind::Int64).unwrap()).unwrap()
}

pub(super) fn idx_source(images: &str, labels: &str) -> Source {
    Source::Idx {
        images: images.into(),
        labels: labels.into(),
    }
}

/// Expects `result` to fail with `code` and a message containing `needle`, as the user sees it.
pub(super) fn expect_failure(
    result: Result<Splits, DataError>,
    code: Code,
    needle: &str,
) -> Diagnostic {
    match result {
        Ok(_) => panic!("expected {code:?} containing {needle:?}, got data"),
        Err(e) => {
            let f = Diagnostic::from(e);
            assert_eq!(f.code, code, "{}", f.message);
            assert!(
                f.message.contains(needle),
                "message {:?} lacks {needle:?}",
                f.message
            );
            assert!(!f.primary.text.is_empty() && f.help.as_deref().is_some_and(|h| !h.is_empty()));
            f
        }
    }
}

#[test]
fn real_mnist_loads_and_splits() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"));
    let d = data(
        idx_source("data/mnist/images.idx.gz", "data/mnist/labels.idx.gz"),
        Targets::Classes(Some(10)),
        (0.8, 0.2, 0.0),
    );
    let s = load(&d, &[784], DType::Float, base, 42).unwrap();
    let val = s.val.as_ref().unwrap();
    assert!(s.test.is_none());
    assert_eq!(s.train.inputs.size(), vec![8000, 784]);
    assert_eq!(val.inputs.size(), vec![2000, 784]);
    assert_eq!(s.train.targets.size(), vec![8000]);
    let all = Tensor::cat(&[&s.train.inputs, &val.inputs], 0);
    let lo = all.min().double_value(&[]);
    let hi = all.max().double_value(&[]);
    assert!(lo == 0.0 && hi == 1.0, "pixels in [{lo}, {hi}]");
    // The digits of README.md, whatever the split.
    let labels = Tensor::cat(&[&s.train.targets, &val.targets], 0);
    let counts = ints(&labels.bincount::<Tensor>(None, 10));
    assert_eq!(
        counts,
        vec![1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978]
    );
    // The same seed gives the same split, another seed another.
    let again = load(&d, &[784], DType::Float, base, 42).unwrap();
    assert_eq!(ints(&again.train.targets), ints(&s.train.targets));
    let other = load(&d, &[784], DType::Float, base, 43).unwrap();
    assert_ne!(ints(&other.train.targets), ints(&s.train.targets));
    // A model input of the wrong size is named with both sizes.
    let f = expect_failure(
        load(&d, &[1, 28, 29], DType::Float, base, 1),
        Code::DataInvalid,
        "samples of 784 values [28, 28], but the model's input [1, 28, 29] holds 812",
    );
    assert_eq!(f.primary.span, source_span());
}

#[test]
fn normalize_per_channel_and_scalar() {
    let dir = Scratch::new();
    // Two samples of two channels of two values.
    Tensor::from_slice(&[1f32, 3., 10., 30., 5., 7., 50., 70.])
        .reshape([2, 2, 2])
        .write_npy(dir.path("x.npy"))
        .unwrap();
    Tensor::from_slice(&[0i64, 1])
        .write_npy(dir.path("y.npy"))
        .unwrap();
    let source = Source::Npy {
        inputs: "x.npy".into(),
        targets: "y.npy".into(),
    };
    let mut d = data(source, Targets::Classes(Some(2)), all_train());
    d.normalize = Some(Normalize {
        mean: vec![1.0, 10.0],
        std: vec![2.0, 20.0],
    });
    let s = load(&d, &[2, 2], DType::Float, &dir.0, 1).unwrap();
    assert_eq!(
        floats(&s.train.inputs),
        vec![0., 1., 0., 1., 2., 3., 2., 3.]
    );
    d.normalize = Some(Normalize {
        mean: vec![1.0],
        std: vec![2.0],
    });
    let s = load(&d, &[2, 2], DType::Float, &dir.0, 1).unwrap();
    assert_eq!(floats(&s.train.inputs)[..2], [0., 1.]);
    d.normalize = Some(Normalize {
        mean: vec![0.0, 0.0, 0.0],
        std: vec![1.0, 1.0, 1.0],
    });
    expect_failure(
        load(&d, &[2, 2], DType::Float, &dir.0, 1),
        Code::DataInvalid,
        "gives 3 values, one per channel, but the samples [2, 2] have 2 channels",
    );
}

#[test]
fn a_missing_file_is_a_typed_error_with_its_path_and_span() {
    let dir = Scratch::new();
    let d = data(
        idx_source("nope-images.idx", "nope-labels.idx"),
        Targets::Classes(Some(10)),
        all_train(),
    );
    let Err(e) = load(&d, &[784], DType::Float, &dir.0, 1) else {
        panic!("a missing file loaded");
    };
    assert!(matches!(e.kind, DataKind::Missing), "{e:?}");
    assert_eq!(e.span, source_span());
    let path = e.path.clone().expect("the file is named");
    assert!(path.ends_with("nope-images.idx"), "{}", path.display());
    assert!(e.detail.contains("it does not exist"), "{}", e.detail);
    let f = Diagnostic::from(e);
    assert_eq!(f.code, Code::DataMissing);
    assert_eq!(f.primary.span, source_span());
    assert_eq!(f.primary.text, "file not found");
}
