//! `lfm plot --history --category C -o c.svg`: per resource, the distribution of the peaks of
//! the category's normally ended runs, the runs that ran out of a limit (the retries), and the
//! allocation sizing gives the next run.

use std::path::PathBuf;

use lfm_sizing::auto::AutoLimit;
use lfm_sizing::history::{ended_normally, Row};
use lfm_sizing::Strategy;
use plotters::prelude::*;

use super::{canvas, legend_line, Area};
use crate::cli::PlotArgs;
use crate::monitoring::open_history as open;
use lfm_sizing::advice::next_allocation;

const BINS: usize = 24;

/// One resource of the category.
struct Peaks {
    resource: AutoLimit,
    /// Peaks of the normally ended runs.
    normal: Vec<f64>,
    /// What the runs that ran out of this resource had used when they were killed.
    ran_out: Vec<f64>,
    allocation: f64,
}

pub fn plot(args: &PlotArgs, history: Option<&PathBuf>) -> Result<(), String> {
    let Some(category) = args.category.as_deref() else {
        return Err("--history plots one category: give --category C".into());
    };
    let strategy = Strategy::parse(&args.strategy)?;
    let history = open(history)?;
    let rows = history.rows(Some(category))?;
    if rows.is_empty() {
        return Err(format!(
            "no run of category {category} in {}",
            history.path().display()
        ));
    }
    let panels: Vec<Peaks> = [AutoLimit::Memory, AutoLimit::Cores, AutoLimit::Disk]
        .into_iter()
        .filter_map(|resource| peaks(&rows, resource, strategy))
        .collect();
    let areas = canvas(&args.output, panels.len())?;
    for (area, peaks) in areas.iter().zip(&panels) {
        let name = peaks.resource.name();
        draw_peaks(area, peaks, category, strategy).map_err(|e| format!("{name}: {e}"))?;
    }
    areas[0]
        .present()
        .map_err(|e| format!("{}: {e}", args.output.display()))
}

/// None for a resource no run measured (disk without a sandbox).
fn peaks(rows: &[Row], resource: AutoLimit, strategy: Strategy) -> Option<Peaks> {
    let used = |ended: bool| -> Vec<f64> {
        rows.iter()
            .filter(|r| ended_normally(r) == ended)
            .filter(|r| ended || r.exceeded.split(',').any(|x| x == resource.name()))
            .filter_map(|r| resource.used(r))
            .collect()
    };
    let (normal, ran_out) = (used(true), used(false));
    if normal.is_empty() && ran_out.is_empty() {
        return None;
    }
    Some(Peaks {
        resource,
        normal,
        ran_out,
        allocation: next_allocation(rows, strategy, resource, None, None),
    })
}

/// Bars of `values` over `BINS` equal bins of `0..top`: (bin start, bin end, count).
fn histogram(values: &[f64], top: f64) -> Vec<(f64, f64, u32)> {
    let width = top / BINS as f64;
    let mut counts = [0u32; BINS];
    for &value in values {
        counts[((value / width) as usize).min(BINS - 1)] += 1;
    }
    let bars = counts.iter().enumerate().filter(|(_, &n)| n > 0);
    bars.map(|(i, &n)| (i as f64 * width, (i + 1) as f64 * width, n))
        .collect()
}

type Bins = Vec<(f64, f64, u32)>;

/// The x axis' end (above every peak and the allocation), both histograms, the tallest bar.
fn binned(peaks: &Peaks) -> (f64, Bins, Bins, u32) {
    let top = peaks
        .normal
        .iter()
        .chain(&peaks.ran_out)
        .fold(peaks.allocation, |a, &b| a.max(b))
        .max(1.0)
        * 1.1;
    let normal = histogram(&peaks.normal, top);
    let ran_out = histogram(&peaks.ran_out, top);
    let tallest = normal
        .iter()
        .chain(&ran_out)
        .map(|b| b.2)
        .max()
        .unwrap_or(1);
    (top, normal, ran_out, tallest)
}

fn draw_peaks(
    area: &Area,
    peaks: &Peaks,
    category: &str,
    strategy: Strategy,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let (top, normal, ran_out, tallest) = binned(peaks);
    let unit = peaks.resource.unit();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "{category}: {} peaks of {} runs",
                peaks.resource.name(),
                peaks.normal.len() + peaks.ran_out.len()
            ),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(32)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..top, 0.0..f64::from(tallest) * 1.25)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(unit)
        .y_desc("runs")
        .draw()
        .map_err(e)?;
    let blue = RGBColor(31, 119, 180);
    let bars = |bars: Vec<(f64, f64, u32)>, color: RGBColor| {
        bars.into_iter().map(move |(x0, x1, n)| {
            Rectangle::new([(x0, 0.0), (x1, f64::from(n))], color.mix(0.7).filled())
        })
    };
    chart
        .draw_series(bars(normal, blue))
        .map_err(e)?
        .label(format!(
            "peaks of {} normally ended runs",
            peaks.normal.len()
        ))
        .legend(legend_line(blue));
    if !peaks.ran_out.is_empty() {
        chart
            .draw_series(bars(ran_out, RED))
            .map_err(e)?
            .label(format!(
                "{} runs that ran out (retried)",
                peaks.ran_out.len()
            ))
            .legend(legend_line(RED));
    }
    let green = RGBColor(0, 140, 60);
    let line = vec![
        (peaks.allocation, 0.0),
        (peaks.allocation, f64::from(tallest) * 1.25),
    ];
    chart
        .draw_series(LineSeries::new(line, green.stroke_width(3)))
        .map_err(e)?
        .label(format!(
            "next allocation {:.1} {unit} ({})",
            peaks.allocation,
            strategy.name()
        ))
        .legend(legend_line(green));
    super::draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
}
