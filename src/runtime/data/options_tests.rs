//! Tests of the data options as [`load`](super::load) applies them: a split's own source, the
//! uint8 `scale`, `drop_last` and the loss's `ignore_index` among the labels.

use super::tests::{all_train, data, expect_failure, floats, ints, Scratch};
use super::*;
use kiln::diagnostic::Code;
use kiln::ir::HeldOut;
use tch::Device;

/// `x.npy` with `n` samples of two floats `i, i` and `y.npy` with labels `i % 3`, as `name`.
fn npy_pair(dir: &Scratch, name: &str, n: i64) -> Source {
    let x = Tensor::arange(n, (Kind::Float, Device::Cpu))
        .unsqueeze(1)
        .repeat([1, 2]);
    let y = Tensor::arange(n, (Kind::Int64, Device::Cpu)).remainder(3);
    let (xs, ys) = (format!("{name}-x.npy"), format!("{name}-y.npy"));
    x.write_npy(dir.path(&xs)).unwrap();
    y.write_npy(dir.path(&ys)).unwrap();
    Source::Npy {
        inputs: xs,
        targets: ys,
    }
}

fn own(source: Source) -> Option<HeldOut> {
    Some(HeldOut {
        source,
        span: kiln::span::Span::new(kiln::span::FileId(0), 50, 60),
        scale: None,
        layout: kiln::ir::Layout::AsStored,
    })
}

#[test]
fn each_split_of_its_own_source_holds_exactly_the_file() {
    let dir = Scratch::new();
    let mut d = data(
        npy_pair(&dir, "train", 30),
        Targets::Classes(Some(3)),
        all_train(),
    );
    d.val = own(npy_pair(&dir, "val", 7));
    d.test = own(npy_pair(&dir, "test", 5));
    let s = load(&d, &[2], DType::Float, &dir.0, 1).unwrap();
    assert_eq!(s.train.len(), 30);
    let (val, test) = (s.val.unwrap(), s.test.unwrap());
    assert_eq!((val.len(), test.len()), (7, 5));
    // All of each file, in file order.
    assert_eq!(
        ints(&val.targets),
        (0..7).map(|i| i % 3).collect::<Vec<_>>()
    );
    assert_eq!(
        floats(&test.inputs),
        vec![0., 0., 1., 1., 2., 2., 3., 3., 4., 4.]
    );
    assert_eq!(ints(&s.train.targets).len(), 30);

    // Fractions of `source` for training and validation, a file for the test split.
    let mut d = data(
        npy_pair(&dir, "train", 30),
        Targets::Classes(Some(3)),
        (0.8, 0.2, 0.0),
    );
    d.test = own(npy_pair(&dir, "test", 5));
    let s = load(&d, &[2], DType::Float, &dir.0, 1).unwrap();
    assert_eq!(
        (s.train.len(), s.val.unwrap().len(), s.test.unwrap().len()),
        (24, 6, 5)
    );

    // A split's own file is checked like `source`, and its failures point at its own call.
    let mut d = data(
        npy_pair(&dir, "train", 30),
        Targets::Classes(Some(3)),
        all_train(),
    );
    d.val = own(Source::Npy {
        inputs: "absent.npy".into(),
        targets: "val-y.npy".into(),
    });
    let f = expect_failure(
        load(&d, &[2], DType::Float, &dir.0, 1),
        Code::DataMissing,
        "absent.npy",
    );
    assert_eq!(f.primary.span.start, 50);
}

#[test]
fn scale_divides_bytes_by_its_value_and_none_keeps_them() {
    let dir = Scratch::new();
    let x = Tensor::from_slice(&[0u8, 51, 102, 255]).reshape([2, 2]);
    x.write_npy(dir.path("bytes.npy")).unwrap();
    Tensor::from_slice(&[0i64, 1])
        .write_npy(dir.path("labels.npy"))
        .unwrap();
    let source = Source::Npy {
        inputs: "bytes.npy".into(),
        targets: "labels.npy".into(),
    };
    let mut d = data(source, Targets::Classes(Some(2)), all_train());
    // uint8 `.npy` arrays are kept as they are by default.
    assert_eq!(d.scale, None);
    let s = load(&d, &[2], DType::Float, &dir.0, 1).unwrap();
    assert_eq!(floats(&s.train.inputs), vec![0.0, 51.0, 102.0, 255.0]);
    d.scale = Some(255.0);
    let s = load(&d, &[2], DType::Float, &dir.0, 1).unwrap();
    assert_eq!(floats(&s.train.inputs), vec![0.0, 0.2, 0.4, 1.0]);

    // A scale for inputs that are not bytes is refused.
    Tensor::from_slice(&[0f32, 0.5, 1.0, 2.0])
        .reshape([2, 2])
        .write_npy(dir.path("floats.npy"))
        .unwrap();
    let mut d = data(
        Source::Npy {
            inputs: "floats.npy".into(),
            targets: "labels.npy".into(),
        },
        Targets::Classes(Some(2)),
        all_train(),
    );
    d.scale = Some(255.0);
    expect_failure(
        load(&d, &[2], DType::Float, &dir.0, 1),
        Code::DataInvalid,
        "divides uint8 inputs",
    );
}

#[test]
fn drop_last_needs_one_full_batch_and_counts_only_full_ones() {
    let dir = Scratch::new();
    let mut d = data(
        npy_pair(&dir, "train", 10),
        Targets::Classes(Some(3)),
        all_train(),
    );
    d.batch = 4;
    let s = load(&d, &[2], DType::Float, &dir.0, 1).unwrap();
    assert_eq!(d.steps_per_epoch(s.train.len() as u64), 3);
    d.drop_last = true;
    let s = load(&d, &[2], DType::Float, &dir.0, 1).unwrap();
    assert_eq!(d.steps_per_epoch(s.train.len() as u64), 2);
    d.batch = 11;
    expect_failure(
        load(&d, &[2], DType::Float, &dir.0, 1),
        Code::DataInvalid,
        "`drop_last`",
    );
}

#[test]
fn the_ignored_label_may_lie_outside_the_classes() {
    let dir = Scratch::new();
    Tensor::zeros([4, 2], (Kind::Float, Device::Cpu))
        .write_npy(dir.path("x.npy"))
        .unwrap();
    Tensor::from_slice(&[0i64, -1, 2, -1])
        .write_npy(dir.path("y.npy"))
        .unwrap();
    let source = Source::Npy {
        inputs: "x.npy".into(),
        targets: "y.npy".into(),
    };
    let mut d = data(source, Targets::Classes(Some(3)), all_train());
    expect_failure(
        load(&d, &[2], DType::Float, &dir.0, 1),
        Code::DataInvalid,
        "the label -1",
    );
    d.ignore_label = Some(-1);
    let s = load(&d, &[2], DType::Float, &dir.0, 1).unwrap();
    assert_eq!(ints(&s.train.targets), vec![0, -1, 2, -1]);
}

#[test]
fn channels_last_samples_move_their_channels_first_and_are_refused_without_the_layout() {
    let dir = Scratch::new();
    // Four images of 2x3 pixels, 2 channels, stored [N, H, W, C].
    let hwc = Tensor::arange(4 * 2 * 3 * 2, (Kind::Float, Device::Cpu)).reshape([4, 2, 3, 2]);
    hwc.write_npy(dir.path("x.npy")).unwrap();
    Tensor::arange(4, (Kind::Int64, Device::Cpu))
        .remainder(3)
        .write_npy(dir.path("y.npy"))
        .unwrap();
    let source = Source::Npy {
        inputs: "x.npy".into(),
        targets: "y.npy".into(),
    };
    let mut d = data(source, Targets::Classes(Some(3)), all_train());
    // As stored, reshaping [2, 3, 2] to [2, 2, 3] would scramble the pixels.
    let refused = expect_failure(
        load(&d, &[2, 2, 3], DType::Float, &dir.0, 1),
        Code::DataInvalid,
        "scramble",
    );
    assert!(refused
        .help
        .unwrap_or_default()
        .contains("layout: channels_last"));
    d.layout = kiln::ir::Layout::ChannelsLast(None);
    let s = load(&d, &[2, 2, 3], DType::Float, &dir.0, 1).unwrap();
    // The split keeps file order: the training set is the four images, as torch.permute gives.
    let want = hwc.permute([0, 3, 1, 2]).contiguous();
    assert_eq!(floats(&s.train.inputs), floats(&want));
    // Flat rows read as [H, W, C] first when the stored shape is declared.
    hwc.reshape([4, 12]).write_npy(dir.path("x.npy")).unwrap();
    d.layout = kiln::ir::Layout::ChannelsLast(Some(vec![2, 3, 2].into()));
    let s = load(&d, &[2, 2, 3], DType::Float, &dir.0, 1).unwrap();
    assert_eq!(floats(&s.train.inputs), floats(&want));
}
