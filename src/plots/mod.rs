//! The SVG charts of `lfm plot` (a run over time, or a category's history) and `lfm simulate
//! --plot`, drawn with plotters' SVG backend, one panel per resource.

pub mod history;
pub mod node;
pub mod run;
mod simulate;
pub mod site_usage;

use plotters::prelude::*;

pub use simulate::{draw, Panel};

pub(crate) type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

pub(crate) const WIDTH: u32 = 1000;
pub(crate) const PANEL_HEIGHT: u32 = 300;

/// A white SVG canvas split into `panels` rows.
pub(crate) fn canvas(path: &std::path::Path, panels: usize) -> Result<Vec<Area<'_>>, String> {
    let root =
        SVGBackend::new(path, (WIDTH, PANEL_HEIGHT * panels.max(1) as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    Ok(root.split_evenly((panels.max(1), 1)))
}

/// The charts' f64-by-f64 plotting context.
pub(crate) type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Every chart's legend: a bordered, slightly transparent box at `position`.
pub(crate) fn draw_legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(position)
        .draw()
        .map_err(|e| e.to_string())
}

/// A legend entry's short line in `color`.
pub(crate) fn legend_line(color: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
}
