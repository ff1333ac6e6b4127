//! Installing and removing the hook in a Python installation: `lfm_site_hook.py` beside the
//! standard library, and a marked block in the standard library's `sitecustomize.py` that calls
//! it. The standard library directory is on the sys.path of the installation's every process
//! and of every venv made from it (with or without --system-site-packages), unlike its
//! site-packages, whose `.pth` files such venvs never read.

use std::path::{Path, PathBuf};
use std::process::Command;

pub const HOOK_PY: &str = include_str!("../../python/lfm_site_hook.py");
const HOOK_FILE: &str = "lfm_site_hook.py";
const BEGIN: &str = "# >>> lfm site hook (lfm usage --install-hook; removed by --remove-hook) >>>";
const END: &str = "# <<< lfm site hook <<<";

/// Where an installation keeps what the hook needs.
#[derive(Debug)]
pub struct Installation {
    pub interpreter: PathBuf,
    pub stdlib: PathBuf,
}

/// The installation under `prefix`, asked of its own interpreter; a venv is refused (its
/// standard library is its base installation's: hook that one).
pub fn installation(prefix: &Path) -> Result<Installation, String> {
    // A venv's interpreter started with -S reports its base installation as its own prefix
    // (3.11's `site` is what reads pyvenv.cfg): tell a venv by that file, before running it.
    if let Some(config) = venv_config(prefix) {
        return Err(format!(
            "{} is a venv ({}): hook the installation it was made from, which logs its venvs too",
            prefix.display(),
            config.display()
        ));
    }
    let interpreter = ["python3", "python"]
        .iter()
        .map(|name| prefix.join("bin").join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| format!("{}: no bin/python3 or bin/python", prefix.display()))?;
    let script = "import sys, sysconfig\n\
                  print(sysconfig.get_paths()['stdlib'])\n\
                  print(sys.base_prefix)";
    let output = Command::new(&interpreter)
        .args(["-S", "-c", script])
        .output()
        .map_err(|e| format!("{}: {e}", interpreter.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut lines = text.lines();
    let (Some(stdlib), Some(base)) = (lines.next(), lines.next()) else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("{}: {}", interpreter.display(), stderr.trim()));
    };
    // Never write into another installation than the one named (a bin/python3 that is a
    // link to the system's, a conda or pyenv shim).
    if !same_directory(Path::new(base), prefix) {
        return Err(format!(
            "{} belongs to the installation {base}, not to {}: name that one",
            interpreter.display(),
            prefix.display()
        ));
    }
    Ok(Installation {
        interpreter,
        stdlib: PathBuf::from(stdlib),
    })
}

fn venv_config(prefix: &Path) -> Option<PathBuf> {
    let config = prefix.join("pyvenv.cfg");
    config.is_file().then_some(config)
}

fn same_directory(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Write the hook and its `sitecustomize` block (replacing an earlier one), logging to `log_dir`.
/// Returns the files written.
pub fn install(prefix: &Path, log_dir: &Path) -> Result<Vec<PathBuf>, String> {
    let installation = installation(prefix)?;
    let log_dir =
        std::path::absolute(log_dir).map_err(|e| format!("{}: {e}", log_dir.display()))?;
    let hook = installation.stdlib.join(HOOK_FILE);
    let sitecustomize = installation.stdlib.join("sitecustomize.py");
    let existing = read_optional(&sitecustomize)?;
    let (rest, ours_alone) = match &existing {
        Some(text) => {
            let rest = without_block(text);
            let alone = rest.trim().is_empty();
            (rest, alone)
        }
        None => (String::new(), true),
    };
    write(&hook, HOOK_PY)?;
    write(&sitecustomize, &(rest + &block(&log_dir, ours_alone)))?;
    compile(&installation, &[&hook, &sitecustomize])?;
    Ok(vec![hook, sitecustomize])
}

/// Remove the hook and its block; a `sitecustomize.py` left empty goes too. Returns what changed.
pub fn remove(prefix: &Path) -> Result<Vec<PathBuf>, String> {
    let installation = installation(prefix)?;
    let mut changed = Vec::new();
    let sitecustomize = installation.stdlib.join("sitecustomize.py");
    if let Some(text) = read_optional(&sitecustomize)? {
        if text.contains(BEGIN) {
            let rest = without_block(&text);
            if rest.trim().is_empty() {
                remove_file(&sitecustomize)?;
                remove_cached(&installation.stdlib, "sitecustomize")?;
            } else {
                write(&sitecustomize, &rest)?;
            }
            changed.push(sitecustomize);
        }
    }
    let hook = installation.stdlib.join(HOOK_FILE);
    if hook.exists() {
        remove_file(&hook)?;
        remove_cached(&installation.stdlib, "lfm_site_hook")?;
        changed.push(hook);
    }
    Ok(changed)
}

/// The block `site` runs. When it is the whole `sitecustomize.py`, it also runs the
/// `sitecustomize` this file now hides (a venv's own), as Python would have.
fn block(log_dir: &Path, chain: bool) -> String {
    let dir = serde_json::to_string(&log_dir.to_string_lossy()).expect("a string serializes");
    let chain_line = if chain {
        "    lfm_site_hook.chain_sitecustomize(__import__('os').path.dirname(__file__))\n"
    } else {
        ""
    };
    // The hidden sitecustomize runs first: what it imports is the site's setup, not the program's.
    format!(
        "{BEGIN}\ntry:\n    import lfm_site_hook\n{chain_line}    lfm_site_hook.install({dir})\n\
         except Exception:\n    pass\n{END}\n"
    )
}

fn without_block(text: &str) -> String {
    let (Some(start), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        return text.to_string();
    };
    if end < start {
        return text.to_string();
    }
    let after = &text[end + END.len()..];
    format!(
        "{}{}",
        &text[..start],
        after.strip_prefix('\n').unwrap_or(after)
    )
}

/// Byte-compile as the admin, so that processes (which may not write the standard library's
/// `__pycache__`) do not compile the hook at every start.
fn compile(installation: &Installation, files: &[&Path]) -> Result<(), String> {
    let status = Command::new(&installation.interpreter)
        .args(["-S", "-m", "py_compile"])
        .args(files)
        .status()
        .map_err(|e| format!("{}: {e}", installation.interpreter.display()))?;
    if !status.success() {
        return Err(format!(
            "{} -m py_compile failed on {}",
            installation.interpreter.display(),
            files[0].display()
        ));
    }
    Ok(())
}

fn remove_cached(stdlib: &Path, module: &str) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(stdlib.join("__pycache__")) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("{module}.")) {
            remove_file(&entry.path())?;
        }
    }
    Ok(())
}

fn read_optional(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn remove_file(path: &Path) -> Result<(), String> {
    std::fs::remove_file(path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admin_s_own_sitecustomize_is_kept_around_the_block() {
        let admin = "import os\nos.environ.setdefault('X', '1')\n";
        let with = format!("{admin}{}", block(Path::new("/var/log/lfm"), false));
        assert!(with.contains("lfm_site_hook.install(\"/var/log/lfm\")"));
        assert!(!with.contains("chain_sitecustomize"));
        assert_eq!(without_block(&with), admin);
        assert!(block(Path::new("/l"), true).contains("chain_sitecustomize"));
    }
}
