//! Disk use of a run's sandbox directory: walked now and then, at most 5% of the time.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::report::Disk;

pub struct DiskMeter {
    path: PathBuf,
    last: Option<Disk>,
    next_walk: Instant,
}

impl DiskMeter {
    pub fn new(path: PathBuf) -> DiskMeter {
        DiskMeter {
            path,
            last: None,
            next_walk: Instant::now(),
        }
    }

    /// Walk the sandbox if it is time to; a big sandbox is costly to walk.
    pub fn maybe_measure(&mut self, min_gap: std::time::Duration) {
        if Instant::now() < self.next_walk {
            return;
        }
        let began = Instant::now();
        self.measure();
        self.next_walk = Instant::now() + (began.elapsed() * 20).max(min_gap);
    }

    pub fn measure(&mut self) {
        self.last = Some(measure(&self.path));
    }

    pub fn last(&self) -> Option<&Disk> {
        self.last.as_ref()
    }
}

fn measure(path: &Path) -> Disk {
    use std::os::unix::fs::MetadataExt;
    let mut disk = Disk {
        path: path.display().to_string(),
        ..Disk::default()
    };
    let entries = walkdir::WalkDir::new(path).follow_links(false).into_iter();
    for meta in entries.flatten().filter_map(|e| e.metadata().ok()) {
        if meta.is_file() {
            // Allocated blocks, not apparent size: a sparse file does not fill a disk.
            disk.bytes += meta.blocks() * 512;
            disk.files += 1;
            disk.largest_file_bytes = disk.largest_file_bytes.max(meta.len());
        }
    }
    disk
}
