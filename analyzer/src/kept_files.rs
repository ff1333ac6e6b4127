//! Caches kept as one file an entry in a directory of their own, capped by count: past the
//! cap, the least recently used entries go (a read that finds an entry valid touches its
//! mtime, as a write sets it). A run reads only the entries it needs, each by its name.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Remove the files of `dir` whose names end with `suffix` ("" for all), beyond the `kept`
/// most recently used (by mtime).
pub fn keep_newest(dir: &Path, suffix: &str, kept: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() <= kept {
        return;
    }
    files.sort();
    for (_, path) in &files[..files.len() - kept] {
        let _ = std::fs::remove_file(path);
    }
}

/// What identifies a file's content without reading it: its size, mtime, ctime and inode.
/// `ctime` is set from the clock by every write, `touch` and rename into place, so a copy
/// that preserves an older mtime (`cp -p`, `rsync -t`) or a same-size rewrite with its mtime
/// set back still changes the stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    inode: u64,
}

impl Stamp {
    pub fn of(path: &Path) -> Option<Stamp> {
        std::fs::metadata(path)
            .ok()
            .map(|meta| Stamp::from_metadata(&meta))
    }

    pub fn from_metadata(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            inode: meta.ino(),
        }
    }

    /// The mtime as nanoseconds since the epoch (0 before it).
    fn mtime_nanos(&self) -> u128 {
        let (seconds, nanos) = self.mtime;
        u128::try_from(seconds).map_or(0, |s| s * 1_000_000_000 + nanos.max(0) as u128)
    }
}

/// A path and its stamp when it was stamped; None: it did not exist.
pub type Stamped = (PathBuf, Option<Stamp>);

/// How much older than the stamping a stamp must be for a cache to trust it (FAT's mtime has
/// two seconds' resolution; most file systems take mtimes from a clock of a few ms).
const SETTLED: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether every stamp's mtime is older than `at` by [`SETTLED`]: a later change then gets a
/// later mtime, even from a coarse clock. (Not the ctime: a file whose mtime was set back, as
/// tests and `cp -p` do, would never count as settled; its stamp holds the ctime anyway.)
pub fn settled(stamps: &[Stamped], at: SystemTime) -> bool {
    let Some(limit) = at
        .checked_sub(SETTLED)
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
    else {
        return false;
    };
    stamps
        .iter()
        .all(|(_, at)| at.is_none_or(|stamp| stamp.mtime_nanos() < limit.as_nanos()))
}

/// A hasher that has taken in the running lfm executable (path, device, inode, size, mtime):
/// another build may lay an entry out differently. None where it cannot be described.
pub fn executable_hasher() -> Option<blake3::Hasher> {
    use std::os::unix::fs::MetadataExt;
    let exe = std::env::current_exe().ok()?;
    let meta = exe.metadata().ok()?;
    let mut hasher = blake3::Hasher::new();
    hasher.update(exe.as_os_str().as_encoded_bytes());
    for number in [meta.dev(), meta.ino(), meta.size()] {
        hasher.update(&number.to_le_bytes());
    }
    hasher.update(&meta.mtime().to_le_bytes());
    hasher.update(&meta.mtime_nsec().to_le_bytes());
    Some(hasher)
}

fn bincode_options() -> impl bincode::Options + Copy {
    use bincode::Options as _;
    bincode::options()
        .with_fixint_encoding()
        .allow_trailing_bytes()
}

/// The value stored in `file` after its stamps, when every stamp still holds.
pub fn read_stamped<T: serde::de::DeserializeOwned>(file: &Path) -> Option<T> {
    read_stamped_with_stamps(file).map(|(_, value)| value)
}

/// Like [`read_stamped`], with the stamps (all of which hold now).
pub fn read_stamped_with_stamps<T: serde::de::DeserializeOwned>(
    file: &Path,
) -> Option<(Vec<Stamped>, T)> {
    use bincode::Options as _;
    use std::io::Read as _;
    let mut opened = std::fs::File::open(file).ok()?;
    let mut bytes = Vec::new();
    opened.read_to_end(&mut bytes).ok()?;
    // Bounded by the file's size: a damaged length must not ask for exabytes.
    let options = bincode_options().with_limit(bytes.len() as u64);
    let mut rest = bytes.as_slice();
    let stamps: Vec<Stamped> = options.deserialize_from(&mut rest).ok()?;
    if !stamps.iter().all(|(path, at)| Stamp::of(path) == *at) {
        return None;
    }
    let value = options.deserialize_from(&mut rest).ok()?;
    // Used now: eviction ([`keep_newest`]) keeps the recently used entries.
    let _ = opened.set_modified(SystemTime::now());
    Some((stamps, value))
}

/// Store `value` after its `stamps` as `dir/name` (written whole or not at all), keeping the
/// `kept` newest entries ending with `suffix`. A cache that cannot be written is no error.
pub fn store_stamped<T: serde::Serialize>(
    dir: &Path,
    name: &str,
    suffix: &str,
    kept: usize,
    stamps: &[Stamped],
    value: &T,
) {
    use bincode::Options as _;
    let options = bincode_options();
    let mut bytes = Vec::new();
    let written = options.serialize_into(&mut bytes, stamps).is_ok()
        && options.serialize_into(&mut bytes, value).is_ok();
    if !written || std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let _ = lfm_fs::write_bytes_atomically(&dir.join(name), &bytes);
    keep_newest(dir, suffix, kept);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_stale_once_a_file_is_rewritten_even_with_its_old_size_and_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("module.py");
        std::fs::write(&source, b"import a\n").unwrap();
        let old = UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        std::fs::File::options()
            .write(true)
            .open(&source)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let stamps = vec![(source.clone(), Stamp::of(&source))];
        assert!(settled(&stamps, SystemTime::now()));
        store_stamped(dir.path(), "entry.bin", ".bin", 4, &stamps, &7u32);
        let entry = dir.path().join("entry.bin");
        assert_eq!(read_stamped::<u32>(&entry), Some(7));
        // As `cp -p` or `rsync -t` would leave it: other bytes, same size, the old mtime.
        std::fs::write(&source, b"import b\n").unwrap();
        let file = std::fs::File::options().write(true).open(&source).unwrap();
        file.set_modified(old).unwrap();
        assert_eq!(read_stamped::<u32>(&entry), None);
    }

    #[test]
    fn only_the_newest_entries_with_the_suffix_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let written = |name: &str, seconds: u64| {
            let path = dir.path().join(name);
            std::fs::write(&path, b"x").unwrap();
            let at = UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + seconds);
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(at).unwrap();
        };
        for n in 0..5u64 {
            written(&format!("{n}.bin"), n);
        }
        written("other.json", 0);
        let left = || {
            let mut names: Vec<String> = (std::fs::read_dir(dir.path()).unwrap())
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        keep_newest(dir.path(), ".bin", 2);
        assert_eq!(left(), ["3.bin", "4.bin", "other.json"]);
        keep_newest(dir.path(), "", 1);
        assert_eq!(left(), ["4.bin"]);
    }
}
