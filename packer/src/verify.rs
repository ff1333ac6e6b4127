//! `lfm verify`: an isolated interpreter whose path holds only the pack imports every module
//! the manifest says the closure needs.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::manifest::{Manifest, MANIFEST_NAME};

/// Run with `-I -S -c` (python/lfm_probes/import_all.py).
const IMPORT_ALL: &str = include_str!("../../python/lfm_probes/import_all.py");

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verification {
    pub imported: Vec<String>,
    /// module -> error
    pub failed: Vec<(String, String)>,
    /// Optional imports that were not installed when the pack was made.
    pub skipped: Vec<String>,
    /// `name==version` of the engine distributions the pack leaves to the worker.
    #[serde(default)]
    pub engine_left_out: Vec<String>,
}

impl Verification {
    pub fn ok(&self) -> bool {
        self.failed.is_empty()
    }
}

pub fn read_manifest(root: &Path) -> Result<Manifest> {
    let path = root.join(MANIFEST_NAME);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{} has no {MANIFEST_NAME}: not an lfm pack", root.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{}: not a valid lfm-pack manifest", path.display()))
}

/// Import the modules of every target (or of `target` only) with `python -I -S` (`-I` only
/// when the pack leaves the engine to the worker's site-packages).
pub fn verify(root: &Path, python: &Path, target: Option<&str>) -> Result<Verification> {
    let manifest = read_manifest(root)?;
    let mut modules: Vec<String> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    let mut matched = false;
    for packed in &manifest.targets {
        if target.is_some_and(|t| t != packed.target) {
            continue;
        }
        matched = true;
        for module in &packed.modules {
            if !modules.contains(module) {
                modules.push(module.clone());
            }
        }
        for module in &packed.optional_missing {
            if !skipped.contains(module) {
                skipped.push(module.clone());
            }
        }
    }
    if let Some(target) = target {
        if !matched {
            let known: Vec<&str> = manifest.targets.iter().map(|t| t.target.as_str()).collect();
            bail!(
                "the pack has no target {target:?} (it has: {})",
                known.join(", ")
            );
        }
    }
    let paths: Vec<String> = manifest
        .run
        .pythonpath
        .iter()
        .map(|p| root.join(p).display().to_string())
        .collect();
    let request = serde_json::json!({ "paths": paths, "modules": modules });
    // A self-contained pack is verified with its own interpreter, the one it will run with.
    let own = manifest
        .run
        .interpreter
        .as_ref()
        .map(|relative| root.join(relative));
    let python = own.as_deref().unwrap_or(python);
    // A pack that leaves the engine to the worker is checked as the worker runs it: with the
    // interpreter's own site-packages, where the engine is, behind the pack.
    let flags: &[&str] = if manifest.engine_left_out.is_empty() {
        &["-I", "-S", "-c"]
    } else {
        &["-I", "-c"]
    };
    let output = Command::new(python)
        .args(flags)
        .arg(IMPORT_ALL)
        .arg(request.to_string())
        .current_dir(root)
        .env("LD_LIBRARY_PATH", root.join("python/lib"))
        .output()
        .with_context(|| format!("starting {}", python.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed while importing: {}",
            python.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let results: Vec<(String, Option<String>)> = serde_json::from_str(last)
        .with_context(|| format!("unexpected output from the import check: {stdout}"))?;
    let mut verification = Verification {
        imported: Vec::new(),
        failed: Vec::new(),
        skipped,
        engine_left_out: manifest
            .engine_left_out
            .iter()
            .map(|dist| format!("{}=={}", dist.name, dist.version))
            .collect(),
    };
    for (module, error) in results {
        match error {
            None => verification.imported.push(module),
            Some(error) => verification.failed.push((module, error)),
        }
    }
    Ok(verification)
}
