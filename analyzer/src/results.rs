//! Persistent cache of whole analysis results, for re-running an unchanged request.
//!
//! The summary cache ([`crate::cache`]) saves parsing; what remains of a warm run over a large
//! tree is computing and printing every closure again. When nothing the result depends on has
//! changed, the printed result itself can be reused. A result depends on:
//! - the request: targets, extra roots, working directory, environment argument, output format
//!   (the entry's file name is a hash of these);
//! - the environment: the interpreter's answer and the installed distributions (`env_key`);
//! - the files read: every source file loaded, by stat stamp (size, mtime, ctime, inode), taken
//!   before the file was read;
//! - the directories listed while resolving imports, by stamp: a module created or deleted
//!   anywhere the resolver looked changes its directory's mtime;
//! - for directory targets, the list of files found.
//!
//! Any difference and the entry is not replayed. When only source files changed, the entry is
//! still handed back ([`Previous`]): each target's output is stored with where it starts and
//! how long it is ([`TargetIndex`]), and the caller reuses those of targets that could not
//! read a changed file ([`crate::reuse`]) and computes the others, with the summary cache.
//! An entry is the zstd-compressed output, then the target index (bincode), then the loaded
//! modules' table ([`crate::module_table`], bincode, possibly empty), then the header (inputs,
//! outcome and the two sections' lengths, bincode), then the header's length (u64
//! little-endian): the output is compressed straight into the file as it is printed, and a
//! lookup reads only the header (and a run reads only its request's entry). The least recently
//! used entries beyond [`KEPT_RESULTS`], or beyond the analyze caches' budget in bytes
//! ([`crate::cache::budget`]), are deleted.

use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Names the layout of an entry; entries of another layout are ignored.
const LAYOUT: &str = "lfm-results/9";

/// How many results (one per distinct request) the cache keeps.
pub const KEPT_RESULTS: usize = 16;

pub use crate::kept_files::Stamp;

/// Everything a result was computed from, as recorded when it was computed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inputs {
    pub env_key: [u8; 32],
    /// The files the targets named or their directories held, in order.
    pub located: Vec<PathBuf>,
    /// Every source file read, with its stamp before reading (`None`: it could not be read).
    pub files: Vec<(PathBuf, Option<Stamp>)>,
    /// Each of `files`' summary key in the summary cache, where one was used.
    pub keys: Vec<Option<crate::cache::CacheKey>>,
    /// Every directory listed while resolving imports, with its stamp before listing.
    pub dirs: Vec<(PathBuf, Option<Stamp>)>,
    /// The installed Python files whose imports were followed ([`crate::installed_imports`])
    /// and that are not in `files`, with their stamps before reading: an edit made in place
    /// (no reinstall, so no RECORD changed) can change what installed code imports.
    pub installed: Vec<(PathBuf, Option<Stamp>)>,
}

/// What the command reports besides the output itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub warnings: u64,
    pub missing_required: bool,
}

#[derive(Serialize, Deserialize)]
struct Header {
    layout: String,
    inputs: Inputs,
    outcome: Outcome,
    /// Bytes of the [`TargetIndex`] after the compressed output.
    index_len: u64,
    /// Bytes of the [`crate::module_table::ModuleTable`] after the target index (0: none stored).
    table_len: u64,
}

/// Each target of a stored output, in output order: enough to copy its JSON into a later
/// output, with what it counts towards the command's closing lines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetIndex {
    /// (module, scope or [`NO_SCOPE`]) as the analysis numbered them.
    pub jobs: Vec<(u32, u32)>,
    /// Where each target's JSON starts in the output, and its length.
    pub spans: Vec<(u64, u64)>,
    /// Each target's outcome, an index into `outcomes` (most targets share the empty one).
    pub outcome_of: Vec<u32>,
    pub outcomes: Vec<TargetOutcome>,
    /// Per module, whether its whole-module closure was shared ([`crate::reuse::imported_flags`]).
    pub imported: Vec<bool>,
    /// The output's compressed frames ([`crate::frames`]).
    pub frames: Vec<crate::frames::Frame>,
}

/// The scope number of a module target in [`TargetIndex::jobs`].
pub const NO_SCOPE: u32 = u32::MAX;

/// What one target adds to the command's closing lines: its distinct warnings (file, line,
/// message), the required modules and distributions it misses, and whether it misses any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TargetOutcome {
    pub warnings: Vec<(String, u32, String)>,
    pub missing: Vec<String>,
    pub missing_required: bool,
}

/// Why a stored result was not replayed, and the entry when only source files changed.
pub struct Miss {
    pub why: String,
    pub previous: Option<Box<Previous>>,
}

/// An entry computed with the same environment, targets and directory listings as now, some of
/// whose source files changed since.
pub struct Previous {
    file: std::fs::File,
    compressed_len: u64,
    index_len: u64,
    /// The files it read, in the order of their module numbers, with their stamps then.
    pub files: Vec<(PathBuf, Option<Stamp>)>,
    /// Each file's summary key then ([`Inputs::keys`]).
    pub keys: Vec<Option<crate::cache::CacheKey>>,
    /// The installed files whose imports it followed ([`Inputs::installed`]), unchanged.
    pub installed: Vec<(PathBuf, Option<Stamp>)>,
    /// The directories it listed ([`Inputs::dirs`]), unchanged.
    pub dirs: Vec<(PathBuf, Option<Stamp>)>,
    table_len: u64,
}

impl Previous {
    /// Its loaded modules' table ([`crate::module_table::ModuleTable::to_bytes`]); `None` when none was stored or
    /// it cannot be read back.
    pub fn module_table(&self) -> Option<Vec<u8>> {
        if self.table_len == 0 {
            return None;
        }
        let mut section = vec![0u8; usize::try_from(self.table_len).ok()?];
        (&self.file)
            .seek(SeekFrom::Start(self.compressed_len + self.index_len))
            .ok()?;
        (&self.file).read_exact(&mut section).ok()?;
        Some(section)
    }

    /// Its target index; `None` when it cannot be read back.
    pub fn index(&self) -> Option<TargetIndex> {
        let mut section = vec![0u8; usize::try_from(self.index_len).ok()?];
        (&self.file)
            .seek(SeekFrom::Start(self.compressed_len))
            .ok()?;
        (&self.file).read_exact(&mut section).ok()?;
        bincode::deserialize(&section).ok()
    }

    /// Its frames, to copy into the next entry (read at offsets: the output's reader is not
    /// disturbed).
    pub fn frames(&self, index: &TargetIndex) -> std::io::Result<crate::frames::FrameSource> {
        let file = self.file.try_clone()?;
        Ok(crate::frames::FrameSource::new(file, index.frames.clone()))
    }

    /// A reader of its output (laid out in `index`'s frames), from the start.
    pub fn output(&self, index: &TargetIndex) -> std::io::Result<StoredOutput> {
        let file = self.file.try_clone()?;
        let frames = crate::frames::DecodedFrames::start(file, &index.frames, self.compressed_len)?;
        Ok(StoredOutput {
            frames,
            buffer: Arc::default(),
            start: 0,
            position: 0,
            retired: Vec::new(),
        })
    }
}

/// A stored output read forward, span by span.
pub struct StoredOutput {
    frames: crate::frames::DecodedFrames,
    /// Decoded bytes not yet consumed, from `buffer[start..]`; `position` is the output
    /// offset of `buffer[start]`. A frame at a time, its spans handed out without a copy:
    /// copying them (~570 MB for a site-packages) was most of the main thread's work when
    /// nearly every target's output is reused.
    buffer: Arc<Vec<u8>>,
    start: usize,
    position: u64,
    /// Frames read whose spans may still be held, until their buffers can serve again.
    retired: Vec<Arc<Vec<u8>>>,
}

/// Bytes of a stored output's frame, shared rather than copied; or bytes of their own.
#[derive(Debug, Clone, Default)]
pub struct SharedBytes {
    buffer: Arc<Vec<u8>>,
    range: std::ops::Range<usize>,
}

impl std::ops::Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buffer[self.range.clone()]
    }
}

impl From<Vec<u8>> for SharedBytes {
    fn from(bytes: Vec<u8>) -> SharedBytes {
        let range = 0..bytes.len();
        SharedBytes {
            buffer: Arc::new(bytes),
            range,
        }
    }
}

impl StoredOutput {
    /// The `len` bytes at `start`, which must not be before the end of the last span read.
    pub fn read_span(&mut self, start: u64, len: u64) -> std::io::Result<SharedBytes> {
        let skip = start.checked_sub(self.position).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "span behind the reader")
        })?;
        let (skip, len) = match (usize::try_from(skip), usize::try_from(len)) {
            (Ok(skip), Ok(len)) => (skip, len),
            _ => return Err(std::io::ErrorKind::InvalidInput.into()),
        };
        self.fill(skip + len)?;
        let from = self.start + skip;
        self.start = from + len;
        self.position = start + len as u64;
        Ok(SharedBytes {
            buffer: Arc::clone(&self.buffer),
            range: from..from + len,
        })
    }

    /// At least `wanted` unconsumed bytes in the buffer, or an error at the output's end.
    fn fill(&mut self, wanted: usize) -> std::io::Result<()> {
        while self.buffer.len() - self.start < wanted {
            let eof = || std::io::ErrorKind::UnexpectedEof.into();
            let frame = self.frames.next_frame().unwrap_or_else(|| Err(eof()))?;
            let next = match self.start == self.buffer.len() {
                // The common case: spans do not cross frames, so nothing is carried over.
                true => frame,
                false => {
                    let mut joined = self.buffer[self.start..].to_vec();
                    joined.extend_from_slice(&frame);
                    self.frames.give_back(frame);
                    joined
                }
            };
            let spent = std::mem::replace(&mut self.buffer, Arc::new(next));
            self.retired.push(spent);
            self.start = 0;
            self.give_back_retired();
        }
        Ok(())
    }

    /// The buffers of retired frames no span holds any more, back to the decoder.
    fn give_back_retired(&mut self) {
        let retired = std::mem::take(&mut self.retired);
        for frame in retired {
            match Arc::try_unwrap(frame) {
                Ok(buffer) => self.frames.give_back(buffer),
                Err(frame) => self.retired.push(frame),
            }
        }
    }
}

/// A reusable result: its outcome, and its entry file, from which the output is decompressed.
pub struct Hit {
    pub outcome: Outcome,
    file: std::fs::File,
    compressed_len: u64,
}

impl Hit {
    /// Write the stored output to `out`.
    pub fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        (&self.file).seek(SeekFrom::Start(0))?;
        let compressed = BufReader::new((&self.file).take(self.compressed_len));
        zstd::stream::copy_decode(compressed, out)
    }
}

pub struct ResultsCache {
    dir: PathBuf,
}

impl ResultsCache {
    pub fn new(cache_dir: &Path) -> ResultsCache {
        ResultsCache {
            dir: cache_dir.join("analyze-results"),
        }
    }

    fn entry_path(&self, request: &RequestKey) -> PathBuf {
        self.dir.join(format!("{}.bin", request.0))
    }

    /// The stored result for `request`, if every input it was computed from is unchanged;
    /// otherwise why not. `env_key` and `located` are the current ones; files and directories
    /// are stat'ed here.
    pub fn lookup(
        &self,
        request: &RequestKey,
        env_key: &[u8; 32],
        located: &[PathBuf],
    ) -> Result<Hit, Miss> {
        let miss = |why: &str| Miss {
            why: why.to_string(),
            previous: None,
        };
        let path = self.entry_path(request);
        let mut file = std::fs::File::open(&path).map_err(|_| miss("nothing stored"))?;
        let (header, compressed_len) =
            read_header(&mut file).ok_or_else(|| miss("damaged entry"))?;
        if let Some(changed) = changed_context(&header, env_key, located) {
            return Err(miss(&format!("{changed} changed")));
        }
        if let Some(changed) = changed_file(&header.inputs.installed) {
            return Err(miss(&format!("installed {changed} changed")));
        }
        if let Some(changed) = changed_file(&header.inputs.files) {
            return Err(Miss {
                why: format!("{changed} changed"),
                previous: Some(Box::new(Previous {
                    file,
                    compressed_len,
                    index_len: header.index_len,
                    files: header.inputs.files,
                    keys: header.inputs.keys,
                    installed: header.inputs.installed,
                    dirs: header.inputs.dirs,
                    table_len: header.table_len,
                })),
            });
        }
        // Recently used entries are the ones eviction keeps.
        let _ = file.set_modified(std::time::SystemTime::now());
        Ok(Hit {
            outcome: header.outcome,
            file,
            compressed_len,
        })
    }

    /// A writer for the output of `request`; [`ResultWriter::finish`] stores it.
    pub fn writer(&self, request: &RequestKey) -> Result<ResultWriter> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let (file, tmp) = lfm_fs::temporary_in(&self.dir)
            .with_context(|| format!("creating a file in {}", self.dir.display()))?
            .into_parts();
        Ok(ResultWriter {
            path: self.entry_path(request),
            tmp,
            dir: self.dir.clone(),
            encoder: Some(crate::frames::FrameWriter::new(file).context("starting zstd")?),
            written: 0,
            index: TargetIndex::default(),
            outcome_ids: Default::default(),
        })
    }
}

/// The header at the end of an entry, and the length of the compressed output before the
/// target index.
fn read_header(file: &mut std::fs::File) -> Option<(Header, u64)> {
    let end = file.seek(SeekFrom::End(0)).ok()?;
    let mut length = [0u8; 8];
    file.seek(SeekFrom::Start(end.checked_sub(8)?)).ok()?;
    file.read_exact(&mut length).ok()?;
    let header_len = u64::from_le_bytes(length);
    let compressed_len = end.checked_sub(8)?.checked_sub(header_len)?;
    file.seek(SeekFrom::Start(compressed_len)).ok()?;
    let mut header = vec![0u8; usize::try_from(header_len).ok()?];
    file.read_exact(&mut header).ok()?;
    let header = bincode::deserialize::<Header>(&header).ok()?;
    let compressed_len =
        (compressed_len.checked_sub(header.table_len)?).checked_sub(header.index_len)?;
    Some((header, compressed_len))
}

/// Compresses one result's output into its entry file as it is printed.
pub struct ResultWriter {
    path: PathBuf,
    /// Removed when dropped: a writer not finished (a failed write, a closed pipe) leaves no
    /// partial entry behind.
    tmp: lfm_fs::TempPath,
    dir: PathBuf,
    /// Taken by [`ResultWriter::finish`].
    encoder: Option<crate::frames::FrameWriter>,
    /// Bytes of output written so far: where the next target starts.
    written: u64,
    index: TargetIndex,
    outcome_ids: rustc_hash::FxHashMap<TargetOutcome, u32>,
}

impl ResultWriter {
    /// Output that is no target's (the document's head and tail).
    pub fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.written += bytes.len() as u64;
        match &mut self.encoder {
            Some(encoder) => encoder.write_other(bytes),
            None => Ok(()),
        }
    }

    /// Copy whole frames of a stored output where the same targets follow one another.
    pub fn copy_frames_from(&mut self, source: crate::frames::FrameSource) {
        if let Some(encoder) = &mut self.encoder {
            encoder.copy_from(source);
        }
    }

    /// The next target: after a comma or not, its JSON, what it counts, and its number in
    /// the stored output it was copied from, if it was.
    pub fn write_target(
        &mut self,
        comma: bool,
        json: &[u8],
        outcome: TargetOutcome,
        old: Option<u32>,
    ) -> std::io::Result<()> {
        let parts: &[&[u8]] = if comma { &[b",", json] } else { &[json] };
        let start = self.written + comma as u64;
        self.note_target(start, json.len() as u64, outcome);
        self.written = start + json.len() as u64;
        match &mut self.encoder {
            Some(encoder) => encoder.write_target(parts, old),
            None => Ok(()),
        }
    }

    /// The next target's output is at `start`, `len` bytes long, with `outcome`.
    fn note_target(&mut self, start: u64, len: u64, outcome: TargetOutcome) {
        let next = self.index.outcomes.len() as u32;
        let id = *self
            .outcome_ids
            .entry(outcome)
            .or_insert_with_key(|outcome| {
                self.index.outcomes.push(outcome.clone());
                next
            });
        self.index.spans.push((start, len));
        self.index.outcome_of.push(id);
    }

    /// Store the output with what it was computed from (whole or not at all), then delete the
    /// least recently used entries beyond [`KEPT_RESULTS`]. `jobs` and `imported` complete
    /// the target index ([`TargetIndex`]); a count of targets other than the ones noted
    /// stores no index (nor `table`, the loaded modules' [`crate::module_table::ModuleTable::to_bytes`], empty for
    /// none), so nothing will be reused from this result but the whole of it.
    pub fn finish(
        mut self,
        inputs: Inputs,
        (jobs, imported): (Vec<(u32, u32)>, Vec<bool>),
        table: Vec<u8>,
        outcome: Outcome,
    ) -> Result<()> {
        let encoder = self.encoder.take().context("already finished")?;
        let (mut file, frames) = encoder.finish().context("finishing zstd")?;
        let mut index = std::mem::take(&mut self.index);
        let mut table = table;
        if jobs.len() == index.spans.len() {
            index.jobs = jobs;
            index.imported = imported;
            index.frames = frames;
        } else {
            index = TargetIndex::default();
            table = Vec::new();
        }
        let index = bincode::serialize(&index).context("serialising the target index")?;
        let header = bincode::serialize(&Header {
            layout: LAYOUT.to_string(),
            inputs,
            outcome,
            index_len: index.len() as u64,
            table_len: table.len() as u64,
        })
        .context("serialising the result header")?;
        file.write_all(&index)
            .and_then(|_| file.write_all(&table))
            .and_then(|_| file.write_all(&header))
            .and_then(|_| file.write_all(&(header.len() as u64).to_le_bytes()))
            .with_context(|| format!("writing {}", self.tmp.display()))?;
        drop(file);
        self.tmp
            .persist(&self.path)
            .with_context(|| format!("renaming to {}", self.path.display()))?;
        let budget = crate::cache::budget().unwrap_or(crate::cache::DEFAULT_BUDGET);
        evict(&self.dir, KEPT_RESULTS, budget);
        Ok(())
    }
}

/// The first input other than a source file that differs from when the result was stored.
fn changed_context(header: &Header, env_key: &[u8; 32], located: &[PathBuf]) -> Option<String> {
    let inputs = &header.inputs;
    if header.layout != LAYOUT {
        return Some("the entry layout".into());
    }
    if &inputs.env_key != env_key {
        return Some("the environment".into());
    }
    if inputs.located != located {
        return Some("the located files".into());
    }
    changed_file(&inputs.dirs)
}

/// The first of `stamped` whose stamp differs from now (stat'ed on all cores: a whole
/// site-packages is ~8,500 files).
fn changed_file(stamped: &[(PathBuf, Option<Stamp>)]) -> Option<String> {
    use rayon::prelude::*;
    stamped
        .par_iter()
        .with_min_len(256)
        .find_first(|(path, stamp)| Stamp::of(path) != *stamp)
        .map(|(path, _)| path.display().to_string())
}

/// Delete all but the `keep` most recently used entries, and past `budget` bytes the least
/// recently used (the newest, just written, always stays).
fn evict(dir: &Path, keep: usize, budget: u64) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> = read
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".bin"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    entries.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    let mut total = 0u64;
    for (n, (_, bytes, path)) in entries.into_iter().enumerate() {
        total = total.saturating_add(bytes);
        if n > 0 && (n >= keep || total > budget) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Identifies a request: the hash of everything the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestKey(String);

impl RequestKey {
    pub fn new(parts: &[&[u8]]) -> RequestKey {
        let mut hasher = blake3::Hasher::new();
        hasher.update(LAYOUT.as_bytes());
        hasher.update(env!("CARGO_PKG_VERSION").as_bytes());
        hasher.update(crate::cache::EXTRACTOR_VERSION);
        for part in parts {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        RequestKey(hasher.finalize().to_hex()[..32].to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(dir: &Path, file: &Path) -> Inputs {
        Inputs {
            env_key: [7; 32],
            located: vec![file.to_path_buf()],
            files: vec![(file.to_path_buf(), Stamp::of(file))],
            keys: vec![None],
            dirs: vec![(dir.to_path_buf(), Stamp::of(dir))],
            installed: Vec::new(),
        }
    }

    fn store(cache: &ResultsCache, request: &RequestKey, inputs: Inputs, text: &str) {
        let mut writer = cache.writer(request).unwrap();
        writer.write_all(text.as_bytes()).unwrap();
        let outcome = Outcome {
            warnings: 2,
            missing_required: true,
        };
        writer
            .finish(inputs, (Vec::new(), Vec::new()), Vec::new(), outcome)
            .unwrap();
    }

    fn replay(hit: Hit) -> String {
        let mut out = Vec::new();
        hit.write_to(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_result_is_reused_only_while_its_inputs_are_unchanged() {
        let cache_dir = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let file = project.path().join("job.py");
        std::fs::write(&file, "import os\n").unwrap();
        let cache = ResultsCache::new(cache_dir.path());
        let request = RequestKey::new(&[b"job.py", b"json"]);
        let located = [file.clone()];
        let hit = |request: &RequestKey| match cache.lookup(request, &[7; 32], &located) {
            Ok(hit) => hit,
            Err(miss) => panic!("not reused: {}", miss.why),
        };
        store(
            &cache,
            &request,
            inputs(project.path(), &file),
            "{\"out\":1}\n",
        );

        let first = hit(&request);
        assert_eq!(first.outcome.warnings, 2);
        assert_eq!(replay(first), "{\"out\":1}\n");

        let other_request = RequestKey::new(&[b"job.py", b"table"]);
        assert!(cache.lookup(&other_request, &[7; 32], &located).is_err());
        let miss = |env: [u8; 32], located: &[PathBuf]| {
            cache
                .lookup(&request, &env, located)
                .err()
                .map(|miss| miss.why)
        };
        assert_eq!(miss([8; 32], &located).unwrap(), "the environment changed");
        assert_eq!(miss([7; 32], &[]).unwrap(), "the located files changed");

        // A new module where the resolver looked changes the directory's stamp.
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(project.path().join("json.py"), "").unwrap();
        let why = cache
            .lookup(&request, &[7; 32], &located)
            .err()
            .unwrap()
            .why;
        assert_eq!(why, format!("{} changed", project.path().display()));
        store(
            &cache,
            &request,
            inputs(project.path(), &file),
            "{\"out\":2}\n",
        );
        let hit = hit(&request);
        assert_eq!(replay(hit), "{\"out\":2}\n");

        // Same length, new content: the stamp (mtime, ctime) still differs.
        std::fs::write(&file, "import re\n").unwrap();
        assert!(cache.lookup(&request, &[7; 32], &located).is_err());
    }

    #[test]
    fn a_result_whose_source_files_changed_hands_back_its_targets() {
        let cache_dir = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let file = project.path().join("job.py");
        std::fs::write(&file, "import os\n").unwrap();
        let cache = ResultsCache::new(cache_dir.path());
        let request = RequestKey::new(&[b"job.py"]);
        let mut writer = cache.writer(&request).unwrap();
        let empty = TargetOutcome::default();
        let warned = TargetOutcome {
            warnings: vec![("job.py".into(), 3, "dynamic import".into())],
            missing: vec!["nope".into()],
            missing_required: true,
        };
        writer.write_all(b"[").unwrap();
        writer
            .write_target(false, b"AA", empty.clone(), None)
            .unwrap();
        writer
            .write_target(true, b"BBB", warned.clone(), None)
            .unwrap();
        writer.write_all(b"]").unwrap();
        let outcome = Outcome {
            warnings: 1,
            missing_required: true,
        };
        let keys = (vec![(0, NO_SCOPE), (0, 1)], vec![false]);
        writer
            .finish(inputs(project.path(), &file), keys, Vec::new(), outcome)
            .unwrap();

        std::fs::write(&file, "import re\n").unwrap();
        let miss = cache
            .lookup(&request, &[7; 32], std::slice::from_ref(&file))
            .err()
            .unwrap();
        let previous = miss.previous.expect("only a source file changed");
        let index = previous.index().unwrap();
        assert_eq!(index.jobs, [(0, NO_SCOPE), (0, 1)]);
        assert_eq!(index.outcomes[index.outcome_of[1] as usize], warned);
        let mut output = previous.output(&index).unwrap();
        assert_eq!(*output.read_span(1, 2).unwrap(), *b"AA");
        assert_eq!(*output.read_span(4, 3).unwrap(), *b"BBB");
        assert!(output.read_span(1, 2).is_err(), "spans are read forward");

        // A listed directory changed too: the entry is not handed back.
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(project.path().join("re.py"), "").unwrap();
        let miss = cache
            .lookup(&request, &[7; 32], std::slice::from_ref(&file))
            .err()
            .unwrap();
        assert!(miss.previous.is_none());
    }

    #[test]
    fn only_the_most_recently_used_results_are_kept() {
        let cache_dir = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let file = project.path().join("job.py");
        std::fs::write(&file, "").unwrap();
        let cache = ResultsCache::new(cache_dir.path());
        for n in 0..KEPT_RESULTS + 3 {
            let request = RequestKey::new(&[n.to_string().as_bytes()]);
            store(&cache, &request, inputs(project.path(), &file), "x");
        }
        let count = std::fs::read_dir(cache_dir.path().join("analyze-results"))
            .unwrap()
            .count();
        assert_eq!(count, KEPT_RESULTS);
    }

    #[test]
    fn past_the_budget_only_the_most_recent_results_stay() {
        let cache_dir = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let file = project.path().join("job.py");
        std::fs::write(&file, "").unwrap();
        let cache = ResultsCache::new(cache_dir.path());
        for n in 0..4u8 {
            let request = RequestKey::new(&[&[n]]);
            store(&cache, &request, inputs(project.path(), &file), "x");
            // Distinct mtimes, whatever the file system's clock.
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + n as u64);
            let entry = std::fs::File::options()
                .write(true)
                .open(cache.entry_path(&request));
            entry.unwrap().set_modified(at).unwrap();
        }
        let dir = cache_dir.path().join("analyze-results");
        let one = std::fs::metadata(cache.entry_path(&RequestKey::new(&[&[3]])))
            .unwrap()
            .len();
        evict(&dir, KEPT_RESULTS, 2 * one + one / 2);
        let kept = |n: u8| cache.entry_path(&RequestKey::new(&[&[n]])).exists();
        assert_eq!(
            (0..4).map(kept).collect::<Vec<_>>(),
            [false, false, true, true]
        );
        evict(&dir, KEPT_RESULTS, 0);
        assert!(kept(3), "the newest stays whatever the budget");
    }

    #[test]
    fn a_damaged_entry_is_a_miss_not_an_error() {
        let cache_dir = tempfile::tempdir().unwrap();
        let cache = ResultsCache::new(cache_dir.path());
        let request = RequestKey::new(&[b"x"]);
        std::fs::create_dir_all(cache_dir.path().join("analyze-results")).unwrap();
        for bytes in [
            &b""[..],
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
            b"\x04\0\0\0\0\0\0\0abcd",
            b"abcd\x04\0\0\0\0\0\0\0",
            b"\x09\0\0\0\0\0\0\0",
        ] {
            std::fs::write(cache.entry_path(&request), bytes).unwrap();
            assert!(cache.lookup(&request, &[0; 32], &[]).is_err());
        }
    }

    #[test]
    fn an_abandoned_result_leaves_no_file_behind() {
        let cache_dir = tempfile::tempdir().unwrap();
        let cache = ResultsCache::new(cache_dir.path());
        let request = RequestKey::new(&[b"abandoned"]);
        let mut writer = cache.writer(&request).unwrap();
        writer.write_all(b"{\"format\":").unwrap();
        drop(writer);
        let left: Vec<_> = std::fs::read_dir(cache_dir.path().join("analyze-results"))
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name())
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
        assert!(cache.lookup(&request, &[0; 32], &[]).is_err());
    }
}
