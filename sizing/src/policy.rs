//! The one sizing policy every command runs: which limits a run's history sizes, their first
//! allocation, and after a run that ran out of sized limits only, the next attempt's (at most
//! `max_retries` more). `lfm run --auto`, `lfm call --auto` and a serve request's `"auto": true`
//! all go through [`Attempts`]; only where the history rows come from differs.

use std::path::Path;

use super::auto::{self, Ask, AutoLimit};
use super::history::{History, Row};
use super::Strategy;
use lfm_monitor::limits::Limits;
use lfm_monitor::report::Report;

/// As `lfm run --max-retries` and a serve request's `max_retries`.
pub const DEFAULT_MAX_RETRIES: u32 = 3;

/// The category's history, read when an allocation is made (it grows between attempts): its
/// sizing window, and the history it came from (where `best-so-far` keeps its tallies).
pub type Rows<'a> = &'a dyn Fn() -> Result<(Vec<Row>, Option<&'a History>), String>;

/// One sized run and its retries.
#[derive(Debug, Clone)]
pub struct Attempts {
    pub strategy: Strategy,
    /// Larger attempts allowed after the first.
    pub max_retries: u32,
    /// The limits sizing gives (filled by [`Attempts::first`]).
    pub sized: Vec<AutoLimit>,
    /// Attempts that ran out before the current one.
    pub retried: u32,
    /// The node's memory (MiB) where it is not the machine's: a serve's `--node-memory`, so
    /// that "the whole node" (a strategy's first allocation without history, a retry's cap)
    /// is what the serve may give.
    pub node_memory_mb: Option<f64>,
    /// The run's input size in bytes, when known: what the input-aware strategies size from.
    pub input_bytes: Option<u64>,
}

/// One resource an attempt ran out of, and what the next attempt gets.
#[derive(Debug, Clone, Copy)]
pub struct Grown {
    pub resource: AutoLimit,
    pub failed: f64,
    pub next: f64,
}

impl Attempts {
    pub fn new(strategy: Strategy, max_retries: u32) -> Attempts {
        Attempts {
            strategy,
            max_retries,
            sized: Vec::new(),
            retried: 0,
            node_memory_mb: None,
            input_bytes: None,
        }
    }

    /// Size every limit among memory, cores, (with a sandbox) disk and (when `gpus_sized`)
    /// GPUs that `limits` does not give, at the strategy's first allocation.
    pub fn first(
        &mut self,
        limits: &mut Limits,
        sandbox: Option<&Path>,
        gpus_sized: bool,
        rows: Rows,
    ) -> Result<(), String> {
        self.sized = auto::to_size(limits, sandbox, gpus_sized);
        for &resource in &self.sized {
            let value = self.allocation(resource, sandbox, None, rows)?;
            resource.set(limits, value);
        }
        Ok(())
    }

    /// After an attempt: the next one's limits, grown where it ran out of sized limits; none
    /// when it did not run out of one, or may not run again.
    pub fn retry(
        &mut self,
        report: &Report,
        limits: &mut Limits,
        sandbox: Option<&Path>,
        rows: Rows,
    ) -> Result<Option<Vec<Grown>>, String> {
        let ran_out = auto::exhausted(&report.limits_exceeded, &self.sized);
        if ran_out.is_empty() || self.retried >= self.max_retries {
            return Ok(None);
        }
        let mut grown = Vec::new();
        for resource in ran_out {
            let failed = resource.limit(limits).unwrap_or(0.0);
            let next = self.allocation(resource, sandbox, Some(failed), rows)?;
            resource.set(limits, next);
            grown.push(Grown {
                resource,
                failed,
                next,
            });
        }
        self.retried += 1;
        Ok(Some(grown))
    }

    /// Whether `report` ran out of a limit sizing gave (its next attempt is sized from the
    /// history, so its row must be there first).
    pub fn ran_out(&self, report: &Report) -> bool {
        !auto::exhausted(&report.limits_exceeded, &self.sized).is_empty()
    }

    /// The names of the sized limits, for the Report's `limits_from_sizing`.
    pub fn sized_names(&self) -> Vec<String> {
        self.sized.iter().map(|r| r.name().to_string()).collect()
    }

    fn allocation(
        &self,
        resource: AutoLimit,
        sandbox: Option<&Path>,
        failed: Option<f64>,
        rows: Rows,
    ) -> Result<f64, String> {
        let (rows, history) = rows()?;
        let node = match (resource, self.node_memory_mb) {
            (AutoLimit::Memory, Some(mb)) => mb,
            _ => auto::node(resource, sandbox),
        };
        let ask = Ask {
            strategy: self.strategy,
            node,
            input: self.input_bytes.map(|b| b as f64),
            failed,
        };
        Ok(resource.allocation(&rows, &ask, history))
    }
}

impl Grown {
    /// `lfm: ran out of its sized memory limit of 250.0 MiB; retry 1 at 500.0 MiB`.
    pub fn message(&self, attempt: u32) -> String {
        format!(
            "lfm: ran out of its sized {} limit of {:.1} {unit}; retry {attempt} at {:.1} {unit}",
            self.resource.name(),
            self.failed,
            self.next,
            unit = self.resource.unit()
        )
    }
}

/// Why a sized run did not run.
#[derive(Debug)]
pub enum SizedRunError {
    /// The history could not be read to size it.
    History(String),
    Run(lfm_monitor::RunError),
}

/// Run once, or with `attempts`: the limits not given come from the category's history in
/// `history`, and a run that ran out of sized limits runs again larger. Every attempt of a
/// category is recorded in the history, after `annotate` (a call adds what its function did).
pub fn run_sized(
    mut options: lfm_monitor::RunOptions,
    mut attempts: Option<Attempts>,
    gpus_sized: bool,
    history: &Path,
    annotate: &mut dyn FnMut(&mut Report),
) -> Result<Report, SizedRunError> {
    let category = options.category.clone();
    let sandbox = options.sandbox.clone();
    // Opened once sizing needs it; a history that cannot be opened fails the sized run.
    let opened = match &attempts {
        Some(_) => Some(History::open(history).map_err(SizedRunError::History)?),
        None => None,
    };
    let rows = || match &opened {
        Some(h) => Ok((h.sizing_rows(category.as_deref())?, Some(h))),
        None => Ok((Vec::new(), None)),
    };
    if let Some(attempts) = attempts.as_mut() {
        attempts.input_bytes = options.input_bytes;
        attempts
            .first(&mut options.limits, sandbox.as_deref(), gpus_sized, &rows)
            .map_err(SizedRunError::History)?;
    }
    loop {
        let mut report = lfm_monitor::run(&options).map_err(SizedRunError::Run)?;
        if let Some(attempts) = &attempts {
            report.limits_from_sizing = attempts.sized_names();
        }
        annotate(&mut report);
        match &opened {
            Some(opened) => record_in(opened, &report),
            None => record(history, &report),
        }
        let Some(attempts) = attempts.as_mut() else {
            return Ok(report);
        };
        let grown = attempts
            .retry(&report, &mut options.limits, sandbox.as_deref(), &rows)
            .map_err(SizedRunError::History)?;
        let Some(grown) = grown else {
            return Ok(report);
        };
        for resource in grown {
            eprintln!("{}", resource.message(attempts.retried));
        }
    }
}

/// Append a finished run of a category to the history (a warning, never a failure of the run).
pub fn record(history: &Path, report: &Report) {
    if report.category.is_none() {
        return;
    }
    match History::open(history) {
        Ok(opened) => record_in(&opened, report),
        Err(error) => eprintln!("lfm: warning: not recorded: {error}"),
    }
}

/// [`record`] into a history open already.
fn record_in(history: &History, report: &Report) {
    if report.category.is_none() {
        return;
    }
    let sized = !report.limits_from_sizing.is_empty();
    if let Err(error) = history.record(report, sized) {
        eprintln!("lfm: warning: not recorded: {error}");
    }
}
