//! The node-local pack cache: what it holds, its budget, and leases that keep a pack in use
//! from being evicted.
//!
//! A process that runs from a pack holds a shared `flock` on the pack's `<hash>.lock` for as
//! long as it uses it ([`PackLease`]); eviction removes a pack only under an exclusive,
//! non-blocking lock on the same file, and also spares a pack that a process runs from
//! (its executable or working directory inside the pack) for users that took no lease, such as
//! a script that ran `lfm unpack` and then the pack's `run`. Lock files stay (0 bytes each):
//! removing one while another process waits on it would let two processes each believe they
//! hold it.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};
use nix::fcntl::{Flock, FlockArg};

pub mod shipped;

/// Written last inside an extraction: a root without it is not used.
pub(crate) const COMPLETE_MARKER: &str = ".lfm-complete";
/// Touched on every use, for least-recently-used eviction.
pub(crate) const USED_MARKER: &str = ".lfm-used";
/// In a composition: the hashes of the parts it links to, one a line.
pub(crate) const PARTS_LIST: &str = ".lfm-parts";

/// The default budget's ceiling, whatever the filesystem's size.
pub const DEFAULT_CEILING: u64 = 20 << 30;
/// The default budget's share of what the cache's filesystem could give it (its free space plus
/// what the cache already holds).
pub const DEFAULT_SHARE_PERCENT: u64 = 25;

/// A pack unpacked in the cache, held so that no eviction removes it while this lives.
#[derive(Debug)]
pub struct PackLease {
    root: PathBuf,
    _lock: Flock<fs::File>,
    /// A composition's parts (docs/pack.md, "Parts"), held as long as it is.
    _parts: Vec<PackLease>,
}

impl PackLease {
    /// The unpacked pack's directory (its `run`, `app/`, ...).
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// One pack of the cache, as `lfm cache` shows it.
#[derive(Debug, Clone)]
pub struct CachedPack {
    pub root: PathBuf,
    pub bytes: u64,
    pub last_used: SystemTime,
    pub in_use: bool,
}

/// What an eviction did.
#[derive(Debug, Default, Clone)]
pub struct Evicted {
    pub removed: Vec<PathBuf>,
    pub freed_bytes: u64,
    /// Packs over the budget that were kept because a process uses them.
    pub kept_in_use: Vec<PathBuf>,
}

pub(crate) fn lock_path(cache: &Path, hash: &str) -> PathBuf {
    cache.join(format!("{hash}.lock"))
}

/// Wait for `how` (shared or exclusive) on the lock file at `path`, created if absent.
pub(crate) fn lock(path: &Path, how: FlockArg) -> Result<Flock<fs::File>> {
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    Flock::lock(file, how)
        .map_err(|(_, errno)| anyhow::anyhow!("locking {}: {errno}", path.display()))
}

pub(crate) fn lease(root: PathBuf, lock: Flock<fs::File>) -> PackLease {
    lease_with_parts(root, lock, Vec::new())
}

pub(crate) fn lease_with_parts(
    root: PathBuf,
    lock: Flock<fs::File>,
    parts: Vec<PackLease>,
) -> PackLease {
    PackLease {
        root,
        _lock: lock,
        _parts: parts,
    }
}

/// Remove the tree at `path`, also when it is sealed read-only (a part): its directories are
/// made writable first where a plain removal is refused.
pub(crate) fn remove_tree(path: &Path) -> std::io::Result<()> {
    match fs::remove_dir_all(path) {
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            use std::os::unix::fs::PermissionsExt;
            for entry in walkdir::WalkDir::new(path).into_iter().flatten() {
                if entry.file_type().is_dir() {
                    let _ = fs::set_permissions(entry.path(), fs::Permissions::from_mode(0o755));
                }
            }
            fs::remove_dir_all(path)
        }
        other => other,
    }
}

/// The budget when none is given: [`DEFAULT_SHARE_PERCENT`] of the free space of the cache's
/// filesystem plus what the cache holds, at most [`DEFAULT_CEILING`].
pub fn default_budget(cache: &Path, held_bytes: u64) -> u64 {
    let existing = cache
        .ancestors()
        .find(|dir| dir.exists())
        .unwrap_or(Path::new("/"));
    let free = nix::sys::statvfs::statvfs(existing)
        .map(|stat| stat.blocks_available().saturating_mul(stat.fragment_size()))
        .unwrap_or(0);
    (free.saturating_add(held_bytes) / 100 * DEFAULT_SHARE_PERCENT).min(DEFAULT_CEILING)
}

/// Every complete pack in `cache`, least recently used first.
pub fn list(cache: &Path) -> Vec<CachedPack> {
    let cache = &fs::canonicalize(cache).unwrap_or_else(|_| cache.to_path_buf());
    let Ok(entries) = fs::read_dir(cache) else {
        return Vec::new();
    };
    let mut packs: Vec<CachedPack> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|root| root.join(COMPLETE_MARKER).exists())
        .map(|root| CachedPack {
            bytes: tree_bytes(&root),
            last_used: fs::metadata(root.join(USED_MARKER))
                .and_then(|meta| meta.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH),
            in_use: false,
            root,
        })
        .collect();
    let runners = processes_running_from(cache);
    for pack in &mut packs {
        pack.in_use = runners.iter().any(|dir| dir.starts_with(&pack.root))
            || try_exclusive(cache, &pack.root).is_none();
    }
    // A part is in use while a composition in use links to it, lease or not.
    let linked: Vec<PathBuf> = packs
        .iter()
        .filter(|pack| pack.in_use)
        .flat_map(|pack| parts_of(&pack.root))
        .collect();
    for pack in &mut packs {
        pack.in_use |= linked.contains(&pack.root);
    }
    packs.sort_by(|a, b| (a.last_used, &a.root).cmp(&(b.last_used, &b.root)));
    packs
}

/// Remove least recently used packs until the cache holds at most `budget` bytes (`None`:
/// [`default_budget`]); never `keep`, never a pack in use.
pub fn evict(cache: &Path, budget: Option<u64>, keep: Option<&Path>) -> Evicted {
    let keep = keep.map(|root| fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf()));
    evict_listed(
        cache,
        list(cache),
        budget,
        keep.as_deref(),
        remove_unless_used,
    )
}

/// The one eviction rule of every pack store: least recently used first (`packs` come sorted
/// so) until they hold at most `budget` bytes (`None`: [`default_budget`] of `store`); never
/// `keep`, never one `remove` refuses (in use).
fn evict_listed(
    store: &Path,
    packs: Vec<CachedPack>,
    budget: Option<u64>,
    keep: Option<&Path>,
    remove: impl Fn(&CachedPack) -> bool,
) -> Evicted {
    let mut held: u64 = packs.iter().map(|pack| pack.bytes).sum();
    let budget = budget.unwrap_or_else(|| default_budget(store, held));
    let mut evicted = Evicted::default();
    for pack in packs {
        if held <= budget {
            break;
        }
        if Some(pack.root.as_path()) == keep {
            continue;
        }
        match remove(&pack) {
            true => {
                held = held.saturating_sub(pack.bytes);
                evicted.freed_bytes += pack.bytes;
                evicted.removed.push(pack.root);
            }
            false => evicted.kept_in_use.push(pack.root),
        }
    }
    evicted
}

/// Remove every pack no process uses (`lfm cache clean`).
pub fn remove_unused(cache: &Path) -> Evicted {
    evict(cache, Some(0), None)
}

/// Remove `pack` under its exclusive lock, unless a process uses it.
fn remove_unless_used(pack: &CachedPack) -> bool {
    // The listed roots are canonical, so is their parent.
    let Some(cache) = pack.root.parent().filter(|_| !pack.in_use) else {
        return false;
    };
    let Some(_exclusive) = try_exclusive(cache, &pack.root) else {
        return false;
    };
    // Checked again under the lock: a process may have started from it since `list`.
    if processes_running_from(cache)
        .iter()
        .any(|dir| dir.starts_with(&pack.root))
        || linked_from_a_running_composition(cache, &pack.root)
    {
        return false;
    }
    // Renamed first so that no reader ever sees half a pack with its marker.
    let doomed = cache.join(format!(
        ".evicted-{}-{}",
        pack.root.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    if fs::rename(&pack.root, &doomed).is_err() {
        return false;
    }
    let _ = remove_tree(&doomed);
    true
}

/// The part roots a composition links to (its `.lfm-parts`; none for a plain pack).
pub(crate) fn parts_of(root: &Path) -> Vec<PathBuf> {
    let Some(cache) = root.parent() else {
        return Vec::new();
    };
    fs::read_to_string(root.join(PARTS_LIST))
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.is_empty())
        .map(|hash| cache.join(hash))
        .collect()
}

/// Whether a process runs from a composition that links to `part` (without a lease: a script
/// that ran `lfm unpack` and then the composition's `run`).
fn linked_from_a_running_composition(cache: &Path, part: &Path) -> bool {
    let runners = processes_running_from(cache);
    runners.iter().any(|dir| {
        dir.strip_prefix(cache)
            .ok()
            .and_then(|rest| rest.components().next())
            .is_some_and(|first| parts_of(&cache.join(first)).iter().any(|p| p == part))
    })
}

fn try_exclusive(cache: &Path, root: &Path) -> Option<Flock<fs::File>> {
    let hash = root.file_name()?.to_string_lossy();
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(cache, &hash))
        .ok()?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).ok()
}

/// The executables and working directories of this machine's processes that lie in `cache`.
fn processes_running_from(cache: &Path) -> Vec<PathBuf> {
    let cache = fs::canonicalize(cache).unwrap_or_else(|_| cache.to_path_buf());
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .flat_map(|entry| ["exe", "cwd"].map(|link| fs::read_link(entry.path().join(link))))
        .flatten()
        .filter(|path| path.starts_with(&cache))
        .collect()
}

/// Bytes of the regular files under `dir`.
pub fn tree_bytes(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.metadata().ok())
        .filter(|meta| meta.is_file())
        .map(|meta| meta.len())
        .sum()
}
