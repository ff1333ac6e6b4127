//! Reading and writing cgroup control files, with errors that name the file and the value.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::reread::KeptFiles;

pub fn write(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value)
        .with_context(|| format!("failed to write {value:?} to {}", path.display()))
}

/// `key value` lines (memory.stat, cpu.stat, memory.events, memory.oom_control).
pub fn read_keyed(path: &Path, key: &str) -> Option<u64> {
    Keyed::read(path)?.get(key)
}

/// A whole `key value` file read once, for the files several counters come from.
pub struct Keyed(String);

impl Keyed {
    pub fn read(path: &Path) -> Option<Keyed> {
        fs::read_to_string(path).ok().map(Keyed)
    }

    pub fn get(&self, key: &str) -> Option<u64> {
        self.0.lines().find_map(|line| {
            let mut parts = line.split_whitespace();
            (parts.next()? == key)
                .then(|| parts.next()?.parse().ok())
                .flatten()
        })
    }

    /// The sum of the keys present; `None` when none is.
    pub fn sum(&self, keys: &[&str]) -> Option<u64> {
        keys.iter()
            .filter_map(|k| self.get(k))
            .fold(None, |acc, v| Some(acc.unwrap_or(0) + v))
    }
}

pub fn read_pids(path: &Path) -> Vec<i32> {
    fs::read_to_string(path)
        .map(|text| parse_pids(&text))
        .unwrap_or_default()
}

fn parse_pids(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// A cgroup's counter files, read on every sample through descriptors kept open (see
/// [`crate::reread`]).
#[derive(Default)]
pub struct Counters(KeptFiles);

impl Counters {
    pub fn u64(&self, path: &Path) -> Option<u64> {
        self.0.read(path)?.trim().parse().ok()
    }

    pub fn keyed(&self, path: &Path) -> Option<Keyed> {
        self.0.read(path).map(Keyed)
    }

    pub fn keyed_value(&self, path: &Path, key: &str) -> Option<u64> {
        self.keyed(path)?.get(key)
    }

    pub fn pids(&self, path: &Path) -> Vec<i32> {
        self.0
            .read(path)
            .map(|t| parse_pids(&t))
            .unwrap_or_default()
    }

    /// See [`KeptFiles::write_and_keep`].
    pub fn write_and_keep(&self, path: &Path, text: &str) -> std::io::Result<()> {
        self.0.write_and_keep(path, text)
    }

    /// Close the descriptors: the cgroup is about to be removed.
    pub fn close_all(&self) {
        self.0.close_all();
    }
}

/// The mount point of a cgroup filesystem: `cgroup2`, or a v1 hierarchy with `controller`.
pub fn mount_point(fstype: &str, controller: Option<&str>) -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 4 || fields[2] != fstype {
            return None;
        }
        match controller {
            Some(name) if !fields[3].split(',').any(|o| o == name) => None,
            _ => Some(PathBuf::from(fields[1])),
        }
    })
}

/// This process's cgroup path in the v2 hierarchy (`0::/path`) or in the v1 hierarchy that
/// holds `controller`.
pub fn own_cgroup(controller: Option<&str>) -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        match controller {
            None if controllers.is_empty() => Some(path.to_string()),
            Some(name) if controllers.split(',').any(|c| c == name) => Some(path.to_string()),
            _ => None,
        }
    })
}

/// Remove run directories left by lfm processes that no longer exist (a crash, a SIGKILL).
pub fn clean_stale_runs(parent: &Path, kill: impl Fn(&Path)) {
    let owner = |name: &str| lfm_fs::owners::pid_after("run-", name);
    lfm_fs::remove_dead_owners(parent, owner, |path| {
        kill(path);
        let _ = remove_cgroup_dir(path);
    });
}

/// rmdir a cgroup, retrying for up to a second: killed tasks take a moment to leave it.
pub fn remove_cgroup_dir(dir: &Path) -> Result<()> {
    let mut result = fs::remove_dir(dir);
    for _ in 0..200 {
        if result.is_ok() || !dir.exists() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        result = fs::remove_dir(dir);
    }
    result.with_context(|| format!("could not remove {}", dir.display()))
}

/// A name unique to this process and run.
pub fn run_name() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQUENCE: AtomicU32 = AtomicU32::new(0);
    format!(
        "run-{}-{}",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn kill_listed(procs_file: &Path) {
    for _ in 0..200 {
        let pids = read_pids(procs_file);
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // SAFETY: plain kill(2) on a pid listed by the cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_of_dead_processes_are_killed_then_removed() {
        let parent = tempfile::tempdir().unwrap();
        // A pid above the kernel's maximum (4194304) never runs.
        let dead = parent.path().join("run-4194399-0");
        let alive = parent.path().join(format!("run-{}-0", std::process::id()));
        let other = parent.path().join("lfm-4194399");
        for dir in [&dead, &alive, &other] {
            fs::create_dir(dir).unwrap();
        }
        let killed = std::cell::RefCell::new(Vec::new());
        clean_stale_runs(parent.path(), |dir| {
            killed.borrow_mut().push(dir.to_path_buf())
        });
        assert_eq!(killed.into_inner(), std::slice::from_ref(&dead));
        assert!(!dead.exists() && alive.exists() && other.exists());
    }
}
