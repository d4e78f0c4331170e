//! Training curves: `loss.svg`/`loss.png` and, for class targets, `accuracy.svg`/`accuracy.png`,
//! drawn from a run directory's `metrics.jsonl` with plotters.
//!
//! Text in the PNG files is rasterised with DejaVu Sans, bundled under `assets/fonts/` and read by
//! ab_glyph, so the plots come out the same on a machine with no fonts or font libraries.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordi64;
use plotters::coord::Shift;
use plotters::prelude::*;

use kiln::diagnostic::problem::{RunStage, Running};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::rundir::{read_metrics, read_report, MetricLine};
use kiln::span::Span;

/// DejaVu Sans 2.37 (license: `assets/fonts/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// Width and height of every plot, in pixels.
const SIZE: (u32, u32) = (960, 600);
/// Series drawn with a marker at every point up to this many points.
const MARKERS_UP_TO: usize = 60;

const TRAIN: RGBColor = RGBColor(31, 119, 180);
const VAL: RGBColor = RGBColor(230, 110, 0);
const TOP_K: RGBColor = RGBColor(44, 160, 44);

/// One curve: `(step, value)` points in file order.
struct Series {
    label: String,
    color: RGBColor,
    points: Vec<(i64, f64)>,
}

/// One chart: a title, the y axis' name and its curves.
struct Chart {
    title: String,
    y_desc: &'static str,
    percent: bool,
    series: Vec<Series>,
}

/// Writes the training curves of the run in `dir` beside its `metrics.jsonl`.
///
/// `loss.svg` and `loss.png` when any loss was recorded; `accuracy.svg` and `accuracy.png` when
/// the metrics hold accuracies. A run without `metrics.jsonl` (nothing recorded) gets no plots.
/// Failures are K0509 (`RunIo`) at `span`.
pub fn write_curves(dir: &Path, span: Span) -> Result<(), Diagnostic> {
    let lines = match read_metrics(dir) {
        Ok(Some(lines)) => lines,
        Ok(None) => return Ok(()),
        Err(e) => return Err(fail(span, e.op.verb(), Some(e.path), e.detail)),
    };
    register_font().map_err(|e| fail(span, "load the bundled font (DejaVu Sans)", None, e))?;
    let name = run_name(dir);
    for (file, chart) in charts(&lines, &name) {
        write_chart(dir, file, &chart)
            .map_err(|e| fail(span, "draw", Some(dir.join(file)), e.to_string()))?;
    }
    Ok(())
}

/// A K0509 failure at `span`: `action` could not be done (to `path`).
fn fail(span: Span, action: &str, path: Option<PathBuf>, error: String) -> Diagnostic {
    Problem::Running(Running::RunIo {
        span,
        action: action.to_string(),
        path,
        error,
        stage: RunStage::Plot,
    })
    .diagnostic()
}

/// Registers the bundled font as plotters' `sans-serif`, once per process.
fn register_font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| "it is not a valid font".to_string())
    })
    .clone()
}

/// The experiment's name and trial from `report.yaml`, when it is there.
fn run_name(dir: &Path) -> String {
    let Ok(report) = read_report(dir) else {
        return String::new();
    };
    if report.trial.is_empty() {
        report.experiment
    } else {
        format!("{} ({})", report.experiment, report.trial_label(", "))
    }
}

/// The charts to draw, with their file stems, from the lines of `metrics.jsonl`. Points that
/// are not finite are left out.
fn charts(lines: &[MetricLine], name: &str) -> Vec<(&'static str, Chart)> {
    let mut train_loss = Vec::new();
    let mut train_acc = Vec::new();
    let mut val_loss = Vec::new();
    let mut val_acc = Vec::new();
    let mut top_k: Option<(String, Vec<(i64, f64)>)> = None;
    let finite = |x: f64| x.is_finite().then_some(x);
    for line in lines {
        let step = i64::try_from(line.step()).unwrap_or(i64::MAX);
        match line {
            MetricLine::Train(r) => {
                train_loss.extend(finite(r.train_loss).map(|y| (step, y)));
                let acc = r.train_accuracy.and_then(finite);
                train_acc.extend(acc.map(|y| (step, 100.0 * y)));
            }
            MetricLine::Val(r) => {
                val_loss.extend(finite(r.loss).map(|y| (step, y)));
                let acc = r.accuracy.and_then(finite);
                val_acc.extend(acc.map(|y| (step, 100.0 * y)));
                if let Some(t) = r.top_k {
                    let entry = top_k
                        .get_or_insert_with(|| (format!("val top-{} accuracy", t.k), Vec::new()));
                    entry
                        .1
                        .extend(finite(t.accuracy).map(|y| (step, 100.0 * y)));
                }
            }
        }
    }
    let title = |what: &str| {
        if name.is_empty() {
            what.to_string()
        } else {
            format!("{name}: {what}")
        }
    };
    let series = |label: &str, color, points: Vec<(i64, f64)>| Series {
        label: label.to_string(),
        color,
        points,
    };
    let mut out = Vec::new();
    let loss: Vec<Series> = [
        series("train loss", TRAIN, train_loss),
        series("val loss", VAL, val_loss),
    ]
    .into_iter()
    .filter(|s| !s.points.is_empty())
    .collect();
    if !loss.is_empty() {
        out.push((
            "loss",
            Chart {
                title: title("loss"),
                y_desc: "loss",
                percent: false,
                series: loss,
            },
        ));
    }
    let mut acc = vec![
        series("train accuracy", TRAIN, train_acc),
        series("val accuracy", VAL, val_acc),
    ];
    if let Some((label, points)) = top_k {
        acc.push(series(&label, TOP_K, points));
    }
    acc.retain(|s| !s.points.is_empty());
    if !acc.is_empty() {
        out.push((
            "accuracy",
            Chart {
                title: title("accuracy"),
                y_desc: "accuracy",
                percent: true,
                series: acc,
            },
        ));
    }
    out
}

/// Writes `<stem>.svg` and `<stem>.png`, each through a temporary file renamed into place.
fn write_chart(dir: &Path, stem: &str, chart: &Chart) -> Result<(), String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(&root, chart)?;
        root.present().map_err(|e| e.to_string())?;
    }
    let svg_tmp = dir.join(format!(".{stem}.tmp.svg"));
    let written = std::fs::write(&svg_tmp, svg).map_err(|e| e.to_string());
    place(written, &svg_tmp, &dir.join(format!("{stem}.svg")))?;

    // The bitmap backend picks the encoder from the extension: the temporary name keeps `.png`.
    let png_tmp = dir.join(format!(".{stem}.tmp.png"));
    let drawn = (|| {
        let root = BitMapBackend::new(&png_tmp, SIZE).into_drawing_area();
        draw(&root, chart)?;
        root.present().map_err(|e| e.to_string())
    })();
    place(drawn, &png_tmp, &dir.join(format!("{stem}.png")))
}

/// Renames a written temporary file into place; removes it when writing or renaming failed.
fn place(written: Result<(), String>, tmp: &Path, path: &Path) -> Result<(), String> {
    let result = written.and_then(|()| std::fs::rename(tmp, path).map_err(|e| e.to_string()));
    if result.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    result
}

/// A range around `lo..hi` with a margin, never empty.
fn padded(lo: f64, hi: f64) -> (f64, f64) {
    let span = hi - lo;
    let pad = if span > 0.0 {
        span * 0.06
    } else {
        lo.abs().max(1.0) * 0.05
    };
    (lo - pad, hi + pad)
}

/// Losses whose largest value is this many times the smallest are drawn on a log scale.
const LOG_SCALE_RATIO: f64 = 100.0;

/// Draws one chart on any plotters backend.
fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let all = chart.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut lo, mut hi) = (i64::MAX, i64::MIN, f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        lo = lo.min(y);
        hi = hi.max(y);
    }
    if x0 > x1 {
        return Ok(());
    }
    let xpad = ((x1 - x0) / 30).max(1);
    let (x0, x1) = ((x0 - xpad).max(0), x1 + xpad);

    let mut builder = ChartBuilder::on(root);
    builder
        .caption(&chart.title, ("sans-serif", 26))
        .margin(18)
        .x_label_area_size(56)
        .y_label_area_size(84);
    if !chart.percent && lo > 0.0 && hi / lo >= LOG_SCALE_RATIO {
        let ctx = builder
            .build_cartesian_2d(x0..x1, (lo / 1.25..hi * 1.25).log_scale())
            .map_err(err)?;
        let desc = format!("{} (log scale)", chart.y_desc);
        return finish(ctx, chart, &desc, &|v: &f64| log_label(*v));
    }
    let (mut y0, mut y1) = padded(lo, hi);
    if chart.percent {
        y0 = y0.max(0.0);
        y1 = y1.min(100.0).max(y0 + 0.1);
    } else if y0 < 0.0 && lo >= 0.0 {
        y0 = 0.0;
    }
    let ctx = builder.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?;
    let decimals = label_decimals(y1 - y0);
    let y_fmt = |v: &f64| {
        if chart.percent {
            format!("{v:.*}%", decimals.saturating_sub(2))
        } else {
            format!("{v:.decimals$}")
        }
    };
    finish(ctx, chart, chart.y_desc, &y_fmt)
}

/// Draws the mesh, the curves and the legend into a chart whose axes are set.
fn finish<'a, DB, Y>(
    mut ctx: ChartContext<'a, DB, Cartesian2d<RangedCoordi64, Y>>,
    chart: &Chart,
    y_desc: &str,
    y_fmt: &dyn Fn(&f64) -> String,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    ctx.configure_mesh()
        .x_desc("step")
        .y_desc(y_desc)
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 15))
        .max_light_lines(4)
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(215, 215, 215))
        .y_label_formatter(y_fmt)
        .draw()
        .map_err(err)?;

    for s in &chart.series {
        let style = ShapeStyle::from(&s.color).stroke_width(2);
        let color = s.color;
        ctx.draw_series(LineSeries::new(s.points.iter().copied(), style))
            .map_err(err)?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(
                    vec![(x, y), (x + 24, y)],
                    ShapeStyle::from(&color).stroke_width(3),
                )
            });
        if s.points.len() <= MARKERS_UP_TO {
            ctx.draw_series(
                s.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, s.color.filled())),
            )
            .map_err(err)?;
        }
    }
    ctx.configure_series_labels()
        .position(if chart.percent {
            SeriesLabelPosition::LowerRight
        } else {
            SeriesLabelPosition::UpperRight
        })
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .margin(12)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// A tick label on a log axis: `0.5`, `20`, `1e-5`.
fn log_label(v: f64) -> String {
    if (0.01..10_000.0).contains(&v) {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.0e}")
    }
}

/// Decimals that tell tick labels apart over a range of width `range`.
fn label_decimals(range: f64) -> usize {
    match range {
        r if r >= 20.0 => 0,
        r if r >= 2.0 => 1,
        r if r >= 0.2 => 2,
        r if r >= 0.02 => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::diagnostic::Code;
    use kiln::span::FileId;

    fn run_dir(name: &str, metrics: &str) -> std::path::PathBuf {
        let dir = crate::toolkit::scratch(&format!("plot-{name}"));
        std::fs::write(dir.join("metrics.jsonl"), metrics).expect("write metrics");
        dir
    }

    fn span() -> Span {
        Span::new(FileId(0), 0, 0)
    }

    fn classification(epochs: u64) -> String {
        let mut text = String::new();
        for e in 1..=epochs {
            let loss = 2.0 / (e as f64 + 0.5);
            text += &format!(
                "{{\"split\":\"train\",\"epoch\":{e},\"step\":{},\"lr\":0.001,\"train_loss\":{loss},\"train_accuracy\":{},\"seconds\":1.0,\"samples_per_s\":5000.0}}\n",
                125 * e,
                1.0 - loss / 4.0
            );
            text += &format!(
                "{{\"split\":\"val\",\"epoch\":{e},\"step\":{},\"loss\":{},\"accuracy\":{},\"top_5_accuracy\":{}}}\n",
                125 * e,
                loss * 1.1,
                1.0 - loss / 3.5,
                1.0 - loss / 20.0
            );
        }
        text
    }

    #[test]
    fn writes_loss_and_accuracy_plots() {
        let dir = run_dir("class", &classification(12));
        std::fs::write(
            dir.join("report.yaml"),
            "experiment: mnist_mlp\ntrial:\n- - lr\n  - '0.001'\n",
        )
        .expect("write report");
        write_curves(&dir, span()).expect("plots");
        for name in ["loss.svg", "loss.png", "accuracy.svg", "accuracy.png"] {
            assert!(dir.join(name).is_file(), "{name} missing");
        }
        for name in ["loss.png", "accuracy.png"] {
            let png = std::fs::read(dir.join(name)).expect("read png");
            assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is not a PNG");
            assert!(png.len() > 10_000, "{name} is only {} bytes", png.len());
        }
        let loss = std::fs::read_to_string(dir.join("loss.svg")).expect("read svg");
        assert!(loss.starts_with("<svg"), "{}", &loss[..80.min(loss.len())]);
        for label in [
            "train loss",
            "val loss",
            "step",
            "mnist_mlp (lr=0.001): loss",
        ] {
            assert!(loss.contains(label), "loss.svg lacks `{label}`");
        }
        let acc = std::fs::read_to_string(dir.join("accuracy.svg")).expect("read svg");
        for label in [
            "train accuracy",
            "val accuracy",
            "val top-5 accuracy",
            "mnist_mlp (lr=0.001): accuracy",
        ] {
            assert!(acc.contains(label), "accuracy.svg lacks `{label}`");
        }
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .expect("list")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left behind");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn regression_has_no_accuracy_plot() {
        let text = "{\"split\":\"train\",\"epoch\":1,\"step\":10,\"lr\":0.01,\"train_loss\":0.5,\"train_accuracy\":null,\"seconds\":0.1,\"samples_per_s\":100.0}\n\
                    {\"split\":\"val\",\"epoch\":1,\"step\":10,\"loss\":0.6}\n";
        let dir = run_dir("regression", text);
        write_curves(&dir, span()).expect("plots");
        assert!(dir.join("loss.svg").is_file() && dir.join("loss.png").is_file());
        assert!(!dir.join("accuracy.svg").exists() && !dir.join("accuracy.png").exists());
        let svg = std::fs::read_to_string(dir.join("loss.svg")).expect("read svg");
        assert!(svg.contains("train loss") && svg.contains("val loss"));
        assert!(!svg.contains("log scale"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn losses_over_orders_of_magnitude_use_a_log_scale() {
        let mut text = String::new();
        for step in 1..=50 {
            text += &format!(
                "{{\"split\":\"train\",\"epoch\":{step},\"step\":{step},\"lr\":0.01,\"train_loss\":{},\"train_accuracy\":null,\"seconds\":0.1,\"samples_per_s\":100.0}}\n",
                2.0 * 0.7f64.powi(step)
            );
        }
        let dir = run_dir("log", &text);
        write_curves(&dir, span()).expect("plots");
        let svg = std::fs::read_to_string(dir.join("loss.svg")).expect("read svg");
        assert!(svg.contains("loss (log scale)"), "no log scale");
        assert!(svg.contains("1e-5"), "no log tick label");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn non_finite_and_malformed_lines_are_skipped() {
        let text = "{\"split\":\"train\",\"epoch\":1,\"step\":5,\"lr\":0.01,\"train_loss\":null,\"train_accuracy\":null,\"seconds\":0.1,\"samples_per_s\":100.0}\n\
                    not json\n\
                    {\"split\":\"train\",\"epoch\":2,\"step\":10,\"lr\":0.01,\"train_loss\":0.4,\"train_accuracy\":null,\"seconds\":0.1,\"samples_per_s\":100.0}\n";
        let dir = run_dir("odd", text);
        write_curves(&dir, span()).expect("plots");
        assert!(dir.join("loss.png").is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_metrics_means_no_plots_and_unreadable_metrics_fail() {
        let dir = crate::toolkit::scratch("plot-missing");
        write_curves(&dir, span()).expect("nothing to plot");
        assert!(!dir.join("loss.png").exists());
        // A directory where the file should be cannot be read.
        std::fs::create_dir_all(dir.join("metrics.jsonl")).expect("dir");
        let f = write_curves(&dir, span()).expect_err("unreadable metrics");
        assert_eq!(f.code, Code::RunIo);
        assert!(f.message.contains("metrics.jsonl"), "{}", f.message);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unwritable_directory_is_a_run_io_failure() {
        let dir = run_dir("unwritable", &classification(2));
        // A directory in the way of the output file makes the rename fail, even as root.
        std::fs::create_dir_all(dir.join("loss.svg").join("x")).expect("dir");
        let f = write_curves(&dir, span()).expect_err("cannot write");
        assert_eq!(f.code, Code::RunIo);
        assert!(f.message.contains("loss"), "{}", f.message);
        assert!(
            !dir.join(".loss.tmp.svg").exists(),
            "temporary file left behind"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
