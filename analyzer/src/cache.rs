//! Persistent per-file cache of module summaries, keyed by content hash.
//!
//! Parsing dominates analysis time, and a summary depends only on the file's bytes (and on this
//! crate's extraction rules, hence the version in the key), so a second run re-parses only the
//! files whose content changed. One file holds the whole cache: reading thousands of small files
//! would cost more than the parse it saves.
//!
//! Entries age by generations: each run that writes the cache is one generation, and an entry
//! not used in the last [`KEPT_GENERATIONS`] of them is dropped. Old versions of edited files
//! therefore leave the cache, while projects analysed now and then (sharing the default cache
//! directory) keep theirs.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use crate::extract::ModuleSummary;

/// Bump when extraction rules change: old entries then simply stop matching (stored results
/// too, whose request keys hash it: a result made by other rules is another result).
pub(crate) const EXTRACTOR_VERSION: &[u8] = b"lfm-extract-14";

pub type CacheKey = [u8; 32];

/// How many cache-writing runs an unused entry survives.
pub const KEPT_GENERATIONS: u32 = 32;

/// Names the layout of the cache file; a file of another layout is ignored and replaced.
const FILE_LAYOUT: &str = "lfm-summary-cache/2";

/// The cache file: its generation, and each entry with the generation that last used it.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct CacheFile<S> {
    layout: String,
    generation: u32,
    entries: Vec<(CacheKey, u32, S)>,
}

struct Entry {
    summary: Arc<ModuleSummary>,
    last_used: u32,
}

pub struct SummaryCache {
    path: PathBuf,
    /// The generation this run writes, one past the file's.
    generation: u32,
    entries: Mutex<HashMap<CacheKey, Entry>>,
    added: Mutex<usize>,
}

impl SummaryCache {
    /// Open the cache file in `dir`; a missing or unreadable cache starts empty.
    pub fn open(dir: &Path) -> SummaryCache {
        let path = dir.join("analyze-summaries.bin");
        // Decoded as read: the file's bytes never sit in memory beside the summaries.
        let file: CacheFile<ModuleSummary> = std::fs::File::open(&path)
            .ok()
            .and_then(|file| {
                use bincode::Options as _;
                // Bounded by the file's size: a damaged length must not ask for exabytes.
                let size = file.metadata().ok()?.len();
                let reader = std::io::BufReader::with_capacity(1 << 16, file);
                bincode::options()
                    .with_fixint_encoding()
                    .allow_trailing_bytes()
                    .with_limit(size)
                    .deserialize_from::<_, CacheFile<ModuleSummary>>(reader)
                    .ok()
            })
            .filter(|file| file.layout == FILE_LAYOUT)
            .unwrap_or_default();
        let entries = file
            .entries
            .into_iter()
            .map(|(key, last_used, summary)| {
                let summary = Arc::new(summary);
                (key, Entry { summary, last_used })
            })
            .collect();
        SummaryCache {
            path,
            generation: file.generation.wrapping_add(1),
            entries: Mutex::new(entries),
            added: Mutex::new(0),
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
                *added += 1;
            }
        }
    }

    /// Write the cache if anything was added, atomically (temp file + rename), without the
    /// entries that no run of the last [`KEPT_GENERATIONS`] used.
    pub fn save(&self) -> Result<()> {
        if self.added.lock().map(|a| *a == 0).unwrap_or(true) {
            return Ok(());
        }
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
        let file = CacheFile {
            layout: FILE_LAYOUT.to_string(),
            generation: self.generation,
            entries: list,
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let tmp = dir.join(format!(".analyze-summaries.{}.tmp", std::process::id()));
        let written = std::fs::File::create(&tmp)
            .map_err(anyhow::Error::from)
            .and_then(|out| {
                // Encoded as written: no second copy of the whole cache in memory.
                let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
                bincode::serialize_into(&mut out, &file)?;
                out.flush()?;
                Ok(())
            });
        if let Err(error) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(error.context(format!("writing {}", tmp.display())));
        }
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("renaming to {}", self.path.display()))?;
        if let Ok(mut added) = self.added.lock() {
            *added = 0;
        }
        Ok(())
    }
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

    /// One run that uses `used` and writes a generation (it adds something new).
    fn run_using(dir: &Path, used: &CacheKey, run: u32) {
        let cache = SummaryCache::open(dir);
        assert_eq!(cache.get(used).unwrap().name(0), "used");
        let fresh = SummaryCache::key(format!("fresh {run}").as_bytes());
        cache.insert(fresh, summary_named("fresh"));
        cache.save().unwrap();
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
