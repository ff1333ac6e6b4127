//! The supervised process tree as /proc sees it.
//!
//! lfm is a child subreaper, so every process the command starts (double-forked and setsid'd
//! ones too) stays a descendant of lfm until it is reaped. A sample walks /proc once and keeps
//! the descendants. /proc is parsed by hand here: the loop runs every 10 ms at first and needs
//! four fields from three small files per process.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crate::reread::reread;

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
    /// In its exit (the kernel's PF_EXITING): it leaves its cgroup before it is a zombie, and
    /// unmapping a big address space takes milliseconds, in which a sample can see it
    /// outside without its having left.
    pub exiting: bool,
}

/// Every live descendant of `root` (not `root` itself), with its counters.
pub fn descendants(root: i32) -> Vec<ProcessSample> {
    ProcFiles::by_path().descendants(root)
}

/// `root`'s descendants, and `root` itself when `with_root`.
pub fn tree(root: i32, with_root: bool) -> Vec<ProcessSample> {
    ProcFiles::by_path().tree(root, with_root)
}

/// Counters of specific pids (those a cgroup lists).
pub fn samples_of(pids: &[i32]) -> Vec<ProcessSample> {
    ProcFiles::by_path().samples_of(pids)
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

/// The /proc files of one process a sample reads.
#[derive(Clone, Copy)]
enum ProcFile {
    Stat,
    Status,
    Io,
    /// The main thread's children: all of them while the process has one thread.
    Children,
}

impl ProcFile {
    fn path(self, pid: i32) -> String {
        match self {
            ProcFile::Stat => format!("/proc/{pid}/stat"),
            ProcFile::Status => format!("/proc/{pid}/status"),
            ProcFile::Io => format!("/proc/{pid}/io"),
            ProcFile::Children => format!("/proc/{pid}/task/{pid}/children"),
        }
    }
}

/// Descriptors of a process's files, each opened the first time it is read.
#[derive(Default)]
struct Opened([Option<File>; 4]);

/// The /proc files of a run's processes, kept open between samples for up to `capacity`
/// processes (each holds four descriptors; the rest are read by path).
pub struct ProcFiles {
    open: HashMap<i32, Opened>,
    capacity: usize,
}

impl ProcFiles {
    pub fn new() -> ProcFiles {
        ProcFiles {
            open: HashMap::new(),
            capacity: 64,
        }
    }

    fn by_path() -> ProcFiles {
        ProcFiles {
            open: HashMap::new(),
            capacity: 0,
        }
    }

    /// Close the files of processes other than `alive` (gone since they were opened).
    pub fn retain(&mut self, alive: &HashSet<i32>) {
        self.open.retain(|pid, _| alive.contains(pid));
    }

    fn text(&mut self, pid: i32, file: ProcFile) -> Option<String> {
        if !self.open.contains_key(&pid) && self.open.len() >= self.capacity {
            return fs::read_to_string(file.path(pid)).ok();
        }
        let slot = &mut self.open.entry(pid).or_default().0[file as usize];
        if let Some(kept) = slot {
            if let Ok(text) = reread(kept) {
                return Some(text);
            }
            // Reaped since it was opened: the pid may be another process's now.
            *slot = None;
        }
        let opened = File::open(file.path(pid)).ok()?;
        let text = reread(&opened).ok();
        *slot = Some(opened);
        text
    }

    /// Every live descendant of `root` (not `root` itself), with its counters.
    pub fn descendants(&mut self, root: i32) -> Vec<ProcessSample> {
        self.tree(root, false)
    }

    /// `root`'s descendants, and `root` itself last when `with_root` (its stat read once).
    pub fn tree(&mut self, root: i32, with_root: bool) -> Vec<ProcessSample> {
        let root_stat = self.stat(root);
        let mut tree = if has_children_files() {
            let threads = root_stat.as_ref().map_or(0, Stat::single_threads);
            self.descendants_by_children(root, threads)
        } else {
            self.descendants_by_scan(root)
        };
        if let (true, Some(stat)) = (with_root, root_stat) {
            tree.push(self.sample(root, &stat));
        }
        tree
    }

    /// Counters of specific pids (those a cgroup lists).
    pub fn samples_of(&mut self, pids: &[i32]) -> Vec<ProcessSample> {
        pids.iter()
            .filter_map(|&pid| {
                let stat = self.stat(pid)?;
                Some(self.sample(pid, &stat))
            })
            .collect()
    }

    /// Children of every thread of `pid` (a child belongs to the thread that forked it).
    fn children_of(&mut self, pid: i32, threads: u64) -> Vec<i32> {
        let parse = |text: &str| -> Vec<i32> {
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .collect()
        };
        if threads == 1 {
            return self
                .text(pid, ProcFile::Children)
                .map(|text| parse(&text))
                .unwrap_or_default();
        }
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            return Vec::new(); // gone since it was listed
        };
        let mut children = Vec::new();
        for task in tasks.flatten() {
            if let Ok(text) = fs::read_to_string(task.path().join("children")) {
                children.extend(parse(&text));
            }
        }
        children
    }

    fn descendants_by_children(&mut self, root: i32, root_threads: u64) -> Vec<ProcessSample> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = self.children_of(root, root_threads);
        while let Some(pid) = stack.pop() {
            if !seen.insert(pid) {
                continue;
            }
            let Some(stat) = self.stat(pid) else {
                continue; // exited and reaped between the two reads
            };
            stack.extend(self.children_of(pid, stat.single_threads()));
            out.push(self.sample(pid, &stat));
        }
        out
    }

    fn descendants_by_scan(&mut self, root: i32) -> Vec<ProcessSample> {
        let mut stats: HashMap<i32, Stat> = HashMap::new();
        for (pid, _) in numbered_entries(Path::new("/proc")) {
            // Every process on the node: read by path, not kept open.
            if let Some(stat) = fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|text| parse_stat(&text))
            {
                stats.insert(pid, stat);
            }
        }
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        for (&pid, stat) in &stats {
            children.entry(stat.ppid).or_default().push(pid);
        }
        let mut out = Vec::new();
        let mut stack = children.get(&root).cloned().unwrap_or_default();
        while let Some(pid) = stack.pop() {
            if let Some(kids) = children.get(&pid) {
                stack.extend(kids);
            }
            out.push(self.sample(pid, &stats[&pid]));
        }
        out
    }

    fn stat(&mut self, pid: i32) -> Option<Stat> {
        parse_stat(&self.text(pid, ProcFile::Stat)?)
    }

    fn sample(&mut self, pid: i32, stat: &Stat) -> ProcessSample {
        let mut sample = ProcessSample {
            pid,
            start_ticks: stat.start_ticks,
            cpu_ticks: stat.cpu_ticks,
            zombie: stat.zombie,
            exiting: stat.exiting,
            ..Default::default()
        };
        if let Some(status) = self.text(pid, ProcFile::Status) {
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
        if let Some(io) = self.text(pid, ProcFile::Io) {
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
}

impl Default for ProcFiles {
    fn default() -> Self {
        ProcFiles::new()
    }
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

/// What a sample needs of /proc/PID/stat.
struct Stat {
    ppid: i32,
    start_ticks: u64,
    /// utime + stime
    cpu_ticks: u64,
    threads: u64,
    zombie: bool,
    exiting: bool,
}

impl Stat {
    /// 1 when the main thread is the only one, so it is the parent of every child; a
    /// leader that exited before its other threads (a zombie leader) is not.
    fn single_threads(&self) -> u64 {
        if self.zombie {
            0
        } else {
            self.threads
        }
    }
}

/// include/linux/sched.h: set at the start of the task's exit.
const PF_EXITING: u64 = 0x4;

/// The command name may hold spaces and parentheses, so fields are counted from the last ')'.
fn parse_stat(stat: &str) -> Option<Stat> {
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // after ')': state(0) ppid(1) ... flags(6) ... utime(11) stime(12) ... num_threads(17) ...
    // starttime(19)
    let number = |index: usize| -> Option<u64> { fields.get(index)?.parse().ok() };
    Some(Stat {
        ppid: fields.get(1)?.parse().ok()?,
        start_ticks: number(19)?,
        cpu_ticks: number(11)? + number(12)?,
        threads: number(17)?,
        zombie: fields.first() == Some(&"Z"),
        exiting: number(6)? & PF_EXITING != 0,
    })
}

/// The entries of `dir` named by a number (a pid), with their paths; none if it is unreadable.
pub(crate) fn numbered_entries(dir: &Path) -> Vec<(i32, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            Some((pid, entry.path()))
        })
        .collect()
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
        let wanted = child.id() as i32;
        // Other tests of this process start and end threads meanwhile: look a few times, and
        // say what was seen if it never shows.
        let mut found = Vec::new();
        for _ in 0..50 {
            found = descendants(me);
            if found.iter().any(|p| p.pid == wanted) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let stat = fs::read_to_string(format!("/proc/{me}/stat")).unwrap_or_default();
        child.kill().unwrap();
        child.wait().unwrap();
        let seen: Vec<(i32, u64)> = found.iter().map(|p| (p.pid, p.start_ticks)).collect();
        assert!(
            found.iter().any(|p| p.pid == wanted && p.start_ticks > 0),
            "child {wanted} not among {seen:?}; this process: {stat}"
        );
    }

    #[test]
    fn a_process_in_its_exit_is_told_from_a_live_one() {
        // /proc/PID/stat as the kernel writes it, the flags field (the 9th) changed.
        let own = fs::read_to_string("/proc/self/stat").unwrap();
        let with_flags = |flags: u64| {
            let close = own.rfind(')').unwrap();
            let mut fields: Vec<String> = own[close + 2..]
                .split_whitespace()
                .map(String::from)
                .collect();
            fields[6] = flags.to_string();
            format!("{} {}", &own[..=close], fields.join(" "))
        };
        let live = parse_stat(&with_flags(0x0040_0140)).unwrap();
        assert!(!live.exiting && !live.zombie);
        let exiting = parse_stat(&with_flags(0x0040_4144)).unwrap();
        assert!(exiting.exiting && !exiting.zombie);
        assert_eq!(exiting.start_ticks, live.start_ticks);
        let this = parse_stat(&own).unwrap();
        assert!(!this.exiting, "this test's own process");
    }

    #[test]
    fn kept_files_follow_a_process_until_it_is_reaped() {
        let mut files = ProcFiles::new();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        let root = child.id() as i32;
        let mut found = Vec::new();
        // Up to 30 s for the shell to start its sleep: a loaded machine took over a second.
        for _ in 0..3000 {
            found = files.samples_of(&[root]);
            found.extend(files.descendants(root));
            if found.len() == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(found.len(), 2, "the shell and its sleep: {found:?}");
        let again = files.samples_of(&[root]);
        assert_eq!(again[0].start_ticks, found[0].start_ticks);
        assert!(
            files.open.contains_key(&root),
            "the shell's files are kept open"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            files.samples_of(&[root]).is_empty(),
            "a reaped process reads as gone"
        );
        files.retain(&HashSet::new());
        assert!(files.open.is_empty());
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
        for _ in 0..3000 {
            by_children = pids(ProcFiles::new().descendants(root));
            if by_children.len() >= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let by_scan = pids(ProcFiles::new().descendants_by_scan(root));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(by_children.len(), 2, "{by_children:?}");
        assert_eq!(by_children, by_scan);
    }
}
