//! `lfm plot`: a run over time, or a category's history, as SVG (src/plots draws them).

use crate::cli::PlotArgs;
use crate::plots::{history, node, run};

const EXIT_FAILED: i32 = 1;
const EXIT_USAGE: i32 = 2;

pub fn plot(args: PlotArgs) -> i32 {
    let drawn = match &args.history {
        Some(path) => {
            let path = (!path.is_empty()).then(|| std::path::PathBuf::from(path));
            if args.node {
                node::plot(&args, path.as_ref())
            } else {
                history::plot(&args, path.as_ref())
            }
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
