//! Where cgroup v2 runs go: a cgroup lfm may write, made able to hand controllers to its runs.
//!
//! Controllers reach a run only through `cgroup.subtree_control` of the cgroup above it, and the
//! kernel refuses to enable domain controllers (memory, cpu, io, pids) there while that cgroup
//! holds processes (the no-internal-process rule; the root cgroup is exempt). lfm starts in the
//! cgroup its caller sits in, so `<own>/lfm/<run>` alone gets no controllers. In order:
//!
//! 1. `<own>` is writable and holds only lfm supervisors: lfm moves itself into the leaf
//!    `<own>/lfm-supervisor`, enables on the now-empty `<own>` what its parent offers, and puts
//!    runs under `<own>/lfm`, as container runtimes do in a delegated cgroup. Concurrent lfm
//!    processes do the same steps, which are idempotent; one that finds another supervisor still
//!    in `<own>` waits for it to move.
//! 2. `<own>` holds other processes (a shell, a batch script): lfm moves none of them. If the
//!    parent is writable (a delegated subtree one level up: systemd's `user@UID.service/app.slice`,
//!    Slurm's `step_N/user`), runs go beside `<own>`, under `<parent>/lfm`.
//! 3. Otherwise runs go under `<own>/lfm` without controllers (the supervisor enforces limits),
//!    or, when `<own>` is not writable either, cgroup v2 is not used at all.
//!
//! Each outcome except the plain one comes with a note saying which cgroup is used and why.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::files::{self, write};

/// Controllers a run uses, in the order they are enabled.
pub const WANTED: [&str; 4] = ["cpu", "io", "memory", "pids"];
/// The leaf lfm supervisors move into (step 1).
pub const SUPERVISOR_LEAF: &str = "lfm-supervisor";
/// How long a supervisor waits for other supervisors to leave `<own>` (step 1).
const SETTLE: Duration = Duration::from_secs(2);

/// The cgroup runs are created in, and why it was chosen.
pub struct Placement {
    /// `.../lfm`: run directories are created in it.
    pub runs_parent: PathBuf,
    pub note: Option<String>,
}

/// Choose (and where needed prepare) the cgroup under which this process's runs go. `mount` is
/// the cgroup2 mount point, `own` this process's cgroup directory.
pub fn place(mount: &Path, own: &Path) -> Result<Placement> {
    let plain = |note: Option<String>| Placement {
        runs_parent: own.join("lfm"),
        note,
    };
    let offered = offered(own);
    if own == mount || offered.is_empty() {
        // The root cgroup may hold processes and enable controllers at once; a cgroup offered
        // no controllers has none to gain.
        return if writable(own) {
            Ok(plain(None))
        } else {
            bail!(not_writable(own))
        };
    }
    let processes = files::read_pids(&own.join("cgroup.procs"));
    let others: Vec<i32> = processes
        .iter()
        .copied()
        .filter(|&pid| !is_supervisor(pid))
        .collect();
    if writable(own) && others.is_empty() {
        match move_into_leaf(own, &offered) {
            Ok(()) => {
                return Ok(Placement {
                    runs_parent: own.join("lfm"),
                    note: Some(format!(
                        "cgroup2: {} is writable by uid {} and holds no other process: lfm moved itself into {SUPERVISOR_LEAF}/ there and enabled {} on it, so runs under {}/lfm get kernel limits",
                        own.display(),
                        uid(),
                        offered.join(" "),
                        own.display()
                    )),
                })
            }
            Err(reason) => return Ok(beside_or_plain(own, &offered, &reason)),
        }
    }
    let reason = if writable(own) {
        format!(
            "{} holds other processes ({}) and lfm moves none but its own",
            own.display(),
            describe(&others)
        )
    } else {
        not_writable(own)
    };
    let placement = beside_or_plain(own, &offered, &reason);
    if placement.runs_parent == own.join("lfm") && !writable(own) {
        bail!("{reason}, and runs cannot go beside it: its parent is not writable");
    }
    Ok(placement)
}

/// Step 2, else step 3.
fn beside_or_plain(own: &Path, offered: &[&'static str], reason: &str) -> Placement {
    if let Some(parent) = own.parent().filter(|p| writable(p)) {
        for controller in offered {
            // Idempotent, and fails harmlessly (EBUSY) when the parent holds processes itself.
            let _ = fs::write(
                parent.join("cgroup.subtree_control"),
                format!("+{controller}"),
            );
        }
        let enabled = fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
        if enabled.split_whitespace().any(|c| c == "memory") {
            return Placement {
                runs_parent: parent.join("lfm"),
                note: Some(format!(
                    "cgroup2: {reason}, so runs go beside it, under {}/lfm ({} is writable by uid {})",
                    parent.display(),
                    parent.display(),
                    uid()
                )),
            };
        }
    }
    Placement {
        runs_parent: own.join("lfm"),
        note: Some(format!(
            "cgroup2: {reason}, and its parent is not writable with controllers: runs under {}/lfm without the {} controllers",
            own.display(),
            offered.join(" ")
        )),
    }
}

/// Step 1: move this process into `<own>/lfm-supervisor` and enable `offered` on `<own>`.
fn move_into_leaf(own: &Path, offered: &[&'static str]) -> Result<(), String> {
    let leaf = own.join(SUPERVISOR_LEAF);
    if let Err(error) = fs::create_dir(&leaf) {
        if error.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(format!("creating {}: {error}", leaf.display()));
        }
    }
    write(&leaf.join("cgroup.procs"), &std::process::id().to_string())
        .map_err(|e| format!("{e:#}"))?;
    let control = own.join("cgroup.subtree_control");
    let started = Instant::now();
    loop {
        let mut busy = false;
        for controller in offered {
            if let Err(error) = fs::write(&control, format!("+{controller}")) {
                // Anything but EBUSY (a controller the kernel will not enable here) only
                // costs that controller; memory is checked below.
                if error.raw_os_error() == Some(libc::EBUSY) {
                    busy = true;
                    break;
                }
            }
        }
        if !busy {
            let enabled = fs::read_to_string(&control).unwrap_or_default();
            if enabled.split_whitespace().any(|c| c == "memory") {
                return Ok(());
            }
            return Err(format!(
                "the memory controller could not be enabled in {}",
                control.display()
            ));
        }
        // Someone is still in <own>: another supervisor about to move (wait), or a process
        // lfm must not move (give up).
        let others: Vec<i32> = files::read_pids(&own.join("cgroup.procs"))
            .into_iter()
            .filter(|&pid| !is_supervisor(pid))
            .collect();
        if !others.is_empty() {
            return Err(format!(
                "{} holds other processes ({}) and lfm moves none but its own",
                own.display(),
                describe(&others)
            ));
        }
        if started.elapsed() > SETTLE {
            return Err(format!(
                "other lfm supervisors stayed in {} for {}s",
                own.display(),
                SETTLE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Controllers the parent of `dir` enables for it, among those runs use.
fn offered(dir: &Path) -> Vec<&'static str> {
    let text = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    WANTED
        .into_iter()
        .filter(|c| text.split_whitespace().any(|o| o == *c))
        .collect()
}

/// May this process create cgroups in `dir`, move processes through it and enable controllers?
fn writable(dir: &Path) -> bool {
    [
        dir.to_path_buf(),
        dir.join("cgroup.procs"),
        dir.join("cgroup.subtree_control"),
    ]
    .iter()
    .all(|path| {
        let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: access(2) on a NUL-terminated path.
        unsafe { libc::access(c_path.as_ptr(), libc::W_OK) == 0 }
    })
}

fn not_writable(dir: &Path) -> String {
    format!(
        "{} is not writable by uid {} (the cgroup is not delegated to this user)",
        dir.join("cgroup.procs").display(),
        uid()
    )
}

/// Is `pid` this process or another lfm supervisor (the same executable)?
fn is_supervisor(pid: i32) -> bool {
    if pid as u32 == std::process::id() {
        return true;
    }
    let mine = fs::read_link("/proc/self/exe");
    let theirs = fs::read_link(format!("/proc/{pid}/exe"));
    matches!((mine, theirs), (Ok(a), Ok(b)) if a == b)
}

/// "123 bash, 456 sleep" (at most 5).
fn describe(pids: &[i32]) -> String {
    let mut parts: Vec<String> = pids
        .iter()
        .take(5)
        .map(|pid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{pid} {}", comm.trim())
        })
        .collect();
    if pids.len() > 5 {
        parts.push(format!("{} more", pids.len() - 5));
    }
    parts.join(", ")
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}
