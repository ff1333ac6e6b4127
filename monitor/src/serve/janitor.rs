//! What no reply waits for, on a thread of its own: a finished call's history row, the removal
//! of its cgroup and of its directory. Together ~1.3 ms a call (an SQLite transaction, two
//! rmdirs of cgroups, a directory whose removal may wait on the disk's discard): on the serve's
//! loop they delayed the next request of a client that sends one as soon as it has a reply.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::backend::Backend;
use crate::report::Report;
use crate::sizing::history::History;

enum Job {
    Record(Box<Report>, bool),
    Remove(Option<Box<dyn Backend>>, PathBuf),
    /// Answered once every job sent before it is done.
    Sync(mpsc::Sender<()>),
}

pub(super) struct Janitor {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Janitor {
    /// A janitor writing to its own connection to `history` (none: rows are not recorded).
    pub fn start(history: Option<&Path>) -> Result<Janitor, String> {
        let history = history.map(History::open).transpose()?;
        let (jobs, inbox) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("lfm-serve-janitor".into())
            .spawn(move || work(history, inbox))
            .map_err(|error| format!("starting the serve's cleanup thread: {error}"))?;
        Ok(Janitor {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    pub fn record(&self, report: Report, sized: bool) {
        self.send(Job::Record(Box::new(report), sized));
    }

    /// Drop `cgroup` (which kills what is left in it and removes it), then remove `dir`.
    pub fn remove(&self, cgroup: Option<Box<dyn Backend>>, dir: PathBuf) {
        self.send(Job::Remove(cgroup, dir));
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
            do_job(None, job);
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

fn work(history: Option<History>, inbox: mpsc::Receiver<Job>) {
    for job in inbox {
        do_job(history.as_ref(), job);
    }
}

fn do_job(history: Option<&History>, job: Job) {
    match job {
        Job::Record(report, sized) => {
            let Some(history) = history else { return };
            if let Err(error) = history.record(&report, sized) {
                eprintln!("lfm serve: warning: call not recorded: {error}");
            }
        }
        Job::Remove(cgroup, dir) => {
            drop(cgroup);
            let _ = std::fs::remove_dir_all(dir);
        }
        Job::Sync(done) => {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_is_done_by_the_time_it_is_dropped_and_sync_waits_for_them() {
        let scratch = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = (0..20)
            .map(|i| scratch.path().join(format!("call-{i}")))
            .collect();
        let janitor = Janitor::start(None).unwrap();
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
