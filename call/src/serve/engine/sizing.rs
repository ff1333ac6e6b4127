//! The history of `lfm serve`'s calls, and `"auto": true`: limits from the category's history
//! and a larger attempt after a call ran out of one (as `lfm run --auto`, docs/sizing.md).

use lfm_monitor::report::Report;
use lfm_sizing::policy::Attempts;

use super::{CallSpec, Server};

/// What `"auto": true` asked, and how far it got.
#[derive(Debug, Clone)]
pub struct Auto {
    pub attempts: Attempts,
    /// What each attempt that ran out had and ran out of: `{limits, limits_exceeded,
    /// peak_memory_bytes}` (the reply's `retries`).
    pub retries: Vec<serde_json::Value>,
}

impl Auto {
    pub fn new(attempts: Attempts) -> Auto {
        Auto {
            attempts,
            retries: Vec::new(),
        }
    }
}

impl Server {
    /// The first attempt's sized limits: every one of memory, cores and disk (a call always
    /// has a sandbox) that the request did not give. Later attempts come sized from
    /// [`Server::retry`].
    /// `serve_bytes`: what the serve and its zygote hold (read once per admission pass).
    pub(super) fn size(&self, spec: &mut CallSpec, serve_bytes: u64) -> Result<(), String> {
        let CallSpec {
            auto,
            limits,
            category,
            ..
        } = spec;
        let Some(auto) = auto.as_mut().filter(|a| a.attempts.retried == 0) else {
            return Ok(());
        };
        auto.attempts.node_memory_mb = Some(self.node_memory_mb(serve_bytes));
        let sandbox = Some(self.options.zygote.work_dir.as_path());
        let rows = || Ok((self.rows(category.as_deref())?, self.history.as_ref()));
        auto.attempts.first(limits, sandbox, false, &rows)
    }

    /// The memory of the serve's node budget that calls can have (less what the serve and its
    /// zygote hold), in the MiB sizing counts in: "the whole node" to a strategy.
    fn node_memory_mb(&self, serve_bytes: u64) -> f64 {
        let for_calls = self.options.node.memory_bytes.saturating_sub(serve_bytes);
        for_calls as f64 / (1u64 << 20) as f64
    }

    /// The category's rows, once those of calls that finished before are in (read once
    /// between two calls' ends: many queued calls of one category are sized from them).
    fn rows(&self, category: Option<&str>) -> Result<Vec<lfm_sizing::history::Row>, String> {
        let key = category.map(str::to_string);
        if let Some(rows) = self.sizing_rows.borrow().get(&key) {
            return Ok(rows.clone());
        }
        self.janitor.sync();
        let history = self
            .history
            .as_ref()
            .ok_or("\"auto\" sizes from the history, and this server runs with --no-history")?;
        let rows = history.sizing_rows(category)?;
        self.sizing_rows.borrow_mut().insert(key, rows.clone());
        Ok(rows)
    }

    /// Mark the sized limits in the Report; whether there were any.
    pub(super) fn mark_sized(spec: &CallSpec, report: &mut Report) -> bool {
        if let Some(auto) = &spec.auto {
            report.limits_from_sizing = auto.attempts.sized_names();
        }
        !report.limits_from_sizing.is_empty()
    }

    /// Append the Report to the history (a warning when that fails: the call's outcome stands).
    pub(super) fn record(&self, report: &Report, sized: bool) {
        let Some(history) = &self.history else {
            return;
        };
        if let Err(error) = history.record(report, sized) {
            eprintln!("lfm serve: warning: call not recorded: {error}");
        }
    }

    /// The finished call's history row, to record after its reply ([`Server::after_delivery`]);
    /// recorded at once instead when the call ran out of a sized limit, for its next attempt
    /// is sized from the history.
    pub(super) fn record_now_or_later(
        &self,
        spec: &CallSpec,
        report: &Report,
        sized: bool,
    ) -> Option<(Report, bool)> {
        let ran_out = spec
            .auto
            .as_ref()
            .is_some_and(|auto| auto.attempts.ran_out(report));
        if ran_out {
            self.record(report, sized);
            return None;
        }
        self.history.is_some().then(|| (report.clone(), sized))
    }

    /// The next attempt of an `auto` call that ran out of sized limits only, each of those at
    /// the strategy's next allocation; none when it may not or need not run again.
    pub(super) fn retry(&self, spec: &CallSpec, report: &Report) -> Option<CallSpec> {
        let mut again = spec.clone();
        let auto = again.auto.as_mut()?;
        auto.attempts.node_memory_mb = Some(self.node_memory_mb(self.serve_resident_bytes()));
        let sandbox = Some(self.options.zygote.work_dir.as_path());
        let rows = || Ok((self.rows(spec.category.as_deref())?, self.history.as_ref()));
        auto.attempts
            .retry(report, &mut again.limits, sandbox, &rows)
            .ok()??;
        auto.retries.push(serde_json::json!({
            "limits": report.limits,
            "limits_exceeded": report.limits_exceeded,
            "peak_memory_bytes": report.memory.peak_bytes,
        }));
        Some(again)
    }
}
