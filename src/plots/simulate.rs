//! `lfm simulate --plot`: allocation against use per task, one panel per resource.

use std::path::Path;

use plotters::prelude::*;

/// One resource: each task's use and each strategy's first allocation, in file order.
pub struct Panel {
    pub resource: String,
    pub uses: Vec<f64>,
    /// (strategy, first allocation of every task).
    pub series: Vec<(String, Vec<f64>)>,
    /// The whole node: the top of the axis.
    pub node: f64,
}

impl Panel {
    fn unit(&self) -> &'static str {
        match self.resource.as_str() {
            "cores" | "gpus" => "cores",
            _ => "MB",
        }
    }
}

const WIDTH: u32 = 1200;
const PANEL_HEIGHT: u32 = 420;

pub fn draw(path: &Path, panels: &[Panel]) -> Result<(), String> {
    let height = PANEL_HEIGHT * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, panel).map_err(|e| format!("{}: {e}", panel.resource))?;
    }
    root.present().map_err(|e| e.to_string())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw_panel(area: &Area, panel: &Panel) -> Result<(), String> {
    let tasks = panel.uses.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{}: allocation vs use per task", panel.resource),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..tasks, 0.0..panel.node * 1.05)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("task (trace order)")
        .y_desc(panel.unit())
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (strategy, allocations)) in panel.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(indexed(allocations), color.stroke_width(1)))
            .map_err(|e| e.to_string())?
            .label(strategy.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    // Use last, on top: where a strategy's line is below it, that task was retried.
    chart
        .draw_series(LineSeries::new(indexed(&panel.uses), BLACK.stroke_width(1)))
        .map_err(|e| e.to_string())?
        .label("use")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK));
    super::draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
}

fn indexed(values: &[f64]) -> impl Iterator<Item = (f64, f64)> + '_ {
    values.iter().enumerate().map(|(i, &v)| (i as f64, v))
}
