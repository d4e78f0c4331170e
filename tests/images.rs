//! Image folders end to end: a small CNN trained on PNG files in `ImageFolder` layout with a
//! random crop and flip every epoch; the same seed gives the same run, a run stopped within an
//! epoch and resumed records what an uninterrupted one does (the augmentation's draws depend on
//! the epoch and the sample, not on the process), and augmentation changes what is computed;
//! what the checker says about image folders before a run. The pixels themselves are compared
//! with PIL's in `src/runtime/data/images.rs`, the crops and flips with a by-hand reference in
//! `src/runtime/data/augment.rs`.

mod support;

use std::path::Path;

use support::*;

/// Writes an RGB PNG of `w × h` pixels.
fn png(path: &Path, w: u32, h: u32, rgb: &[u8]) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let file = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut e = png::Encoder::new(file, w, h);
    e.set_color(png::ColorType::Rgb);
    e.set_depth(png::BitDepth::Eight);
    e.write_header()
        .expect("header")
        .write_image_data(rgb)
        .expect("pixels");
}

/// Two classes of 16 × 16 images, 40 each: a bright bar in the top half (`high`) or the bottom
/// half (`low`) over noise, so a crop of 2 pixels and a mirror keep the class. The same pixels
/// (`[80, 3, 16, 16]` bytes) and classes go to `pics_x.npy` and `pics_y.npy`, in the folder's
/// order.
fn folder(dir: &Path) {
    let (mut planar, mut labels) = (Vec::new(), Vec::new());
    let mut state = 12345u64;
    let mut noise = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 58) as u8
    };
    for (class, rows) in [("high", 2..6), ("low", 10..14)] {
        for i in 0..40 {
            let mut rgb = Vec::with_capacity(16 * 16 * 3);
            for y in 0..16 {
                for x in 0..16 {
                    let bar = rows.contains(&y) && (3..13).contains(&x);
                    for c in 0..3u8 {
                        rgb.push(if bar { 200 - 30 * c } else { 20 } + noise());
                    }
                }
            }
            png(&dir.join(format!("pics/{class}/{i:02}.png")), 16, 16, &rgb);
            for c in 0..3 {
                planar.extend(rgb.iter().skip(c).step_by(3));
            }
            labels.extend_from_slice(&i64::from(class == "low").to_le_bytes());
        }
    }
    let x = support::files::npy_bytes("|u1", &[80, 3, 16, 16], &planar);
    std::fs::write(dir.join("pics_x.npy"), x).expect("write");
    let y = support::files::npy_bytes("<i8", &[80], &labels);
    std::fs::write(dir.join("pics_y.npy"), y).expect("write");
}

fn experiment(augment: &str) -> String {
    format!(
        "experiment \"pics\" {{\n  seed 5\n  data {{\n    source images(\"pics\", size: [3, 16, 16]{augment})\n    split(train: 0.75, val: 0.25)\n    batch 8\n    normalize(mean: [0.4, 0.35, 0.3], std: [0.3, 0.3, 0.3])\n  }}\n  model {{\n    input [3, 16, 16]\n    conv2d(8, kernel_size: 3, padding: 1)\n    relu\n    max_pool2d(2)\n    flatten\n    dropout(0.1)\n    linear(2)\n  }}\n  device cpu\n  optimizer adam(lr: 3e-3)\n  train {{\n    steps 48\n    loss cross_entropy\n    metrics [accuracy]\n    eval_every 16 steps\n    checkpoint(every: 4 steps, keep: 2)\n  }}\n}}\n"
    )
}

fn train(exp: &Path, dir: &Path, extra: &[&str]) {
    let mut args = vec!["run", s(exp), "--quiet", "--run-dir", s(dir)];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn an_augmented_folder_trains_reproducibly_and_resumes_as_one_run() {
    let dir = scratch("images-train");
    folder(&dir);
    let exp = write(&dir, "pics.exp", &experiment(", crop: 2, flip: true"));
    // 1,000 steps, long enough to be killed within an epoch (8 batches each).
    let long = write(
        &dir,
        "long.exp",
        &experiment(", crop: 2, flip: true")
            .replace("steps 48", "steps 1000")
            .replace("eval_every 16 steps", "eval_every 200 steps")
            .replace("every: 4 steps", "every: 20 steps"),
    );
    let (a, b) = (dir.join("a"), dir.join("b"));
    train(&long, &a, &[]);
    train(&long, &b, &[]);
    same_computation(metrics(&a), metrics(&b), "the same seed");
    let r = report(&a);
    let val = r["val"]["accuracy"].as_f64().expect("val accuracy");
    assert!(val >= 0.9, "the bars are learnt: val accuracy {val}");
    // Killed after the checkpoint of step 100 or later (step 100 is half way through epoch 13)
    // and resumed: the augmentation's draws, like every other number, are the uninterrupted
    // run's.
    let cut = dir.join("cut");
    killed_run(&long, &cut, 100);
    let o = run(&["run", s(&long), "--quiet", "--resume", s(&cut)]);
    assert!(o.status.success(), "{}", text(&o));
    same_computation(metrics(&a), metrics(&cut), "metrics of the resumed run");
    let steps = |d: &Path| std::fs::read_to_string(d.join("steps.jsonl")).expect("steps");
    same_computation(steps(&a), steps(&cut), "steps.jsonl of the resumed run");
    let a = dir.join("short");
    train(&exp, &a, &[]);
    // Augmentation is what the batches see: without it, other losses.
    let plain = write(&dir, "plain.exp", &experiment(""));
    let p = dir.join("plain");
    train(&plain, &p, &[]);
    assert_ne!(steps(&a), steps(&p), "crop and flip changed nothing");
    let crop_only = write(&dir, "crop.exp", &experiment(", crop: 2"));
    let c = dir.join("crop");
    train(&crop_only, &c, &[]);
    assert_ne!(steps(&a), steps(&c), "flip changed nothing");
    assert_ne!(steps(&p), steps(&c), "crop changed nothing");
    // Kept as bytes and made floats batch by batch, the images train exactly as the same bytes
    // read from `.npy`, scaled and normalised as they load.
    let npy = write(
        &dir,
        "npy.exp",
        &experiment("").replace(
            "images(\"pics\", size: [3, 16, 16])",
            "npy(\"pics_x.npy\", \"pics_y.npy\", classes: 2, scale: 255)",
        ),
    );
    let n = dir.join("npy");
    train(&npy, &n, &[]);
    same_computation(
        steps(&p),
        steps(&n),
        "an image folder against its bytes from .npy",
    );
    // Predictions for a folder of images (here the class folders, their classes ignored) and
    // for one image, each row naming its file.
    let o = run(&["predict", s(&a), "--input", s(&dir.join("pics"))]);
    assert!(o.status.success(), "{}", text(&o));
    let csv = String::from_utf8(o.stdout).expect("utf-8");
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("file,class,p0,p1"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 80);
    assert_eq!((rows[0][0], rows[40][0]), ("high/00.png", "low/00.png"));
    let right = rows
        .iter()
        .filter(|r| (r[1] == "0") == r[0].starts_with("high/"))
        .count();
    assert!(right >= 72, "{right} of 80 predicted as their folder");
    let one = run(&["predict", s(&a), "--input", s(&dir.join("pics/low/07.png"))]);
    assert!(one.status.success(), "{}", text(&one));
    let one = String::from_utf8(one.stdout).expect("utf-8");
    // The image alone is a batch of one: its probabilities agree to float32 rounding.
    let alone: Vec<&str> = one.lines().nth(1).expect("a row").split(',').collect();
    let among = &rows[47];
    assert_eq!((alone[0], among[0]), ("07.png", "low/07.png"));
    assert_eq!(alone[1], among[1]);
    for (x, y) in alone[2..].iter().zip(&among[2..]) {
        let (x, y): (f64, f64) = (x.parse().expect("p"), y.parse().expect("p"));
        assert!((x - y).abs() <= 1e-6, "{x} vs {y}");
    }
    // The plan says how training batches are augmented.
    let o = run(&["plan", s(&exp)]);
    assert!(
        text(&o).contains("images: 80 samples of [3, 16, 16]; training batches augmented: random crop after padding 2, left-right flip"),
        "{}",
        text(&o)
    );
}

#[test]
fn the_checker_lists_image_folders_before_a_run() {
    let dir = scratch("images-check");
    folder(&dir);
    let check = |name: &str, exp: String| {
        let file = write(&dir, name, &exp);
        let o = run(&["check", s(&file)]);
        (o.status.code(), flat(&text(&o)))
    };
    // The classes are the folders: a head of another size is refused.
    let (code, said) = check("head.exp", experiment("").replace("linear(2)", "linear(3)"));
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("the data has 2 classes but the model outputs 3 scores"),
        "{said}"
    );
    // A declared class count the folders do not have.
    let (_, said) = check("classes.exp", experiment(", classes: 3"));
    assert!(said.contains("K0220"), "{said}");
    assert!(
        said.contains("`pics` has 2 class folders (`high`, `low`), but `classes` declares 3"),
        "{said}"
    );
    // A held-out folder with other classes, and augmentation declared on it.
    png(&dir.join("other/left/0.png"), 16, 16, &[9; 16 * 16 * 3]);
    png(&dir.join("other/right/0.png"), 16, 16, &[9; 16 * 16 * 3]);
    let exp = experiment("").replace(
        "split(train: 0.75, val: 0.25)",
        "split(train: 0.75, test: images(\"other\", size: [3, 16, 16], flip: true))",
    );
    let (_, said) = check("held-out.exp", exp);
    assert!(said.contains("`other`'s class folders (`left`, `right`) are not the training folder's (`high`, `low`)"), "{said}");
    assert!(
        said.contains("the test split is never augmented, so its source takes no `crop` or `flip`"),
        "{said}"
    );
    // Neither one nor three channels; a file, not a folder; a class folder without images.
    let (_, said) = check(
        "channels.exp",
        experiment("").replace("size: [3, 16, 16]", "size: [4, 16, 16]"),
    );
    assert!(
        said.contains("K0121") && said.contains("not [4, 16, 16]"),
        "{said}"
    );
    let (_, said) = check(
        "file.exp",
        experiment("").replace("\"pics\"", "\"head.exp\""),
    );
    assert!(
        said.contains("K0221") && said.contains("it is not a folder"),
        "{said}"
    );
    std::fs::create_dir_all(dir.join("pics/empty")).expect("mkdir");
    std::fs::write(dir.join("pics/empty/readme.txt"), "no images").expect("write");
    let (_, said) = check("empty.exp", experiment(""));
    assert!(
        said.contains("its class folder `empty` holds no PNG or JPEG images"),
        "{said}"
    );
}
