//! The shipped packs of the Python client's node cache (`$LFM_NODE_CACHE/shipped`,
//! docs/python.md "Packs that travel"): pack files as they arrived on the node, `HASH.tar.zst`
//! or a parts manifest `HASH.parts.json` and its parts. They live under the unpacked packs'
//! budget and leave by the same rule ([`super::evict`]'s): the client runs
//! `lfm cache --shipped DIR --prune` after it transferred one.
//!
//! A file was last used when its modification time says (the client touches it on every use).
//! One is in use while its `HASH.lock` is held (a transfer of it under way) or when it was used
//! in the last [`GRACE`]: a serve may be about to unpack it (its unpacked copy is evicted on its
//! own terms, in the pack cache).

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};

use super::{lock, lock_path, CachedPack, Evicted};

/// What the client names a whole pack and a parts manifest (or a part) it shipped.
pub const SUFFIXES: [&str; 2] = [".tar.zst", ".parts.json"];
/// How long a shipped pack stays after its last use, whatever the budget.
pub const GRACE: Duration = Duration::from_secs(600);

/// Every shipped pack in `dir`, least recently used first.
pub fn list(dir: &Path) -> Vec<CachedPack> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let now = SystemTime::now();
    let mut packs: Vec<CachedPack> = entries
        .flatten()
        .filter_map(|entry| shipped_pack(&entry.path(), now))
        .collect();
    packs.sort_by(|a, b| (a.last_used, &a.root).cmp(&(b.last_used, &b.root)));
    packs
}

/// Remove least recently used shipped packs until `dir` holds at most `budget` bytes of them
/// (`None`: the pack cache's default budget); never one in use.
pub fn evict(dir: &Path, budget: Option<u64>) -> Evicted {
    super::evict_listed(dir, list(dir), budget, None, remove_unless_used)
}

fn shipped_pack(path: &Path, now: SystemTime) -> Option<CachedPack> {
    let hash = hash_of(path)?;
    let meta = fs::metadata(path).ok().filter(|meta| meta.is_file())?;
    let last_used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let in_use = recently_used(last_used, now) || try_lock(path.parent()?, hash).is_none();
    Some(CachedPack {
        root: path.to_path_buf(),
        bytes: meta.len(),
        last_used,
        in_use,
    })
}

fn hash_of(path: &Path) -> Option<&str> {
    let name = path.file_name()?.to_str()?;
    SUFFIXES.iter().find_map(|suffix| name.strip_suffix(suffix))
}

/// A file modified in the future (another node's clock, a copy) counts as just used.
fn recently_used(last_used: SystemTime, now: SystemTime) -> bool {
    now.duration_since(last_used)
        .map_or(true, |age| age < GRACE)
}

fn try_lock(dir: &Path, hash: &str) -> Option<Flock<fs::File>> {
    lock(&lock_path(dir, hash), FlockArg::LockExclusiveNonblock).ok()
}

/// Remove `pack` under its exclusive lock, unless it is in use or was used since `list`.
fn remove_unless_used(pack: &CachedPack) -> bool {
    let (Some(dir), Some(hash)) = (pack.root.parent(), hash_of(&pack.root)) else {
        return false;
    };
    if pack.in_use {
        return false;
    }
    let Some(_exclusive) = try_lock(dir, hash) else {
        return false;
    };
    let used_since = fs::metadata(&pack.root)
        .and_then(|meta| meta.modified())
        .map_or(true, |used| used > pack.last_used);
    !used_since && fs::remove_file(&pack.root).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shipped pack of `bytes` bytes last used `age` ago.
    fn shipped(dir: &Path, name: &str, bytes: usize, age: Duration) -> std::path::PathBuf {
        let path = dir.join(name);
        fs::write(&path, vec![b'x'; bytes]).unwrap();
        let file = fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
        path
    }

    #[test]
    fn least_recently_used_leave_until_under_the_budget_and_recent_or_locked_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let hour = Duration::from_secs(3600);
        let a = shipped(dir.path(), "a.tar.zst", 1000, hour * 4);
        let b = shipped(dir.path(), "b.parts.json", 1000, hour * 3);
        let c = shipped(dir.path(), "c.tar.zst", 1000, hour * 2);
        let recent = shipped(dir.path(), "r.tar.zst", 1000, Duration::ZERO);
        let other = shipped(dir.path(), "transfers.jsonl", 5000, hour * 5);
        let held = lock(&lock_path(dir.path(), "b"), FlockArg::LockExclusive).unwrap();
        let evicted = evict(dir.path(), Some(1500));
        assert_eq!(evicted.removed, vec![a.clone(), c.clone()]);
        assert_eq!(evicted.kept_in_use, vec![b.clone(), recent.clone()]);
        assert!(!a.exists() && !c.exists());
        assert!(b.exists() && recent.exists() && other.exists());
        drop(held);
        assert_eq!(evict(dir.path(), Some(1500)).removed, vec![b]);
    }

    #[test]
    fn a_missing_directory_holds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(list(&dir.path().join("absent")).is_empty());
        assert!(evict(&dir.path().join("absent"), Some(0))
            .removed
            .is_empty());
    }
}
