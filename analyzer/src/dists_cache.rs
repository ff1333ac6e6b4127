//! The distribution index of an environment, kept between lfm processes: reading every
//! RECORD of a site directory (~11,000 lines for pandas and scikit-learn) and indexing each
//! installed file was the most of what `lfm call` spent before starting the function.
//!
//! An index is reused only while none of what it was read from can have changed. Its inputs
//! are stamped before it is built (a change made while it is read shows at the next lookup):
//! each site directory and `conda-meta` (an installed, removed or upgraded distribution adds,
//! removes or renames an entry: the directory's mtime), each dist-info or egg-info directory
//! and every file directly in it (METADATA, RECORD, top_level.txt... edited in place: mtime and
//! size), and each conda-meta JSON file. The lfm executable is part of the key: another build
//! may lay the index out differently. A stamp too recent to tell a change made in the same
//! tick of a coarse file-system clock apart means: not stored this time. Anything unreadable
//! means: build it again.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::dists::DistIndex;
use crate::kept_files::{executable_hasher, read_stamped, settled, store_stamped, Stamp, Stamped};

/// The cache's directory under lfm's cache directory, and how many indexes it keeps (an
/// index is ~3 MB for pandas and scikit-learn).
pub const DIR: &str = "analyze-dists";
const KEPT: usize = 8;

/// The index of `site_dirs` (and `prefix`'s conda-meta), from `cache` while it holds.
pub fn build_cached(
    site_dirs: &[PathBuf],
    prefix: Option<&Path>,
    cache: Option<&Path>,
) -> DistIndex {
    let Some(dir) = cache else {
        return DistIndex::build(site_dirs, prefix);
    };
    let name = key(site_dirs, prefix);
    if let Some(index) = name.as_deref().and_then(|name| lookup(&dir.join(name))) {
        return index;
    }
    let stamped_at = SystemTime::now();
    let stamps = stamps(site_dirs, prefix);
    let index = DistIndex::build(site_dirs, prefix);
    if let Some(name) = name.filter(|_| settled(&stamps, stamped_at)) {
        store(dir, &name, &stamps, &index);
    }
    index
}

/// The file name of this environment's index: the lfm executable, the site directories and
/// the prefix. None where the executable cannot be described.
fn key(site_dirs: &[PathBuf], prefix: Option<&Path>) -> Option<String> {
    let mut hasher = executable_hasher()?;
    for dir in site_dirs.iter().map(PathBuf::as_path).chain(prefix) {
        hasher.update(&[1]);
        hasher.update(dir.as_os_str().as_encoded_bytes());
    }
    Some(format!("{}.bin", &hasher.finalize().to_hex()[..32]))
}

fn lookup(file: &Path) -> Option<DistIndex> {
    DistIndex::from_stored(read_stamped(file)?)
}

fn store(dir: &Path, name: &str, stamps: &[Stamped], index: &DistIndex) {
    if let Some(index) = index.to_stored() {
        store_stamped(dir, name, ".bin", KEPT, stamps, &index);
    }
}

fn stamps(site_dirs: &[PathBuf], prefix: Option<&Path>) -> Vec<Stamped> {
    inputs(site_dirs, prefix)
        .into_iter()
        .map(|path| {
            let at = Stamp::of(&path);
            (path, at)
        })
        .collect()
}

/// Everything [`DistIndex::build`] reads, and what it lists: an installed, removed or
/// upgraded distribution changes one of these.
pub fn inputs(site_dirs: &[PathBuf], prefix: Option<&Path>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for site in site_dirs {
        paths.push(site.clone());
        for entry in sorted_entries(site) {
            let name = entry.file_name().unwrap_or_default().to_string_lossy();
            if name.ends_with(".dist-info") || name.ends_with(".egg-info") {
                paths.extend(sorted_entries(&entry));
                paths.push(entry);
            }
        }
    }
    if let Some(meta) = prefix.map(|prefix| prefix.join("conda-meta")) {
        let json = sorted_entries(&meta)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "json"));
        paths.extend(json);
        paths.push(meta);
    }
    paths
}

/// A directory's entries (none for a file or a missing path), sorted.
fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dists::Owner;
    use std::time::{Duration, UNIX_EPOCH};

    const LONG_AGO: Duration = Duration::from_secs(1_000_000);

    /// A site directory with two distributions: `alpha` (a package) and `beta` (a module
    /// and a file it shares with alpha).
    fn site(root: &Path) -> PathBuf {
        let site = root.join("site-packages");
        dist(
            &site,
            "alpha",
            "1.0",
            &["alpha/__init__.py", "alpha/core.py", "shared.txt"],
        );
        dist(&site, "beta", "2.0", &["beta.py", "shared.txt"]);
        site
    }

    fn dist(site: &Path, name: &str, version: &str, files: &[&str]) {
        let files: Vec<(&str, &str)> = files.iter().map(|file| (*file, "")).collect();
        crate::test_site::dist(site, name, version, &files);
    }

    fn settle(dir: &Path) {
        crate::test_site::settle(dir, UNIX_EPOCH + LONG_AGO);
    }

    fn build(site: &Path, cache: &Path) -> DistIndex {
        build_cached(&[site.to_path_buf()], None, Some(cache))
    }

    fn stored_count(cache: &Path) -> usize {
        std::fs::read_dir(cache).map_or(0, |d| d.count())
    }

    fn from_cache(site: &Path, cache: &Path) -> Option<DistIndex> {
        lookup(&cache.join(key(&[site.to_path_buf()], None)?))
    }

    fn names(index: &DistIndex) -> Vec<String> {
        index
            .dists
            .iter()
            .map(|d| format!("{}=={}", d.name, d.version))
            .collect()
    }

    #[test]
    fn a_stored_index_answers_as_the_built_one() {
        let scratch = tempfile::tempdir().unwrap();
        let (site, cache) = (site(scratch.path()), scratch.path().join("cache"));
        settle(&site);
        let built = build(&site, &cache);
        let stored = from_cache(&site, &cache).expect("stored");
        assert_eq!(names(&stored), names(&built));
        for path in [
            "alpha/core.py",
            "beta.py",
            "shared.txt",
            "alpha",
            "missing.py",
            ".",
        ] {
            let path = site.join(path);
            assert_eq!(
                stored.owner_of(&path, "x"),
                built.owner_of(&path, "x"),
                "{path:?}"
            );
            assert_eq!(stored.owns(&path), built.owns(&path), "{path:?}");
        }
        assert_eq!(
            stored.owner_of(&site.join("shared.txt"), ""),
            Owner::Ambiguous(vec![0, 1])
        );
        assert_eq!(stored.owner_of(&site.join("alpha"), ""), Owner::One(0));
        assert_eq!(
            stored.owner_of(&site.join("nothing.py"), "beta"),
            Owner::One(1)
        );
        assert_eq!(stored.sorted_files(), built.sorted_files());
        assert_eq!(stored.by_name("Alpha"), Some(0));
    }

    #[test]
    fn an_index_is_reused_until_a_distribution_is_installed() {
        let scratch = tempfile::tempdir().unwrap();
        let (site, cache) = (site(scratch.path()), scratch.path().join("cache"));
        settle(&site);
        build(&site, &cache);
        assert_eq!(stored_count(&cache), 1);
        assert!(from_cache(&site, &cache).is_some());
        dist(&site, "gamma", "3.0", &["gamma.py"]);
        assert!(
            from_cache(&site, &cache).is_none(),
            "the site directory changed"
        );
        let again = build(&site, &cache);
        assert!(names(&again).contains(&"gamma==3.0".to_string()));
    }

    #[test]
    fn a_record_edited_in_place_is_read_again() {
        let scratch = tempfile::tempdir().unwrap();
        let (site, cache) = (site(scratch.path()), scratch.path().join("cache"));
        settle(&site);
        build(&site, &cache);
        // Neither the site nor the dist-info directory changes: only the file.
        let record = site.join("beta-2.0.dist-info/RECORD");
        std::fs::write(&record, "beta.py,,\nbeta_extra.py,,\n").unwrap();
        assert!(from_cache(&site, &cache).is_none());
        let again = build(&site, &cache);
        assert_eq!(
            again.owner_of(&site.join("beta_extra.py"), ""),
            Owner::One(1)
        );
    }

    #[test]
    fn a_removed_distribution_is_forgotten() {
        let scratch = tempfile::tempdir().unwrap();
        let (site, cache) = (site(scratch.path()), scratch.path().join("cache"));
        settle(&site);
        build(&site, &cache);
        std::fs::remove_dir_all(site.join("beta-2.0.dist-info")).unwrap();
        let again = build(&site, &cache);
        assert_eq!(names(&again), ["alpha==1.0"]);
    }

    #[test]
    fn inputs_changed_too_recently_to_tell_apart_are_not_stored() {
        let scratch = tempfile::tempdir().unwrap();
        let (site, cache) = (site(scratch.path()), scratch.path().join("cache"));
        let index = build(&site, &cache);
        assert_eq!(names(&index).len(), 2);
        assert_eq!(stored_count(&cache), 0);
    }

    #[test]
    fn a_damaged_index_is_built_again() {
        let scratch = tempfile::tempdir().unwrap();
        let (site, cache) = (site(scratch.path()), scratch.path().join("cache"));
        settle(&site);
        build(&site, &cache);
        let file = cache.join(key(std::slice::from_ref(&site), None).unwrap());
        let bytes = std::fs::read(&file).unwrap();
        for cut in [0, 10, bytes.len() / 2, bytes.len() - 3] {
            std::fs::write(&file, &bytes[..cut]).unwrap();
            assert!(from_cache(&site, &cache).is_none(), "cut at {cut}");
            let again = build(&site, &cache);
            assert_eq!(names(&again).len(), 2);
        }
        let mut flipped = bytes.clone();
        let last = flipped.len() - 20;
        flipped[last] ^= 0xff;
        std::fs::write(&file, &flipped).unwrap();
        let _ = from_cache(&site, &cache); // any answer but a panic
    }
}
