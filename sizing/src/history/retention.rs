//! Retention: what the history keeps of each category, so that a node's file stops growing.
//!
//! Per category, the most recent [`Retention::whole_runs`] runs keep their whole Report and
//! their import rows. Older runs, up to [`Retention::sized_runs`] (what sizing reads), keep
//! their row with a compact Report holding only the fields sizing reads; their import rows are
//! folded into per-category totals (`pruned_calls`, `pruned_imports`, `pruned_distributions`)
//! that `lfm usage` adds to the rows still kept. Older runs leave. Each category is pruned in
//! its own short transaction, so writers wait milliseconds, never the whole pass; freed pages
//! go back to the filesystem in a new file (incremental auto-vacuum) and are reused otherwise.

use rusqlite::{params, Connection, OptionalExtension};

use super::{History, SIZING_WINDOW};
use lfm_monitor::report::Report;

pub const RETENTION_SCHEMA: &str = "lfm-retention/1";

/// A category is pruned when it holds this many runs more than it keeps (and by `lfm history
/// --prune`).
pub const PRUNE_EVERY: i64 = 500;

/// Pages an incremental vacuum frees per transaction.
const VACUUM_CHUNK: i64 = 2_000;

/// Sentinels for absent values in the totals' keys (SQLite keys never match on NULL).
const NO_DISTRIBUTION: &str = "";
const NO_CLOSURE: i64 = -1;

const CREATE: &str = "
    CREATE TABLE IF NOT EXISTS pruned_calls (
        category TEXT NOT NULL, target TEXT NOT NULL, closure_id INTEGER NOT NULL,
        preloaded TEXT NOT NULL, calls INTEGER NOT NULL, first_time REAL NOT NULL,
        last_time REAL NOT NULL, PRIMARY KEY (category, target, closure_id, preloaded));
    CREATE TABLE IF NOT EXISTS pruned_imports (
        category TEXT NOT NULL, target TEXT NOT NULL, module TEXT NOT NULL,
        distribution TEXT NOT NULL, found INTEGER NOT NULL, missed INTEGER NOT NULL,
        calls INTEGER NOT NULL, first_time REAL NOT NULL, last_time REAL NOT NULL,
        last_run INTEGER NOT NULL,
        PRIMARY KEY (category, target, module, distribution, found, missed));
    CREATE TABLE IF NOT EXISTS pruned_distributions (
        category TEXT NOT NULL, distribution TEXT NOT NULL, calls INTEGER NOT NULL,
        first_time REAL NOT NULL, last_time REAL NOT NULL,
        PRIMARY KEY (category, distribution));
    CREATE TABLE IF NOT EXISTS reports (
        run_id INTEGER PRIMARY KEY, report TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS retention_state (
        category TEXT PRIMARY KEY, compacted_below INTEGER NOT NULL);";

/// What a run row keeps of its Report: the fields sizing reads ([`History::sizing_rows`]),
/// those present only. The whole Report goes to the `reports` table, which retention empties.
pub(super) fn sizing_fields(report: &Report) -> serde_json::Value {
    let mut fields = serde_json::Map::new();
    if let Some(cores) = report.limits.cores {
        fields.insert("limits".into(), serde_json::json!({ "cores": cores }));
    }
    if let Some(throttling) = &report.cpu_throttling {
        fields.insert(
            "cpu_throttling".into(),
            serde_json::json!({
                "periods": throttling.periods,
                "throttled_periods": throttling.throttled_periods,
            }),
        );
    }
    if let Some(gpu) = &report.gpu {
        fields.insert(
            "gpu".into(),
            serde_json::json!({
                "memory_peak_bytes": gpu.memory_peak_bytes,
                "devices_used": gpu.devices_used,
            }),
        );
    }
    if let Some(allocation) = &report.allocation {
        // What a served call held of the node and waited for it: kept with the run, not only
        // in its whole Report (which retention drops first).
        fields.insert(
            "allocation".into(),
            serde_json::json!({
                "memory_bytes": allocation.memory_bytes,
                "cores": allocation.cores,
                "queue_wait_seconds": allocation.queue_wait_seconds,
            }),
        );
    }
    if let Some(input) = report.input_bytes {
        fields.insert("input_bytes".into(), input.into());
    }
    // How it ended beyond its exit type (`lfm history` shows `exception ValueError`,
    // `signal 9`, `exit 1`): kept with the run, as its whole Report goes first.
    fields.insert(
        "exit".into(),
        serde_json::json!({
            "status": report.exit.status,
            "signal": report.exit.signal,
            "exception": report.exit.exception.as_ref().map(|e| serde_json::json!({"type": e.type_name})),
        }),
    );
    serde_json::Value::Object(fields)
}

/// How much of each category the history keeps.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Runs kept whole: Report and import rows.
    pub whole_runs: usize,
    /// Runs kept at all (rows sizing reads, with a compact Report).
    pub sized_runs: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            whole_runs: 20,
            sized_runs: SIZING_WINDOW,
        }
    }
}

/// What a pass did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Pruned {
    pub categories: usize,
    /// Runs whose Report was made compact and whose imports were folded into totals.
    pub compacted: u64,
    /// Runs removed (older than what sizing reads).
    pub removed: u64,
}

/// Add the totals' tables to a history that has none.
pub(super) fn prepare(c: &Connection) -> Result<(), String> {
    let version: Option<String> = c
        .query_row(
            "SELECT value FROM meta WHERE key = 'retention_schema'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| e.to_string())?;
    match version.as_deref() {
        Some(RETENTION_SCHEMA) => Ok(()),
        Some(other) => Err(format!(
            "retention tables of schema {other}, this lfm reads {RETENTION_SCHEMA}"
        )),
        None => c
            .execute_batch(&format!(
                "BEGIN IMMEDIATE; {CREATE}
                 INSERT OR IGNORE INTO meta VALUES ('retention_schema', '{RETENTION_SCHEMA}');
                 COMMIT;"
            ))
            .map_err(|e| {
                let _ = c.execute_batch("ROLLBACK");
                format!("adding the retention tables ({RETENTION_SCHEMA}) failed: {e}")
            }),
    }
}

impl History {
    /// Prune every category to `retention`, then give freed pages back where the file allows.
    pub fn prune(&self, retention: &Retention) -> Result<Pruned, String> {
        let fail = |e: rusqlite::Error| format!("history {}: {e}", self.path.display());
        let categories: Vec<String> = {
            let mut statement = self
                .connection
                .prepare("SELECT DISTINCT category FROM runs")
                .map_err(fail)?;
            let rows = statement.query_map([], |r| r.get(0)).map_err(fail)?;
            rows.collect::<Result<_, _>>().map_err(fail)?
        };
        let pruned = self
            .prune_categories(&categories, retention, Pace::WHOLE)
            .map_err(fail)?;
        // Freed pages leave the file (where it was made with incremental auto-vacuum), and
        // the log is folded back so that it does not keep them.
        self.give_back_pages().map_err(fail)?;
        Ok(pruned)
    }

    /// Give freed pages back to the filesystem: in chunks where the file was made for it
    /// (incremental auto-vacuum), else, or when it is mostly free pages (a first pass over a
    /// long history), by one VACUUM, during which writers wait; it costs what is left, while
    /// moving pages one by one out of a huge free list took hours here.
    fn give_back_pages(&self) -> rusqlite::Result<()> {
        let pragma = |pragma: &str| -> rusqlite::Result<i64> {
            self.connection.query_row(pragma, [], |r| r.get(0))
        };
        let free = pragma("PRAGMA freelist_count")?;
        if pragma("PRAGMA auto_vacuum")? != 2 || free * 2 > pragma("PRAGMA page_count")? {
            self.connection
                .execute_batch("PRAGMA auto_vacuum=INCREMENTAL; VACUUM;")?;
        } else {
            // Each chunk its own transaction, so that writers wait for one at most; each step
            // of `incremental_vacuum` frees one page: stepped to the end.
            for _ in 0..(free + VACUUM_CHUNK - 1) / VACUUM_CHUNK {
                let sql = format!("PRAGMA incremental_vacuum({VACUUM_CHUNK})");
                let mut vacuum = self.connection.prepare_cached(&sql)?;
                let mut freed = vacuum.query([])?;
                while freed.next()?.is_some() {}
            }
        }
        self.connection
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    /// Bytes of the file and its write-ahead log.
    pub fn file_bytes(&self) -> u64 {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let wal = std::path::PathBuf::from(wal);
        [&self.path, &wal]
            .iter()
            .filter_map(|path| std::fs::metadata(path).ok())
            .map(|meta| meta.len())
            .sum()
    }

    /// After a run of `category` is recorded: prune it once it holds [`PRUNE_EVERY`] runs
    /// more than it keeps (a failure is a warning: the run is recorded). Counted no further
    /// than that, through the index: counting all of a category cost every run ~40 ms on a
    /// history of a million runs never pruned, which is then caught up a pass per run.
    pub(super) fn prune_when_due(&self, category: &str) {
        let retention = Retention::default();
        let threshold = (retention.sized_runs.max(retention.whole_runs) as i64) + PRUNE_EVERY;
        let count: rusqlite::Result<i64> = self.connection.query_row(
            "SELECT count(*) FROM
                 (SELECT 1 FROM runs WHERE category = ?1 ORDER BY id DESC LIMIT ?2)",
            params![category, threshold],
            |r| r.get(0),
        );
        if count.is_ok_and(|n| n >= threshold) {
            let one = [category.to_string()];
            if let Err(error) = self.prune_categories(&one, &retention, Pace::WHILE_RECORDING) {
                eprintln!(
                    "lfm: warning: pruning history {}: {error}",
                    self.path.display()
                );
            }
        }
    }

    /// Prune `categories`: their bounds first, then the runs by ranges of ids, each range in
    /// its own transaction (writers wait for one range at most) and each page read once
    /// whatever the number of categories: runs of many categories share pages, and a pass per
    /// category rewrote every page once per category (hundreds of GB of I/O on a million runs).
    fn prune_categories(
        &self,
        categories: &[String],
        retention: &Retention,
        pace: Pace,
    ) -> rusqlite::Result<Pruned> {
        let c = &self.connection;
        c.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS prune_bounds (
                 category TEXT PRIMARY KEY, compacted_below INTEGER NOT NULL,
                 whole_from INTEGER NOT NULL, kept_from INTEGER NOT NULL);
             DELETE FROM temp.prune_bounds;",
        )?;
        let mut pruned = Pruned::default();
        for category in categories {
            pruned.categories += usize::from(self.bound(category, retention)?);
        }
        // From the oldest run of these categories to the last boundary.
        let (first, last): (Option<i64>, Option<i64>) = c.query_row(
            "SELECT min((SELECT min(id) FROM runs r WHERE r.category = b.category)),
                    max(max(b.whole_from, b.kept_from))
             FROM temp.prune_bounds b",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let (Some(mut start), Some(last)) = (first, last) else {
            return Ok(pruned);
        };
        let mut ranges = 0;
        while start < last && ranges < pace.most_ranges {
            let end = start + pace.range;
            let transaction = c.unchecked_transaction()?;
            pruned.compacted += fold_range(c, start, end)?;
            pruned.removed += remove_range(c, start, end)?;
            transaction.commit()?;
            start = end;
            ranges += 1;
        }
        // Folded up to `start` (all of it unless the pace stopped the pass early).
        c.execute(
            "INSERT INTO retention_state (category, compacted_below)
                 SELECT category, min(whole_from, ?1) FROM temp.prune_bounds
                 WHERE min(whole_from, ?1) > compacted_below
             ON CONFLICT (category) DO UPDATE SET compacted_below = excluded.compacted_below",
            params![start],
        )?;
        Ok(pruned)
    }

    /// Note in `prune_bounds` where `category`'s whole runs and kept runs start; whether there
    /// is anything to fold or remove.
    fn bound(&self, category: &str, retention: &Retention) -> rusqlite::Result<bool> {
        let c = &self.connection;
        // The id of the oldest of the `kept` most recent runs (past the newest when none).
        let boundary = |kept: usize| -> rusqlite::Result<Option<i64>> {
            if kept == 0 {
                return c.query_row(
                    "SELECT max(id) + 1 FROM runs WHERE category = ?1",
                    params![category],
                    |r| r.get(0),
                );
            }
            c.query_row(
                "SELECT id FROM runs WHERE category = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2",
                params![category, kept as i64 - 1],
                |r| r.get(0),
            )
            .optional()
        };
        let compacted_below: i64 = c
            .query_row(
                "SELECT compacted_below FROM retention_state WHERE category = ?1",
                params![category],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0);
        let whole_from = boundary(retention.whole_runs)?
            .unwrap_or(0)
            .max(compacted_below);
        let kept_from = boundary(retention.sized_runs.max(retention.whole_runs))?.unwrap_or(0);
        c.execute(
            "INSERT INTO temp.prune_bounds VALUES (?1, ?2, ?3, ?4)",
            params![category, compacted_below, whole_from, kept_from],
        )?;
        let has_older: bool = c.query_row(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE category = ?1 AND id < ?2)",
            params![category, kept_from],
            |r| r.get(0),
        )?;
        Ok(whole_from > compacted_below || has_older)
    }
}

/// How a pass walks the ids: so many per transaction, and at most so many transactions.
#[derive(Clone, Copy)]
struct Pace {
    range: i64,
    most_ranges: usize,
}

impl Pace {
    /// `lfm history --prune`: everything, in large ranges (a first pass over a million calls
    /// takes minutes; writers wait for one range, about 4 s there).
    const WHOLE: Pace = Pace {
        range: 20_000,
        most_ranges: usize::MAX,
    };
    /// After a run is recorded (a serve records between calls): small ranges, and a bounded
    /// pass; a long history never pruned before is caught up over the next passes.
    const WHILE_RECORDING: Pace = Pace {
        range: 1_000,
        most_ranges: 200,
    };
}

/// The runs with ids in `?1..?2` whose detail retention folds now: past their category's
/// whole runs, not folded before.
const FOLDED: &str = "
    WITH folded AS (
        SELECT r.id, r.category, r.time FROM runs r
        JOIN temp.prune_bounds b ON b.category = r.category
        WHERE r.id >= ?1 AND r.id < ?2 AND r.id >= b.compacted_below AND r.id < b.whole_from)";

/// Fold the calls and imports of the runs of `start..end` whose detail leaves into the totals,
/// remove their rows and whole Reports, and make compact a Report a run row holds itself.
fn fold_range(c: &Connection, start: i64, end: i64) -> rusqlite::Result<u64> {
    let range = params![start, end];
    let folded: i64 = c.query_row(
        &format!("{FOLDED} SELECT count(*) FROM folded"),
        range,
        |r| r.get(0),
    )?;
    if folded == 0 {
        return Ok(0);
    }
    c.execute(
        &format!("{FOLDED} {FOLD_CALLS}"),
        params![start, end, NO_CLOSURE],
    )?;
    c.execute(
        &format!("{FOLDED} {FOLD_IMPORTS}"),
        params![start, end, NO_DISTRIBUTION],
    )?;
    c.execute(&format!("{FOLDED} {FOLD_DISTRIBUTIONS}"), range)?;
    for table in ["call_imports", "calls", "reports"] {
        c.execute(
            &format!("{FOLDED} DELETE FROM {table} WHERE run_id IN (SELECT id FROM folded)"),
            range,
        )?;
    }
    let compacted = c.execute(&format!("{FOLDED} {COMPACT_REPORTS}"), range)?;
    if compacted > 0 {
        // Their rows changed: the sizing window's cache of them is filled again (window.rs).
        c.execute(
            &format!(
                "{FOLDED} DELETE FROM sizing_window
                 WHERE (category, id) IN (SELECT category, id FROM folded)"
            ),
            range,
        )?;
    }
    Ok(folded as u64)
}

/// Remove the runs of `start..end` older than what their category keeps (folded already).
fn remove_range(c: &Connection, start: i64, end: i64) -> rusqlite::Result<u64> {
    let removed = "SELECT r.id FROM runs r JOIN temp.prune_bounds b ON b.category = r.category
                   WHERE r.id >= ?1 AND r.id < ?2 AND r.id < b.kept_from";
    for table in ["call_imports", "calls", "reports"] {
        c.execute(
            &format!("DELETE FROM {table} WHERE run_id IN ({removed})"),
            params![start, end],
        )?;
    }
    let count = c.execute(
        &format!("DELETE FROM runs WHERE id IN ({removed})"),
        params![start, end],
    )?;
    Ok(count as u64)
}

/// The calls of the folded runs, added to their totals (`?3`: the key of no closure).
const FOLD_CALLS: &str = "
    INSERT INTO pruned_calls (category, target, closure_id, preloaded, calls, first_time,
                              last_time)
    SELECT f.category, k.target, coalesce(k.closure_id, ?3), k.preloaded, count(*),
           min(f.time), max(f.time)
    FROM folded f JOIN calls k ON k.run_id = f.id
    WHERE true
    GROUP BY 1, 2, 3, 4
    ON CONFLICT (category, target, closure_id, preloaded) DO UPDATE SET
        calls = calls + excluded.calls, first_time = min(first_time, excluded.first_time),
        last_time = max(last_time, excluded.last_time)";

/// Their imports (`?3`: the key of no distribution).
const FOLD_IMPORTS: &str = "
    INSERT INTO pruned_imports (category, target, module, distribution, found, missed, calls,
                                first_time, last_time, last_run)
    SELECT f.category, k.target, i.module, coalesce(i.distribution, ?3), i.found, i.missed,
           count(*), min(f.time), max(f.time), max(f.id)
    FROM folded f JOIN calls k ON k.run_id = f.id JOIN call_imports i ON i.run_id = f.id
    WHERE true
    GROUP BY 1, 2, 3, 4, 5, 6
    ON CONFLICT (category, target, module, distribution, found, missed) DO UPDATE SET
        calls = calls + excluded.calls, first_time = min(first_time, excluded.first_time),
        last_time = max(last_time, excluded.last_time),
        last_run = max(last_run, excluded.last_run)";

/// Per distribution, the calls that imported any of its modules (one each, however many).
const FOLD_DISTRIBUTIONS: &str = "
    INSERT INTO pruned_distributions (category, distribution, calls, first_time, last_time)
    SELECT f.category, i.distribution, count(DISTINCT f.id), min(f.time), max(f.time)
    FROM folded f JOIN calls k ON k.run_id = f.id JOIN call_imports i ON i.run_id = f.id
    WHERE i.found AND i.distribution IS NOT NULL
    GROUP BY 1, 2
    ON CONFLICT (category, distribution) DO UPDATE SET
        calls = calls + excluded.calls, first_time = min(first_time, excluded.first_time),
        last_time = max(last_time, excluded.last_time)";

/// A whole Report kept in its run row (a history written before the `reports` table) made
/// what [`sizing_fields`] keeps (merge-patching onto `{}` drops the absent ones). Pages it
/// frees are only partly free: a VACUUM (`lfm history --prune` on such a file) returns them.
const COMPACT_REPORTS: &str = "
    UPDATE runs SET report = json_patch('{}', json_object(
        'limits', json_object('cores', json_extract(report, '$.limits.cores')),
        'cpu_throttling', json_object(
            'periods', json_extract(report, '$.cpu_throttling.periods'),
            'throttled_periods', json_extract(report, '$.cpu_throttling.throttled_periods')),
        'gpu', json_object(
            'memory_peak_bytes', json_extract(report, '$.gpu.memory_peak_bytes'),
            'devices_used', json_extract(report, '$.gpu.devices_used')),
        'input_bytes', json_extract(report, '$.input_bytes')))
    WHERE id IN (SELECT id FROM folded) AND json_valid(report) AND length(report) > 512";

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use super::super::Imported;
    use super::*;

    fn history_with(runs: usize) -> (tempfile::TempDir, History) {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(&dir.path().join("h.sqlite")).unwrap();
        let rows: Vec<Imported> = (0..runs).map(|i| run("a", i)).collect();
        history.import(&rows).unwrap();
        (dir, history)
    }

    #[test]
    fn recording_prunes_a_category_once_it_holds_prune_every_runs_more_than_it_keeps() {
        let window = Retention::default().sized_runs;
        let (_dir, history) = history_with(window + PRUNE_EVERY as usize - 1);
        history.prune_when_due("a");
        let count = |h: &History| h.rows(Some("a")).unwrap().len();
        assert_eq!(
            count(&history),
            window + PRUNE_EVERY as usize - 1,
            "not due"
        );

        let (_dir, history) = history_with(window + PRUNE_EVERY as usize);
        history.prune_when_due("a");
        let rows = history.rows(Some("a")).unwrap();
        assert_eq!(rows.len(), window, "due: back to what sizing reads");
        assert_eq!(rows[0].memory_mb, PRUNE_EVERY as f64, "the oldest left");
        assert_eq!(history.sizing_rows(Some("a")).unwrap(), rows);

        // A long history never pruned: due whatever its count (it was due only at multiples).
        let (_dir, history) = history_with(window + 3 * PRUNE_EVERY as usize + 7);
        history.prune_when_due("a");
        assert_eq!(count(&history), window, "a long history is caught up");
    }

    #[test]
    fn a_paced_pass_stops_early_and_the_next_ones_go_on_where_it_stopped() {
        let window = Retention::default().sized_runs;
        let (_dir, history) = history_with(window + 500);
        let pace = Pace {
            range: 100,
            most_ranges: 2,
        };
        let one = ["a".to_string()];
        let count = |h: &History| h.rows(Some("a")).unwrap().len();
        let first = history
            .prune_categories(&one, &Retention::default(), pace)
            .unwrap();
        assert_eq!(first.removed, 200, "two ranges of 100 ids");
        assert_eq!(count(&history), window + 300);
        for _ in 0..3 {
            history
                .prune_categories(&one, &Retention::default(), pace)
                .unwrap();
        }
        assert_eq!(count(&history), window, "caught up");
        let rows = history.rows(Some("a")).unwrap();
        assert_eq!(rows[0].memory_mb, 500.0, "the oldest kept");
    }
}
