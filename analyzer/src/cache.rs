//! Persistent per-file cache of module summaries, keyed by content hash.
//!
//! Parsing dominates analysis time, and a summary depends only on the file's bytes (and on this
//! crate's extraction rules, hence the version in the key), so a second run re-parses only the
//! files whose content changed. One file holds the whole cache: reading thousands of small files
//! would cost more than the parse it saves.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use crate::extract::ModuleSummary;

/// Bump when extraction rules change: old entries then simply stop matching.
const EXTRACTOR_VERSION: &[u8] = b"lfm-extract-5";

pub type CacheKey = [u8; 32];

pub struct SummaryCache {
    path: PathBuf,
    entries: Mutex<HashMap<CacheKey, Arc<ModuleSummary>>>,
    added: Mutex<usize>,
}

impl SummaryCache {
    /// Open the cache file in `dir`; a missing or unreadable cache starts empty.
    pub fn open(dir: &Path) -> SummaryCache {
        let path = dir.join("analyze-summaries.bin");
        let entries: HashMap<CacheKey, Arc<ModuleSummary>> = std::fs::read(&path)
            .ok()
            .and_then(|bytes| bincode::deserialize::<Vec<(CacheKey, ModuleSummary)>>(&bytes).ok())
            .map(|list| list.into_iter().map(|(k, v)| (k, Arc::new(v))).collect())
            .unwrap_or_default();
        SummaryCache {
            path,
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
        self.entries.lock().ok()?.get(key).cloned()
    }

    pub fn insert(&self, key: CacheKey, summary: Arc<ModuleSummary>) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(key, summary);
            if let Ok(mut added) = self.added.lock() {
                *added += 1;
            }
        }
    }

    /// Write the cache if anything was added, atomically (temp file + rename).
    pub fn save(&self) -> Result<()> {
        if self.added.lock().map(|a| *a == 0).unwrap_or(true) {
            return Ok(());
        }
        let entries = self
            .entries
            .lock()
            .map_err(|_| anyhow::anyhow!("cache lock poisoned"))?;
        let mut list: Vec<(&CacheKey, &ModuleSummary)> =
            entries.iter().map(|(k, v)| (k, v.as_ref())).collect();
        list.sort_by_key(|(k, _)| **k);
        let bytes = bincode::serialize(&list).context("serialising the cache")?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let tmp = dir.join(format!(".analyze-summaries.{}.tmp", std::process::id()));
        let mut file =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        file.write_all(&bytes)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("renaming to {}", self.path.display()))?;
        if let Ok(mut added) = self.added.lock() {
            *added = 0;
        }
        Ok(())
    }
}
