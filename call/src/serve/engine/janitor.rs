//! What no reply waits for, on a thread of its own: a finished call's history row, the removal
//! of its cgroup and of its directory. Together ~1.3 ms a call (an SQLite transaction, two
//! rmdirs of cgroups, a directory whose removal may wait on the disk's discard): on the serve's
//! loop they delayed the next request of a client that sends one as soon as it has a reply.
//! A slot cgroup kept for the next call (pool.rs) is released here too: its call's directory
//! removed first (so none of its files' pages stay charged to it), then its processes gone.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use lfm_monitor::backend::Backend;
use lfm_monitor::report::Report;
use lfm_sizing::history::History;

use super::pool::{Pooled, Returns};

enum Job {
    Record(Box<Report>, bool),
    Remove(Option<Box<dyn Backend>>, Option<PathBuf>),
    Release(Pooled, PathBuf),
    /// Answered once every job sent before it is done.
    Sync(mpsc::Sender<()>),
}

pub(super) struct Janitor {
    jobs: Option<mpsc::Sender<Job>>,
    returns: Returns,
    thread: Option<JoinHandle<()>>,
}

impl Janitor {
    /// A janitor writing to its own connection to `history` (none: rows are not recorded).
    /// Released slot cgroups go to `returns`.
    pub fn start(history: Option<&Path>, returns: Returns) -> Result<Janitor, String> {
        let history = history.map(History::open).transpose()?;
        let (jobs, inbox) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("lfm-serve-janitor".into())
            .spawn({
                let returns = returns.clone();
                move || work(history, &returns, inbox)
            })
            .map_err(|error| format!("starting the serve's cleanup thread: {error}"))?;
        Ok(Janitor {
            jobs: Some(jobs),
            returns,
            thread: Some(thread),
        })
    }

    pub fn record(&self, report: Report, sized: bool) {
        self.send(Job::Record(Box::new(report), sized));
    }

    /// Drop `cgroup` (which kills what is left in it and removes it), then remove `dir`.
    pub fn remove(&self, cgroup: Option<Box<dyn Backend>>, dir: PathBuf) {
        self.send(Job::Remove(cgroup, Some(dir)));
    }

    /// Drop `cgroup` (a pooled one no longer needed).
    pub fn discard(&self, cgroup: Box<dyn Backend>) {
        self.send(Job::Remove(Some(cgroup), None));
    }

    /// Remove `dir`, then hand the cgroup back to the pool once nothing of its call is left
    /// in it (else remove it).
    pub fn release(&self, pooled: Pooled, dir: PathBuf) {
        self.send(Job::Release(pooled, dir));
    }

    /// Wait until every row sent so far is in the history (sizing reads it next).
    pub fn sync(&self) {
        let (done, wait) = mpsc::channel();
        self.send(Job::Sync(done));
        let _ = wait.recv();
    }

    fn send(&self, job: Job) {
        let Some(jobs) = &self.jobs else { return };
        if let Err(mpsc::SendError(job)) = jobs.send(job) {
            // The thread is gone (it panicked): do the job here rather than lose it.
            do_job(None, &self.returns, job);
        }
    }
}

impl Drop for Janitor {
    /// Every job sent is done before the server goes.
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs that ended while the janitor was busy are recorded together, in one transaction:
/// under a stream of short calls a commit per call was most of the janitor's time.
fn work(history: Option<History>, returns: &Returns, inbox: mpsc::Receiver<Job>) {
    let mut waiting = Vec::new();
    while let Ok(first) = inbox.recv() {
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                Job::Record(report, sized) => waiting.push((report, sized)),
                Job::Sync(done) => {
                    record_all(history.as_ref(), std::mem::take(&mut waiting));
                    let _ = done.send(());
                }
                // Removals come between records (one a call): they need no row written first.
                other => do_job(history.as_ref(), returns, other),
            }
            next = inbox.try_recv().ok();
        }
        record_all(history.as_ref(), std::mem::take(&mut waiting));
    }
}

/// One transaction for `runs`; should it fail, each on its own, so that one run the history
/// refuses does not take the others with it.
fn record_all(history: Option<&History>, runs: Vec<(Box<Report>, bool)>) {
    let Some(history) = history.filter(|_| !runs.is_empty()) else {
        return;
    };
    let together: Vec<(&Report, bool)> = runs.iter().map(|(r, s)| (r.as_ref(), *s)).collect();
    if together.len() > 1 && history.record_all(&together).is_ok() {
        return;
    }
    for (report, sized) in runs {
        record(history, &report, sized);
    }
}

fn do_job(history: Option<&History>, returns: &Returns, job: Job) {
    match job {
        Job::Record(report, sized) => {
            if let Some(history) = history {
                record(history, &report, sized);
            }
        }
        Job::Remove(cgroup, dir) => {
            drop(cgroup);
            if let Some(dir) = dir {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        Job::Release(pooled, dir) => {
            let _ = std::fs::remove_dir_all(dir);
            if let Some(pooled) = emptied(pooled) {
                returns
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(pooled);
            }
        }
        Job::Sync(done) => {
            let _ = done.send(());
        }
    }
}

fn record(history: &History, report: &Report, sized: bool) {
    if let Err(error) = history.record(report, sized) {
        eprintln!("lfm serve: warning: call not recorded: {error}");
    }
}

/// The cgroup once its call's last process has left it (killed, and waited for), with what
/// the kernel still charges it reclaimed; `None` (it is removed) should a process stay.
fn emptied(pooled: Pooled) -> Option<Pooled> {
    pooled.cgroup.kill_all();
    if !pooled.cgroup.pids().unwrap_or_default().is_empty() {
        return None;
    }
    pooled.cgroup.reclaim().ok()?;
    Some(pooled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_sent_in_a_burst_are_all_recorded_in_order_before_sync_returns() {
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join("h.sqlite");
        let janitor = Janitor::start(Some(&path), Returns::default()).unwrap();
        for i in 0..50 {
            let category = ["a", "b"][i % 2];
            let mut report = lfm_monitor::report::documented_example();
            report.category = Some(category.into());
            report.memory.peak_bytes = (i as u64) << 20;
            janitor.record(report, false);
            if i == 20 {
                janitor.remove(None, scratch.path().join("none"));
            }
        }
        janitor.sync();
        let rows = History::open(&path).unwrap().rows(None).unwrap();
        let memory: Vec<f64> = rows.iter().map(|r| r.memory_mb).collect();
        assert_eq!(memory, (0..50).map(f64::from).collect::<Vec<_>>());
        drop(janitor);
    }

    #[test]
    fn every_job_is_done_by_the_time_it_is_dropped_and_sync_waits_for_them() {
        let scratch = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = (0..20)
            .map(|i| scratch.path().join(format!("call-{i}")))
            .collect();
        let janitor = Janitor::start(None, Returns::default()).unwrap();
        for dir in &dirs[..10] {
            std::fs::create_dir_all(dir.join("sandbox")).unwrap();
            janitor.remove(None, dir.clone());
        }
        janitor.sync();
        assert!(dirs[..10].iter().all(|d| !d.exists()));
        for dir in &dirs[10..] {
            std::fs::create_dir_all(dir.join("sandbox")).unwrap();
            janitor.remove(None, dir.clone());
        }
        drop(janitor);
        assert!(dirs.iter().all(|d| !d.exists()));
    }
}
