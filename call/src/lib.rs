//! lfm-call: everything between "run this Python function" and the monitor.
//!
//! It owns the choice of interpreter (a pack's, an environment's, a python on PATH), where a
//! call target lives (found by the analyzer's own rules, so `lfm call` runs what `lfm analyze`
//! analysed), the function's slice and static closure, the arguments as callers give them, the
//! runner request of `lfm call` and the typed serve protocol that `lfm serve` parses. It does
//! not run anything itself (lfm-monitor does: the supervisor, the serve engine, sizing) and
//! knows nothing of the command line.

mod arguments;
pub mod call;
mod compiled;
mod error;
mod files;
mod interpreter;
mod kept_analysis;
mod locate;
pub mod protocol;
pub mod runner;
pub mod serve;
mod slice;
mod target;

pub use arguments::{
    from_flags as arguments_from_flags, from_pickle_file as arguments_from_pickle_file, input_bytes,
};
pub use compiled::{keep_compiled, DIR as COMPILED_SLICES_DIR, KEPT as COMPILED_SLICES_KEPT};
pub use error::{CallError, ErrorKind, Result};
pub use files::CallFiles;
pub use interpreter::{Interpreter, InterpreterChoice, PACK_CACHE_MAX_VARIABLE};
pub use kept_analysis::DIR as KEPT_ANALYSES_DIR;
pub use locate::{locate, Located};
pub use slice::{slice, slice_kept, static_closure, with_distributions, Sliced};
pub use target::{prepare, runner_target, Prepared, Resolved, Targets};
