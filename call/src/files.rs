//! The per-call files of `lfm call`: the runner's request, and what it writes back.

use std::path::{Path, PathBuf};

use crate::runner::request::{Arguments, Outputs, Request, ResultFormat, Target};

/// In a private temporary directory under the cache, removed with this value.
pub struct CallFiles {
    _dir: tempfile::TempDir,
    pub request: PathBuf,
    pub result: PathBuf,
    pub outcome: PathBuf,
    pub imports: PathBuf,
}

impl CallFiles {
    pub fn create(cache: &Path) -> anyhow::Result<CallFiles> {
        let calls = cache.join("calls");
        std::fs::create_dir_all(&calls)?;
        remove_dead_owners(&calls, "call-");
        // The owner's pid in the name: a call killed with lfm (SIGKILL) is cleaned by the next.
        let dir = tempfile::Builder::new()
            .prefix(&format!("call-{}-", std::process::id()))
            .tempdir_in(&calls)?;
        Ok(CallFiles {
            request: dir.path().join("request.json"),
            result: dir.path().join("result"),
            outcome: dir.path().join("outcome.json"),
            imports: dir.path().join("imports.log"),
            _dir: dir,
        })
    }

    /// Write the runner's request: the value as JSON into our result file, or as a pickle
    /// into `pickle_to`; the import log unless `log_imports` is off.
    pub fn write_request(
        &self,
        target: Target,
        args: Arguments,
        pickle_to: Option<PathBuf>,
        log_imports: bool,
    ) -> anyhow::Result<()> {
        let format = match pickle_to {
            Some(_) => ResultFormat::Pickle,
            None => ResultFormat::Json,
        };
        let outputs = Outputs {
            result_file: pickle_to.unwrap_or_else(|| self.result.clone()),
            outcome_file: self.outcome.clone(),
            import_log: log_imports.then(|| self.imports.clone()),
        };
        let request = Request::new(target, args, format, outputs);
        std::fs::write(&self.request, request.to_json())?;
        Ok(())
    }
}

/// Remove what processes that no longer exist left in `parent`: entries named
/// `{prefix}{pid}` or `{prefix}{pid}-...` whose pid is not running (a SIGKILL, a crash).
/// A pid that was reused keeps its entry: only the dead are certain.
pub fn remove_dead_owners(parent: &Path, prefix: &str) {
    let owner = |name: &str| lfm_fs::owners::pid_after(prefix, name);
    lfm_fs::remove_dead_owners(parent, owner, |dir| {
        let _ = std::fs::remove_dir_all(dir);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_dead_processes_left_is_removed() {
        let parent = tempfile::tempdir().unwrap();
        // A pid above the kernel's maximum (4194304) never runs.
        let dead = parent.path().join("serve-4194399");
        let alive = parent.path().join(format!("serve-{}", std::process::id()));
        let init = parent.path().join("serve-1-x");
        let other = parent.path().join("runner-abc");
        for dir in [&dead, &alive, &init, &other] {
            std::fs::create_dir_all(dir.join("sandbox")).unwrap();
        }
        remove_dead_owners(parent.path(), "serve-");
        assert!(!dead.exists());
        assert!(alive.exists() && init.exists() && other.exists());
    }
}
