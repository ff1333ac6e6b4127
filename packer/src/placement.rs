//! Where each installed file goes in a pack. The environment's prefix maps to `env/`; a site
//! directory outside it (a base Python's site-packages under `--system-site-packages`, the
//! user site, a `.pth` or `PYTHONPATH` directory, an editable project's source directory) maps
//! to the pack's own site directory, so that everything the interpreter imported from lies on
//! the pack's path, with its dist-info beside it for importlib.metadata.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use lfm_analyzer::dists::Distribution;
use lfm_analyzer::interpreter::Interpreter;

use crate::manifest::Origin;

pub(crate) struct Placement {
    /// (source directory, archive directory), the longest source first.
    roots: Vec<(PathBuf, String)>,
    /// The pack's own site directory, e.g. `env/lib/python3.11/site-packages`.
    pub(crate) site: String,
    prefix: PathBuf,
    /// The interpreter's site directories, the longest first.
    site_dirs: Vec<PathBuf>,
}

impl Placement {
    pub(crate) fn of(interpreter: &Interpreter, prefix: &Path, site_dirs: &[PathBuf]) -> Self {
        let site = site_dirs
            .iter()
            .find_map(|dir| dir.strip_prefix(prefix).ok())
            .map(|relative| format!("env/{}", relative.display()))
            .unwrap_or_else(|| {
                format!("env/lib/python{}/site-packages", interpreter.major_minor())
            });
        let mut roots = vec![(prefix.to_path_buf(), "env".to_string())];
        for dir in site_dirs.iter().filter(|dir| !dir.starts_with(prefix)) {
            roots.push((dir.clone(), site.clone()));
            // Scripts and data its distributions installed beside it (`../../../bin/tool` in
            // the user site's RECORDs) go where the environment's own would.
            if let Some(base) = scheme_base(dir) {
                roots.push((base.to_path_buf(), "env".to_string()));
            }
        }
        roots.sort_by_key(|(source, _)| std::cmp::Reverse(source.as_os_str().len()));
        let mut site_dirs = site_dirs.to_vec();
        site_dirs.sort_by_key(|dir| std::cmp::Reverse(dir.as_os_str().len()));
        Placement {
            roots,
            site,
            prefix: prefix.to_path_buf(),
            site_dirs,
        }
    }

    /// The archive path of `file` by where it lies; None when the pack has no place for it.
    pub(crate) fn place(&self, file: &Path) -> Option<String> {
        self.roots.iter().find_map(|(source, archive)| {
            let relative = file.strip_prefix(source).ok()?;
            Some(format!("{archive}/{}", relative.display()))
        })
    }

    /// The top-level package directory (or module file) that `file` belongs to in the site
    /// directory it was found in.
    pub(crate) fn top_level_entry(&self, file: &Path) -> Option<PathBuf> {
        let site_dir = self.site_dirs.iter().find(|dir| file.starts_with(dir))?;
        let first = file.strip_prefix(site_dir).ok()?.components().next()?;
        Some(site_dir.join(first))
    }

    /// The archive path of an installed `file` of `dist`; an error naming the file when the
    /// pack has no place for it.
    pub(crate) fn archive_path(&self, dist: &Distribution, file: &Path) -> Result<String> {
        if let Some(root) = dist.editable.iter().find(|r| file.starts_with(&r.path)) {
            let inside = file.strip_prefix(&root.path).unwrap_or(Path::new(""));
            let name = root.path.file_name().unwrap_or_default();
            let top = if root.path.is_dir() {
                PathBuf::from(root.name.replace('.', "/"))
            } else {
                PathBuf::from(name)
            };
            return Ok(format!("{}/{}", self.site, top.join(inside).display()));
        }
        if let Some(archive_path) = self.place(file) {
            return Ok(archive_path);
        }
        bail!(
            "{} {}: {} cannot be packed: it lies outside the environment {} and outside every \
             directory on the interpreter's sys.path, so the pack has no place for it",
            dist.name,
            dist.version,
            file.display(),
            self.prefix.display()
        )
    }

    /// Where `dist` came from, when not from the environment's own site directories.
    pub(crate) fn origin(&self, dist: &Distribution) -> Option<Origin> {
        if !dist.editable.is_empty() {
            return Some(Origin::Editable);
        }
        (!dist.metadata_path.starts_with(&self.prefix)).then_some(Origin::OutsidePrefix)
    }
}

/// `BASE` of a site directory `BASE/lib/pythonX.Y/site-packages`.
fn scheme_base(site_dir: &Path) -> Option<&Path> {
    let name = site_dir.file_name()?.to_str()?;
    let version = site_dir.parent()?;
    let lib = version.parent()?;
    let is_scheme = matches!(name, "site-packages" | "dist-packages")
        && version.file_name()?.to_str()?.starts_with("python")
        && lib.file_name()? == "lib";
    is_scheme.then(|| lib.parent()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_base_of_a_user_site() {
        let user = Path::new("/home/u/.local/lib/python3.11/site-packages");
        assert_eq!(scheme_base(user), Some(Path::new("/home/u/.local")));
        assert_eq!(scheme_base(Path::new("/opt/extra")), None);
    }
}
