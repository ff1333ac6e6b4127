//! Unpacking like a careful worker: any tar.zst / tar.gz / tar, each archive extracted once per
//! cache, entry by entry under safety rules, into a fresh directory renamed into place under a
//! lock.

use std::collections::HashSet;
use std::fs;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};
use nix::fcntl::FlockArg;

use crate::cache::{self, PackLease, COMPLETE_MARKER, USED_MARKER};

#[derive(Debug, Clone)]
pub struct UnpackOptions {
    pub cache: PathBuf,
    /// Refuse archives that expand to more than this (a tar bomb).
    pub max_bytes: u64,
    pub max_entries: u64,
    /// After unpacking, evict least recently used packs until the cache is at most this big
    /// (`None`: [`cache::default_budget`]).
    pub cache_max: Option<u64>,
    /// Compile the pack's Python files once, with this interpreter, before it is published.
    pub compile_with: Option<PathBuf>,
    /// Seal the unpacked tree read-only before it is published (parts, which many
    /// compositions link to).
    pub read_only: bool,
}

impl UnpackOptions {
    pub fn new(cache: PathBuf) -> UnpackOptions {
        UnpackOptions {
            cache,
            max_bytes: 64 << 30,
            max_entries: 2_000_000,
            cache_max: None,
            compile_with: None,
            read_only: false,
        }
    }

    /// `$LFM_CACHE_DIR/packs`, `$XDG_CACHE_HOME/lfm/packs` or `~/.cache/lfm/packs`.
    pub fn default_cache() -> PathBuf {
        lfm_analyzer::cache::SummaryCache::default_dir()
            .unwrap_or_else(|| std::env::temp_dir().join("lfm"))
            .join("packs")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("refused entry {entry:?}: {rule}")]
    Refused { entry: String, rule: String },
    #[error("{0:#}")]
    Other(#[from] anyhow::Error),
}

impl From<io::Error> for UnpackError {
    fn from(error: io::Error) -> Self {
        UnpackError::Other(error.into())
    }
}

fn refused(entry: &Path, rule: impl Into<String>) -> UnpackError {
    UnpackError::Refused {
        entry: entry.display().to_string(),
        rule: rule.into(),
    }
}

/// Unpack `archive` into the cache (once) and return its root. Nothing keeps the pack from a
/// later eviction: a process that runs from it holds [`unpack_leased`]'s lease instead.
pub fn unpack(archive: &Path, options: &UnpackOptions) -> Result<PathBuf, UnpackError> {
    unpack_leased(archive, options).map(|lease| lease.root().to_path_buf())
}

/// Unpack `archive` into the cache (once) and hold it there: no eviction removes it while the
/// lease lives. A new extraction then evicts least recently used packs over the budget.
pub fn unpack_leased(archive: &Path, options: &UnpackOptions) -> Result<PackLease, UnpackError> {
    if crate::parts::is_parts_manifest(archive) {
        return crate::parts::compose_leased(archive, options);
    }
    let hash = hash_file(archive).with_context(|| format!("reading {}", archive.display()))?;
    fs::create_dir_all(&options.cache)
        .with_context(|| format!("creating {}", options.cache.display()))?;
    let root = options.cache.join(&hash);
    let lock_path = cache::lock_path(&options.cache, &hash);
    let mut extracted = false;
    // An eviction can only take the pack between its extraction and our shared lock.
    for _ in 0..3 {
        let shared = cache::lock(&lock_path, FlockArg::LockShared)?;
        if root.join(COMPLETE_MARKER).exists() {
            touch(&root.join(USED_MARKER));
            if extracted {
                cache::evict(&options.cache, options.cache_max, Some(&root));
            }
            return Ok(cache::lease(root, shared));
        }
        drop(shared);
        extract_into_cache(archive, options, &hash, &root)?;
        extracted = true;
    }
    Err(anyhow::anyhow!(
        "{}: evicted from {} as soon as it was unpacked, three times; is the cache budget \
         smaller than the pack?",
        archive.display(),
        options.cache.display()
    )
    .into())
}

/// Extract `archive` to `root` under the pack's exclusive lock, unless another process did.
pub(crate) fn extract_into_cache(
    archive: &Path,
    options: &UnpackOptions,
    hash: &str,
    root: &Path,
) -> Result<(), UnpackError> {
    let _exclusive = cache::lock(
        &cache::lock_path(&options.cache, hash),
        FlockArg::LockExclusive,
    )?;
    if root.join(COMPLETE_MARKER).exists() {
        return Ok(());
    }
    clean_stale_temporaries(&options.cache);
    let tmp = options
        .cache
        .join(format!(".tmp-{hash}-{}", std::process::id()));
    let _ = cache::remove_tree(&tmp);
    fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let result = extract(archive, &tmp, options)
        .and_then(|()| match &options.compile_with {
            Some(python) => compile(&tmp, python).map_err(UnpackError::from),
            None => Ok(()),
        })
        .and_then(|()| {
            fs::write(tmp.join(COMPLETE_MARKER), hash.as_bytes())?;
            touch(&tmp.join(USED_MARKER));
            if options.read_only {
                crate::parts::seal(&tmp)?;
            }
            Ok(())
        });
    if let Err(error) = result {
        let _ = cache::remove_tree(&tmp);
        return Err(error);
    }
    if root.exists() {
        // A directory without the marker: an interrupted run of an older lfm. Replace it.
        cache::remove_tree(root)
            .with_context(|| format!("removing incomplete {}", root.display()))?;
    }
    fs::rename(&tmp, root).with_context(|| format!("moving {} into place", root.display()))?;
    log_extraction(&options.cache, hash, archive);
    Ok(())
}

/// blake3 of the archive bytes: the cache key.
pub fn hash_file(path: &Path) -> io::Result<String> {
    let mut hasher = blake3::Hasher::new();
    let mut file = fs::File::open(path)?;
    io::copy(&mut file, &mut hasher)?;
    Ok(hasher.finalize().to_hex().to_string())
}

fn open_decompressed(archive: &Path) -> Result<Box<dyn Read>> {
    let mut file = BufReader::new(
        fs::File::open(archive).with_context(|| format!("opening {}", archive.display()))?,
    );
    let mut magic = [0u8; 4];
    let read = {
        use std::io::BufRead;
        let buffer = file.fill_buf()?;
        let n = buffer.len().min(4);
        magic[..n].copy_from_slice(&buffer[..n]);
        n
    };
    if read == 4 && magic == [0x28, 0xB5, 0x2F, 0xFD] {
        let mut decoder = zstd::stream::Decoder::with_buffer(file)?;
        // Bounded decoder memory whatever the archive claims (2^27 = 128 MiB window).
        decoder.window_log_max(27)?;
        Ok(Box::new(decoder))
    } else if read >= 2 && magic[..2] == [0x1F, 0x8B] {
        Ok(Box::new(flate2::bufread::MultiGzDecoder::new(file)))
    } else {
        Ok(Box::new(file))
    }
}

/// Extract entry by entry into the empty directory `dest`, refusing anything unsafe.
pub fn extract(archive: &Path, dest: &Path, options: &UnpackOptions) -> Result<(), UnpackError> {
    let reader = open_decompressed(archive)?;
    let mut tar = tar::Archive::new(reader);
    let unreadable = || {
        format!(
            "{}: not a readable tar, tar.gz or tar.zst archive",
            archive.display()
        )
    };
    let mut extraction = Extraction {
        dest,
        options,
        seen: HashSet::new(),
        regular_files: HashSet::new(),
        total_bytes: 0,
        count: 0,
    };
    for entry in tar.entries().with_context(unreadable)? {
        extraction.entry(&mut entry.with_context(unreadable)?)?;
    }
    Ok(())
}

/// What an extraction has written so far, to refuse bombs, duplicates and dangling hard links.
struct Extraction<'a> {
    dest: &'a Path,
    options: &'a UnpackOptions,
    seen: HashSet<PathBuf>,
    regular_files: HashSet<PathBuf>,
    total_bytes: u64,
    count: u64,
}

impl Extraction<'_> {
    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<R>) -> Result<(), UnpackError> {
        let raw = entry
            .path()
            .context("an entry name is not a valid path")?
            .into_owned();
        let path = safe_relative(&raw)?;
        self.count += 1;
        if self.count > self.options.max_entries {
            return Err(refused(
                &raw,
                format!(
                    "more than {} entries (a tar bomb?)",
                    self.options.max_entries
                ),
            ));
        }
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
        ) {
            return Ok(()); // pax metadata records (the tar crate applies per-entry ones itself)
        }
        if path.as_os_str().is_empty() {
            if kind.is_dir() {
                return Ok(()); // "./" itself
            }
            return Err(refused(&raw, "empty path"));
        }
        if !self.seen.insert(path.clone()) && !kind.is_dir() {
            return Err(refused(&raw, "duplicate path"));
        }
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => self.file(entry, &raw, path),
            tar::EntryType::Directory => self.directory(&raw, &path),
            tar::EntryType::Symlink => self.symlink(entry, &raw, &path),
            tar::EntryType::Link => self.hard_link(entry, &raw, &path),
            other => Err(refused(
                &raw,
                format!("entry type {other:?} is not allowed (only files, directories and links)"),
            )),
        }
    }

    fn file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<R>,
        raw: &Path,
        path: PathBuf,
    ) -> Result<(), UnpackError> {
        let size = entry.header().size().unwrap_or(0);
        self.total_bytes = self.total_bytes.saturating_add(size);
        if self.total_bytes > self.options.max_bytes {
            return Err(refused(
                raw,
                format!(
                    "archive expands past {} bytes (a tar bomb?)",
                    self.options.max_bytes
                ),
            ));
        }
        make_parents(self.dest, &path, raw)?;
        let target = self.dest.join(&path);
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(|e| refused(raw, format!("cannot create: {e}")))?;
        let copied = io::copy(&mut entry.take(size), &mut file)?;
        if copied != size {
            return Err(refused(raw, "truncated entry"));
        }
        let mode = entry.header().mode().unwrap_or(0o644);
        // No setuid/setgid/sticky, nothing group/world-writable; owner can always read.
        let masked = (mode & 0o755) | 0o600;
        fs::set_permissions(&target, fs::Permissions::from_mode(masked))?;
        self.regular_files.insert(path);
        Ok(())
    }

    fn directory(&self, raw: &Path, path: &Path) -> Result<(), UnpackError> {
        make_parents(self.dest, path, raw)?;
        let target = self.dest.join(path);
        match fs::symlink_metadata(&target) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) => Err(refused(raw, "directory over an existing non-directory")),
            Err(_) => Ok(fs::create_dir(&target)?),
        }
    }

    fn symlink<R: Read>(
        &self,
        entry: &tar::Entry<R>,
        raw: &Path,
        path: &Path,
    ) -> Result<(), UnpackError> {
        let link = link_target(entry, raw, "symlink")?;
        if link.is_absolute() {
            return Err(refused(
                raw,
                format!("symlink to an absolute path {}", link.display()),
            ));
        }
        let parent = path.parent().unwrap_or(Path::new(""));
        if !stays_inside(&parent.join(&link)) {
            return Err(refused(
                raw,
                format!("symlink target {} leaves the root", link.display()),
            ));
        }
        make_parents(self.dest, path, raw)?;
        std::os::unix::fs::symlink(&link, self.dest.join(path))
            .map_err(|e| refused(raw, format!("cannot create: {e}")))
    }

    fn hard_link<R: Read>(
        &self,
        entry: &tar::Entry<R>,
        raw: &Path,
        path: &Path,
    ) -> Result<(), UnpackError> {
        let link = link_target(entry, raw, "hard link")?;
        let link = safe_relative(&link).map_err(|_| {
            refused(
                raw,
                format!("hard link target {} leaves the root", link.display()),
            )
        })?;
        if !self.regular_files.contains(&link) {
            return Err(refused(
                raw,
                format!(
                    "hard link to {}, which is not a file extracted earlier from this archive",
                    link.display()
                ),
            ));
        }
        make_parents(self.dest, path, raw)?;
        fs::hard_link(self.dest.join(&link), self.dest.join(path))
            .map_err(|e| refused(raw, format!("cannot link: {e}")))
    }
}

/// What a link entry (`kind`: symlink or hard link) points at, as written in the archive.
fn link_target<R: Read>(
    entry: &tar::Entry<R>,
    raw: &Path,
    kind: &str,
) -> Result<PathBuf, UnpackError> {
    let without = || format!("{kind} without a target");
    Ok(entry
        .link_name()
        .with_context(without)?
        .ok_or_else(|| refused(raw, without()))?
        .into_owned())
}

/// A relative path of normal components only.
fn safe_relative(raw: &Path) -> Result<PathBuf, UnpackError> {
    let mut out = PathBuf::new();
    for component in raw.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(refused(raw, "path contains '..'")),
            Component::RootDir | Component::Prefix(_) => return Err(refused(raw, "absolute path")),
        }
    }
    Ok(out)
}

/// Does a relative path, with `..` resolved lexically, stay below the root?
fn stays_inside(path: &Path) -> bool {
    let mut depth: i64 = 0;
    for component in path.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// Create the parent directories of `path` under `dest`, refusing to go through anything that
/// is not a real directory (a symlink planted by an earlier entry must not be written through).
fn make_parents(dest: &Path, path: &Path, raw: &Path) -> Result<(), UnpackError> {
    let mut current = dest.to_path_buf();
    let Some(parent) = path.parent() else {
        return Ok(());
    };
    for component in parent.components() {
        current.push(component);
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(refused(
                    raw,
                    format!(
                        "parent {} is not a directory (a symlink?)",
                        current.strip_prefix(dest).unwrap_or(&current).display()
                    ),
                ))
            }
            Err(_) => fs::create_dir(&current)?,
        }
    }
    Ok(())
}

/// Byte-compile every .py of the extracted tree once. Unchecked-hash pycs (PEP 552) never go
/// stale on a read-only or timestamp-normalised tree, and are never rewritten by imports.
fn compile(root: &Path, python: &Path) -> Result<()> {
    let output = std::process::Command::new(python)
        .args([
            "-I",
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
        ])
        .arg(root)
        .output()
        .with_context(|| format!("starting {} to compile the pack", python.display()))?;
    // compileall exits 1 when some file does not compile (py2 leftovers in test dirs): that file
    // is imported from source, as it would be anyway.
    if !output.status.success() && output.status.code() != Some(1) {
        anyhow::bail!(
            "compiling with {} failed: {}",
            python.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// One line per extraction in `lfm-unpack.log`: what a node's cache did, and when.
pub(crate) fn log_extraction(cache: &Path, hash: &str, archive: &Path) {
    use std::io::Write;
    let seconds = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if let Ok(mut log) = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(cache.join("lfm-unpack.log"))
    {
        let _ = writeln!(
            log,
            "{seconds} {hash} pid={} {}",
            std::process::id(),
            archive.display()
        );
    }
}

pub(crate) fn touch(path: &Path) {
    let _ = fs::write(path, b"");
}

/// Remove extraction and eviction directories left by processes that died mid-way.
pub(crate) fn clean_stale_temporaries(cache: &Path) {
    let owner = |name: &str| {
        lfm_fs::owners::pid_at_end(".tmp-", name)
            .or_else(|| lfm_fs::owners::pid_at_end(".evicted-", name))
    };
    lfm_fs::remove_dead_owners(cache, owner, |path| {
        let _ = cache::remove_tree(path);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_temporaries_of_dead_processes_are_cleaned() {
        let cache = tempfile::tempdir().unwrap();
        // A pid above the kernel's maximum (4194304) never runs.
        let dead = [".tmp-0a1b-4194399", ".evicted-0a1b-7-4194399"];
        let kept = [
            format!(".tmp-0a1b-{}", std::process::id()),
            "0a1b-4194399".to_string(),
            ".tmp-0a1b".to_string(),
        ];
        for name in dead.iter().copied().chain(kept.iter().map(String::as_str)) {
            fs::create_dir_all(cache.path().join(name).join("lib")).unwrap();
        }
        clean_stale_temporaries(cache.path());
        assert!(dead.iter().all(|name| !cache.path().join(name).exists()));
        assert!(kept.iter().all(|name| cache.path().join(name).exists()));
    }

    #[test]
    fn paths() {
        assert!(safe_relative(Path::new("a/../b")).is_err());
        assert!(safe_relative(Path::new("/etc/passwd")).is_err());
        assert_eq!(
            safe_relative(Path::new("./a/b")).unwrap(),
            PathBuf::from("a/b")
        );
        assert!(stays_inside(Path::new("a/b/../c")));
        assert!(!stays_inside(Path::new("a/../../c")));
    }
}
