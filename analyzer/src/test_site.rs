//! Installed environments made up for tests: distributions with a RECORD, files set back in time.

use std::path::Path;
use std::time::SystemTime;

/// Install distribution `name` into `site`: its dist-info (METADATA, RECORD, top_level.txt)
/// and each (file, contents).
pub fn dist(site: &Path, name: &str, version: &str, files: &[(&str, &str)]) {
    let info = site.join(format!("{name}-{version}.dist-info"));
    std::fs::create_dir_all(&info).unwrap();
    let metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
    std::fs::write(info.join("METADATA"), metadata).unwrap();
    let record: String = files.iter().map(|(f, _)| format!("{f},,\n")).collect();
    std::fs::write(info.join("RECORD"), record).unwrap();
    std::fs::write(info.join("top_level.txt"), format!("{name}\n")).unwrap();
    for (file, contents) in files {
        let path = site.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
}

/// Every path under `dir` (and `dir`) modified at `at`: what an installed environment looks
/// like long after, and what lets a change made next show on any clock.
pub fn settle(dir: &Path, at: SystemTime) {
    for entry in walkdir::WalkDir::new(dir).contents_first(true) {
        let path = entry.unwrap().into_path();
        let file = std::fs::File::open(&path).unwrap();
        file.set_modified(at).unwrap();
    }
}
