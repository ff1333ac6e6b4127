//! No cgroup: rlimits in the child; the supervisor measures and enforces from /proc.

use std::os::fd::RawFd;

use anyhow::Result;

use super::{Backend, BackendKind, Enforced, Reading};
use crate::limits::Limits;

pub struct Rlimit {
    notes: Vec<String>,
}

impl Rlimit {
    pub fn new(limits: &Limits) -> Rlimit {
        Rlimit {
            notes: notes_for(limits),
        }
    }
}

/// What the supervisor enforces itself under `limits`.
fn notes_for(limits: &Limits) -> Vec<String> {
    let mut notes = Vec::new();
    if limits.memory_bytes.is_some() {
        notes.push("rlimit backend: --memory is enforced by the supervisor polling /proc (RSS of the tree)".into());
    }
    // SAFETY: geteuid has no preconditions.
    if limits.processes.is_some() && unsafe { libc::geteuid() } == 0 {
        notes.push("rlimit backend as root: RLIMIT_NPROC does not apply to root, so --processes is enforced by polling and a process-group kill".into());
    }
    notes
}

impl Backend for Rlimit {
    fn kind(&self) -> BackendKind {
        BackendKind::Rlimit
    }

    fn join_fds(&self) -> Vec<RawFd> {
        Vec::new()
    }

    fn enforced(&self) -> Enforced {
        Enforced::default()
    }

    fn read(&self) -> Reading {
        Reading::default()
    }

    fn pids(&self) -> Option<Vec<i32>> {
        None
    }

    fn kill_all(&self) {}

    fn remove(&mut self) -> Result<()> {
        Ok(())
    }

    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    /// Nothing is kept between runs: the rlimits are the child's, the figures the
    /// supervisor's samples of the run's own processes.
    fn open_window(&mut self, limits: &Limits) -> Result<()> {
        self.notes = notes_for(limits);
        Ok(())
    }
}
