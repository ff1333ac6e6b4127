//! Paths as hash keys: `Path`'s Hash walks components, which showed in whole-tree runs
//! (installed files, modules, directory listings), so maps here are keyed by bytes instead.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Whether `path` is written in the form its components would give back: no repeated or
/// trailing separator, no `.` component after the first. Nearly every path is.
fn is_plain(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && !bytes.ends_with(b"/")
        && !bytes.ends_with(b"/.")
        && !bytes.starts_with(b"./")
        && bytes != b"."
        && memchr::memmem::find(bytes, b"//").is_none()
        && memchr::memmem::find(bytes, b"/./").is_none()
}

/// Bytes that are equal exactly when the paths are (as Path compares them, by components).
/// Borrowed when the path is already plain.
pub fn path_key(path: &Path) -> Cow<'_, OsStr> {
    if is_plain(path.as_os_str().as_bytes()) {
        Cow::Borrowed(path.as_os_str())
    } else {
        Cow::Owned(path.components().collect::<PathBuf>().into_os_string())
    }
}

/// Whether `path` is absolute, plain and free of `..`: then it is already what
/// [`crate::dists::normalize_path`] would make of it.
pub fn is_normal(path: &Path) -> bool {
    let bytes = path.as_os_str().as_bytes();
    path.is_absolute()
        && is_plain(bytes)
        && !bytes.ends_with(b"/..")
        && memchr::memmem::find(bytes, b"/../").is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_keys_are_equal_exactly_when_paths_are() {
        let forms = [
            "/a/b.py",
            "/a//b.py",
            "/a/./b.py",
            "/a/b.py/",
            "/a/b.py/.",
            "/a/c.py",
            "/a/b",
            "a/b.py",
            "./a/b.py",
            ".",
            "./",
            "/",
            "//",
            "/a/../b.py",
        ];
        for x in forms {
            for y in forms {
                let (px, py) = (Path::new(x), Path::new(y));
                assert_eq!(path_key(px) == path_key(py), px == py, "{x:?} vs {y:?}");
            }
        }
    }
}
