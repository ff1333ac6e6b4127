//! The journal beside the summaries file: summaries added by runs since the file was last
//! written, appended as records. Opening it reads each record's head and key, not its
//! summary; a record is read, and checked, when a run looks its key up.
//!
//! A record: the payload's length (u64 little-endian), its check ([`record_check`], 8 bytes),
//! the key (32 bytes), then the payload (a bincode `ModuleSummary`). A record cut short ends
//! the journal; one that fails its check (a damaged record, or one of another layout) is a
//! missing entry.

use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use anyhow::{Context, Result};
use rustc_hash::FxHashMap as HashMap;

use super::CacheKey;

pub(super) const RECORD_HEAD: u64 = 48;

/// Where a record's payload is, and its check.
#[derive(Clone, Copy)]
pub(super) struct JournalRecord {
    pub offset: u64,
    pub len: u64,
    check: [u8; 8],
}

#[derive(Default)]
pub(super) struct Journal {
    file: Option<std::fs::File>,
    pub records: HashMap<CacheKey, JournalRecord>,
    /// Its bytes as read (the journal's size when it was opened).
    pub bytes: u64,
}

impl Journal {
    /// The heads of the journal at `path` (none when it is missing).
    pub fn open(path: &Path) -> Journal {
        let Ok(file) = std::fs::File::open(path) else {
            return Journal::default();
        };
        let size = file.metadata().map_or(0, |meta| meta.len());
        let mut records = HashMap::default();
        let mut at = 0u64;
        let mut head = [0u8; RECORD_HEAD as usize];
        while at + RECORD_HEAD <= size && file.read_exact_at(&mut head, at).is_ok() {
            let len = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
            let offset = at + RECORD_HEAD;
            let Some(end) = offset.checked_add(len).filter(|&end| end <= size) else {
                break;
            };
            let key: CacheKey = head[16..].try_into().unwrap_or_default();
            let check = head[8..16].try_into().unwrap_or_default();
            records.insert(key, JournalRecord { offset, len, check });
            at = end;
        }
        Journal {
            file: Some(file),
            records,
            bytes: size,
        }
    }

    /// The payload of `key`'s record, if it has one that passes its check.
    pub fn payload(&self, key: &CacheKey, layout: &str) -> Option<Vec<u8>> {
        let record = self.records.get(key)?;
        let mut bytes = vec![0u8; usize::try_from(record.len).ok()?];
        self.file
            .as_ref()?
            .read_exact_at(&mut bytes, record.offset)
            .ok()?;
        (record_check(layout, key, &bytes) == record.check).then_some(bytes)
    }
}

/// The record of `key` and `payload`, appended to `records`.
pub(super) fn add_record(records: &mut Vec<u8>, layout: &str, key: &CacheKey, payload: &[u8]) {
    records.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    records.extend_from_slice(&record_check(layout, key, payload));
    records.extend_from_slice(key);
    records.extend_from_slice(payload);
}

/// One write in append mode: runs that append at once do not interleave their records.
pub(super) fn append(path: &Path, records: &[u8]) -> Result<()> {
    let mut journal = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    journal
        .write_all(records)
        .with_context(|| format!("appending to {}", path.display()))
}

/// The check of a record, under this layout and these extraction rules (a record written by
/// another version fails it).
fn record_check(layout: &str, key: &CacheKey, payload: &[u8]) -> [u8; 8] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(layout.as_bytes());
    hasher.update(super::EXTRACTOR_VERSION);
    hasher.update(key);
    hasher.update(payload);
    let mut check = [0u8; 8];
    check.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
    check
}
