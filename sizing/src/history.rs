//! The history of finished runs and calls: an SQLite file, one per user per node.
//!
//! WAL mode and a busy timeout let many lfm processes append at once without losing a row. The
//! file carries its schema version; a file that is not an lfm history (or a newer one) is an
//! error naming it, never recreated. Move Reports between nodes, not this file: SQLite's locking
//! is unreliable on network filesystems.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};

use super::trace::Trace;
use lfm_monitor::report::Report;

mod imports;
mod retention;
mod tallies;
pub mod usage;
mod window;
pub use imports::IMPORTS_SCHEMA;
pub use retention::{Pruned, Retention, PRUNE_EVERY, RETENTION_SCHEMA};

const SCHEMA: &str = "lfm-history/1";
const MIB: f64 = 1_048_576.0;
/// How many of a category's most recent runs sizing reads ([`History::sizing_rows`]).
pub const SIZING_WINDOW: usize = 1_000;
/// How long a write waits for the other lfm processes writing the same history.
const BUSY_TIMEOUT: Duration = Duration::from_secs(60);
/// SQLite's default: the log is copied into the file at the commit that takes it past this.
const CHECKPOINT_PAGES: u32 = 1_000;

/// One finished run or call, as sizing reads it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Row {
    pub id: i64,
    pub category: String,
    pub time: f64,
    /// `normal`, `signal`, `limits`, `error` or `exception` (the Report's exit type).
    pub exit: String,
    /// The resources whose limit was exceeded, comma-separated.
    pub exceeded: String,
    pub memory_mb: f64,
    pub cores: f64,
    pub disk_mb: Option<f64>,
    pub wall_time: f64,
    pub memory_limit_mb: Option<f64>,
    /// The limits came from sizing (`--auto`).
    pub sized: bool,
    /// The cores limit of the run, if any (from the stored Report).
    pub cores_limit: Option<f64>,
    /// The share of the run's CPU periods in which the kernel held it back at its cores limit
    /// (the Report's cpu_throttling), where the kernel enforced one.
    pub throttled: Option<f64>,
    /// GPU memory of the run's processes (MiB), for runs given GPUs where it was measured.
    pub gpu_memory_mb: Option<f64>,
    /// Devices a process of the run used, where measured.
    pub gpus: Option<f64>,
    /// A served call's memory allocation (MiB) and how long it waited in the queue for it
    /// (docs/serve.md "Admission").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_wait_seconds: Option<f64>,
    /// The run's input size in bytes (the Report's `input_bytes`), where it was known; none
    /// in rows recorded before lfm kept it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_bytes: Option<f64>,
}

/// A run's Report's `exit`, as much of it as says how the run ended.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct ExitDetails {
    pub status: Option<i32>,
    pub signal: Option<i32>,
    pub exception: Option<ExceptionType>,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct ExceptionType {
    #[serde(rename = "type")]
    pub name: String,
}

pub struct History {
    connection: Connection,
    path: PathBuf,
}

/// A run's category in the history: the Report's, else `default`.
fn category_of(report: &Report) -> &str {
    report.category.as_deref().unwrap_or("default")
}

/// `$LFM_HISTORY`, else `$XDG_DATA_HOME/lfm/history-HOST.sqlite` (`~/.local/share`), else the
/// temp dir: one file per user per node.
pub fn default_path() -> PathBuf {
    if let Some(path) = std::env::var_os("LFM_HISTORY") {
        return PathBuf::from(path);
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir);
    data.join("lfm").join(format!("history-{host}.sqlite"))
}

impl History {
    pub fn open(path: &Path) -> Result<History, String> {
        let fail = |e: rusqlite::Error| format!("history {}: {e}", path.display());
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("history {}: {e}", dir.display()))?;
        }
        let connection = Connection::open(path).map_err(fail)?;
        connection.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
        let history = History {
            connection,
            path: path.to_path_buf(),
        };
        history
            .prepare()
            .map_err(|e| format!("history {}: {e}", path.display()))?;
        Ok(history)
    }

    fn prepare(&self) -> Result<(), String> {
        let c = &self.connection;
        // Before anything is written (the switch to WAL writes the header): pages freed by
        // retention can then leave the file. Only on a new file: on one made with it the
        // pragma writes the header again, a transaction and an fsync at every open (~10 ms of
        // each `lfm run --auto`); on an older one it does nothing.
        let pages: i64 = c
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .map_err(|e| e.to_string())?;
        if pages == 0 {
            c.execute_batch("PRAGMA auto_vacuum=INCREMENTAL")
                .map_err(|e| e.to_string())?;
        }
        let wal = self.switch_to_wal()?;
        if wal != "wal" {
            return Err(format!("cannot switch to WAL mode (got {wal})"));
        }
        // A serve records every call: with WAL, NORMAL syncs at checkpoints rather than on
        // each commit (an fsync per call). A power cut may lose the last rows, never corrupt.
        c.execute_batch("PRAGMA synchronous=NORMAL")
            .map_err(|e| e.to_string())?;
        // Reads through a mapping, not a pread per page: a category's window lies on as many
        // pages as it has runs where categories interleave (1,000 syscalls, ~4 ms a decision).
        c.execute_batch("PRAGMA mmap_size=268435456")
            .map_err(|e| e.to_string())?;
        let tables: i64 = c
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| e.to_string())?;
        if tables == 0 {
            c.execute_batch(
                "BEGIN IMMEDIATE;
                 CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                 INSERT OR IGNORE INTO meta VALUES ('schema', 'lfm-history/1');
                 CREATE TABLE IF NOT EXISTS runs (
                     id INTEGER PRIMARY KEY, category TEXT NOT NULL, time REAL NOT NULL,
                     exit TEXT NOT NULL, exceeded TEXT NOT NULL, memory_mb REAL NOT NULL,
                     cores REAL NOT NULL, disk_mb REAL, wall_time REAL NOT NULL,
                     memory_limit_mb REAL, sized INTEGER NOT NULL, report TEXT NOT NULL);
                 CREATE INDEX IF NOT EXISTS runs_category ON runs (category, id);
                 COMMIT;",
            )
            .map_err(|e| e.to_string())?;
        }
        let schema: Option<String> = c
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|_| "not an lfm history (it has other tables)".to_string())?;
        match schema.as_deref() {
            Some(SCHEMA) => imports::prepare(c)
                .and_then(|()| retention::prepare(c))
                .and_then(|()| tallies::prepare(c))
                .map(|()| self.prepare_window()),
            Some(other) => Err(format!("schema {other}, this lfm reads {SCHEMA}")),
            None => Err("not an lfm history (no schema version)".into()),
        }
    }

    /// `PRAGMA journal_mode=WAL` needs the database to itself for a moment, and SQLite answers
    /// "database is locked" at once there rather than call the busy handler: while other lfm
    /// processes create or write the same file, it is tried again until the busy timeout.
    fn switch_to_wal(&self) -> Result<String, String> {
        let started = std::time::Instant::now();
        loop {
            match self
                .connection
                .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            {
                Ok(mode) => return Ok(mode),
                Err(e) if is_busy(&e) && started.elapsed() < BUSY_TIMEOUT => {
                    std::thread::sleep(retry_pause());
                }
                Err(e) if is_busy(&e) => {
                    return Err(format!("still locked after {BUSY_TIMEOUT:?} ({e})"))
                }
                Err(e) => return Err(format!("not an SQLite database, or damaged ({e})")),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one finished run (its category is the Report's), and a call's imports with it.
    pub fn record(&self, report: &Report, sized: bool) -> Result<(), String> {
        self.record_all(&[(report, sized)])
    }

    /// Append finished runs in one transaction, all or none (`lfm serve` records the calls
    /// that ended meanwhile together: one commit instead of one a call).
    pub fn record_all(&self, runs: &[(&Report, bool)]) -> Result<(), String> {
        let fail = |e: rusqlite::Error| format!("history {}: {e}", self.path.display());
        let transaction = self.connection.unchecked_transaction().map_err(fail)?;
        for &(report, sized) in runs {
            self.insert_run(report, sized)?;
            let run = transaction.last_insert_rowid();
            imports::record(&transaction, run, report).map_err(fail)?;
            self.keep_window_current(category_of(report), Some(run));
        }
        transaction.commit().map_err(fail)?;
        let categories: std::collections::BTreeSet<&str> =
            runs.iter().map(|(report, _)| category_of(report)).collect();
        for category in categories {
            self.prune_when_due(category);
        }
        Ok(())
    }

    /// `write` with this connection's automatic checkpoints off: a decision's own writes (its
    /// tallies, the window cache) never copy the log into the file, which takes milliseconds
    /// at times; the writes that record, import and prune runs still do.
    fn without_checkpoint<T>(
        &self,
        write: impl FnOnce() -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.connection
            .execute_batch("PRAGMA wal_autocheckpoint=0")?;
        let written = write();
        // Should this fail, this connection no longer checkpoints; the others still do.
        let _ = (self.connection)
            .execute_batch(&format!("PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES}"));
        written
    }

    fn insert_run(&self, report: &Report, sized: bool) -> Result<(), String> {
        let exit = serde_json::to_value(report.exit.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let exceeded: Vec<&str> = report.limits_exceeded.keys().map(String::as_str).collect();
        let json = retention::sizing_fields(report).to_string();
        self.connection
            .execute(
                "INSERT INTO runs (category, time, exit, exceeded, memory_mb, cores, disk_mb,
                     wall_time, memory_limit_mb, sized, report)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    report.category.as_deref().unwrap_or("default"),
                    report.end,
                    exit,
                    exceeded.join(","),
                    report.memory.peak_bytes as f64 / MIB,
                    report.cores.peak.max(report.cores.average),
                    report.disk.as_ref().map(|d| d.bytes as f64 / MIB),
                    report.wall_time,
                    report.limits.memory_bytes.map(|b| b as f64 / MIB),
                    sized,
                    json,
                ],
            )
            .map_err(|e| format!("history {}: {e}", self.path.display()))?;
        let whole = serde_json::to_string(report).map_err(|e| e.to_string())?;
        self.connection
            .execute(
                "INSERT INTO reports (run_id, report) VALUES (?1, ?2)",
                params![self.connection.last_insert_rowid(), whole],
            )
            .map_err(|e| format!("history {}: {e}", self.path.display()))?;
        Ok(())
    }

    /// Rows in the order they were recorded, of one category or all.
    pub fn rows(&self, category: Option<&str>) -> Result<Vec<Row>, String> {
        let filter = "WHERE ?1 IS NULL OR category = ?1 ORDER BY id LIMIT ?2";
        self.select_rows(filter, category, i64::MAX)
    }

    /// How each run (of `category`, or all) ended beyond its exit type, by run id: the exit
    /// fields its row keeps, else those of its whole Report; none where neither has them.
    pub fn exits(
        &self,
        category: Option<&str>,
    ) -> Result<std::collections::HashMap<i64, ExitDetails>, String> {
        let sql = "SELECT runs.id, COALESCE(json_extract(runs.report, '$.exit'),
                       json_extract(reports.report, '$.exit'))
                   FROM runs LEFT JOIN reports ON reports.run_id = runs.id
                   WHERE ?1 IS NULL OR runs.category = ?1";
        let read = || -> rusqlite::Result<_> {
            let mut statement = self.connection.prepare(sql)?;
            let rows = statement.query_map(params![category], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))
            })?;
            let mut exits = std::collections::HashMap::new();
            for row in rows {
                let (id, exit) = row?;
                if let Some(exit) = exit.and_then(|e| serde_json::from_str(&e).ok()) {
                    exits.insert(id, exit);
                }
            }
            Ok(exits)
        };
        read().map_err(|e| format!("history {}: {e}", self.path.display()))
    }

    /// What sizing reads: the [`SIZING_WINDOW`] most recent rows of one category (or of all),
    /// in the order they were recorded. A decision then costs the same after a million runs as
    /// after a thousand, and follows a category whose needs drift.
    /// A category's window comes from its cache beside the runs (`window.rs`), brought up to
    /// date first: its runs lie together there, where in `runs` they lie on as many pages as
    /// it has runs once categories interleave.
    pub fn sizing_rows(&self, category: Option<&str>) -> Result<Vec<Row>, String> {
        if let Some(rows) = category.and_then(|c| self.cached_window(c)) {
            return Ok(rows);
        }
        self.window_from_runs(category)
    }

    /// [`History::sizing_rows`] read from the runs themselves.
    fn window_from_runs(&self, category: Option<&str>) -> Result<Vec<Row>, String> {
        // Two statements, so that a category's rows come from the (category, id) index.
        let filter = match category {
            Some(_) => "WHERE category = ?1 ORDER BY id DESC LIMIT ?2",
            None => "WHERE ?1 IS NULL ORDER BY id DESC LIMIT ?2",
        };
        let mut rows = self.select_rows(filter, category, SIZING_WINDOW as i64)?;
        rows.reverse();
        Ok(rows)
    }

    fn select_rows(
        &self,
        filter: &str,
        category: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Row>, String> {
        self.runs_where(filter, params![category, limit])
            .map_err(|e| format!("history {}: {e}", self.path.display()))
    }

    /// The runs `filter` (a WHERE clause and what follows it) selects, as sizing reads them.
    fn runs_where(
        &self,
        filter: &str,
        values: impl rusqlite::Params,
    ) -> rusqlite::Result<Vec<Row>> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs {filter}");
        let mut statement = self.connection.prepare_cached(&sql)?;
        let rows = statement.query_map(values, read_run)?;
        rows.collect()
    }
}

/// What sizing reads of a run row: its columns, then the Report fields it keeps
/// ([`retention::sizing_fields`]), parsed here (`json_extract` of each field in SQL cost
/// ~1 ms over a window of 1,000 runs). The window's cache stores what [`read_run`] makes of
/// them, so that both read the same values.
const RUN_COLUMNS: &str = "
    id, category, time, exit, exceeded, memory_mb, cores, disk_mb, wall_time, memory_limit_mb,
    sized, report";

/// The Report fields a run row keeps, as [`retention::sizing_fields`] writes them (a row
/// recorded before retention holds the whole Report: the same fields among others).
#[derive(Default, serde::Deserialize)]
struct SizingFields {
    limits: Option<LimitFields>,
    cpu_throttling: Option<ThrottlingFields>,
    gpu: Option<GpuFields>,
    allocation: Option<AllocationFields>,
    input_bytes: Option<f64>,
}

#[derive(serde::Deserialize)]
struct LimitFields {
    cores: Option<f64>,
}

#[derive(serde::Deserialize)]
struct ThrottlingFields {
    periods: Option<f64>,
    throttled_periods: Option<f64>,
}

#[derive(serde::Deserialize)]
struct GpuFields {
    memory_peak_bytes: Option<f64>,
    devices_used: Option<f64>,
}

#[derive(serde::Deserialize)]
struct AllocationFields {
    memory_bytes: Option<f64>,
    queue_wait_seconds: Option<f64>,
}

/// A [`Row`] from the columns of [`RUN_COLUMNS`], in that order. A Report whose fields do not
/// read gives none of them (sizing then goes without them), never a failed decision.
fn read_run(r: &rusqlite::Row) -> rusqlite::Result<Row> {
    let report = r.get_ref(11)?.as_str().unwrap_or_default();
    let fields: SizingFields = serde_json::from_str(report).unwrap_or_default();
    let throttling = fields.cpu_throttling.as_ref();
    let throttled = throttling
        .and_then(|t| Some((t.throttled_periods?, t.periods?)))
        .filter(|&(_, periods)| periods != 0.0)
        .map(|(throttled, periods)| throttled / periods);
    let gpu = fields.gpu.as_ref();
    let allocation = fields.allocation.as_ref();
    Ok(Row {
        cores_limit: fields.limits.and_then(|l| l.cores),
        throttled,
        gpu_memory_mb: gpu.and_then(|g| g.memory_peak_bytes).map(|b| b / MIB),
        gpus: gpu.and_then(|g| g.devices_used),
        allocation_mb: allocation.and_then(|a| a.memory_bytes).map(|b| b / MIB),
        queue_wait_seconds: allocation.and_then(|a| a.queue_wait_seconds),
        input_bytes: fields.input_bytes,
        ..read_columns(r)?
    })
}

/// A [`Row`] of the eleven columns both [`read_run`] and [`read_row`] start with; the Report
/// fields left for them.
fn read_columns(r: &rusqlite::Row) -> rusqlite::Result<Row> {
    Ok(Row {
        id: r.get(0)?,
        category: r.get(1)?,
        time: r.get(2)?,
        exit: r.get(3)?,
        exceeded: r.get(4)?,
        memory_mb: r.get(5)?,
        cores: r.get(6)?,
        disk_mb: r.get(7)?,
        wall_time: r.get(8)?,
        memory_limit_mb: r.get(9)?,
        sized: r.get(10)?,
        cores_limit: None,
        throttled: None,
        gpu_memory_mb: None,
        gpus: None,
        allocation_mb: None,
        queue_wait_seconds: None,
        input_bytes: None,
    })
}

/// A [`Row`] from the sizing window's cache, whose columns are [`Row`]'s fields in order.
fn read_row(r: &rusqlite::Row) -> rusqlite::Result<Row> {
    Ok(Row {
        cores_limit: r.get(11)?,
        throttled: r.get(12)?,
        gpu_memory_mb: r.get(13)?,
        gpus: r.get(14)?,
        allocation_mb: r.get(15)?,
        queue_wait_seconds: r.get(16)?,
        input_bytes: r.get(17)?,
        ..read_columns(r)?
    })
}

/// Whether a run's end says its memory was enough (it ended on its own or raised).
pub fn ended_normally(row: &Row) -> bool {
    matches!(row.exit.as_str(), "normal" | "exception")
}

/// A run held back at its cores limit in at least this share of its CPU periods wanted more
/// than the limit: its measured cores are what the limit allowed.
pub const THROTTLED: f64 = 0.1;

/// The cores a run needed: its measured peak, or, when the kernel throttled it at its limit
/// (see [`THROTTLED`]), one core more than the limit, so that the next allocation climbs until
/// the category runs unthrottled.
pub fn cores_needed(row: &Row) -> f64 {
    match (row.cores_limit, row.throttled) {
        (Some(limit), Some(share)) if share >= THROTTLED => row.cores.max(limit + 1.0),
        _ => row.cores,
    }
}

/// A trace row as `lfm history --import` records it: a normally ended run of its category.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    pub category: String,
    pub memory_mb: f64,
    pub cores: f64,
    pub disk_mb: Option<f64>,
    pub wall_time: f64,
    /// The task's input size in bytes, from an `input_bytes` column.
    pub input_bytes: Option<f64>,
    /// `FILE:LINE`, kept as the row's Report (`{"imported_from": ...}`).
    pub source: String,
}

/// A trace's rows for the history: every row under `category` when given, else under its own.
/// `memory` (MiB) and `cores` are required, `disk` (MiB), `wall_time` (s) and `input_bytes`
/// optional; a negative value is an error naming its line and column.
pub fn imports(
    trace: &Trace,
    path: &Path,
    category: Option<&str>,
) -> Result<Vec<Imported>, String> {
    let at = |name: &str| {
        trace
            .column(name)
            .map_err(|e| format!("{}: {e}", path.display()))
    };
    let (memory, cores) = (at("memory")?, at("cores")?);
    let (disk, wall) = (at("disk").ok(), at("wall_time").ok());
    let input = at(super::trace::INPUT_BYTES).ok();
    let mut out = Vec::with_capacity(trace.rows.len());
    for ((name, values), line) in trace.rows.iter().zip(&trace.lines) {
        for column in [Some(memory), Some(cores), disk, wall, input]
            .into_iter()
            .flatten()
        {
            if values[column] < 0.0 {
                return Err(format!(
                    "{}:{line}: column {} ({}): {} is negative",
                    path.display(),
                    column + 1,
                    trace.columns[column],
                    values[column]
                ));
            }
        }
        out.push(Imported {
            category: category.unwrap_or(name).to_string(),
            memory_mb: values[memory],
            cores: values[cores],
            disk_mb: disk.map(|d| values[d]),
            wall_time: wall.map_or(0.0, |w| values[w]),
            input_bytes: input.map(|i| values[i]),
            source: format!("{}:{line}", path.display()),
        });
    }
    Ok(out)
}

impl History {
    /// Append imported rows, all or none (one transaction), in order.
    pub fn import(&self, rows: &[Imported]) -> Result<(), String> {
        let fail = |e: rusqlite::Error| format!("history {}: {e}", self.path.display());
        let transaction = self.connection.unchecked_transaction().map_err(fail)?;
        {
            let mut insert = transaction
                .prepare(
                    "INSERT INTO runs (category, time, exit, exceeded, memory_mb, cores, disk_mb,
                         wall_time, memory_limit_mb, sized, report)
                     VALUES (?1, ?2, 'normal', '', ?3, ?4, ?5, ?6, NULL, 0, ?7)",
                )
                .map_err(fail)?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            for row in rows {
                let mut report = serde_json::json!({ "imported_from": row.source });
                if let Some(input) = row.input_bytes {
                    report["input_bytes"] = input.into();
                }
                let report = report.to_string();
                insert
                    .execute(params![
                        row.category,
                        now,
                        row.memory_mb,
                        row.cores,
                        row.disk_mb,
                        row.wall_time,
                        report
                    ])
                    .map_err(fail)?;
            }
        }
        let categories: std::collections::BTreeSet<&str> =
            rows.iter().map(|row| row.category.as_str()).collect();
        for category in categories {
            self.keep_window_current(category, None);
        }
        transaction.commit().map_err(fail)
    }
}

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// 5-20 ms, different in each process, so that processes which collided do not again.
fn retry_pause() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let spread = (nanos ^ std::process::id().wrapping_mul(2_654_435_761)) % 15;
    Duration::from_millis(5 + u64::from(spread))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// docs/report.md's example Report (its second JSON block), of `category`.
    pub(crate) fn a_report(category: &str, memory_mb: u64) -> lfm_monitor::report::Report {
        let mut report = lfm_monitor::report::documented_example();
        report.category = Some(category.into());
        report.memory.peak_bytes = memory_mb << 20;
        report
    }

    /// The `i`th run of a trace, in `category`, using `i` MiB.
    pub(in crate::history) fn run(category: &str, i: usize) -> Imported {
        Imported {
            category: category.into(),
            memory_mb: i as f64,
            cores: 1.0,
            disk_mb: None,
            wall_time: 1.0,
            input_bytes: None,
            source: format!("trace:{i}"),
        }
    }

    #[test]
    fn a_new_history_gives_pages_back_and_opening_one_again_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.sqlite");
        let first = History::open(&path).unwrap();
        first.import(&[run("a", 1)]).unwrap();
        let mode: i64 = (first.connection)
            .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, 2, "incremental");
        let wal = || {
            std::fs::metadata(dir.path().join("h.sqlite-wal"))
                .unwrap()
                .len()
        };
        let before = wal();
        let again = History::open(&path).unwrap();
        assert_eq!(wal(), before, "the second open wrote to the log");
        assert_eq!(again.sizing_rows(Some("a")).unwrap().len(), 1);
    }

    #[test]
    fn sizing_reads_the_most_recent_window_of_its_category_in_recorded_order() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(&dir.path().join("h.sqlite")).unwrap();
        let runs = SIZING_WINDOW + 300;
        let imported: Vec<Imported> = (0..2 * runs)
            .map(|i| run(if i % 2 == 0 { "a" } else { "b" }, i))
            .collect();
        history.import(&imported).unwrap();
        let window = history.sizing_rows(Some("a")).unwrap();
        let expected: Vec<f64> = (runs - SIZING_WINDOW..runs)
            .map(|i| (2 * i) as f64)
            .collect();
        let memory: Vec<f64> = window.iter().map(|row| row.memory_mb).collect();
        assert_eq!(
            memory, expected,
            "the last {SIZING_WINDOW} of a, oldest first"
        );
        assert_eq!(
            history.rows(Some("a")).unwrap().len(),
            runs,
            "rows() reads all"
        );
        let everything = history.sizing_rows(None).unwrap();
        assert_eq!(everything.len(), SIZING_WINDOW);
        assert_eq!(everything.last().unwrap().memory_mb, (2 * runs - 1) as f64);
    }
}
