//! `lfm plot REPORT.json SERIES.jsonl -o run.svg`: memory, cores and disk over time (from
//! `--series`), each with its limit and the run's end: where a limit or a signal killed it.

use std::path::{Path, PathBuf};

use lfm_monitor::report::{read_series, ExitKind, SeriesSample};
use lfm_monitor::Report;
use plotters::prelude::*;

use super::{canvas, legend_line, Area};

const MIB: f64 = 1_048_576.0;

/// One resource over time.
struct Track {
    /// Also the key of `limits_exceeded` that names it.
    resource: &'static str,
    unit: &'static str,
    points: Vec<(f64, f64)>,
    limit: Option<f64>,
    /// The Report's peak: the kernel's high-water marks see spikes between samples.
    peak: Option<f64>,
}

pub fn plot(inputs: &[PathBuf], output: &Path) -> Result<(), String> {
    let (report, series) = read_inputs(inputs)?;
    let tracks = tracks(report.as_ref(), &series);
    let end = series.last().map_or(0.0, |s| s.t);
    let end = report.as_ref().map_or(end, |r| r.wall_time.max(end));
    let areas = canvas(output, tracks.len())?;
    for (area, track) in areas.iter().zip(&tracks) {
        draw_track(area, track, report.as_ref(), end.max(0.1))
            .map_err(|e| format!("{}: {e}", track.resource))?;
    }
    areas[0]
        .present()
        .map_err(|e| format!("{}: {e}", output.display()))
}

/// A Report and a series file, in any order (each is told by its content); one of them may
/// be missing.
fn read_inputs(inputs: &[PathBuf]) -> Result<(Option<Report>, Vec<SeriesSample>), String> {
    let (mut report, mut series) = (None, Vec::new());
    for path in inputs {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let value: Option<serde_json::Value> = serde_json::from_str(&text).ok();
        let format = value.as_ref().and_then(|v| v["format"].as_str());
        if format.is_some_and(|f| f.starts_with("lfm-report/")) {
            let parsed = serde_json::from_value(value.unwrap_or_default())
                .map_err(|e| format!("{}: not a Report (docs/report.md): {e}", path.display()))?;
            report = Some(parsed);
        } else {
            series = read_series(path)?;
        }
    }
    if report.is_none() && series.is_empty() {
        return Err("nothing to plot: the series is empty and no Report was given".into());
    }
    Ok((report, series))
}

fn tracks(report: Option<&Report>, series: &[SeriesSample]) -> Vec<Track> {
    let limits = report.map(|r| &r.limits);
    let memory = Track {
        resource: "memory",
        unit: "MiB",
        points: series
            .iter()
            .map(|s| (s.t, s.memory_bytes as f64 / MIB))
            .collect(),
        limit: limits.and_then(|l| l.memory_bytes).map(|b| b as f64 / MIB),
        peak: report.map(|r| r.memory.peak_bytes as f64 / MIB),
    };
    let cores = Track {
        resource: "cores",
        unit: "cores",
        points: series.iter().map(|s| (s.t, s.cores)).collect(),
        limit: limits.and_then(|l| l.cores),
        peak: report.map(|r| r.cores.peak),
    };
    let disk = Track {
        resource: "disk",
        unit: "MiB",
        points: series
            .iter()
            .filter_map(|s| Some((s.t, s.disk_bytes? as f64 / MIB)))
            .collect(),
        limit: limits.and_then(|l| l.disk_bytes).map(|b| b as f64 / MIB),
        peak: report
            .and_then(|r| r.disk.as_ref())
            .map(|d| d.bytes as f64 / MIB),
    };
    // Disk is measured only in a sandbox: no panel without one.
    let measured = !disk.points.is_empty() || disk.peak.is_some() || disk.limit.is_some();
    let mut tracks = vec![memory, cores];
    if measured {
        tracks.push(disk);
    }
    tracks
}

/// Why the run ended early, if it did: `killed: memory limit`, `killed by signal 11`.
fn ending(report: &Report) -> Option<String> {
    match report.exit.kind {
        ExitKind::Limits => {
            let exceeded: Vec<&str> = report.limits_exceeded.keys().map(String::as_str).collect();
            Some(format!("killed: {} limit", exceeded.join(", ")))
        }
        ExitKind::Signal => Some(format!(
            "killed by signal {}",
            report.exit.signal.unwrap_or(0)
        )),
        _ => None,
    }
}

fn draw_track(area: &Area, track: &Track, report: Option<&Report>, end: f64) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let top = track
        .points
        .iter()
        .map(|p| p.1)
        .chain(track.limit)
        .chain(track.peak)
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{} over time", track.resource), ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(32)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end * 1.02, 0.0..top * 1.15)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(track.unit)
        .draw()
        .map_err(e)?;
    let blue = RGBColor(31, 119, 180);
    if !track.points.is_empty() {
        chart
            .draw_series(LineSeries::new(track.points.clone(), blue.stroke_width(2)))
            .map_err(e)?
            .label(track.resource)
            .legend(legend_line(blue));
    }
    if let Some(peak) = track.peak {
        let line = vec![(0.0, peak), (end * 1.02, peak)];
        let gray = RGBColor(150, 150, 150);
        chart
            .draw_series(LineSeries::new(line, gray.stroke_width(1)))
            .map_err(e)?
            .label(format!("peak {peak:.1} {} (Report)", track.unit))
            .legend(legend_line(gray));
    }
    if let Some(limit) = track.limit {
        let line = vec![(0.0, limit), (end * 1.02, limit)];
        chart
            .draw_series(LineSeries::new(line, RED.stroke_width(2)))
            .map_err(e)?
            .label(format!("limit {limit:.1} {}", track.unit))
            .legend(legend_line(RED));
    }
    if let Some(why) = report.and_then(ending) {
        let line = vec![(end, 0.0), (end, top * 1.15)];
        let dark = RGBColor(150, 0, 0);
        chart
            .draw_series(LineSeries::new(line, dark.stroke_width(3)))
            .map_err(e)?
            .label(why)
            .legend(legend_line(dark));
    }
    super::draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
}
