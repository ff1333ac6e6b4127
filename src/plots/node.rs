//! `lfm plot --history [PATH] --node -o node.svg`: the memory a node's served calls held
//! (their allocations) and used (their peaks) over time, from the history, each call counted
//! from its start to its end; where the two lines part is what sizing left unused.

use std::path::PathBuf;

use lfm_sizing::history::Row;
use plotters::prelude::*;

use super::{canvas, legend_line};
use crate::cli::PlotArgs;
use crate::monitoring::open_history as open;

/// One step line: (time since the first start, MiB held from then on).
type Steps = Vec<(f64, f64)>;

pub fn plot(args: &PlotArgs, history: Option<&PathBuf>) -> Result<(), String> {
    let history = open(history)?;
    let rows = history.rows(args.category.as_deref())?;
    let served: Vec<&Row> = rows.iter().filter(|r| r.allocation_mb.is_some()).collect();
    if served.is_empty() {
        return Err(format!(
            "no call of lfm serve (with an allocation) in {}",
            history.path().display()
        ));
    }
    let allocated = steps(&served, |r| r.allocation_mb.unwrap_or(0.0));
    let used = steps(&served, |r| r.memory_mb);
    let areas = canvas(&args.output, 1)?;
    draw(&areas[0], &allocated, &used, served.len())?;
    areas[0]
        .present()
        .map_err(|e| format!("{}: {e}", args.output.display()))
}

/// The sum of `value` over the calls running at each moment, as a step line.
fn steps(rows: &[&Row], value: impl Fn(&Row) -> f64) -> Steps {
    let start = |r: &Row| r.time - r.wall_time;
    let origin = rows.iter().map(|r| start(r)).fold(f64::INFINITY, f64::min);
    let mut changes: Vec<(f64, f64)> = rows
        .iter()
        .flat_map(|r| [(start(r) - origin, value(r)), (r.time - origin, -value(r))])
        .collect();
    changes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut held = 0.0;
    let mut line = vec![(0.0, 0.0)];
    for (t, change) in changes {
        line.push((t, held));
        held = (held + change).max(0.0);
        line.push((t, held));
    }
    line
}

fn draw(area: &super::Area, allocated: &Steps, used: &Steps, calls: usize) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let end = allocated.last().map_or(1.0, |p| p.0).max(0.1);
    let top = allocated.iter().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("memory of the node's {calls} served calls"),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(32)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..top)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("MiB")
        .draw()
        .map_err(e)?;
    let green = RGBColor(0, 140, 60);
    let blue = RGBColor(31, 119, 180);
    for (line, color, label) in [
        (allocated, green, "allocated (held by running calls)"),
        (used, blue, "used (their peaks)"),
    ] {
        chart
            .draw_series(LineSeries::new(line.iter().copied(), color.stroke_width(2)))
            .map_err(e)?
            .label(label)
            .legend(legend_line(color));
    }
    super::draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(end: f64, wall: f64, allocation: f64, used: f64) -> Row {
        Row {
            id: 0,
            category: "c".into(),
            time: end,
            exit: "normal".into(),
            exceeded: String::new(),
            memory_mb: used,
            cores: 1.0,
            disk_mb: None,
            wall_time: wall,
            memory_limit_mb: Some(allocation),
            sized: false,
            cores_limit: None,
            throttled: None,
            gpu_memory_mb: None,
            gpus: None,
            allocation_mb: Some(allocation),
            queue_wait_seconds: Some(0.0),
            input_bytes: None,
        }
    }

    #[test]
    fn what_running_calls_hold_is_summed_from_each_start_to_each_end() {
        // 100 MiB over 10-20 s, 300 MiB over 15-30 s.
        let rows = [
            call(20.0, 10.0, 100.0, 60.0),
            call(30.0, 15.0, 300.0, 250.0),
        ];
        let refs: Vec<&Row> = rows.iter().collect();
        let allocated = steps(&refs, |r| r.allocation_mb.unwrap());
        let level_at = |line: &Steps, t: f64| line.iter().rfind(|p| p.0 <= t).map(|p| p.1).unwrap();
        assert_eq!(level_at(&allocated, 2.0), 100.0);
        assert_eq!(level_at(&allocated, 7.0), 400.0);
        assert_eq!(level_at(&allocated, 12.0), 300.0);
        assert_eq!(level_at(&allocated, 20.0), 0.0);
        let used = steps(&refs, |r| r.memory_mb);
        assert_eq!(level_at(&used, 7.0), 310.0);
    }
}
