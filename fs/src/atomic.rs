//! A file written whole or not at all: its bytes go into a temporary file beside it, renamed
//! over it once complete, so a reader (another lfm on the node) never sees part of it and a
//! write that fails or is interrupted leaves the old file as it was.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use tempfile::NamedTempFile;

/// A temporary file in `dir`, removed when dropped unless persisted (`persist`, or
/// `into_parts` and the path's `persist`). Created with the mode `File::create` gives
/// (0666 less the umask), not tempfile's 0600: a pack or cache file written through it is
/// readable by whoever could read one written in place.
pub fn temporary_in(dir: &Path) -> io::Result<NamedTempFile> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(".lfm-")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
}

/// Write `path` through `write`, whole or not at all (an error from `write` leaves `path` as
/// it was, and no temporary file). `path`'s directory must exist.
pub fn write_atomically<E: From<io::Error>>(
    path: &Path,
    write: impl FnOnce(&mut File) -> Result<(), E>,
) -> Result<(), E> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut temporary = temporary_in(dir)?;
    write(temporary.as_file_mut())?;
    temporary.persist(path).map_err(io::Error::from)?;
    Ok(())
}

/// Write `bytes` as the whole of `path`, atomically (see [`write_atomically`]).
pub fn write_bytes_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomically(path, |file| file.write_all(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_write_replaces_the_file_whole_and_leaves_nothing_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("entry.json");
        std::fs::write(&path, b"old").unwrap();
        write_bytes_atomically(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(names_in(dir.path()), ["entry.json"]);
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_removes_its_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("entry.json");
        std::fs::write(&path, b"old").unwrap();
        let failed = write_atomically(&path, |file| {
            file.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        });
        assert_eq!(failed.unwrap_err().to_string(), "disk full");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(names_in(dir.path()), ["entry.json"]);
    }

    #[test]
    fn the_file_gets_the_mode_a_plain_write_gives() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (atomic, plain) = (dir.path().join("atomic"), dir.path().join("plain"));
        write_bytes_atomically(&atomic, b"x").unwrap();
        std::fs::write(&plain, b"x").unwrap();
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode();
        assert_eq!(mode(&atomic), mode(&plain));
    }

    #[test]
    fn the_temporary_goes_beside_the_file_whose_directory_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("entry");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        write_bytes_atomically(&path, b"x").unwrap();
        assert_eq!(names_in(&dir.path().join("sub")), ["entry"]);
        assert!(write_bytes_atomically(Path::new("/nonexistent/lfm/entry"), b"x").is_err());
    }
}
