//! lfm-monitor: run a command under control, enforce its limits and measure what it used.
//!
//! It owns the backends (cgroup v2, cgroup v1, rlimit + /proc), detected at run time behind one
//! [`backend::Backend`] trait; the supervisor loop that samples, enforces limits, forwards
//! signals and leaves no process or cgroup behind (also for a process it did not start, as a
//! serve's forked calls: [`supervisor::RunMonitor`]); the versioned [`report::Report`] (with its
//! cctools resource_monitor rendering), the runner's outcome read into it ([`outcome`]) and the
//! import log ([`imports`]); GPUs, real (NVML) or scripted, with a per-node ledger ([`gpu`]).
//! It embeds no Python and knows nothing of Python calls (lfm-call), sizing (lfm-sizing), the
//! analyzer, packs or the command line.

pub mod backend;
pub mod gpu;
pub mod imports;
pub mod limits;
pub mod outcome;
pub mod proctree;
pub mod report;
mod reread;
pub mod supervisor;

pub use backend::{BackendChoice, BackendKind};
pub use limits::Limits;
pub use report::Report;
pub use supervisor::{run, RunError, RunOptions};
