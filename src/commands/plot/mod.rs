//! `lfm plot` (a run over time, or a category's history) and `lfm simulate --plot`: SVG charts
//! drawn with plotters' SVG backend, one panel per resource.

mod history;
mod run;
mod simulate;

use plotters::prelude::*;

pub use simulate::{draw, Panel};

use crate::cli::PlotArgs;

const EXIT_FAILED: i32 = 1;
const EXIT_USAGE: i32 = 2;

pub fn plot(args: PlotArgs) -> i32 {
    let drawn = match &args.history {
        Some(path) => {
            let path = (!path.is_empty()).then(|| std::path::PathBuf::from(path));
            history::plot(&args, path.as_ref())
        }
        None if args.inputs.is_empty() => {
            eprintln!("error: give a Report and/or a series file, or --history --category C");
            return EXIT_USAGE;
        }
        None => run::plot(&args.inputs, &args.output),
    };
    match drawn {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("error: {error}");
            EXIT_FAILED
        }
    }
}

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

/// A legend entry's short line in `color`.
pub(crate) fn legend_line(color: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
}
