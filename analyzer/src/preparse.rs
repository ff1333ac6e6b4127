//! Summaries of the located files, made on the pool's threads while the loading thread already
//! resolves the imports of those made first.
//!
//! Resolving a module's imports needs its own summary and nothing else of the files not yet
//! loaded, and loading takes the located files in the order they were given. So each pool
//! thread summarises the next file not yet taken, in that order, and loading takes each
//! summary as soon as it is made instead of after the last one. On a whole site-packages
//! (~9k files) this puts the loading thread's ~0.2 s of resolving beside the parse instead of
//! after it. This module owns only the hand-over; what a summary is and how imports resolve
//! belong to [`crate::project`].

use rustc_hash::FxHashMap as HashMap;
use std::any::Any;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::cache::SummaryCache;
use crate::paths::path_key;
use crate::project::{recall_or_summarize, Summarized};

/// Summaries made while loading waits before it is woken (the one it waits for is among the
/// first made: the files are summarised in order).
const WAKE_AFTER: usize = 16;
/// How long loading waits before it looks again, woken or not.
const LOOK_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_millis(2);

/// Files being summarised in the background, taken one by one by path.
pub struct Preparse {
    paths: Vec<PathBuf>,
    /// The first of `paths` with each key (a path given twice is summarised twice, the
    /// second summary never taken, as when every file was summarised before loading).
    slot_of: HashMap<OsString, usize>,
    /// The next file a pool thread summarises.
    next: AtomicUsize,
    state: Mutex<State>,
    made: Condvar,
    filler: Mutex<Option<JoinHandle<()>>>,
}

struct State {
    slots: Vec<Slot>,
    /// Whether loading waits for a summary, and how many were made since it began to.
    waiting: bool,
    made_while_waiting: usize,
    /// A pool thread panicked: the panic, resumed on the thread that waits.
    panic: Option<Box<dyn Any + Send>>,
}

enum Slot {
    Pending,
    Made(Summarized),
    Taken,
}

impl Preparse {
    /// Start summarising `paths` on the global pool (summaries from `cache` where it has them).
    pub fn start(paths: Vec<PathBuf>, cache: Option<Arc<SummaryCache>>) -> Arc<Preparse> {
        Preparse::start_with(paths, move |path| {
            recall_or_summarize(path, cache.as_deref(), None)
        })
    }

    /// Start summarising each of `paths` with `summarise` on the global pool.
    pub fn start_with(
        paths: Vec<PathBuf>,
        summarise: impl Fn(&Path) -> Summarized + Send + Sync + 'static,
    ) -> Arc<Preparse> {
        let mut slot_of = HashMap::default();
        for (slot, path) in paths.iter().enumerate() {
            slot_of.entry(path_key(path).into_owned()).or_insert(slot);
        }
        let slots = (0..paths.len()).map(|_| Slot::Pending).collect();
        let preparse = Arc::new(Preparse {
            paths,
            slot_of,
            next: AtomicUsize::new(0),
            state: Mutex::new(State {
                slots,
                waiting: false,
                made_while_waiting: 0,
                panic: None,
            }),
            made: Condvar::new(),
            filler: Mutex::new(None),
        });
        let filling = preparse.clone();
        let handle = std::thread::spawn(move || filling.fill(&summarise));
        *preparse.filler.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        preparse
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic is never raised while the lock is held: the state is whole.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every pool thread summarises the next file until none is left; then the parse arenas'
    /// pages go back.
    fn fill(&self, summarise: &(impl Fn(&Path) -> Summarized + Sync)) {
        let filled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rayon::broadcast(|_| self.summarise_next_files(summarise))
        }));
        crate::scratch::release_all();
        if let Err(panic) = filled {
            self.lock().panic = Some(panic);
            self.made.notify_all();
        }
    }

    fn summarise_next_files(&self, summarise: &impl Fn(&Path) -> Summarized) {
        loop {
            let slot = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(path) = self.paths.get(slot) else {
                return;
            };
            let summarized = summarise(path);
            let mut state = self.lock();
            state.slots[slot] = Slot::Made(summarized);
            if state.waiting {
                state.made_while_waiting += 1;
                // Loading is woken once a few summaries are made, not at each (a wake per
                // file was ~9k more context switches on a site-packages); at the end, at each.
                let last_ones = self.next.load(Ordering::Relaxed) >= self.paths.len();
                if state.made_while_waiting >= WAKE_AFTER || last_ones {
                    self.made.notify_one();
                }
            }
        }
    }

    /// Whether `path` is one of the files given and its summary is not taken yet.
    pub fn has(&self, path: &Path) -> bool {
        self.slot_of
            .get(&*path_key(path))
            .is_some_and(|&slot| !matches!(self.lock().slots[slot], Slot::Taken))
    }

    /// The summary of `path`, waiting until it is made; `None` when `path` was not given or
    /// its summary was taken already.
    pub fn take(&self, path: &Path) -> Option<Summarized> {
        let &slot = self.slot_of.get(&*path_key(path))?;
        let mut state = self.lock();
        loop {
            match std::mem::replace(&mut state.slots[slot], Slot::Taken) {
                Slot::Made(summarized) => return Some(summarized),
                Slot::Taken => return None,
                Slot::Pending => state.slots[slot] = Slot::Pending,
            }
            if let Some(panic) = state.panic.take() {
                drop(state);
                std::panic::resume_unwind(panic);
            }
            state.waiting = true;
            state.made_while_waiting = 0;
            // Woken after a few summaries, or soon anyway: when the pool is held up by large
            // files, the one waited for may be made long before the next few.
            let waited = self.made.wait_timeout(state, LOOK_AGAIN_AFTER);
            state = waited.map_or_else(|e| e.into_inner().0, |(state, _)| state);
            state.waiting = false;
        }
    }

    /// Summarise no file not begun yet: loading stopped early (an error) and will take none.
    pub fn stop(&self) {
        self.next.fetch_max(self.paths.len(), Ordering::Relaxed);
    }

    /// Wait until every file is summarised (the summaries not taken are dropped).
    pub fn finish(&self) {
        let handle = self.filler.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            // `fill` catches the pool's panics: joining cannot fail but by a bug here.
            let _ = handle.join();
        }
        if let Some(panic) = self.lock().panic.take() {
            std::panic::resume_unwind(panic);
        }
        self.lock().slots.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::read_and_summarize;
    use std::time::Duration;

    /// `work` on another thread; fails (rather than hangs) when it takes over a minute.
    fn within_a_minute<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || sender.send(work()));
        receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("still waiting after a minute")
    }

    #[test]
    fn each_summary_is_taken_by_its_path_once_made() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..64)
            .map(|n| {
                let path = dir.path().join(format!("m{n}.py"));
                std::fs::write(&path, format!("import mod{n}\n")).unwrap();
                path
            })
            .collect();
        let not_given = dir.path().join("other.py");
        let given = paths.clone();
        let taken = within_a_minute(move || {
            let preparse = Preparse::start_with(given.clone(), |p| read_and_summarize(p, None));
            assert!(!preparse.has(&not_given));
            assert!(preparse.take(&not_given).is_none());
            // Taken out of the order they are made in: each waits for its own.
            let taken: Vec<String> = (given.iter().rev())
                .map(|path| {
                    assert!(preparse.has(path));
                    let (summary, problem, stamp, _) = preparse.take(path).unwrap();
                    assert!(problem.is_none() && stamp.is_some());
                    assert!(!preparse.has(path) && preparse.take(path).is_none());
                    summary.edge_module(&summary.imports[0]).to_string()
                })
                .collect();
            preparse.finish();
            taken
        });
        let expected: Vec<String> = (0..64).rev().map(|n| format!("mod{n}")).collect();
        assert_eq!(taken, expected);
    }

    #[test]
    fn once_stopped_no_file_is_begun() {
        let paths: Vec<PathBuf> = (0..100)
            .map(|n| PathBuf::from(format!("/m{n}.py")))
            .collect();
        let begun = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let (counted, held) = (begun.clone(), gate.clone());
        let preparse = Preparse::start_with(paths, move |_| {
            counted.fetch_add(1, Ordering::Relaxed);
            let (open, turned) = &*held;
            drop(
                turned
                    .wait_while(open.lock().unwrap(), |open| !*open)
                    .unwrap(),
            );
            Default::default()
        });
        // Every pool thread holds a file, at most one each.
        while begun.load(Ordering::Relaxed) < rayon::current_num_threads().min(100) {
            std::thread::yield_now();
        }
        preparse.stop();
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        within_a_minute(move || preparse.finish());
        assert_eq!(begun.load(Ordering::Relaxed), rayon::current_num_threads());
    }

    #[test]
    fn a_panic_while_summarising_reaches_the_thread_waiting_for_it() {
        let paths: Vec<PathBuf> = (0..16)
            .map(|n| PathBuf::from(format!("/m{n}.py")))
            .collect();
        let bad = paths[9].clone();
        let waited = within_a_minute(move || {
            let preparse = Preparse::start_with(paths, move |path| {
                if path == bad {
                    panic!("summarising {} failed", path.display());
                }
                Default::default()
            });
            let taken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                preparse.take(Path::new("/m9.py"))
            }));
            taken
                .map(|_| ())
                .map_err(|panic| panic.downcast_ref::<String>().cloned().unwrap_or_default())
        });
        assert_eq!(waited, Err("summarising /m9.py failed".to_string()));
    }
}
