//! Packs made of parts (docs/pack.md, "Parts"): one content-addressed tar.zst per
//! distribution, one for the function's own files (its modules, `run`, the pack manifest), one
//! for the interpreter of a self-contained pack, and a small parts manifest naming them.
//!
//! The same distribution files always give the same part (entries are sorted and normalised,
//! so the bytes and their SHA-256 are the same whichever function's pack wrote them): a node
//! that holds numpy's part for one function holds it for all. On the node each part is
//! unpacked once into the pack cache, compiled, and sealed read-only; a function's environment
//! is composed from symbolic links into the parts, atomically, under the same locks and leases
//! as whole packs, so eviction never removes a part that a composition in use links to.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use nix::fcntl::FlockArg;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cache::{self, PackLease, COMPLETE_MARKER, PARTS_LIST, USED_MARKER};
use crate::manifest::{Manifest, PackPython, MANIFEST_NAME};
use crate::pack::{totals_of, write_tar_zst, DistFiles, Entry, PackOptions, Source};
use crate::unpack::{self, UnpackError, UnpackOptions};

pub const PARTS_FORMAT: &str = "lfm-parts/1";
/// A parts manifest's file name ends so: `<sha256 of its bytes>.parts.json`.
pub const PARTS_SUFFIX: &str = ".parts.json";
/// Written into a composition when two parts hold the same path (which one won).
const NOTES_NAME: &str = ".lfm-compose-notes";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PartsManifest {
    pub format: String,
    pub python: PackPython,
    /// The targets the function part's pack manifest names.
    pub targets: Vec<String>,
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PartKind {
    Distribution,
    Function,
    Interpreter,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Part {
    pub kind: PartKind,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// SHA-256 of the part's bytes: its file is `<sha256>.tar.zst` beside the manifest.
    pub sha256: String,
    /// Compressed size: what a transfer moves.
    pub bytes: u64,
    pub files: u64,
    pub unpacked_bytes: u64,
}

/// Whether `path` names a parts manifest rather than an archive.
pub fn is_parts_manifest(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|name| name.to_string_lossy().ends_with(PARTS_SUFFIX))
}

/// The parts manifest at `path`, checked.
pub fn read_parts_manifest(path: &Path) -> Result<(PartsManifest, String)> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let manifest: PartsManifest = serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: not a parts manifest", path.display()))?;
    if manifest.format != PARTS_FORMAT {
        bail!(
            "{}: format {:?}, this lfm reads {PARTS_FORMAT}",
            path.display(),
            manifest.format
        );
    }
    for (index, part) in manifest.parts.iter().enumerate() {
        if part.sha256.len() != 64 || !part.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "{}: parts[{index}].sha256 is not 64 hex digits: {:?}",
                path.display(),
                part.sha256
            );
        }
    }
    Ok((manifest, hex(&Sha256::digest(&bytes))))
}

// ---- writing -------------------------------------------------------------------------------

/// Write `entries` as parts into `options.output_dir` (each only if no part of the same bytes
/// is there yet) and the parts manifest; (manifest path, bytes of all parts, its SHA-256).
pub(crate) fn write_parts(
    manifest: &Manifest,
    mut entries: BTreeMap<String, Entry>,
    dists: Vec<DistFiles>,
    options: &PackOptions,
) -> Result<(PathBuf, u64, String)> {
    let dir = &options.output_dir;
    let mut parts = Vec::new();
    for dist in dists {
        let own: BTreeMap<String, Entry> = dist
            .paths
            .iter()
            .filter_map(|path| entries.remove_entry(path))
            .collect();
        let name = dist.name.clone();
        parts.push(write_part(
            dir,
            PartKind::Distribution,
            name,
            Some(dist.version),
            None,
            &own,
            options,
        )?);
    }
    let interpreter: BTreeMap<String, Entry> = entries
        .keys()
        .filter(|path| path.starts_with("python/"))
        .cloned()
        .collect::<Vec<_>>()
        .into_iter()
        .filter_map(|path| entries.remove_entry(&path))
        .collect();
    if !interpreter.is_empty() {
        let version = Some(manifest.python.version.clone());
        parts.push(write_part(
            dir,
            PartKind::Interpreter,
            "python".into(),
            version,
            None,
            &interpreter,
            options,
        )?);
    }
    let manifest_bytes = serde_json::to_vec_pretty(manifest)?;
    let first = Some((MANIFEST_NAME, manifest_bytes.as_slice()));
    parts.push(write_part(
        dir,
        PartKind::Function,
        function_name(manifest),
        None,
        first,
        &entries,
        options,
    )?);
    let parts_manifest = PartsManifest {
        format: PARTS_FORMAT.into(),
        python: manifest.python.clone(),
        targets: manifest.targets.iter().map(|t| t.target.clone()).collect(),
        parts,
    };
    let total = parts_manifest.parts.iter().map(|p| p.bytes).sum();
    let bytes = serde_json::to_vec_pretty(&parts_manifest)?;
    let sha256 = hex(&Sha256::digest(&bytes));
    let path = dir.join(format!("{sha256}{PARTS_SUFFIX}"));
    lfm_fs::write_bytes_atomically(&path, &bytes)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok((path, total, sha256))
}

fn function_name(manifest: &Manifest) -> String {
    match manifest.targets.as_slice() {
        [] => "environment".into(),
        [one] => one.target.clone(),
        [first, rest @ ..] => format!("{} and {} more", first.target, rest.len()),
    }
}

fn write_part(
    dir: &Path,
    kind: PartKind,
    name: String,
    version: Option<String>,
    first: Option<(&str, &[u8])>,
    entries: &BTreeMap<String, Entry>,
    options: &PackOptions,
) -> Result<Part> {
    // Unchanged files give the same part: found by what they are, not compressed again.
    let key = first
        .is_none()
        .then(|| part_key(kind, &name, &version, entries, options));
    if let Some(part) = key.as_deref().and_then(|key| remembered_part(dir, key)) {
        return Ok(part);
    }
    let written = write_tar_zst(dir, first, entries, options, None)?;
    let sha256 = sha256_file(&written.tmp)?;
    let path = dir.join(format!("{sha256}.tar.zst"));
    // A part already there is the same bytes: ours is dropped, and its file with it.
    if !path.exists() {
        written
            .tmp
            .persist(&path)
            .with_context(|| format!("moving a part to {}", path.display()))?;
    }
    let totals = totals_of(entries);
    let part = Part {
        kind,
        name,
        version,
        sha256,
        bytes: written.bytes,
        files: totals.files + u64::from(first.is_some()),
        unpacked_bytes: totals.bytes + first.map_or(0, |(_, b)| b.len() as u64),
    };
    if let Some(key) = key {
        remember_part(dir, &key, &part);
    }
    Ok(part)
}

/// Where a store remembers which part the files of a distribution made.
const PART_INDEX: &str = ".lfm-part-index";

/// What a part's bytes follow from: its files' paths, sizes, modification times and link
/// targets, and the compression level.
fn part_key(
    kind: PartKind,
    name: &str,
    version: &Option<String>,
    entries: &BTreeMap<String, Entry>,
    options: &PackOptions,
) -> String {
    use std::os::unix::fs::MetadataExt;
    let mut hasher = blake3::Hasher::new();
    let header = format!("{kind:?}\0{name}\0{version:?}\0{}\0", options.level);
    hasher.update(header.as_bytes());
    for (path, entry) in entries {
        hasher.update(path.as_bytes());
        match &entry.source {
            Source::File(file) => {
                let (size, mtime, nanos) = fs::metadata(file)
                    .map(|m| (m.len(), m.mtime(), m.mtime_nsec()))
                    .unwrap_or_default();
                hasher.update(format!("\0f{size}.{mtime}.{nanos}.{}", entry.executable).as_bytes());
            }
            Source::Bytes(bytes) => {
                hasher.update(b"\0b");
                hasher.update(blake3::hash(bytes).as_bytes());
            }
            Source::Symlink(target) => {
                hasher.update(format!("\0l{}", target.display()).as_bytes());
            }
        }
        hasher.update(b"\n");
    }
    hasher.finalize().to_hex().to_string()
}

fn remembered_part(dir: &Path, key: &str) -> Option<Part> {
    let bytes = fs::read(dir.join(PART_INDEX).join(key)).ok()?;
    let part: Part = serde_json::from_slice(&bytes).ok()?;
    let blob = dir.join(format!("{}.tar.zst", part.sha256));
    let size = fs::metadata(blob).ok()?.len();
    (size == part.bytes).then_some(part)
}

/// Best effort: without the index the part is only compressed again next time.
fn remember_part(dir: &Path, key: &str, part: &Part) {
    let index = dir.join(PART_INDEX);
    let Ok(bytes) = serde_json::to_vec(part) else {
        return;
    };
    let _ = fs::create_dir_all(&index)
        .and_then(|()| lfm_fs::write_bytes_atomically(&index.join(key), &bytes));
}

pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            return Ok(hex(&hasher.finalize()));
        }
        hasher.update(&buffer[..read]);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ---- composing on the node -----------------------------------------------------------------

/// The environment the parts manifest at `manifest_path` describes, composed in the cache
/// (each part unpacked once, from `<sha256>.tar.zst` beside the manifest) and held: neither
/// the composition nor any part it links to is evicted while the lease lives.
pub fn compose_leased(
    manifest_path: &Path,
    options: &UnpackOptions,
) -> Result<PackLease, UnpackError> {
    let (manifest, hash) = read_parts_manifest(manifest_path)?;
    let store = manifest_path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(&options.cache)
        .with_context(|| format!("creating {}", options.cache.display()))?;
    let mut parts = Vec::with_capacity(manifest.parts.len());
    let mut extracted = false;
    for part in &manifest.parts {
        let (lease, new) = part_lease(store, part, options)?;
        extracted |= new;
        parts.push(lease);
    }
    let root = options.cache.join(&hash);
    for _ in 0..3 {
        let shared = cache::lock(
            &cache::lock_path(&options.cache, &hash),
            FlockArg::LockShared,
        )?;
        if root.join(COMPLETE_MARKER).exists() {
            unpack::touch(&root.join(USED_MARKER));
            if extracted {
                cache::evict(&options.cache, options.cache_max, Some(&root));
            }
            return Ok(cache::lease_with_parts(root, shared, parts));
        }
        drop(shared);
        // A composition is links: it adds nothing to evict for.
        compose_into_cache(&manifest, &hash, &root, options, manifest_path)?;
    }
    Err(anyhow!(
        "{}: composed and evicted three times",
        manifest_path.display()
    )
    .into())
}

/// One part unpacked in the cache and held; whether this call unpacked it.
fn part_lease(
    store: &Path,
    part: &Part,
    options: &UnpackOptions,
) -> Result<(PackLease, bool), UnpackError> {
    let root = options.cache.join(&part.sha256);
    let mut extracted = false;
    for _ in 0..3 {
        let lock_path = cache::lock_path(&options.cache, &part.sha256);
        let shared = cache::lock(&lock_path, FlockArg::LockShared)?;
        if root.join(COMPLETE_MARKER).exists() {
            unpack::touch(&root.join(USED_MARKER));
            return Ok((cache::lease(root, shared), extracted));
        }
        drop(shared);
        extract_part(store, part, options, &root)?;
        extracted = true;
    }
    Err(anyhow!(
        "part {} was evicted as soon as it was unpacked, three times",
        part.name
    )
    .into())
}

fn extract_part(
    store: &Path,
    part: &Part,
    options: &UnpackOptions,
    root: &Path,
) -> Result<(), UnpackError> {
    let blob = store.join(format!("{}.tar.zst", part.sha256));
    if !blob.exists() {
        return Err(anyhow!(
            "part {} ({}) is not in {}: fetch {}.tar.zst there first",
            part.name,
            part.sha256,
            store.display(),
            part.sha256
        )
        .into());
    }
    let actual = sha256_file(&blob).with_context(|| format!("reading {}", blob.display()))?;
    if actual != part.sha256 {
        // A corrupt part must not stay where the next fetch would take it for a good one.
        let _ = fs::remove_file(&blob);
        return Err(anyhow!(
            "part {}: {} is corrupt (SHA-256 {actual}, the manifest says {}); removed: fetch it again",
            part.name,
            blob.display(),
            part.sha256
        )
        .into());
    }
    let mut options = options.clone();
    if options.compile_with.is_none() {
        options.compile_with = python_on_path();
    }
    options.read_only = true;
    unpack::extract_into_cache(&blob, &options, &part.sha256, root)
}

/// Parts are read-only, so their modules are compiled once when unpacked, by the node's
/// `python3` (bytecode of another version is just not used).
fn python_on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("python3"))
        .find(|candidate| candidate.is_file())
}

fn compose_into_cache(
    manifest: &PartsManifest,
    hash: &str,
    root: &Path,
    options: &UnpackOptions,
    manifest_path: &Path,
) -> Result<(), UnpackError> {
    let cache_dir = &options.cache;
    let _exclusive = cache::lock(&cache::lock_path(cache_dir, hash), FlockArg::LockExclusive)?;
    if root.join(COMPLETE_MARKER).exists() {
        return Ok(());
    }
    unpack::clean_stale_temporaries(cache_dir);
    let tmp = cache_dir.join(format!(".tmp-{hash}-{}", std::process::id()));
    let _ = cache::remove_tree(&tmp);
    fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let sources: Vec<PathBuf> = manifest
        .parts
        .iter()
        .map(|p| PathBuf::from(&p.sha256))
        .collect();
    let mut notes = Vec::new();
    let linked = link_union(cache_dir, &tmp, Path::new(""), &sources, &mut notes).and_then(|()| {
        if !notes.is_empty() {
            fs::write(tmp.join(NOTES_NAME), notes.join("\n") + "\n")?;
        }
        let hashes: Vec<&str> = manifest.parts.iter().map(|p| p.sha256.as_str()).collect();
        fs::write(tmp.join(PARTS_LIST), hashes.join("\n") + "\n")?;
        fs::write(tmp.join(COMPLETE_MARKER), hash.as_bytes())?;
        unpack::touch(&tmp.join(USED_MARKER));
        Ok(())
    });
    if let Err(error) = linked {
        let _ = cache::remove_tree(&tmp);
        return Err(anyhow::Error::from(error)
            .context(format!("composing {}", manifest_path.display()))
            .into());
    }
    if root.exists() {
        cache::remove_tree(root)
            .with_context(|| format!("removing incomplete {}", root.display()))?;
    }
    fs::rename(&tmp, root).with_context(|| format!("moving {} into place", root.display()))?;
    unpack::log_extraction(cache_dir, hash, manifest_path);
    Ok(())
}

/// Link into `dest` (the directory at `relative` below the composition) the union of that
/// directory in each part of `sources` (part roots, relative to `cache`): an entry only one
/// part has is one symbolic link to it, whole; a directory several parts share (`site-packages`,
/// a namespace package such as `google/`) is made here and its entries linked the same way.
fn link_union(
    cache: &Path,
    dest: &Path,
    relative: &Path,
    sources: &[PathBuf],
    notes: &mut Vec<String>,
) -> io::Result<()> {
    let mut children: BTreeMap<OsString, Vec<&PathBuf>> = BTreeMap::new();
    for source in sources {
        for entry in fs::read_dir(cache.join(source).join(relative))? {
            let name = entry?.file_name();
            let marker = name == COMPLETE_MARKER || name == USED_MARKER || name == PARTS_LIST;
            if !(relative.as_os_str().is_empty() && marker) {
                children.entry(name).or_default().push(source);
            }
        }
    }
    let depth = relative.components().count();
    for (name, owners) in children {
        let child = relative.join(&name);
        let is_dir = |owner: &&PathBuf| {
            fs::symlink_metadata(cache.join(owner).join(&child)).is_ok_and(|m| m.is_dir())
        };
        if owners.len() > 1 && owners.iter().all(is_dir) {
            fs::create_dir(dest.join(&name))?;
            let owners: Vec<PathBuf> = owners.into_iter().cloned().collect();
            link_union(cache, &dest.join(&name), &child, &owners, notes)?;
            continue;
        }
        if owners.len() > 1 {
            notes.push(format!(
                "{}: in {} parts; {}'s is used",
                child.display(),
                owners.len(),
                owners[0].display()
            ));
        }
        let target = Path::new(&"../".repeat(depth + 1))
            .join(owners[0])
            .join(&child);
        if let Err(error) = std::os::unix::fs::symlink(&target, dest.join(&name)) {
            // A filesystem without symbolic links: this entry is copied instead, and said so.
            copy_tree(&cache.join(owners[0]).join(&child), &dest.join(&name))?;
            notes.push(format!("{}: copied, not linked ({error})", child.display()));
        }
    }
    Ok(())
}

/// Copy `from` (a file, a link or a directory tree) to `to`, links as links.
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(from)?;
    if meta.file_type().is_symlink() {
        return std::os::unix::fs::symlink(fs::read_link(from)?, to);
    }
    if !meta.is_dir() {
        return fs::copy(from, to).map(|_| ());
    }
    fs::create_dir(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        copy_tree(&entry.path(), &to.join(entry.file_name()))?;
    }
    Ok(())
}

/// Make every file and directory under `root` read-only, but `root` itself and its markers
/// (touched on each use).
pub(crate) fn seal(root: &Path) -> io::Result<()> {
    for entry in walkdir::WalkDir::new(root)
        .min_depth(1)
        .contents_first(true)
    {
        let entry = entry.map_err(io::Error::other)?;
        if entry.depth() == 1 && entry.file_name() == USED_MARKER {
            continue;
        }
        if entry.path_is_symlink() {
            continue;
        }
        let meta = entry.metadata().map_err(io::Error::other)?;
        let mode = meta.permissions().mode() & !0o222;
        fs::set_permissions(entry.path(), fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn a_directory_two_parts_share_is_made_and_the_rest_linked_whole() {
        let cache = tempfile::tempdir().unwrap();
        let root = cache.path();
        write(&root.join("a/site/ns/one.py"), "1");
        write(&root.join("a/site/alone/x.py"), "x");
        write(&root.join("b/site/ns/two.py"), "2");
        write(&root.join("b/site/alone.py"), "conflict-free");
        fs::create_dir(root.join("composed")).unwrap();
        let mut notes = Vec::new();
        let sources = [PathBuf::from("a"), PathBuf::from("b")];
        link_union(
            root,
            &root.join("composed"),
            Path::new(""),
            &sources,
            &mut notes,
        )
        .unwrap();
        let site = root.join("composed/site");
        assert!(!fs::symlink_metadata(&site)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(!fs::symlink_metadata(site.join("ns"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            fs::read_link(site.join("ns/one.py")).unwrap(),
            Path::new("../../../a/site/ns/one.py")
        );
        assert_eq!(fs::read_to_string(site.join("ns/two.py")).unwrap(), "2");
        assert_eq!(
            fs::read_link(site.join("alone")).unwrap(),
            Path::new("../../a/site/alone")
        );
        assert_eq!(fs::read_to_string(site.join("alone/x.py")).unwrap(), "x");
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn a_copied_tree_keeps_its_files_and_links() {
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("from/pkg/mod.py"), "m");
        std::os::unix::fs::symlink("pkg/mod.py", dir.path().join("from/link")).unwrap();
        copy_tree(&dir.path().join("from"), &dir.path().join("to")).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("to/pkg/mod.py")).unwrap(),
            "m"
        );
        assert_eq!(
            fs::read_link(dir.path().join("to/link")).unwrap(),
            Path::new("pkg/mod.py")
        );
    }
}
