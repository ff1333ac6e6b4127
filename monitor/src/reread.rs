//! Files read again on every sample, through a descriptor opened once.
//!
//! A sample reads about a dozen small kernel files (cgroup counters, /proc/PID/stat, status,
//! io, children). Opening one by path costs a path walk, a `statx` for the size hint, two
//! `read`s and a `close`; a serve call of 100 ms took ~120 `openat` this way. Kernel files
//! regenerate their text when read again from offset 0, so one `pread` per file is enough.
//! A /proc descriptor stays bound to the process it was opened for: once that process is
//! reaped it reads as an error, never as another process that reused the pid.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The whole text of `file`, read from its start.
pub fn reread(file: &File) -> io::Result<String> {
    let mut bytes = vec![0u8; 4096];
    let mut filled = 0;
    loop {
        if filled == bytes.len() {
            bytes.resize(bytes.len() * 2, 0);
        }
        match file.read_at(&mut bytes[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    bytes.truncate(filled);
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Files of one cgroup, each opened the first time it is read. A file that cannot be opened
/// (absent on this kernel) is remembered as such and not tried again.
#[derive(Default)]
pub struct KeptFiles {
    open: Mutex<HashMap<PathBuf, Option<File>>>,
}

impl KeptFiles {
    pub fn read(&self, path: &Path) -> Option<String> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let file = open
            .entry(path.to_path_buf())
            .or_insert_with(|| File::open(path).ok());
        match reread(file.as_ref()?) {
            Ok(text) => Some(text),
            Err(_) => {
                // The file went away (its cgroup was removed): read by path from now on.
                open.remove(path);
                std::fs::read_to_string(path).ok()
            }
        }
    }

    /// Write `text` to `path` through a new descriptor, kept for its later reads: cgroup v2's
    /// `memory.peak` takes a write as a reset of the peak that descriptor reads (Linux 6.12+).
    pub fn write_and_keep(&self, path: &Path, text: &str) -> io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        file.write_all(text.as_bytes())?;
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.insert(path.to_path_buf(), Some(file));
        Ok(())
    }

    /// Close every descriptor (before the directory holding the files is removed).
    pub fn close_all(&self) {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_file_reads_its_current_text_each_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counter");
        std::fs::write(&path, "1\n").unwrap();
        let kept = KeptFiles::default();
        assert_eq!(kept.read(&path).as_deref(), Some("1\n"));
        std::fs::write(&path, "20000\n").unwrap();
        assert_eq!(kept.read(&path).as_deref(), Some("20000\n"));
        assert_eq!(kept.read(&dir.path().join("absent")), None);
    }

    #[test]
    fn a_file_written_and_kept_is_read_through_the_new_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peak");
        std::fs::write(&path, "").unwrap();
        let kept = KeptFiles::default();
        assert_eq!(kept.read(&path).as_deref(), Some(""));
        kept.write_and_keep(&path, "7\n").unwrap();
        assert_eq!(kept.read(&path).as_deref(), Some("7\n"));
        assert!(kept
            .write_and_keep(&dir.path().join("absent"), "1")
            .is_err());
    }

    #[test]
    fn a_proc_file_is_read_again_from_its_start() {
        let file = File::open("/proc/self/stat").unwrap();
        let first = reread(&file).unwrap();
        let second = reread(&file).unwrap();
        let pid = std::process::id().to_string();
        assert!(first.starts_with(&pid) && second.starts_with(&pid));
    }

    #[test]
    fn text_longer_than_the_first_buffer_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long");
        let text = "key 123\n".repeat(2000);
        std::fs::write(&path, &text).unwrap();
        assert_eq!(reread(&File::open(&path).unwrap()).unwrap(), text);
    }

    #[test]
    fn a_reaped_process_file_reads_as_an_error() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let file = File::open(format!("/proc/{}/stat", child.id())).unwrap();
        child.wait().unwrap();
        assert!(reread(&file).is_err() || reread(&file).unwrap().is_empty());
    }
}
