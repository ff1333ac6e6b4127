//! `lfm usage --site DIR --plot top.svg`: the distinct processes per day that imported each of
//! the most used distributions, one line each.

use std::path::Path;

use lfm_usage::aggregate::SiteUsage;
use plotters::prelude::*;

use super::{canvas, draw_legend, legend_line};

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];
const DAY: f64 = 86_400.0;

pub fn plot(usage: &SiteUsage, path: &Path) -> Result<(), String> {
    if usage.timeline.is_empty() {
        return Err(format!(
            "--plot: no installed distribution was imported in the logs under {}",
            usage.directory.display()
        ));
    }
    let areas = canvas(path, 1)?;
    draw(&areas[0], usage).map_err(|e| format!("{}: {e}", path.display()))?;
    areas[0]
        .present()
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn draw(area: &super::Area, usage: &SiteUsage) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let days = || usage.timeline.iter().flat_map(|s| s.days.iter());
    let first = days().map(|d| d.0).fold(f64::INFINITY, f64::min);
    let last = days().map(|d| d.0).fold(f64::NEG_INFINITY, f64::max);
    let top = days().map(|d| d.1 as f64).fold(1.0, f64::max) * 1.15;
    let span = ((last - first) / DAY).max(1.0);
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "processes per day importing the top {} distributions",
                usage.timeline.len()
            ),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(32)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..span, 0.0..top)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(format!(
            "days since {}",
            &crate::commands::usage::utc(first)[..10]
        ))
        .y_desc("processes")
        .draw()
        .map_err(e)?;
    for (series, color) in usage.timeline.iter().zip(COLORS.iter().cycle()) {
        let points = series
            .days
            .iter()
            .map(|&(day, n)| ((day - first) / DAY, n as f64));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(e)?
            .label(series.distribution.as_str())
            .legend(legend_line(*color));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
}
