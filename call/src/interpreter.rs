//! Which interpreter runs the call: a pack's `run` script, an environment's python, or a
//! python on PATH; and where that interpreter finds the call's local modules.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lfm_analyzer::Environment;
use lfm_monitor::supervisor::resolve_command;
use lfm_packer::{PackLease, UnpackOptions};

use crate::error::{CallError, Result};

/// The environment variable that sets the pack cache's budget (bytes, or with K/M/G/T).
pub const PACK_CACHE_MAX_VARIABLE: &str = "LFM_PACK_CACHE_MAX";

/// What the caller chose (`--pack`, `--env`, `--python`, `--root`).
#[derive(Debug, Clone, Default)]
pub struct InterpreterChoice {
    pub python: Option<PathBuf>,
    pub env: Option<PathBuf>,
    pub pack: Option<PathBuf>,
    pub roots: Vec<PathBuf>,
    /// Where a pack is unpacked (`--cache-dir`'s `packs/`; none: the default pack cache).
    pub packs_cache: Option<PathBuf>,
}

/// How the interpreter is started and what the analyzer knows of it.
#[derive(Debug, Clone)]
pub struct Interpreter {
    pub argv: Vec<OsString>,
    /// Where local modules are looked up: a pack's `app/`, else the working directory.
    pub source_roots: Vec<PathBuf>,
    pub analysis_env: Environment,
    /// `--root` directories.
    pub roots: Vec<PathBuf>,
    /// Site directories the interpreter runs with beyond its own (a pack's), which the
    /// analysis must see as the call will.
    pub site_dirs: Vec<PathBuf>,
    /// Keeps the unpacked pack in the cache while this interpreter may run from it.
    pub pack_lease: Option<Arc<PackLease>>,
}

impl InterpreterChoice {
    /// A pack is unpacked (once per cache) before its interpreter can be named.
    pub fn interpreter(&self) -> Result<Interpreter> {
        if let Some(pack) = &self.pack {
            let lease = unpack(pack, self.packs_cache.clone())?;
            let root = lease.root().to_path_buf();
            return Ok(Interpreter {
                argv: vec![root.join("run").into_os_string(), "python3".into()],
                source_roots: vec![root.join("app")],
                analysis_env: Environment::Python("python3".into()),
                roots: self.roots.clone(),
                site_dirs: pack_site_dirs(&root),
                pack_lease: Some(Arc::new(lease)),
            });
        }
        let cwd = std::env::current_dir().map_err(CallError::failed)?;
        if let Some(prefix) = &self.env {
            let python = prefix.join("bin/python");
            if resolve_command(python.as_os_str()).is_err() {
                return Err(CallError::usage(format!(
                    "--env {}: {} is not an executable interpreter",
                    prefix.display(),
                    python.display()
                )));
            }
            return Ok(Interpreter {
                argv: vec![python.into_os_string()],
                source_roots: vec![cwd],
                analysis_env: Environment::Prefix(prefix.clone()),
                roots: self.roots.clone(),
                site_dirs: Vec::new(),
                pack_lease: None,
            });
        }
        let python = self.python.clone().unwrap_or_else(|| "python3".into());
        if resolve_command(python.as_os_str()).is_err() {
            return Err(CallError::usage(format!(
                "--python {}: no such executable{}",
                python.display(),
                if python.components().count() == 1 {
                    " on PATH"
                } else {
                    ""
                }
            )));
        }
        Ok(Interpreter {
            argv: vec![python.clone().into_os_string()],
            source_roots: vec![cwd],
            analysis_env: Environment::Python(python),
            roots: self.roots.clone(),
            site_dirs: Vec::new(),
            pack_lease: None,
        })
    }
}

/// The site directories a pack's `run` script puts on the path (`env/lib/python*/site-packages`).
fn pack_site_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.join("env/lib")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
        .map(|e| e.path().join("site-packages"))
        .filter(|dir| dir.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// Unpack `pack` into `cache` (default: the default pack cache), whose budget
/// `LFM_PACK_CACHE_MAX` may set.
fn unpack(pack: &Path, cache: Option<PathBuf>) -> Result<PackLease> {
    let cache = cache.unwrap_or_else(UnpackOptions::default_cache);
    let mut options = UnpackOptions::new(cache);
    if let Some(max) = std::env::var_os(PACK_CACHE_MAX_VARIABLE) {
        let max = max.to_string_lossy();
        options.cache_max = Some(
            lfm_monitor::limits::parse_size(PACK_CACHE_MAX_VARIABLE, &max)
                .map_err(|e| CallError::usage(e.to_string()))?,
        );
    }
    lfm_packer::unpack_leased(pack, &options)
        .map_err(|e| CallError::failed(format!("unpacking {}: {e}", pack.display())))
}

impl Interpreter {
    /// Where local modules are found: the source roots, then `--root` directories.
    pub fn search_path(&self) -> Vec<PathBuf> {
        self.source_roots
            .iter()
            .chain(&self.roots)
            .cloned()
            .collect()
    }
}
