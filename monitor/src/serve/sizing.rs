//! The history of `lfm serve`'s calls, and `"auto": true`: limits from the category's history
//! and a larger attempt after a call ran out of one (as `lfm run --auto`, docs/sizing.md).

use crate::report::Report;
use crate::sizing::auto::{self, AutoLimit};
use crate::sizing::Strategy;

use super::{CallSpec, Server};

/// What `"auto": true` asked, and how far it got.
#[derive(Debug, Clone)]
pub struct Auto {
    pub strategy: Strategy,
    /// Larger attempts allowed after the first.
    pub max_retries: u32,
    /// The limits sizing gives (filled when the call is submitted).
    pub sized: Vec<AutoLimit>,
    /// Attempts that ran out before this one.
    pub attempts: u32,
    /// What each of those attempts had and ran out of: `{limits, limits_exceeded,
    /// peak_memory_bytes}` (the reply's `retries`).
    pub retries: Vec<serde_json::Value>,
}

impl Auto {
    pub fn new(strategy: Strategy, max_retries: u32) -> Auto {
        Auto {
            strategy,
            max_retries,
            sized: Vec::new(),
            attempts: 0,
            retries: Vec::new(),
        }
    }
}

impl Server {
    /// The first attempt's sized limits: every one of memory, cores and disk (a call always
    /// has a sandbox) that the request did not give. Later attempts come sized from
    /// [`Server::retry`].
    pub(super) fn size(&self, spec: &mut CallSpec) -> Result<(), String> {
        let Some(mut auto) = spec.auto.take_if(|a| a.attempts == 0) else {
            return Ok(());
        };
        auto.sized = auto::to_size(&spec.limits, Some(&self.options.zygote.work_dir), false);
        for &resource in &auto.sized {
            let value = self.allocation(spec, &auto, resource, None)?;
            resource.set(&mut spec.limits, value);
        }
        spec.auto = Some(auto);
        Ok(())
    }

    fn allocation(
        &self,
        spec: &CallSpec,
        auto: &Auto,
        resource: AutoLimit,
        failed: Option<f64>,
    ) -> Result<f64, String> {
        // Rows of calls that finished before this one may still be on their way.
        self.janitor.sync();
        let history = self
            .history
            .as_ref()
            .ok_or("\"auto\" sizes from the history, and this server runs with --no-history")?;
        let rows = history.rows(spec.category.as_deref())?;
        let node = auto::node(resource, Some(&self.options.zygote.work_dir));
        Ok(resource.allocation(&rows, auto.strategy, node, failed))
    }

    /// Mark the sized limits in the Report; whether there were any.
    pub(super) fn mark_sized(spec: &CallSpec, report: &mut Report) -> bool {
        if let Some(auto) = &spec.auto {
            report.limits_from_sizing = auto.sized.iter().map(|r| r.name().into()).collect();
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
            .is_some_and(|auto| !auto::exhausted(&report.limits_exceeded, &auto.sized).is_empty());
        if ran_out {
            self.record(report, sized);
            return None;
        }
        self.history.is_some().then(|| (report.clone(), sized))
    }

    /// The next attempt of an `auto` call that ran out of sized limits only, each of those at
    /// the strategy's next allocation; none when it may not or need not run again.
    pub(super) fn retry(&self, spec: &CallSpec, report: &Report) -> Option<CallSpec> {
        let auto = spec.auto.as_ref()?;
        let ran_out = auto::exhausted(&report.limits_exceeded, &auto.sized);
        if ran_out.is_empty() || auto.attempts >= auto.max_retries {
            return None;
        }
        let mut again = spec.clone();
        for resource in ran_out {
            let failed = resource.limit(&again.limits);
            let next = self.allocation(spec, auto, resource, failed).ok()?;
            resource.set(&mut again.limits, next);
        }
        if let Some(auto) = again.auto.as_mut() {
            auto.attempts += 1;
            auto.retries.push(serde_json::json!({
                "limits": report.limits,
                "limits_exceeded": report.limits_exceeded,
                "peak_memory_bytes": report.memory.peak_bytes,
            }));
        }
        Some(again)
    }
}
