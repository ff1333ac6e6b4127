//! Acting on the supervised process tree: reaping, signalling, killing, and what the kernel
//! adds up for the processes this one reaped (CPU time, I/O).

use std::time::{Duration, Instant};

use crate::backend::Backend;

/// The rusage of one reaped process.
pub struct Reaped {
    pub pid: i32,
    pub status: libc::c_int,
    pub maxrss_bytes: u64,
}

/// Reap every exited child without blocking.
pub fn reap_exited() -> Vec<Reaped> {
    let mut out = Vec::new();
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: zeroed rusage is a valid value for this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 with valid pointers to locals.
        let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
        if pid <= 0 {
            return out;
        }
        out.push(Reaped {
            pid,
            status,
            maxrss_bytes: usage.ru_maxrss as u64 * 1024,
        });
    }
}

/// After the kill: collect every remaining zombie (bounded), calling `each` for every one.
pub fn reap_all(mut each: impl FnMut(&Reaped)) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        reap_exited().iter().for_each(&mut each);
        if !has_any_child() {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Whether this process has any child, running or exited and not yet reaped.
pub fn has_any_child() -> bool {
    // SAFETY: zeroed siginfo_t is a valid value for this plain C struct.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid with WNOWAIT only inspects (ECHILD when there is no child at all).
    let result = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    result == 0
}

pub fn rusage_children() -> (f64, f64) {
    // SAFETY: zeroed rusage is a valid value for this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (seconds(usage.ru_utime), seconds(usage.ru_stime))
}

/// Storage bytes (read, written) of every process this process has reaped, directly or through
/// reaped children that reaped theirs: the kernel adds a reaped child's I/O accounting to its
/// parent's, so /proc/self/io less the I/O of this process's own threads is exactly that.
pub fn reaped_io() -> (u64, u64) {
    let whole = io_counters("/proc/self/io");
    let own = std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .flatten()
                .map(|t| io_counters(&format!("{}/io", t.path().display())))
                .fold((0, 0), |(r, w), (tr, tw)| (r + tr, w + tw))
        })
        .unwrap_or((0, 0));
    (whole.0.saturating_sub(own.0), whole.1.saturating_sub(own.1))
}

fn io_counters(path: &str) -> (u64, u64) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("read_bytes:"), field("write_bytes:"))
}

pub fn signal_tree(backend: &dyn Backend, pids: &[i32], group: Option<i32>, signal: i32) {
    if let Some(group) = group {
        // SAFETY: kill(2) on the run's own process group.
        unsafe { libc::kill(-group, signal) };
    }
    let cgroup = backend.pids().unwrap_or_default();
    for &pid in cgroup.iter().chain(pids) {
        // SAFETY: kill(2) on a process of the run.
        unsafe { libc::kill(pid, signal) };
    }
}

/// SIGKILL everything the run started: via the cgroup, its process group, and every process
/// `live_tree` still lists (descendants outside the cgroup, or no cgroup at all).
pub fn kill_tree(backend: &dyn Backend, group: Option<i32>, live_tree: impl Fn() -> Vec<i32>) {
    backend.kill_all();
    if let Some(group) = group {
        // SAFETY: kill(2) on the run's own process group (negative pid).
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
    for _ in 0..100 {
        let alive: Vec<i32> = live_tree()
            .into_iter()
            .filter(|&pid| !is_zombie(pid))
            .collect();
        if alive.is_empty() {
            return;
        }
        for pid in alive {
            // SAFETY: kill(2) on a process of the run.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rfind(')').map(|i| stat[i + 2..].starts_with('Z')))
        .unwrap_or(true)
}

/// Command name of a process, for notes.
pub fn process_name(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}
