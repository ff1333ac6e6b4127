//! lfm-monitor: run a command under control, measure what it used, enforce its limits.
//!
//! It owns the backends (cgroup v2, cgroup v1, rlimit + /proc), detected at run time behind one
//! [`backend::Backend`] trait; the supervisor loop that samples, enforces limits, forwards
//! signals and leaves no process or cgroup behind; and the versioned [`report::Report`]
//! (with its cctools resource_monitor rendering); and the Python runner that `lfm call` and
//! `lfm serve` start in the target interpreter (python/, embedded at build time). It knows
//! nothing of the analyzer, packs or the command line.

pub mod backend;
pub mod gpu;
pub mod imports;
pub mod limits;
pub mod outcome;
pub mod proctree;
pub mod report;
mod reread;
pub mod runner;
pub mod serve;
pub mod sizing;
pub mod supervisor;

pub use backend::{BackendChoice, BackendKind};
pub use limits::Limits;
pub use report::Report;
pub use supervisor::{run, RunError, RunOptions};
