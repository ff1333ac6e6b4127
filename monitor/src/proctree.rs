//! The supervised process tree as /proc sees it.
//!
//! lfm is a child subreaper, so every process the command starts (double-forked and setsid'd
//! ones too) stays a descendant of lfm until it is reaped. A sample walks /proc once and keeps
//! the descendants. /proc is parsed by hand here: the loop runs every 10 ms at first and needs
//! four fields from three small files per process.

use std::collections::HashMap;
use std::fs;

/// One process at one instant.
#[derive(Debug, Clone, Default)]
pub struct ProcessSample {
    pub pid: i32,
    /// Start time in clock ticks since boot: with the pid, identifies a process uniquely.
    pub start_ticks: u64,
    pub rss_bytes: u64,
    pub hwm_bytes: u64,
    pub vm_bytes: u64,
    pub swap_bytes: u64,
    pub cpu_ticks: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Exited, waiting to be reaped: it holds no memory and is in no cgroup any more.
    pub zombie: bool,
}

/// Every live descendant of `root` (not `root` itself), with its counters.
pub fn descendants(root: i32) -> Vec<ProcessSample> {
    if has_children_files() {
        return descendants_by_children(root);
    }
    descendants_by_scan(root)
}

/// Whether the kernel lists each thread's children (/proc/PID/task/TID/children,
/// CONFIG_PROC_CHILDREN): following them from the root costs the size of the run's tree,
/// where a scan of /proc reads every process on the node, each sample.
fn has_children_files() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let pid = std::process::id();
        std::path::Path::new(&format!("/proc/{pid}/task/{pid}/children")).exists()
    })
}

/// Children of every thread of `pid` (a child belongs to the thread that forked it).
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new(); // gone since it was listed
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        let Ok(text) = fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        children.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    children
}

fn descendants_by_children(root: i32) -> Vec<ProcessSample> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack = children_of(root);
    while let Some(pid) = stack.pop() {
        if !seen.insert(pid) {
            continue;
        }
        let Some((_, start_ticks, cpu_ticks, zombie)) = read_stat(pid) else {
            continue; // exited and reaped between the two reads
        };
        stack.extend(children_of(pid));
        out.push(sample(pid, start_ticks, cpu_ticks, zombie));
    }
    out
}

fn descendants_by_scan(root: i32) -> Vec<ProcessSample> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parents: HashMap<i32, (i32, u64, u64, bool)> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(stat) = read_stat(pid) {
            parents.insert(pid, stat);
        }
    }
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (&pid, &(ppid, _, _, _)) in &parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut stack = children.get(&root).cloned().unwrap_or_default();
    while let Some(pid) = stack.pop() {
        if let Some(kids) = children.get(&pid) {
            stack.extend(kids);
        }
        let (_, start_ticks, cpu_ticks, zombie) = parents[&pid];
        out.push(sample(pid, start_ticks, cpu_ticks, zombie));
    }
    out
}

/// Counters of specific pids (those a cgroup lists).
pub fn samples_of(pids: &[i32]) -> Vec<ProcessSample> {
    pids.iter()
        .filter_map(|&pid| read_stat(pid).map(|(_, start, cpu, z)| sample(pid, start, cpu, z)))
        .collect()
}

fn sample(pid: i32, start_ticks: u64, cpu_ticks: u64, zombie: bool) -> ProcessSample {
    let mut sample = ProcessSample {
        pid,
        start_ticks,
        cpu_ticks,
        zombie,
        ..Default::default()
    };
    if let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) {
        for line in status.lines() {
            let field = |prefix: &str| line.strip_prefix(prefix).map(kib_field);
            if let Some(v) = field("VmRSS:") {
                sample.rss_bytes = v;
            } else if let Some(v) = field("VmHWM:") {
                sample.hwm_bytes = v;
            } else if let Some(v) = field("VmSize:") {
                sample.vm_bytes = v;
            } else if let Some(v) = field("VmSwap:") {
                sample.swap_bytes = v;
            }
        }
    }
    if let Ok(io) = fs::read_to_string(format!("/proc/{pid}/io")) {
        for line in io.lines() {
            if let Some(v) = line.strip_prefix("read_bytes:") {
                sample.read_bytes = v.trim().parse().unwrap_or(0);
            } else if let Some(v) = line.strip_prefix("write_bytes:") {
                sample.write_bytes = v.trim().parse().unwrap_or(0);
            }
        }
    }
    sample
}

/// Memory only this process maps (smaps_rollup Private_Clean + Private_Dirty): for a process
/// forked from a big parent, what it allocated or copied on write, not what it shares.
pub fn private_bytes(pid: i32) -> u64 {
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) else {
        return 0;
    };
    text.lines()
        .filter_map(|line| {
            line.strip_prefix("Private_Clean:")
                .or_else(|| line.strip_prefix("Private_Dirty:"))
        })
        .map(kib_field)
        .sum()
}

fn kib_field(text: &str) -> u64 {
    text.trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .unwrap_or(0)
        * 1024
}

/// (ppid, start time, utime+stime) from /proc/PID/stat. The command name may hold spaces and
/// parentheses, so fields are counted from the last ')'.
fn read_stat(pid: i32) -> Option<(i32, u64, u64, bool)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // after ')': state(0) ppid(1) ... utime(11) stime(12) ... starttime(19)
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let start: u64 = fields.get(19)?.parse().ok()?;
    let zombie = fields.first() == Some(&"Z");
    Some((ppid, start, utime + stime, zombie))
}

pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_its_own_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let found = descendants(me);
        assert!(found
            .iter()
            .any(|p| p.pid == child.id() as i32 && p.start_ticks > 0));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn following_children_files_finds_what_a_scan_finds() {
        if !has_children_files() {
            eprintln!("SKIP: this kernel has no /proc/PID/task/TID/children");
            return;
        }
        // A shell with two children of its own.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & sleep 5 & wait"])
            .spawn()
            .unwrap();
        let root = child.id() as i32;
        let pids = |found: Vec<ProcessSample>| {
            let mut pids: Vec<i32> = found.iter().map(|p| p.pid).collect();
            pids.sort();
            pids
        };
        let mut by_children = Vec::new();
        for _ in 0..100 {
            by_children = pids(descendants_by_children(root));
            if by_children.len() >= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let by_scan = pids(descendants_by_scan(root));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(by_children.len(), 2, "{by_children:?}");
        assert_eq!(by_children, by_scan);
    }
}
