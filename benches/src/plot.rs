//! The pictures of `BENCHMARKS.md`: line charts drawn as SVG from the side-by-side run's own
//! figures (`compare --plots DIR`), so a picture never disagrees with the table beside it.

use std::path::Path;

use plotters::prelude::*;

/// One line of a chart: its name and its points (x, y).
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// The legend.
    pub name: String,
    /// The points, in x order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A named series with no points yet.
    pub fn new(name: &str) -> Series {
        Series { name: name.to_owned(), points: Vec::new() }
    }
}

/// A chart: title, axis captions, whether each axis is logarithmic.
#[derive(Clone, Copy, Debug)]
pub struct Chart<'a> {
    /// The title.
    pub title: &'a str,
    /// The x axis caption.
    pub x: &'a str,
    /// The y axis caption.
    pub y: &'a str,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// Draws `series` as lines with points into the SVG file `path`.
pub fn draw(path: &Path, chart: Chart<'_>, series: &[Series]) -> anyhow::Result<()> {
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    let (mut x_min, mut x_max, mut y_min, mut y_max) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in points() {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    anyhow::ensure!(x_min <= x_max, "chart {:?} has no points", chart.title);
    // Room around the points: a factor on a log axis, a margin on a linear one.
    let (x_range, y_range) =
        (widen(x_min, x_max, chart.log_x, false), widen(y_min, y_max, chart.log_y, !chart.log_y));
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(chart.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(72);
    macro_rules! finish {
        ($context:expr) => {{
            let mut context = $context;
            context
                .configure_mesh()
                .x_desc(chart.x)
                .y_desc(chart.y)
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(plot_error)?;
            for (index, line) in series.iter().enumerate() {
                let color = PALETTE[index % PALETTE.len()];
                context
                    .draw_series(LineSeries::new(
                        line.points.iter().copied(),
                        color.stroke_width(2),
                    ))
                    .map_err(plot_error)?
                    .label(line.name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                    });
                context
                    .draw_series(
                        line.points.iter().map(|&point| Circle::new(point, 3, color.filled())),
                    )
                    .map_err(plot_error)?;
            }
            context
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(plot_error)?;
        }};
    }
    match (chart.log_x, chart.log_y) {
        (true, true) => finish!(
            builder
                .build_cartesian_2d(x_range.log_scale(), y_range.log_scale())
                .map_err(plot_error)?
        ),
        (true, false) => {
            finish!(builder.build_cartesian_2d(x_range.log_scale(), y_range).map_err(plot_error)?)
        }
        (false, true) => {
            finish!(builder.build_cartesian_2d(x_range, y_range.log_scale()).map_err(plot_error)?)
        }
        (false, false) => {
            finish!(builder.build_cartesian_2d(x_range, y_range).map_err(plot_error)?)
        }
    }
    root.present().map_err(plot_error)?;
    Ok(())
}

/// The axis range around `min..max`: a factor of 1.5 on a log axis, 5% (from zero when
/// `from_zero`) on a linear one.
fn widen(min: f64, max: f64, log: bool, from_zero: bool) -> std::ops::Range<f64> {
    if log {
        return (min / 1.5)..(max * 1.5);
    }
    let span = (max - min).max(max.abs() * 0.1).max(1e-9);
    let low = if from_zero { 0.0 } else { min - span * 0.05 };
    low..(max + span * 0.1)
}

fn plot_error<E: std::fmt::Debug>(error: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart: {error:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_an_svg_with_its_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.svg");
        let series = [
            Series {
                name: "engine".into(),
                points: vec![(1.0, 700.0), (64.0, 710.0), (1024.0, 680.0)],
            },
            Series {
                name: "SQLite".into(),
                points: vec![(1.0, 690.0), (64.0, 720.0), (1024.0, 520.0)],
            },
        ];
        let chart = Chart { title: "tail", x: "MiB", y: "µs", log_x: true, log_y: true };
        draw(&path, chart, &series).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        assert!(svg.contains("engine") && svg.contains("SQLite") && svg.contains("tail"));
        assert!(svg.matches("<circle").count() >= 6, "a point per figure");
        assert!(draw(&path, chart, &[Series::new("empty")]).is_err(), "no points, no chart");
    }
}
