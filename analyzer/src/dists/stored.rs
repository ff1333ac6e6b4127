//! A [`DistIndex`] as the dists cache keeps it (dists_cache.rs): the distributions without
//! their file lists, and who owns each file and directory as two sorted tables. Reading it
//! back copies each table's text once; the hash maps the index is built with cost an
//! allocation and an insertion per installed file (~11,000 for pandas and scikit-learn), which
//! made reading them back about as slow as building them.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;

use serde::{Deserialize, Serialize};

use super::{DistIndex, Distribution};

#[derive(Serialize, Deserialize)]
pub struct StoredIndex {
    dists: Vec<Distribution>,
    by_top_level: HashMap<String, BTreeSet<u32>>,
    by_name: HashMap<String, u32>,
    normalized_names: Vec<String>,
    problems: Vec<String>,
    files: PathTable,
    dirs: PathTable,
}

/// (path, owner) pairs sorted by path, an owner's pairs in the order the map held them:
/// the paths' text end to end, where each ends, and its owner.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct PathTable {
    text: String,
    ends: Vec<u32>,
    owners: Vec<u32>,
}

impl PathTable {
    /// None when a path is not UTF-8 or the text outgrows u32 offsets: not stored then.
    fn from_pairs<'a>(pairs: impl Iterator<Item = (&'a OsStr, u32)>) -> Option<PathTable> {
        let mut pairs: Vec<(&str, u32)> = pairs
            .map(|(path, owner)| Some((path.to_str()?, owner)))
            .collect::<Option<_>>()?;
        // Stable: the owners of one path keep their order.
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        let mut table = PathTable::default();
        for (path, owner) in pairs {
            table.text.push_str(path);
            table.ends.push(u32::try_from(table.text.len()).ok()?);
            table.owners.push(owner);
        }
        Some(table)
    }

    fn path(&self, at: usize) -> &[u8] {
        let start = if at == 0 {
            0
        } else {
            self.ends[at - 1] as usize
        };
        &self.text.as_bytes()[start..self.ends[at] as usize]
    }

    /// Whether some path starts with the bytes `prefix`.
    pub fn has_prefix(&self, prefix: &[u8]) -> bool {
        let first = partition_point(self.ends.len(), |at| self.path(at) < prefix);
        first < self.ends.len() && self.path(first).starts_with(prefix)
    }

    /// The owners of `path`, None when it has none.
    pub fn lookup(&self, path: &OsStr) -> Option<Vec<u32>> {
        let key = path.as_encoded_bytes();
        let first = partition_point(self.ends.len(), |at| self.path(at) < key);
        let owners: Vec<u32> = (first..self.ends.len())
            .take_while(|&at| self.path(at) == key)
            .map(|at| self.owners[at])
            .collect();
        (!owners.is_empty()).then_some(owners)
    }

    /// Every (path, owner) pair.
    pub fn pairs(&self) -> impl Iterator<Item = (&OsStr, u32)> {
        (0..self.ends.len()).map(|at| {
            let text = std::str::from_utf8(self.path(at)).unwrap_or_default();
            (OsStr::new(text), self.owners[at])
        })
    }

    /// Whether the table is well formed (a damaged entry must not panic a lookup).
    fn is_sound(&self) -> bool {
        let text = self.text.len();
        self.ends.len() == self.owners.len()
            && self.ends.windows(2).all(|w| w[0] <= w[1])
            && self.ends.last().is_none_or(|&end| end as usize <= text)
            && (0..self.ends.len()).all(|at| std::str::from_utf8(self.path(at)).is_ok())
    }
}

/// The first index in 0..len for which `before` is false (`before` is true, then false).
fn partition_point(len: usize, before: impl Fn(usize) -> bool) -> usize {
    let (mut low, mut high) = (0, len);
    while low < high {
        let middle = low + (high - low) / 2;
        if before(middle) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    low
}

impl DistIndex {
    /// This index as the cache keeps it; None when it cannot be (a path that is not UTF-8).
    pub fn to_stored(&self) -> Option<StoredIndex> {
        let (files, dirs) = match &self.stored {
            Some((files, dirs)) => (files.clone(), dirs.clone()),
            None => {
                let files = self.by_file.iter().flat_map(|(path, owners)| {
                    owners.iter().map(move |&owner| (path.as_os_str(), owner))
                });
                let dirs = self.by_dir.iter().flat_map(|(path, owners)| {
                    owners.iter().map(move |&owner| (path.as_os_str(), owner))
                });
                (PathTable::from_pairs(files)?, PathTable::from_pairs(dirs)?)
            }
        };
        let dists = self
            .dists
            .iter()
            .map(|dist| Distribution {
                files: Vec::new(),
                ..dist.clone()
            })
            .collect();
        Some(StoredIndex {
            dists,
            by_top_level: self.by_top_level.clone(),
            by_name: self.by_name.clone(),
            normalized_names: self.normalized_names.clone(),
            problems: self.problems.clone(),
            files,
            dirs,
        })
    }

    /// The index a stored one describes; None when it is damaged.
    pub fn from_stored(stored: StoredIndex) -> Option<DistIndex> {
        let count = stored.dists.len();
        let known = |owners: &[u32]| owners.iter().all(|&id| (id as usize) < count);
        let sound = stored.files.is_sound()
            && stored.dirs.is_sound()
            && known(&stored.files.owners)
            && known(&stored.dirs.owners)
            && stored.normalized_names.len() == count
            && stored.by_name.values().all(|&id| (id as usize) < count)
            && stored
                .by_top_level
                .values()
                .all(|ids| ids.iter().all(|&id| (id as usize) < count));
        sound.then(|| DistIndex {
            dists: stored.dists,
            by_top_level: stored.by_top_level,
            by_name: stored.by_name,
            normalized_names: stored.normalized_names,
            problems: stored.problems,
            stored: Some((stored.files, stored.dirs)),
            ..DistIndex::default()
        })
    }
}
