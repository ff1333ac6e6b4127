//! The summaries file, searched by key: a run reads the index records around each key it
//! looks up and the entries it uses, never the whole file (52 MB for a scientific
//! site-packages, which every run once read and decoded whatever it analysed).
//!
//! Layout, integers little-endian: the entries' payloads (each a bincode `ModuleSummary`, in
//! any order); the index, one [`IndexRecord`] per entry sorted by key; the fan-out, [`FAN_OUT`]
//! counts (how many keys start with a byte below each value), which narrows a search to the
//! keys of one first byte; the head ([`FileHead`], bincode); the head's length (u64).

use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::CacheKey;

/// Bytes of one index record: key (32), offset (u64), length (u32), last used (u32), check (8).
pub(super) const RECORD_BYTES: u64 = 56;
/// Where `last_used` sits in an index record.
const LAST_USED_AT: u64 = 44;
const FAN_OUT: usize = 257;
/// Bytes of a file besides its entries: the fan-out, and at most this much of head.
pub(super) const FIXED_BYTES: u64 = FAN_OUT as u64 * 8 + 64;
/// Index records read at once while searching (~3.5 KB): a cache of ~9,000 entries has ~35
/// keys a first byte, so one read finds a key.
const SEARCH_BLOCK: u64 = 64;

#[derive(Serialize, Deserialize)]
struct FileHead {
    layout: String,
    generation: u32,
    entries: u64,
}

/// Where an entry's payload is, when a run last used it, and its check.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct IndexRecord {
    pub key: CacheKey,
    pub offset: u64,
    pub len: u32,
    pub last_used: u32,
    pub check: [u8; 8],
}

impl IndexRecord {
    fn to_bytes(self) -> [u8; RECORD_BYTES as usize] {
        let mut bytes = [0u8; RECORD_BYTES as usize];
        bytes[..32].copy_from_slice(&self.key);
        bytes[32..40].copy_from_slice(&self.offset.to_le_bytes());
        bytes[40..44].copy_from_slice(&self.len.to_le_bytes());
        bytes[44..48].copy_from_slice(&self.last_used.to_le_bytes());
        bytes[48..].copy_from_slice(&self.check);
        bytes
    }

    /// The record in `bytes` ([`RECORD_BYTES`] long: the index is read in whole records).
    fn from_bytes(bytes: &[u8]) -> IndexRecord {
        let u32_at =
            |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
        IndexRecord {
            key: bytes[..32].try_into().unwrap_or_default(),
            offset: u64::from_le_bytes(bytes[32..40].try_into().unwrap_or_default()),
            len: u32_at(40),
            last_used: u32_at(44),
            check: bytes[48..56].try_into().unwrap_or_default(),
        }
    }
}

/// The check of an entry: its key and payload, so that a damaged index record or payload
/// reads as a missing entry, never as another file's summary.
pub(super) fn entry_check(key: &CacheKey, payload: &[u8]) -> [u8; 8] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(key);
    hasher.update(payload);
    let mut check = [0u8; 8];
    check.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
    check
}

/// An open summaries file: its head and fan-out read, nothing else.
pub(super) struct SummaryFile {
    file: std::fs::File,
    size: u64,
    pub generation: u32,
    entries: u64,
    index_start: u64,
    fan: Vec<u64>,
}

impl SummaryFile {
    /// The file at `path` if it is one of `layout`; `None` when it is missing, of another
    /// layout or its head is damaged. Opened for writing where allowed (a run marks the
    /// entries it used in place).
    pub fn open(path: &Path, layout: &str) -> Option<SummaryFile> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .or_else(|_| std::fs::File::open(path))
            .ok()?;
        let size = file.metadata().ok()?.len();
        let head_len = u64::from_le_bytes(
            read_at(&file, size, size.checked_sub(8)?, 8)?
                .try_into()
                .ok()?,
        );
        let head_start = size.checked_sub(8)?.checked_sub(head_len)?;
        let head: FileHead = super::decode(&read_at(&file, size, head_start, head_len)?)?;
        if head.layout != layout {
            return None;
        }
        let fan_start = head_start.checked_sub(FAN_OUT as u64 * 8)?;
        let fan: Vec<u64> = read_at(&file, size, fan_start, FAN_OUT as u64 * 8)?
            .chunks_exact(8)
            .map(|bytes| u64::from_le_bytes(bytes.try_into().unwrap_or_default()))
            .collect();
        let ordered = fan[0] == 0 && fan.windows(2).all(|pair| pair[0] <= pair[1]);
        let index_bytes = head.entries.checked_mul(RECORD_BYTES)?;
        let index_start = fan_start.checked_sub(index_bytes)?;
        (ordered && fan[FAN_OUT - 1] == head.entries).then_some(SummaryFile {
            file,
            size,
            generation: head.generation,
            entries: head.entries,
            index_start,
            fan,
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The index record of `key` and its position in the index.
    pub fn find(&self, key: &CacheKey) -> Option<(u64, IndexRecord)> {
        let first = usize::from(key[0]);
        let (mut low, mut high) = (self.fan[first], self.fan[first + 1]);
        while low < high {
            let (start, end) = match high - low <= SEARCH_BLOCK {
                true => (low, high),
                false => {
                    let middle = low + (high - low) / 2;
                    (middle - SEARCH_BLOCK / 2, middle + SEARCH_BLOCK / 2)
                }
            };
            let records = self.records_between(start, end)?;
            let (first_key, last_key) = (&records.first()?.key, &records.last()?.key);
            if key < first_key {
                high = start;
            } else if key > last_key {
                low = end;
            } else {
                let found = records
                    .binary_search_by(|record| record.key.cmp(key))
                    .ok()?;
                return Some((start + found as u64, records[found]));
            }
        }
        None
    }

    /// The index records at positions `start..end`.
    fn records_between(&self, start: u64, end: u64) -> Option<Vec<IndexRecord>> {
        let at = self.index_start + start * RECORD_BYTES;
        let bytes = read_at(&self.file, self.size, at, (end - start) * RECORD_BYTES)?;
        Some(
            bytes
                .chunks_exact(RECORD_BYTES as usize)
                .map(IndexRecord::from_bytes)
                .collect(),
        )
    }

    /// Every index record, in key order (to write the file again).
    pub fn all_records(&self) -> Option<Vec<IndexRecord>> {
        self.records_between(0, self.entries)
    }

    /// The payload of `record`; `None` where it lies outside the file or fails its check.
    pub fn payload(&self, record: &IndexRecord) -> Option<Vec<u8>> {
        let bytes = read_at(&self.file, self.size, record.offset, u64::from(record.len))?;
        (record.offset < self.index_start && entry_check(&record.key, &bytes) == record.check)
            .then_some(bytes)
    }

    /// Write `generation` as the last use of the entries at `positions` (one 4-byte write
    /// each; a file replaced meanwhile by another run is no longer this one's path).
    pub fn mark_used(&self, positions: &[u64], generation: u32) -> std::io::Result<()> {
        for position in positions
            .iter()
            .filter(|&&position| position < self.entries)
        {
            let at = self.index_start + position * RECORD_BYTES + LAST_USED_AT;
            self.file.write_all_at(&generation.to_le_bytes(), at)?;
        }
        Ok(())
    }
}

/// `len` bytes at `start` of `file` (`size` bytes long); `None` past its end.
fn read_at(file: &std::fs::File, size: u64, start: u64, len: u64) -> Option<Vec<u8>> {
    let end = start.checked_add(len).filter(|&end| end <= size)?;
    let mut bytes = vec![0u8; usize::try_from(end - start).ok()?];
    file.read_exact_at(&mut bytes, start).ok()?;
    Some(bytes)
}

/// Writes a summaries file: payloads as they come, then the sorted index and the head.
pub(super) struct FileWriter {
    out: std::io::BufWriter<std::fs::File>,
    written: u64,
    index: Vec<IndexRecord>,
}

impl FileWriter {
    pub fn new(file: std::fs::File) -> FileWriter {
        FileWriter {
            out: std::io::BufWriter::with_capacity(1 << 16, file),
            written: 0,
            index: Vec::new(),
        }
    }

    /// The entry of `key`, its payload already checked where it was read.
    pub fn add(&mut self, key: CacheKey, last_used: u32, payload: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(payload.len())
            .map_err(|_| std::io::Error::other("a summary over 4 GiB"))?;
        self.out.write_all(payload)?;
        let check = entry_check(&key, payload);
        let offset = self.written;
        self.index.push(IndexRecord {
            key,
            offset,
            len,
            last_used,
            check,
        });
        self.written += payload.len() as u64;
        Ok(())
    }

    /// The index, fan-out and head after the payloads.
    pub fn finish(mut self, layout: &str, generation: u32) -> anyhow::Result<()> {
        self.index.sort_by_key(|record| record.key);
        self.index.dedup_by_key(|record| record.key);
        let mut fan = [0u64; FAN_OUT];
        for record in &self.index {
            self.out.write_all(&record.to_bytes())?;
            fan[usize::from(record.key[0]) + 1] += 1;
        }
        for byte in 1..FAN_OUT {
            fan[byte] += fan[byte - 1];
        }
        for count in fan {
            self.out.write_all(&count.to_le_bytes())?;
        }
        let head = bincode::serialize(&FileHead {
            layout: layout.to_string(),
            generation,
            entries: self.index.len() as u64,
        })?;
        self.out.write_all(&head)?;
        self.out.write_all(&(head.len() as u64).to_le_bytes())?;
        self.out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `count` entries whose keys all start with byte 7 (the search then goes
    /// through many blocks of one fan-out range), each payload its own number.
    fn crowded(path: &Path, count: u32) -> Vec<CacheKey> {
        let mut writer = FileWriter::new(std::fs::File::create(path).unwrap());
        let keys: Vec<CacheKey> = (0..count)
            .map(|n| {
                let mut key = *blake3::hash(&n.to_le_bytes()).as_bytes();
                key[0] = 7;
                key
            })
            .collect();
        for (n, key) in keys.iter().enumerate() {
            writer.add(*key, 1, &(n as u32).to_le_bytes()).unwrap();
        }
        writer.finish("test-layout", 3).unwrap();
        keys
    }

    #[test]
    fn every_key_is_found_through_many_search_blocks_and_absent_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summaries.bin");
        let keys = crowded(&path, 1000);
        let file = SummaryFile::open(&path, "test-layout").unwrap();
        assert_eq!(file.generation, 3);
        for (n, key) in keys.iter().enumerate() {
            let (_, record) = file.find(key).unwrap();
            assert_eq!(file.payload(&record).unwrap(), (n as u32).to_le_bytes());
        }
        let mut absent = keys[10];
        absent[31] ^= 1;
        assert!(file.find(&absent).is_none());
        assert!(file.find(&[8; 32]).is_none());
        assert!(SummaryFile::open(&path, "another-layout").is_none());
    }

    #[test]
    fn a_use_is_marked_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summaries.bin");
        let keys = crowded(&path, 100);
        let file = SummaryFile::open(&path, "test-layout").unwrap();
        let (position, _) = file.find(&keys[42]).unwrap();
        file.mark_used(&[position], 9).unwrap();
        let file = SummaryFile::open(&path, "test-layout").unwrap();
        assert_eq!(file.find(&keys[42]).unwrap().1.last_used, 9);
        assert_eq!(file.find(&keys[41]).unwrap().1.last_used, 1);
    }
}
