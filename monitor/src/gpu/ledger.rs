//! The node's GPU ledger: which device each lfm run holds, safe across concurrent lfm
//! processes and across crashes.
//!
//! One lock file per device in a node-local directory, held with `flock(2)` for as long as the
//! run holds the device. The kernel releases a lock when the last descriptor on it closes, so
//! a holder that dies (even by SIGKILL) frees its devices at once: there is no state to
//! repair. Locks are taken without blocking, in device order, all or nothing, so two runs
//! wanting two devices each never hold one apiece and wait forever.

use std::fs::File;
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use super::{Device, GpuError};

/// Overrides the ledger's directory (default `/tmp/lfm-gpu-ledger`).
pub const LEDGER_ENV: &str = "LFM_GPU_LEDGER";
const DEFAULT_DIR: &str = "/tmp/lfm-gpu-ledger";
/// How often a waiting run looks again. Locks are free the moment a holder ends; this only
/// bounds how late a waiter notices.
const RETRY: Duration = Duration::from_millis(100);

pub struct Ledger {
    dir: PathBuf,
}

/// Devices a run holds: released when dropped (or when the process dies).
#[derive(Debug)]
pub struct Claim {
    pub devices: Vec<Device>,
    /// How long the run waited for them.
    pub waited: Duration,
    _locks: Vec<Flock<File>>,
}

impl Ledger {
    /// `LFM_GPU_LEDGER`, else `/tmp/lfm-gpu-ledger` (shared by every user of the node).
    pub fn of_node() -> Ledger {
        let dir = std::env::var_os(LEDGER_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| DEFAULT_DIR.into());
        Ledger { dir }
    }

    pub fn at(dir: &Path) -> Ledger {
        Ledger {
            dir: dir.to_path_buf(),
        }
    }

    /// `count` devices of `devices` that no other holder has, waiting up to `wait` for them.
    pub fn claim(
        &self,
        devices: &[Device],
        count: usize,
        wait: Duration,
    ) -> Result<Claim, GpuError> {
        self.prepare()?;
        let started = Instant::now();
        loop {
            let (held, locks) = self.try_claim(devices, count)?;
            if held.len() == count {
                return Ok(Claim {
                    devices: held,
                    waited: started.elapsed(),
                    _locks: locks,
                });
            }
            drop(locks);
            if started.elapsed() >= wait {
                return Err(GpuError::Busy {
                    asked: count as u64,
                    free: held.len(),
                    present: devices.len(),
                    waited: started.elapsed().as_secs_f64(),
                });
            }
            std::thread::sleep(RETRY.min(wait.saturating_sub(started.elapsed())));
        }
    }

    /// Lock free devices in order until `count` are held; fewer means the rest are busy.
    fn try_claim(
        &self,
        devices: &[Device],
        count: usize,
    ) -> Result<(Vec<Device>, Vec<Flock<File>>), GpuError> {
        let mut held = Vec::new();
        let mut locks = Vec::new();
        for device in devices {
            if held.len() == count {
                break;
            }
            // Refused (held by another run, or not lockable): the device is busy.
            if let Ok(lock) = Flock::lock(self.open(device)?, FlockArg::LockExclusiveNonblock) {
                held.push(device.clone());
                locks.push(lock);
            }
        }
        Ok((held, locks))
    }

    /// The directory is shared by every user of the node: world-writable and sticky, as /tmp.
    fn prepare(&self) -> Result<(), GpuError> {
        use std::os::unix::fs::PermissionsExt;
        if self.dir.is_dir() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| self.error(&self.dir, e))?;
        let _ = std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o1777));
        Ok(())
    }

    /// Opened read-only, so a lock file another user created can be locked too (flock needs
    /// no write access); close-on-exec, so the run's processes do not inherit the claim.
    fn open(&self, device: &Device) -> Result<File, GpuError> {
        let path = self.dir.join(lock_name(device));
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|e| self.error(&path, std::io::Error::other(e)))?;
        // SAFETY: a NUL-terminated path; the returned descriptor is owned by the File.
        let fd = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_RDONLY | libc::O_CREAT | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd < 0 {
            return Err(self.error(&path, std::io::Error::last_os_error()));
        }
        // Readable by every user whatever the creator's umask (fails, harmlessly, when the
        // file is another user's).
        // SAFETY: fchmod on the descriptor just opened.
        unsafe { libc::fchmod(fd, 0o644) };
        // SAFETY: fd is a fresh descriptor nothing else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    fn error(&self, path: &Path, error: std::io::Error) -> GpuError {
        GpuError::Ledger {
            path: path.display().to_string(),
            reason: error.to_string(),
        }
    }
}

fn lock_name(device: &Device) -> String {
    let name: String = device
        .visible_name()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{name}.lock")
}
