//! `lfm serve` requests with `"auto": true` or `"record": true` (docs/serve.md): a memory
//! limit from the category's history when the request gives none, a call killed for memory
//! run again at the strategy's next allocation, and every attempt recorded in the history,
//! as `lfm call --auto` does.

use std::collections::HashMap;
use std::path::PathBuf;

use lfm_monitor::report::ExitKind;
use lfm_monitor::serve::{CallSpec, Reply, Server};
use lfm_monitor::sizing::Strategy;
use lfm_monitor::Report;

use crate::commands::sizing;

const MIB: f64 = 1_048_576.0;

/// A call being sized or recorded: what to submit again, and the attempts so far.
struct Tracked {
    spec: CallSpec,
    sized: bool,
    /// Earlier attempts killed for memory: their limit and peak, in bytes.
    retries: Vec<serde_json::Value>,
}

pub struct Sizing {
    strategy: Strategy,
    max_retries: u32,
    history: Option<PathBuf>,
    calls: HashMap<(u64, String), Tracked>,
}

impl Sizing {
    pub fn new(strategy: Strategy, max_retries: u32, history: Option<PathBuf>) -> Sizing {
        Sizing {
            strategy,
            max_retries,
            history,
            calls: HashMap::new(),
        }
    }

    fn allocation(&self, category: Option<&str>, failed: Option<f64>) -> Result<u64, String> {
        let rows = sizing::open(self.history.as_ref()).and_then(|h| h.rows(category))?;
        Ok(sizing::memory_allocation(&rows, self.strategy, failed))
    }

    /// Size the call (auto, no memory given) and remember it to record its outcome.
    pub fn prepare(&mut self, spec: &mut CallSpec, auto: bool, record: bool) -> Result<(), String> {
        let sized = auto && spec.limits.memory_bytes.is_none();
        if sized {
            spec.limits.memory_bytes = Some(self.allocation(spec.category.as_deref(), None)?);
        }
        if sized || auto || record {
            let key = (spec.client, spec.id.to_string());
            if self.calls.contains_key(&key) {
                return Err(format!(
                    "id {} is already in flight on this connection: auto and record calls need distinct ids",
                    spec.id
                ));
            }
            let tracked = Tracked {
                spec: spec.clone(),
                sized,
                retries: Vec::new(),
            };
            self.calls.insert(key, tracked);
        }
        Ok(())
    }

    /// Record the tracked calls among `replies`; a sized call killed for memory is submitted
    /// again (its reply held back) while retries remain.
    pub fn finish(&mut self, replies: Vec<Reply>, server: &mut Server) -> Vec<Reply> {
        let mut out = Vec::with_capacity(replies.len());
        for mut reply in replies {
            let key = (reply.client, reply.message["id"].to_string());
            let Some(mut tracked) = self.calls.remove(&key) else {
                out.push(reply);
                continue;
            };
            let report = serde_json::from_value::<Report>(reply.message["report"].clone());
            let Ok(mut report) = report else {
                out.push(reply); // refused: nothing ran, nothing to record
                continue;
            };
            if tracked.sized {
                report.limits_from_sizing = vec!["memory".into()];
                reply.message["report"] = serde_json::to_value(&report).unwrap_or_default();
            }
            sizing::record(self.history.as_ref(), &report);
            if let Some(next) = self.retry(&tracked, &report) {
                tracked.retries.push(serde_json::json!({
                    "memory_bytes": tracked.spec.limits.memory_bytes,
                    "peak_bytes": report.memory.peak_bytes,
                }));
                tracked.spec.limits.memory_bytes = Some(next);
                server.submit(tracked.spec.clone());
                self.calls.insert(key, tracked);
                continue;
            }
            if !tracked.retries.is_empty() {
                reply.message["retries"] = tracked.retries.into();
            }
            out.push(reply);
        }
        out
    }

    /// The next memory limit for a sized call that ran out of memory, if it gets another go.
    fn retry(&self, tracked: &Tracked, report: &Report) -> Option<u64> {
        let ran_out =
            report.exit.kind == ExitKind::Limits && report.limits_exceeded.contains_key("memory");
        if !(tracked.sized && ran_out && tracked.retries.len() < self.max_retries as usize) {
            return None;
        }
        let failed = tracked.spec.limits.memory_bytes.unwrap_or(0) as f64 / MIB;
        let next = self
            .allocation(tracked.spec.category.as_deref(), Some(failed))
            .ok()?;
        (next as f64 / MIB > failed).then_some(next)
    }

    pub fn forget_client(&mut self, client: u64) {
        self.calls.retain(|(c, _), _| *c != client);
    }
}
