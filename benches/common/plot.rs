//! The PNG plots of the benchmarks: latency against node count, and distributions of waits.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Duration;

use plotters::coord::combinators::{BindKeyPoints, IntoLogRange};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// Where a TrueType font is looked for, first found first used (Debian and Ubuntu, Fedora,
/// Arch, macOS). plotters draws text with ab_glyph from the file's bytes, so that building the
/// benchmarks needs no system font library.
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Registers the first font of [`FONTS`] found as plotters' sans-serif, the font of every
/// plot here and of criterion's.
///
/// # Errors
///
/// No font found, or none that plotters can read.
pub fn register_sans_serif() -> Result<(), String> {
    let (path, bytes) = FONTS
        .iter()
        .find_map(|p| std::fs::read(p).ok().map(|b| (p, b)))
        .ok_or_else(|| format!("no font found (looked for {})", FONTS.join(", ")))?;
    // plotters keeps a registered font for the rest of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{path} is not a font plotters can read"))
}

/// Criterion's configuration for the criterion benchmarks: plotters draws text only with a
/// registered font here (it is built with ab_glyph, not the system's font library), so the
/// font is registered first; without one, criterion runs without its plots.
pub fn criterion() -> criterion::Criterion {
    match register_sans_serif() {
        Ok(()) => criterion::Criterion::default(),
        Err(why) => {
            println!("criterion's plots skipped: {why}");
            criterion::Criterion::default().without_plots()
        }
    }
}

/// The size of every plot, in pixels.
const SIZE: (u32, u32) = (900, 550);

/// One colour per client, in the order the clients are given (matplotlib's first colours).
const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// A directory that plots are written to, with a font registered for their text.
pub struct Plots {
    dir: PathBuf,
}

/// One client's latency at each node count: (N, p50, p99).
pub struct Scaling<'a> {
    pub client: &'a str,
    pub points: Vec<(usize, Duration, Duration)>,
}

/// One lock and fault across client counts: (clients, ops per second, p99 wait).
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64, Duration)>,
}

impl Plots {
    /// Registers the first font of [`FONTS`] found and creates `dir`.
    ///
    /// # Errors
    ///
    /// Why plots cannot be drawn: no font found, or `dir` cannot be created.
    pub fn open(dir: PathBuf) -> Result<Plots, String> {
        register_sans_serif()?;
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(Plots { dir })
    }

    /// `latency-vs-nodes.png`: p50 (solid, with points) and p99 (dashed, lighter) of each
    /// client against the node count.
    pub fn latency_vs_nodes(&self, clients: &[Scaling<'_>]) {
        self.write("latency-vs-nodes.png", |path| {
            latency_vs_nodes(path, clients)
        });
    }

    /// `file`: the empirical distribution (CDF) of each client's waits, on a log scale of time.
    pub fn wait_cdf(&self, file: &str, title: &str, clients: &[(&str, &[Duration])]) {
        self.write(file, |path| wait_cdf(path, title, clients));
    }

    /// `file`: throughput (left) and p99 wait (right, log scale) of each series against the
    /// number of clients.
    pub fn contention_vs_clients(&self, file: &str, title: &str, series: &[Series]) {
        self.write(file, |path| contention_vs_clients(path, title, series));
    }

    /// Draws `file` with `draw`, and prints where it went or why it failed.
    fn write(&self, file: &str, draw: impl FnOnce(&Path) -> Result<(), Box<dyn Error>>) {
        let path = self.dir.join(file);
        match draw(&path) {
            Ok(()) => println!("plot: {}", path.display()),
            Err(e) => println!("plot {} failed: {e}", path.display()),
        }
    }
}

fn latency_vs_nodes(path: &Path, clients: &[Scaling<'_>]) -> Result<(), Box<dyn Error>> {
    let nodes = clients
        .iter()
        .flat_map(|c| c.points.iter().map(|&(n, _, _)| n))
        .max()
        .unwrap_or(1);
    let top = clients
        .iter()
        .flat_map(|c| c.points.iter().map(|&(_, _, p99)| micros(p99)))
        .fold(0.0, f64::max)
        * 1.1;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Uncontended acquire+release against node count",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.5..nodes as f64 + 0.5, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("nodes (N)")
        .y_desc("latency (us)")
        .x_labels(nodes)
        .x_label_formatter(&|n| format!("{n:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(BLACK.mix(0.04))
        .draw()?;
    for (i, client) in clients.iter().enumerate() {
        let solid = colour(i).stroke_width(2);
        let light = colour(i).mix(0.55).stroke_width(2);
        chart
            .draw_series(
                LineSeries::new(
                    client
                        .points
                        .iter()
                        .map(|&(n, p50, _)| (n as f64, micros(p50))),
                    solid,
                )
                .point_size(4),
            )?
            .label(format!("{} p50", client.client))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], solid));
        chart
            .draw_series(DashedLineSeries::new(
                client
                    .points
                    .iter()
                    .map(|&(n, _, p99)| (n as f64, micros(p99))),
                8,
                5,
                light,
            ))?
            .label(format!("{} p99", client.client))
            .legend(move |(x, y)| DashedPathElement::new([(x, y), (x + 24, y)], 6, 3, light));
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(())
}

fn contention_vs_clients(
    path: &Path,
    title: &str,
    series: &[Series],
) -> Result<(), Box<dyn Error>> {
    let points = || series.iter().flat_map(|s| s.points.iter());
    let clients = points().map(|p| p.0).fold(1.0, f64::max);
    let top_ops = points().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let (low, high) = points()
        .map(|p| micros(p.2).max(1.0))
        .fold((f64::MAX, 1.0_f64), |(lo, hi), w| (lo.min(w), hi.max(w)));
    let low = decade_below(low.min(high));
    let high = decade_above(high).max(low * 10.0);
    let root = BitMapBackend::new(path, (SIZE.0 * 2, SIZE.1)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let (left, right) = root.split_horizontally(SIZE.0);
    let mut ops = ChartBuilder::on(&left)
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..clients * 1.05, 0.0..top_ops)?;
    ops.configure_mesh()
        .x_desc("separate clients (one task each)")
        .y_desc("acquisitions per second")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(BLACK.mix(0.04))
        .draw()?;
    let mut p99 = ChartBuilder::on(&right)
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            0.0..clients * 1.05,
            (low..high).log_scale().with_key_points(ticks(low, high)),
        )?;
    p99.configure_mesh()
        .x_desc("separate clients (one task each)")
        .y_desc("p99 wait (log scale)")
        .y_label_formatter(&|us| human(*us))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(BLACK.mix(0.04))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let style = colour(i).stroke_width(2);
        ops.draw_series(LineSeries::new(s.points.iter().map(|p| (p.0, p.1)), style).point_size(4))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], style));
        p99.draw_series(
            LineSeries::new(s.points.iter().map(|p| (p.0, micros(p.2).max(1.0))), style)
                .point_size(4),
        )?;
    }
    legend(&mut ops, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(())
}

fn wait_cdf(
    path: &Path,
    title: &str,
    clients: &[(&str, &[Duration])],
) -> Result<(), Box<dyn Error>> {
    // A log scale has no zero: a wait under a microsecond is drawn at one.
    let waits = clients
        .iter()
        .flat_map(|(_, w)| w.iter().map(|&d| micros(d).max(1.0)));
    let (low, high) = waits.fold((f64::MAX, 1.0_f64), |(lo, hi), w| (lo.min(w), hi.max(w)));
    let low = decade_below(low.min(high));
    let high = decade_above(high).max(low * 10.0);
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (low..high).log_scale().with_key_points(ticks(low, high)),
            0.0..1.0,
        )?;
    chart
        .configure_mesh()
        .x_desc("wait, from asking to holding (log scale)")
        .y_desc("fraction of acquisitions")
        .x_label_formatter(&|us| human(*us))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(BLACK.mix(0.04))
        .draw()?;
    for (i, (client, waits)) in clients.iter().enumerate() {
        let style = colour(i).stroke_width(2);
        let mut sorted: Vec<f64> = waits.iter().map(|&d| micros(d).max(1.0)).collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len() as f64;
        // A step at each sample: the fraction of waits at most that long.
        let steps = sorted
            .iter()
            .enumerate()
            .flat_map(|(k, &w)| [(w, k as f64 / n), (w, (k + 1) as f64 / n)]);
        chart
            .draw_series(LineSeries::new(steps, style))?
            .label(*client)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], style));
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present()?;
    Ok(())
}

/// Draws the legend of `chart` at `position`, on white.
fn legend<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 15))
        .draw()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn decade_below(x: f64) -> f64 {
    10f64.powi(x.log10().floor() as i32)
}

fn decade_above(x: f64) -> f64 {
    10f64.powi(x.log10().ceil() as i32)
}

/// Ticks from `low` to `high` (both powers of ten): at 1, 2 and 5 of each decade, or at 1 and
/// 3, or at each decade, the first of these with at most a dozen ticks (so labels do not run
/// into each other).
fn ticks(low: f64, high: f64) -> Vec<f64> {
    let decades = (high / low).log10().round() as usize;
    let steps: &[f64] = match decades {
        0..=3 => &[1.0, 2.0, 5.0],
        4..=5 => &[1.0, 3.0],
        _ => &[1.0],
    };
    (0..=decades)
        .map(|k| low * 10f64.powi(k as i32))
        .flat_map(|decade| steps.iter().map(move |m| m * decade))
        .filter(|&t| t <= high * 1.000_001)
        .collect()
}

/// A time in microseconds as a label: "200 us", "5 ms", "1 s".
fn human(us: f64) -> String {
    if us >= 1e6 {
        format!("{} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{} ms", us / 1e3)
    } else {
        format!("{us} us")
    }
}

/// The directory plots go to: `QUORUM_LOCK_BENCH_PLOTS`, else `docs/bench` in the crate.
pub fn dir() -> PathBuf {
    std::env::var_os("QUORUM_LOCK_BENCH_PLOTS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/bench"),
        PathBuf::from,
    )
}
