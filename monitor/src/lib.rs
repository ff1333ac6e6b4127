//! lfm-monitor: run a command or a Python call under control, measure what it used, enforce
//! its limits, and size the next one.
//!
//! It owns the backends (cgroup v2, cgroup v1, rlimit + /proc), detected at run time behind one
//! [`backend::Backend`] trait; the supervisor loop that samples, enforces limits, forwards
//! signals and leaves no process or cgroup behind; the versioned [`report::Report`] (with its
//! cctools resource_monitor rendering) and the import log ([`imports`]); GPUs, real (NVML) or
//! scripted, with a per-node ledger ([`gpu`]); the serve engine ([`serve`]: one zygote, a cgroup
//! and a Report per forked call, spares, the reply type of the serve protocol); sizing
//! ([`sizing`]: the strategies, the history, the one retry policy `run`, `call` and `serve`
//! share, `lfm size`'s advice and `lfm simulate`'s comparison); and the Python runner that
//! `lfm call` and `lfm serve` start in the target interpreter, with the request it reads
//! ([`runner`], python/ embedded at build time). It knows nothing of the analyzer, packs, how
//! call targets are found (lfm-call) or the command line.

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
