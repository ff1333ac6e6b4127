//! The per-call files of `lfm call`: the runner's request, and what it writes back.

use std::path::{Path, PathBuf};

use lfm_monitor::runner::request::{Arguments, Outputs, Request, ResultFormat, Target};

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
        let dir = tempfile::Builder::new()
            .prefix("call-")
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
