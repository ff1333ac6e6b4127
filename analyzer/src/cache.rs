//! Persistent per-file cache of module summaries, keyed by content hash.
//!
//! Parsing dominates analysis time, and a summary depends only on the file's bytes (and on this
//! crate's extraction rules, hence the version in the key), so a second run re-parses only the
//! files whose content changed. One file holds the whole cache: reading thousands of small files
//! would cost more than the parse it saves.
//!
//! A run that adds a few summaries to a large cache appends them to a journal beside it
//! (`analyze-summaries.journal`) instead of writing the whole file again (52 MB for a
//! scientific site-packages, for one edited file). The journal is read after the file; a
//! record that is cut short or fails its checksum ends it. Once the journal outgrows a
//! quarter of the file, the next save writes the whole cache (temp file + rename) and
//! removes the journal.
//!
//! Entries age by generations: each run that writes the whole cache is one generation, and an
//! entry not used in the last [`KEPT_GENERATIONS`] of them is dropped (runs that only append
//! to the journal age nothing). Old versions of edited files
//! therefore leave the cache, while projects analysed now and then (sharing the default cache
//! directory) keep theirs.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use crate::extract::ModuleSummary;

/// Bump when extraction rules change: old entries then simply stop matching (stored results
/// too, whose request keys hash it: a result made by other rules is another result).
pub(crate) const EXTRACTOR_VERSION: &[u8] = b"lfm-extract-15";

pub type CacheKey = [u8; 32];

/// How many cache-writing runs an unused entry survives.
pub const KEPT_GENERATIONS: u32 = 32;

/// Names the layout of the cache file; a file of another layout is ignored and replaced.
const FILE_LAYOUT: &str = "lfm-summary-cache/3";

/// A journal record: the payload's length (u64 little-endian), the first 8 bytes of its
/// checksum ([`record_check`]), then the payload, `(CacheKey, ModuleSummary)` in bincode.
const RECORD_HEAD: usize = 16;

/// The cache file's head: its layout and generation. The file holds the head's length (u64
/// little-endian) and the head, then chunks of entries, each its length and a [`Chunk`]:
/// decoding ~50 MB of summaries took a core ~0.13 s, and chunks are decoded in parallel.
#[derive(serde::Serialize, serde::Deserialize)]
struct FileHead {
    layout: String,
    generation: u32,
}

/// Entries of the cache file, each with the generation that last used it.
type Chunk<S> = Vec<(CacheKey, u32, S)>;

/// Entries per chunk of the cache file (~3 MB of summaries).
const CHUNK_ENTRIES: usize = 512;

struct Entry {
    summary: Arc<ModuleSummary>,
    last_used: u32,
}

pub struct SummaryCache {
    path: PathBuf,
    journal: PathBuf,
    /// Bytes of the cache file and of the journal, as this run last read or wrote them.
    file_bytes: AtomicU64,
    journal_bytes: AtomicU64,
    /// The generation this run writes, one past the file's.
    generation: u32,
    entries: Mutex<HashMap<CacheKey, Entry>>,
    /// Keys added by this run and not saved yet.
    added: Mutex<Vec<CacheKey>>,
}

impl SummaryCache {
    /// Open the cache file in `dir`; a missing or unreadable cache starts empty.
    pub fn open(dir: &Path) -> SummaryCache {
        let path = dir.join("analyze-summaries.bin");
        let journal = dir.join("analyze-summaries.journal");
        let file_bytes = std::fs::metadata(&path).map_or(0, |meta| meta.len());
        let (generation, stored) = read_cache_file(&path).unwrap_or_default();
        let generation = generation.wrapping_add(1);
        let mut entries: HashMap<CacheKey, Entry> = stored
            .into_iter()
            .map(|(key, last_used, summary)| {
                let summary = Arc::new(summary);
                (key, Entry { summary, last_used })
            })
            .collect();
        let journal_bytes = read_journal(&journal, |key, summary| {
            let summary = Arc::new(summary);
            let last_used = generation;
            entries.insert(key, Entry { summary, last_used });
        });
        SummaryCache {
            path,
            journal,
            file_bytes: AtomicU64::new(file_bytes),
            journal_bytes: AtomicU64::new(journal_bytes),
            generation,
            entries: Mutex::new(entries),
            added: Mutex::new(Vec::new()),
        }
    }

    /// The default location: `$LFM_CACHE_DIR`, else `$XDG_CACHE_HOME/lfm`, else `~/.cache/lfm`.
    pub fn default_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("LFM_CACHE_DIR") {
            return Some(PathBuf::from(dir));
        }
        if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
            return Some(PathBuf::from(dir).join("lfm"));
        }
        std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("lfm"))
    }

    pub fn key(bytes: &[u8]) -> CacheKey {
        let mut hasher = blake3::Hasher::new();
        hasher.update(EXTRACTOR_VERSION);
        hasher.update(bytes);
        *hasher.finalize().as_bytes()
    }

    pub fn get(&self, key: &CacheKey) -> Option<Arc<ModuleSummary>> {
        let mut entries = self.entries.lock().ok()?;
        let entry = entries.get_mut(key)?;
        entry.last_used = self.generation;
        Some(entry.summary.clone())
    }

    pub fn insert(&self, key: CacheKey, summary: Arc<ModuleSummary>) {
        if let Ok(mut entries) = self.entries.lock() {
            let last_used = self.generation;
            entries.insert(key, Entry { summary, last_used });
            if let Ok(mut added) = self.added.lock() {
                added.push(key);
            }
        }
    }

    /// Save what was added: appended to the journal while it stays small beside the file,
    /// else the whole cache ([`SummaryCache::save_whole`]).
    pub fn save(&self) -> Result<()> {
        let added = match self.added.lock() {
            Ok(added) if added.is_empty() => return Ok(()),
            Ok(mut added) => std::mem::take(&mut *added),
            Err(_) => anyhow::bail!("cache lock poisoned"),
        };
        let journal = self.journal_bytes.load(Relaxed);
        let room = (self.file_bytes.load(Relaxed) / 4).saturating_sub(journal);
        if let Some(records) = self.journal_records(&added, room)? {
            self.append_to_journal(&records)?;
            self.journal_bytes
                .store(journal + records.len() as u64, Relaxed);
            return Ok(());
        }
        self.save_whole()
    }

    /// The journal records of `keys`' entries; `None` as soon as they would take more than
    /// `room` bytes (a first run adds every file: its records would be a second copy of the
    /// whole cache in memory).
    fn journal_records(&self, keys: &[CacheKey], room: u64) -> Result<Option<Vec<u8>>> {
        let entries = self
            .entries
            .lock()
            .map_err(|_| anyhow::anyhow!("cache lock poisoned"))?;
        let mut records = Vec::new();
        for key in keys {
            let Some(entry) = entries.get(key) else {
                continue;
            };
            let payload = bincode::serialize(&(key, entry.summary.as_ref()))?;
            if (records.len() + RECORD_HEAD + payload.len()) as u64 > room {
                return Ok(None);
            }
            records.extend_from_slice(&(payload.len() as u64).to_le_bytes());
            records.extend_from_slice(&record_check(&payload));
            records.extend_from_slice(&payload);
        }
        Ok(Some(records))
    }

    /// One write in append mode: runs that append at once do not interleave their records.
    fn append_to_journal(&self, records: &[u8]) -> Result<()> {
        let mut journal = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.journal)
            .with_context(|| format!("opening {}", self.journal.display()))?;
        journal
            .write_all(records)
            .with_context(|| format!("appending to {}", self.journal.display()))
    }

    /// Write the whole cache atomically, without the entries that no run
    /// of the last [`KEPT_GENERATIONS`] used, then remove the journal it now holds.
    fn save_whole(&self) -> Result<()> {
        let entries = self
            .entries
            .lock()
            .map_err(|_| anyhow::anyhow!("cache lock poisoned"))?;
        let oldest_kept = self.generation.saturating_sub(KEPT_GENERATIONS);
        let mut list: Vec<(CacheKey, u32, &ModuleSummary)> = entries
            .iter()
            .filter(|(_, entry)| entry.last_used >= oldest_kept)
            .map(|(key, entry)| (*key, entry.last_used, entry.summary.as_ref()))
            .collect();
        list.sort_by_key(|(key, _, _)| *key);
        let head = FileHead {
            layout: FILE_LAYOUT.to_string(),
            generation: self.generation,
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        lfm_fs::write_atomically(&self.path, |out| write_cache_file(out, &head, &list))
            .with_context(|| format!("writing {}", self.path.display()))?;
        // Records another run appended since this one opened the cache go too: a cache loses
        // nothing but time by that.
        let _ = std::fs::remove_file(&self.journal);
        let written = std::fs::metadata(&self.path).map_or(0, |meta| meta.len());
        self.file_bytes.store(written, Relaxed);
        self.journal_bytes.store(0, Relaxed);
        Ok(())
    }
}

/// Write the head and `entries` in chunks, each encoded on its own (at most one chunk's bytes
/// in memory beside the summaries).
fn write_cache_file(
    out: &mut std::fs::File,
    head: &FileHead,
    entries: &[(CacheKey, u32, &ModuleSummary)],
) -> Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
    let mut bytes = bincode::serialize(head)?;
    out.write_all(&(bytes.len() as u64).to_le_bytes())?;
    out.write_all(&bytes)?;
    for chunk in entries.chunks(CHUNK_ENTRIES) {
        bytes.clear();
        bincode::serialize_into(&mut bytes, chunk)?;
        out.write_all(&(bytes.len() as u64).to_le_bytes())?;
        out.write_all(&bytes)?;
    }
    out.flush()?;
    Ok(())
}

/// The cache file's generation and entries; `None` when it is missing, of another layout or
/// damaged anywhere (the cache then starts empty).
fn read_cache_file(path: &Path) -> Option<(u32, Chunk<ModuleSummary>)> {
    use rayon::prelude::*;
    use std::os::unix::fs::FileExt as _;
    let file = std::fs::File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    let read_at = |start: u64, len: u64| -> Option<Vec<u8>> {
        let end = start.checked_add(len).filter(|&end| end <= size)?;
        let mut bytes = vec![0u8; usize::try_from(end - start).ok()?];
        file.read_exact_at(&mut bytes, start).ok()?;
        Some(bytes)
    };
    let length_at = |start: u64| -> Option<u64> {
        Some(u64::from_le_bytes(read_at(start, 8)?.try_into().ok()?))
    };
    let head_len = length_at(0)?;
    let head: FileHead = decode(&read_at(8, head_len)?)?;
    if head.layout != FILE_LAYOUT {
        return None;
    }
    let mut spans = Vec::new();
    let mut at = 8 + head_len;
    while at < size {
        let len = length_at(at)?;
        spans.push((at + 8, len));
        at = at.checked_add(8 + len)?;
    }
    let chunks: Option<Vec<Chunk<ModuleSummary>>> = spans
        .par_iter()
        .map(|&(start, len)| decode(&read_at(start, len)?))
        .collect();
    Some((head.generation, chunks?.into_iter().flatten().collect()))
}

/// `bytes` decoded, bounded by their length (a damaged length must not ask for exabytes).
fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    use bincode::Options as _;
    bincode::options()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(bytes.len() as u64)
        .deserialize(bytes)
        .ok()
}

/// The checksum of a journal record's payload, under this layout and these extraction rules
/// (a journal written by another version ends at its first record).
fn record_check(payload: &[u8]) -> [u8; 8] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(FILE_LAYOUT.as_bytes());
    hasher.update(EXTRACTOR_VERSION);
    hasher.update(payload);
    let mut check = [0u8; 8];
    check.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
    check
}

/// Hand each whole, intact record of the journal at `path` to `add`, in order; returns the
/// journal's size (0 when there is none).
fn read_journal(path: &Path, mut add: impl FnMut(CacheKey, ModuleSummary)) -> u64 {
    let Ok(bytes) = std::fs::read(path) else {
        return 0;
    };
    let mut rest = &bytes[..];
    while rest.len() >= RECORD_HEAD {
        let (head, body) = rest.split_at(RECORD_HEAD);
        let len = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
        let Some(payload) = usize::try_from(len).ok().and_then(|len| body.get(..len)) else {
            break;
        };
        if head[8..] != record_check(payload) {
            break;
        }
        match bincode::deserialize::<(CacheKey, ModuleSummary)>(payload) {
            Ok((key, summary)) => add(key, summary),
            Err(_) => break,
        }
        rest = &body[payload.len()..];
    }
    bytes.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary_named(name: &str) -> Arc<ModuleSummary> {
        // A module that reads `name` and binds it: one name in the summary's table.
        Arc::new(crate::extract::summarize(&format!("{name} = {name}\n")))
    }

    /// Whether the cache holds `key`, without marking it used.
    fn holds(cache: &SummaryCache, key: &CacheKey) -> bool {
        cache.entries.lock().unwrap().contains_key(key)
    }

    /// One run that uses `used` and writes a generation (the whole cache).
    fn run_using(dir: &Path, used: &CacheKey, run: u32) {
        let cache = SummaryCache::open(dir);
        assert_eq!(cache.get(used).unwrap().name(0), "used");
        let fresh = SummaryCache::key(format!("fresh {run}").as_bytes());
        cache.insert(fresh, summary_named("fresh"));
        cache.save_whole().unwrap();
    }

    #[test]
    fn unused_entries_leave_after_the_kept_generations_and_used_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let (stale, used) = (SummaryCache::key(b"stale"), SummaryCache::key(b"used"));
        let cache = SummaryCache::open(dir.path());
        cache.insert(stale, summary_named("stale"));
        cache.insert(used, summary_named("used"));
        cache.save().unwrap();
        for run in 0..KEPT_GENERATIONS {
            run_using(dir.path(), &used, run);
        }
        assert!(holds(&SummaryCache::open(dir.path()), &stale));
        run_using(dir.path(), &used, KEPT_GENERATIONS);
        let cache = SummaryCache::open(dir.path());
        assert!(
            !holds(&cache, &stale),
            "unused for more than the kept generations"
        );
        assert!(holds(&cache, &used));
    }

    /// A cache with `count` entries keyed `"{prefix}{n}"`, saved as one file.
    fn saved_with(dir: &Path, prefix: &str, count: usize) -> Vec<CacheKey> {
        let cache = SummaryCache::open(dir);
        let keys: Vec<CacheKey> = (0..count)
            .map(|n| SummaryCache::key(format!("{prefix}{n}").as_bytes()))
            .collect();
        for key in &keys {
            cache.insert(*key, summary_named("used"));
        }
        cache.save().unwrap();
        keys
    }

    #[test]
    fn a_few_additions_go_to_the_journal_and_a_cut_record_ends_it() {
        let dir = tempfile::tempdir().unwrap();
        let old = saved_with(dir.path(), "old", 64);
        let file = dir.path().join("analyze-summaries.bin");
        let journal = dir.path().join("analyze-summaries.journal");
        let before = std::fs::read(&file).unwrap();
        let (first, second) = (SummaryCache::key(b"first"), SummaryCache::key(b"second"));
        for key in [first, second] {
            let cache = SummaryCache::open(dir.path());
            cache.insert(key, summary_named("used"));
            cache.save().unwrap();
        }
        assert_eq!(
            std::fs::read(&file).unwrap(),
            before,
            "the file is not rewritten"
        );
        let cache = SummaryCache::open(dir.path());
        assert!(old
            .iter()
            .chain([&first, &second])
            .all(|key| holds(&cache, key)));

        // A run that stopped while appending: the records before the cut still count.
        let length = std::fs::metadata(&journal).unwrap().len();
        let cut = std::fs::OpenOptions::new()
            .write(true)
            .open(&journal)
            .unwrap();
        cut.set_len(length - 3).unwrap();
        let cache = SummaryCache::open(dir.path());
        assert!(holds(&cache, &first));
        assert!(!holds(&cache, &second));
        assert!(old.iter().all(|key| holds(&cache, key)));
    }

    #[test]
    fn a_journal_that_outgrows_the_file_is_folded_into_it() {
        let dir = tempfile::tempdir().unwrap();
        let old = saved_with(dir.path(), "old", 8);
        let size = |name: &str| std::fs::metadata(dir.path().join(name)).map_or(0, |m| m.len());
        let first_size = size("analyze-summaries.bin");
        let mut added = Vec::new();
        for run in 0..8 {
            let key = SummaryCache::key(format!("new {run}").as_bytes());
            let cache = SummaryCache::open(dir.path());
            cache.insert(key, summary_named("used"));
            cache.save().unwrap();
            added.push(key);
            let (file, journal) = (
                size("analyze-summaries.bin"),
                size("analyze-summaries.journal"),
            );
            assert!(
                journal <= file / 4,
                "run {run}: journal {journal} beside {file}"
            );
        }
        assert!(
            size("analyze-summaries.bin") > first_size,
            "folded into the file"
        );
        let cache = SummaryCache::open(dir.path());
        assert!(old.iter().chain(&added).all(|key| holds(&cache, key)));
    }

    #[test]
    fn entries_over_several_chunks_come_back_and_a_cut_file_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        let keys = saved_with(dir.path(), "module", 2 * CHUNK_ENTRIES + 7);
        let cache = SummaryCache::open(dir.path());
        assert!(keys.iter().all(|key| holds(&cache, key)));
        let path = dir.path().join("analyze-summaries.bin");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        let cache = SummaryCache::open(dir.path());
        assert!(keys.iter().all(|key| !holds(&cache, key)));
    }

    #[test]
    fn a_cache_file_of_another_layout_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("analyze-summaries.bin"),
            b"not a cache at all",
        )
        .unwrap();
        let cache = SummaryCache::open(dir.path());
        assert!(cache.get(&SummaryCache::key(b"x")).is_none());
        cache.insert(SummaryCache::key(b"x"), summary_named("x"));
        cache.save().unwrap();
        assert!(SummaryCache::open(dir.path())
            .get(&SummaryCache::key(b"x"))
            .is_some());
    }
}
