//! `--plot PATH`: one row of two charts per workload.
//!
//! Left, ops/s second by second for every run: the degradation picture (a
//! policy that collapses after the first intruder shows a line that drops
//! and stays down). Right, mean ops/s against threads for every
//! (target, variant): the scaling picture.
//!
//! Text needs a TrueType font (plotters' ab_glyph backend has none
//! built in): DejaVuSans is loaded at run time (`DCACHE_FONT` overrides the
//! path). Without a font the charts are drawn with no text at all, and a
//! warning says so.

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::types::{RangedCoordf64, RangedCoordi64};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::{si, RunResult};

/// Where fonts are looked for when `DCACHE_FONT` is not set (Debian's
/// fonts-dejavu-core first).
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
];

const FONT: &str = "sans-serif";

/// The `--plot` path must name a format we can write.
pub fn check_extension(path: &Path) -> Result<(), String> {
    match extension(path).as_deref() {
        Some("svg") | Some("png") => Ok(()),
        _ => Err(format!(
            "--plot path must end in .svg or .png: {}",
            path.display()
        )),
    }
}

fn extension(path: &Path) -> Option<String> {
    path.extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
}

/// Register a font once per process; Err says why there is none.
fn font() -> &'static Result<(), String> {
    static FONT_LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    FONT_LOADED.get_or_init(|| {
        let paths: Vec<String> = match std::env::var("DCACHE_FONT") {
            Ok(p) => vec![p],
            Err(_) => FONT_PATHS.iter().map(|s| s.to_string()).collect(),
        };
        for p in &paths {
            if let Ok(bytes) = std::fs::read(p) {
                // plotters keeps fonts for the life of the process; leaking
                // the one buffer is that lifetime made explicit.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(format!("no usable font at {}", paths.join(", ")))
    })
}

/// Draw `runs` (grouped by workload, in order) into `path`. Returns a
/// warning when the picture had to be drawn without text.
pub fn write_plot(
    path: &Path,
    default_workload: &str,
    runs: &[RunResult],
) -> Result<Option<String>, String> {
    check_extension(path)?;
    let text = font().is_ok();
    let mut groups: Vec<(String, Vec<&RunResult>)> = Vec::new();
    for r in runs {
        let w = r
            .workload
            .as_deref()
            .unwrap_or(default_workload)
            .to_string();
        match groups.iter_mut().find(|(n, _)| *n == w) {
            Some((_, v)) => v.push(r),
            None => groups.push((w, vec![r])),
        }
    }
    if groups.is_empty() {
        groups.push((default_workload.to_string(), Vec::new()));
    }
    let size = (1400, 480 * groups.len() as u32);
    let res = if extension(path).as_deref() == Some("svg") {
        draw(
            SVGBackend::new(path, size).into_drawing_area(),
            &groups,
            text,
        )
    } else {
        draw(
            BitMapBackend::new(path, size).into_drawing_area(),
            &groups,
            text,
        )
    };
    res.map_err(|e| format!("cannot draw --plot {}: {e}", path.display()))?;
    Ok(font()
        .as_ref()
        .err()
        .map(|e| format!("plot drawn without text: {e}")))
}

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordi64, RangedCoordf64>>;

/// (threads, ops/s) points of one line.
type Points = Vec<(i64, f64)>;

type Groups<'a> = [(String, Vec<&'a RunResult>)];

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    groups: &Groups<'_>,
    text: bool,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let rows = root.split_evenly((groups.len(), 2));
    for (i, (name, runs)) in groups.iter().enumerate() {
        over_time(&rows[2 * i], name, runs, text).map_err(err)?;
        over_threads(&rows[2 * i + 1], name, runs, text).map_err(err)?;
    }
    root.present().map_err(err)
}

fn label(r: &RunResult) -> String {
    format!("{} {} {}t", r.variant, r.target, r.threads)
}

/// One color per (variant, target), the same in both charts of a row.
fn color_of(runs: &[&RunResult], r: &RunResult) -> RGBAColor {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for o in runs {
        let k = (o.variant.as_str(), o.target.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let i = keys
        .iter()
        .position(|k| *k == (r.variant.as_str(), r.target.as_str()))
        .unwrap_or(0);
    Palette99::pick(i).to_rgba()
}

fn y_range(max: f64) -> Range<f64> {
    0.0..if max > 0.0 { max * 1.15 } else { 1.0 }
}

fn chart_frame<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    x: Range<i64>,
    y: Range<f64>,
    x_desc: &str,
    text: bool,
) -> Result<Chart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let x_span = x.end - x.start + 1;
    let mut b = ChartBuilder::on(area);
    b.margin(12);
    if text {
        b.caption(title, (FONT, 20))
            .x_label_area_size(40)
            .y_label_area_size(70);
    }
    let mut chart = b.build_cartesian_2d(x, y)?;
    if text {
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc("ops/s")
            .x_labels((x_span as usize).clamp(2, 16))
            .x_label_formatter(&|v| v.to_string())
            .y_label_formatter(&|v| si(*v))
            .label_style((FONT, 13))
            .draw()?;
    }
    // Without a font there is no mesh either: plotters lays the mesh out
    // around its labels.
    Ok(chart)
}

/// ops/s in each measured second of each run.
fn over_time<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    name: &str,
    runs: &[&RunResult],
    text: bool,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    // With many runs the picture would be unreadable: keep, per (target,
    // variant), the run with the most threads, where contention is worst.
    let shown: Vec<&RunResult> = if runs.len() > 12 {
        runs.iter()
            .copied()
            .filter(|r| {
                !runs.iter().any(|o| {
                    o.target == r.target && o.variant == r.variant && o.threads > r.threads
                })
            })
            .collect()
    } else {
        runs.to_vec()
    };
    let secs = shown
        .iter()
        .map(|r| r.per_second.len())
        .max()
        .unwrap_or(0)
        .max(2) as i64;
    let mut thread_counts: Vec<usize> = shown.iter().map(|r| r.threads).collect();
    thread_counts.sort_unstable();
    thread_counts.dedup();
    let max = shown
        .iter()
        .flat_map(|r| r.per_second.iter().map(|s| s.total as f64))
        .fold(0.0, f64::max);
    let mut chart = chart_frame(
        area,
        &format!("{name}: ops/s over time"),
        1..secs,
        y_range(max),
        "second",
        text,
    )?;
    for r in &shown {
        // Fewer threads, fainter line: the most contended run stands out.
        let rank = thread_counts
            .iter()
            .position(|&t| t == r.threads)
            .unwrap_or(0);
        let alpha = 0.35 + 0.65 * (rank + 1) as f64 / thread_counts.len() as f64;
        let color = color_of(runs, r).mix(alpha);
        if r.per_second.len() == 1 {
            // A single second makes no line; show it as a dot.
            let p = (1, r.per_second[0].total as f64);
            chart.draw_series(std::iter::once(Circle::new(p, 3, color.filled())))?;
        }
        let points = r
            .per_second
            .iter()
            .enumerate()
            .map(|(s, v)| ((s + 1) as i64, v.total as f64));
        let series = chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?;
        if text {
            series
                .label(label(r))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
    }
    if text && !shown.is_empty() {
        chart
            .configure_series_labels()
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()?;
    }
    Ok(())
}

/// Mean ops/s against the thread count, one line per (target, variant).
fn over_threads<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    name: &str,
    runs: &[&RunResult],
    text: bool,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let mut lines: Vec<(String, RGBAColor, Points)> = Vec::new();
    for r in runs {
        let key = format!("{} {}", r.variant, r.target);
        let p = (r.threads as i64, r.ops_per_sec);
        match lines.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, _, v)) => v.push(p),
            None => lines.push((key, color_of(runs, r), vec![p])),
        }
    }
    for (_, _, v) in &mut lines {
        v.sort_by_key(|p| p.0);
    }
    let max_t = runs.iter().map(|r| r.threads).max().unwrap_or(1).max(2) as i64;
    let max = runs.iter().map(|r| r.ops_per_sec).fold(0.0, f64::max);
    let mut chart = chart_frame(
        area,
        &format!("{name}: ops/s by threads"),
        1..max_t,
        y_range(max),
        "threads",
        text,
    )?;
    for (key, color, pts) in &lines {
        let color = *color;
        let series = chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?;
        if text {
            series
                .label(key.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    if text && !lines.is_empty() {
        chart
            .configure_series_labels()
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Sample;

    fn runs() -> Vec<RunResult> {
        let s = |total| Sample {
            min: total / 2,
            max: total / 2,
            total,
        };
        ["a", "b"]
            .iter()
            .flat_map(|v| {
                (1..=2).map(move |t| RunResult {
                    workload: None,
                    target: "lib".into(),
                    variant: v.to_string(),
                    threads: t,
                    seconds: 3,
                    ops_per_sec: 100.0 * t as f64,
                    per_second: vec![s(100), s(90), s(110)],
                    cpu_util: None,
                    memory: None,
                })
            })
            .collect()
    }

    #[test]
    fn svg_and_png_are_written() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["p.svg", "p.png"] {
            let path = dir.path().join(name);
            write_plot(&path, "w", &runs()).unwrap();
            let meta = std::fs::metadata(&path).unwrap();
            assert!(meta.len() > 1000, "{name}: {} bytes", meta.len());
        }
        let svg = std::fs::read_to_string(dir.path().join("p.svg")).unwrap();
        assert!(svg.starts_with("<svg"));
        if font().is_ok() {
            assert!(svg.contains("ops/s over time"));
        }
    }

    #[test]
    fn empty_results_still_draw() {
        let dir = tempfile::tempdir().unwrap();
        write_plot(&dir.path().join("e.svg"), "w", &[]).unwrap();
    }

    #[test]
    fn other_extensions_are_refused() {
        assert!(check_extension(Path::new("x.gif")).is_err());
        assert!(check_extension(Path::new("x")).is_err());
        assert!(check_extension(Path::new("x.SVG")).is_ok());
    }
}
