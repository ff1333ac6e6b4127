//! The sizing window's cache: per category, what sizing reads of its [`SIZING_WINDOW`] most
//! recent runs, kept together (a table clustered by category and id). In `runs` a category's
//! rows lie on as many pages as it has rows once categories interleave, so reading its window
//! there costs a page per run (~2-8 ms on a million-run history); here it is a few pages.
//!
//! A cache, checked against `runs` at each read by cheap index lookups: it must hold every run
//! of the category from the window's first to its own newest, nothing else (a run another lfm
//! recorded or retention removed shows in the counts). Runs recorded since are copied in and
//! those that left the window dropped, in one short write that never waits for another writer;
//! a cache that does not match is filled again from `runs`. Whatever goes wrong, sizing reads
//! `runs` as before: the cache only ever makes a read faster.

use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};

use super::{read_row, History, Row, BUSY_TIMEOUT, SIZING_WINDOW};

/// Added in place to histories made before it (older lfm versions ignore it). [`Row`]'s
/// fields in order, as reading `runs` makes them, untyped: they read back exactly.
const CREATE: &str = "
    CREATE TABLE IF NOT EXISTS sizing_window (
        id INTEGER NOT NULL, category TEXT NOT NULL, time, exit, exceeded, memory_mb, cores,
        disk_mb, wall_time, memory_limit_mb, sized, cores_limit, throttled, gpu_memory_mb,
        gpus, allocation_mb, queue_wait_seconds, input_bytes,
        PRIMARY KEY (category, id)) WITHOUT ROWID;";

/// Written to `meta` once every category's cache was filled: a history made before the cache
/// (or by an lfm that only made its table) is filled whole at the first open, once, so that no
/// decision reads a window from `runs` for it.
const FILLED_KEY: &str = "sizing_window_schema";
const FILLED: &str = "lfm-sizing-window/1";

fn filled(c: &Connection) -> rusqlite::Result<bool> {
    let value: Option<String> = c
        .query_row("SELECT value FROM meta WHERE key = ?1", [FILLED_KEY], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(value.as_deref() == Some(FILLED))
}

impl History {
    /// Make the cache and fill it for every category, in one transaction, unless an lfm did.
    /// Where that cannot be written (a history lfm may only read) the open goes on: sizing
    /// reads `runs` where the cache cannot serve it, and the next open tries again.
    pub(super) fn prepare_window(&self) {
        let c = &self.connection;
        if filled(c).unwrap_or(false) {
            return;
        }
        let fill = || -> rusqlite::Result<()> {
            // Immediate: the write lock first (waiting for it), then the check, so that
            // another lfm filling it meanwhile is seen.
            let transaction = Transaction::new_unchecked(c, TransactionBehavior::Immediate)?;
            if !filled(c)? {
                c.execute_batch(CREATE)?;
                for category in categories(c)? {
                    let state = self.window_state(&category)?;
                    if !state.current() {
                        self.bring_up_to_date(&category, &state)?;
                    }
                }
                c.execute(
                    "INSERT OR REPLACE INTO meta VALUES (?1, ?2)",
                    [FILLED_KEY, FILLED],
                )?;
            }
            transaction.commit()
        };
        let _ = fill();
    }
}

/// Every category with runs, hopping through the (category, id) index: a category at a time,
/// not a run at a time.
fn categories(c: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut statement = c.prepare(
        "WITH RECURSIVE next (category) AS (
             SELECT min(category) FROM runs
             UNION ALL
             SELECT (SELECT min(category) FROM runs WHERE category > next.category)
             FROM next WHERE next.category IS NOT NULL)
         SELECT category FROM next WHERE category IS NOT NULL",
    )?;
    let categories = statement.query_map([], |r| r.get(0))?;
    categories.collect()
}

/// What the cache holds of a category and what `runs` holds in the same ids.
struct State {
    /// The first id of the category's window in `runs` (None: it has no run).
    start: Option<i64>,
    /// The cache's oldest and newest ids and its row count.
    cached: (Option<i64>, Option<i64>, i64),
    /// Runs of the category in `runs` between the cache's oldest and newest.
    runs_in_cache: i64,
    /// The category's newest run.
    newest: Option<i64>,
}

impl State {
    /// The cache holds every run of the category from its oldest to its newest, and the
    /// window's start is among them.
    fn whole(&self) -> bool {
        let (oldest, _, count) = self.cached;
        count == self.runs_in_cache && oldest.zip(self.start).is_some_and(|(o, s)| o <= s)
    }

    /// The cache is the window, neither more nor less.
    fn current(&self) -> bool {
        let (oldest, newest, _) = self.cached;
        self.whole() && newest == self.newest && oldest == self.start
    }
}

impl History {
    /// The category's sizing window from the cache, brought up to date; None where the cache
    /// cannot serve it (then sizing reads `runs`).
    pub(super) fn cached_window(&self, category: &str) -> Option<Vec<Row>> {
        let state = self.window_state(category).ok()?;
        let start = state.start?;
        if !state.current() {
            // Filling it whole reads the window's scattered rows anyway (and writes them: ~4
            // ms): a decision reads them from `runs` instead and leaves the filling to the
            // category's next recorded run. Runs recorded by an older lfm are copied in here.
            if !state.whole() {
                return None;
            }
            self.write_without_waiting(|| self.bring_up_to_date(category, &state))
                .ok()?;
        }
        self.read_cache(category, start).ok()
    }

    /// After runs of `category` are inserted (`recorded`: the one run, when there is one),
    /// inside the recording's transaction: the cache takes them (and is filled or caught up
    /// first where it was behind), so that no decision pays for that. A failure only leaves
    /// the cache behind: the next decision sees it.
    pub(super) fn keep_window_current(&self, category: &str, recorded: Option<i64>) {
        if recorded.is_some_and(|run| self.append(category, run).unwrap_or(false)) {
            return;
        }
        if let Ok(state) = self.window_state(category) {
            if !state.current() {
                let _ = self.bring_up_to_date(category, &state);
            }
        }
    }

    /// Where the cache ends at the category's run before `run`: take `run` in and drop what
    /// left the window, a few index lookups (`window_state` counts both sides of the cache,
    /// ~2,000 index entries, which every recorded run would pay). Whether it did.
    fn append(&self, category: &str, run: i64) -> rusqlite::Result<bool> {
        let c = &self.connection;
        let newest = |sql: &str| -> rusqlite::Result<Option<i64>> {
            c.prepare_cached(sql)?
                .query_row(params![category, run], |r| r.get(0))
        };
        let cached = newest("SELECT max(id) FROM sizing_window WHERE category = ?1 AND id < ?2")?;
        let before = newest("SELECT max(id) FROM runs WHERE category = ?1 AND id < ?2")?;
        if cached.is_none() || cached != before {
            return Ok(false);
        }
        self.copy_in(self.runs_where("WHERE id = ?1", params![run])?)?;
        c.prepare_cached(
            "DELETE FROM sizing_window WHERE category = ?1 AND id <
                 (SELECT id FROM runs WHERE category = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
        )?
        .execute(params![category, SIZING_WINDOW as i64 - 1])?;
        Ok(true)
    }

    fn window_state(&self, category: &str) -> rusqlite::Result<State> {
        let one = |sql: &str, p: &[&dyn rusqlite::ToSql]| -> rusqlite::Result<Option<i64>> {
            let mut statement = self.connection.prepare_cached(sql)?;
            statement
                .query_row(p, |r| r.get(0))
                .optional()
                .map(Option::flatten)
        };
        let start = one(
            "SELECT coalesce(
                 (SELECT id FROM runs WHERE category = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2),
                 (SELECT min(id) FROM runs WHERE category = ?1))",
            &[&category, &(SIZING_WINDOW as i64 - 1)],
        )?;
        let cached: (Option<i64>, Option<i64>, i64) = self
            .connection
            .prepare_cached(
                "SELECT min(id), max(id), count(*) FROM sizing_window WHERE category = ?1",
            )?
            .query_row(params![category], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        let runs_in_cache = one(
            "SELECT count(*) FROM runs WHERE category = ?1 AND id BETWEEN ?2 AND ?3",
            &[&category, &cached.0, &cached.1],
        )?;
        let newest = one("SELECT max(id) FROM runs WHERE category = ?1", &[&category])?;
        Ok(State {
            start,
            cached,
            runs_in_cache: runs_in_cache.unwrap_or(0),
            newest,
        })
    }

    /// Copy in the runs after the cache's newest, when what it holds is right (else it is
    /// filled again from the window's start), and drop those before the start.
    fn bring_up_to_date(&self, category: &str, state: &State) -> rusqlite::Result<()> {
        let Some(start) = state.start else {
            return Ok(());
        };
        let c = &self.connection;
        let kept = state.cached.1.filter(|_| state.whole());
        let drop_below = if kept.is_some() { start } else { i64::MAX };
        c.prepare_cached("DELETE FROM sizing_window WHERE category = ?1 AND id < ?2")?
            .execute(params![category, drop_below])?;
        let from = kept.map_or(start, |newest| newest + 1);
        let filter = "WHERE category = ?1 AND id >= ?2 ORDER BY id";
        self.copy_in(self.runs_where(filter, params![category, from])?)
    }

    /// Put `runs` into the cache as sizing reads them from `runs`.
    fn copy_in(&self, runs: Vec<Row>) -> rusqlite::Result<()> {
        let mut insert = self.connection.prepare_cached(
            "INSERT INTO sizing_window VALUES
                 (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
        )?;
        for run in runs {
            insert.execute(params![
                run.id,
                run.category,
                run.time,
                run.exit,
                run.exceeded,
                run.memory_mb,
                run.cores,
                run.disk_mb,
                run.wall_time,
                run.memory_limit_mb,
                run.sized,
                run.cores_limit,
                run.throttled,
                run.gpu_memory_mb,
                run.gpus,
                run.allocation_mb,
                run.queue_wait_seconds,
                run.input_bytes,
            ])?;
        }
        Ok(())
    }

    /// `write` in one transaction that does not wait: while another lfm writes, a decision
    /// reads `runs` instead of the cache.
    fn write_without_waiting(
        &self,
        write: impl FnOnce() -> rusqlite::Result<()>,
    ) -> rusqlite::Result<()> {
        let c = &self.connection;
        c.busy_timeout(Duration::ZERO)?;
        let written = self.without_checkpoint(|| {
            let transaction = c.unchecked_transaction()?;
            write()?;
            transaction.commit()
        });
        c.busy_timeout(BUSY_TIMEOUT)?;
        written
    }

    fn read_cache(&self, category: &str, start: i64) -> rusqlite::Result<Vec<Row>> {
        let mut statement = self.connection.prepare_cached(
            "SELECT id, category, time, exit, exceeded, memory_mb, cores, disk_mb, wall_time,
                    memory_limit_mb, sized, cores_limit, throttled, gpu_memory_mb, gpus,
                    allocation_mb, queue_wait_seconds, input_bytes
             FROM sizing_window WHERE category = ?1 AND id >= ?2 ORDER BY id",
        )?;
        let rows = statement.query_map(params![category, start], read_row)?;
        rows.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{a_report, run};
    use super::super::{Imported, Retention};
    use super::*;
    use crate::auto::{Ask, AutoLimit};
    use crate::Strategy;

    /// The cache's rows of `category`.
    fn cached(history: &History, category: &str) -> i64 {
        let sql = "SELECT count(*) FROM sizing_window WHERE category = ?1";
        (history.connection)
            .query_row(sql, [category], |r| r.get(0))
            .unwrap()
    }

    /// The window read through the cache is the window read from `runs`, and sizes the same
    /// (best-so-far without tallies: a full replay of it).
    fn same_window(history: &History, category: &str) {
        right_window(history, category);
        let from_runs = history.window_from_runs(Some(category)).unwrap();
        assert_eq!(cached(history, category), from_runs.len() as i64);
    }

    /// Sizing reads the window of `runs`, through the cache or not.
    fn right_window(history: &History, category: &str) {
        let from_runs = history.window_from_runs(Some(category)).unwrap();
        let through_cache = history.sizing_rows(Some(category)).unwrap();
        assert_eq!(through_cache, from_runs, "{category}");
        let ask = Ask::first(Strategy::BestSoFar, 16_000.0);
        assert_eq!(
            AutoLimit::Memory.allocation(&through_cache, &ask, None),
            AutoLimit::Memory.allocation(&from_runs, &ask, None)
        );
    }

    fn interleaved(categories: &[&str], runs: usize) -> Vec<Imported> {
        (0..runs)
            .map(|i| run(categories[i % categories.len()], i))
            .collect()
    }

    #[test]
    fn the_cached_window_is_the_window_of_runs_after_recording_and_pruning() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(&dir.path().join("h.sqlite")).unwrap();
        // a: more runs than the window; b: fewer.
        history
            .import(&interleaved(&["a", "a", "a", "b"], 4 * 400 + 4))
            .unwrap();
        same_window(&history, "a");
        same_window(&history, "b");
        // Runs recorded since: copied in, the oldest dropped.
        history.import(&interleaved(&["a", "b"], 6)).unwrap();
        same_window(&history, "a");
        same_window(&history, "b");
        // Retention keeping fewer runs than the window removes some the cache holds.
        let retention = Retention {
            whole_runs: 5,
            sized_runs: 700,
        };
        history.prune(&retention).unwrap();
        assert_eq!(history.window_from_runs(Some("a")).unwrap().len(), 700);
        // A decision reads those from `runs`; the next recorded run fills the cache again.
        right_window(&history, "a");
        right_window(&history, "b");
        history.import(&interleaved(&["a", "b"], 2)).unwrap();
        same_window(&history, "a");
        same_window(&history, "b");
        // Another lfm removed a run inside the window behind the cache's back: seen, and
        // the cache filled again by the next recorded run.
        let middle = history.sizing_rows(Some("a")).unwrap()[350].id;
        (history.connection)
            .execute("DELETE FROM runs WHERE id = ?1", [middle])
            .unwrap();
        right_window(&history, "a");
        history.import(&interleaved(&["a"], 1)).unwrap();
        same_window(&history, "a");
    }

    /// The cache's rows of `category` as they lie, without bringing them up to date first.
    fn as_cached(history: &History, category: &str) -> Vec<Row> {
        history.read_cache(category, i64::MIN).unwrap()
    }

    #[test]
    fn recording_keeps_the_cache_current_without_a_decision() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(&dir.path().join("h.sqlite")).unwrap();
        history
            .import(&interleaved(&["a", "a", "b"], 3 * 600))
            .unwrap();
        for category in ["a", "b"] {
            let window = history.window_from_runs(Some(category)).unwrap();
            assert!(as_cached(&history, category) == window, "{category}");
        }
        // A run recorded: taken in, and the oldest run leaves the cache with the window.
        history.record(&a_report("a", 7), false).unwrap();
        let window = history.window_from_runs(Some("a")).unwrap();
        assert_eq!(window.len(), SIZING_WINDOW);
        assert_eq!(window.last().unwrap().memory_mb, 7.0);
        assert!(as_cached(&history, "a") == window);
        // A run an older lfm recorded (not in the cache): the next recorded run catches up.
        (history.connection)
            .execute(
                "INSERT INTO runs (category, time, exit, exceeded, memory_mb, cores, wall_time,
                     sized, report) VALUES ('a', 0, 'normal', '', 8, 1, 1, 0, '{}')",
                [],
            )
            .unwrap();
        history.record(&a_report("a", 9), false).unwrap();
        let window = history.window_from_runs(Some("a")).unwrap();
        let newest: Vec<f64> = window[998..].iter().map(|r| r.memory_mb).collect();
        assert_eq!(newest, [8.0, 9.0]);
        assert!(as_cached(&history, "a") == window);
        // A history made before the cache: the category's next recorded run fills it.
        (history.connection)
            .execute("DELETE FROM sizing_window", [])
            .unwrap();
        history.record(&a_report("b", 9), false).unwrap();
        let window = history.window_from_runs(Some("b")).unwrap();
        assert_eq!(window.len(), 601);
        assert!(as_cached(&history, "b") == window);
        assert!(as_cached(&history, "a").is_empty());
    }

    /// A Report with every field sizing reads, with values that SQL and Rust could round apart.
    fn a_full_report(category: &str) -> lfm_monitor::report::Report {
        let mut report = a_report(category, 5);
        report.limits.cores = Some(1.7);
        report.cpu_throttling = Some(lfm_monitor::report::CpuThrottling {
            periods: 3_000,
            throttled_periods: 7,
            throttled_seconds: 0.1,
        });
        report.gpu = Some(lfm_monitor::report::Gpu {
            memory_peak_bytes: Some(3_000_000_007),
            devices_used: Some(2),
            ..Default::default()
        });
        report.allocation = Some(lfm_monitor::report::Allocated {
            memory_bytes: 123_456_789,
            cores: 1.5,
            queue_wait_seconds: 0.123_456_789_012_345_67,
            node_memory_bytes: 1 << 34,
            node_cores: 2.0,
            serve_memory_bytes: None,
        });
        report.input_bytes = Some(9_007_199_254_740_993);
        report
    }

    #[test]
    fn the_report_fields_read_as_sql_extracted_them() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(&dir.path().join("h.sqlite")).unwrap();
        history.record(&a_full_report("a"), false).unwrap();
        // What SQLite makes of the stored fields: how lfm read them before it parsed them.
        let sql: (f64, f64, f64, f64, f64, f64, f64) = (history.connection)
            .query_row(
                "SELECT json_extract(report, '$.limits.cores'),
                     json_extract(report, '$.cpu_throttling.throttled_periods') * 1.0
                         / json_extract(report, '$.cpu_throttling.periods'),
                     json_extract(report, '$.gpu.memory_peak_bytes') / 1048576.0,
                     json_extract(report, '$.gpu.devices_used'),
                     json_extract(report, '$.allocation.memory_bytes') / 1048576.0,
                     json_extract(report, '$.allocation.queue_wait_seconds'),
                     json_extract(report, '$.input_bytes') FROM runs",
                [],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    ))
                },
            )
            .unwrap();
        let read = history.window_from_runs(Some("a")).unwrap().remove(0);
        let fields = (
            read.cores_limit,
            read.throttled,
            read.gpu_memory_mb,
            read.gpus,
            read.allocation_mb,
            read.queue_wait_seconds,
            read.input_bytes,
        );
        assert_eq!(
            fields,
            (
                Some(sql.0),
                Some(sql.1),
                Some(sql.2),
                Some(sql.3),
                Some(sql.4),
                Some(sql.5),
                Some(sql.6)
            )
        );
        assert_eq!(as_cached(&history, "a"), std::slice::from_ref(&read));
        // A Report that does not read (written by hand, or damaged): the run without its
        // fields, never a failed decision.
        (history.connection)
            .execute("UPDATE runs SET report = '{\"limits\": ' ", [])
            .unwrap();
        let damaged = history.window_from_runs(Some("a")).unwrap().remove(0);
        assert_eq!(damaged.cores_limit, None);
        assert_eq!(damaged.input_bytes, None);
        assert_eq!(damaged.memory_mb, read.memory_mb);
    }

    /// A history made before the cache: its runs, and no cache table nor note of one.
    fn as_made_before_the_cache(path: &std::path::Path) {
        let c = Connection::open(path).unwrap();
        c.execute_batch(
            "DROP TABLE sizing_window; DELETE FROM meta WHERE key = 'sizing_window_schema';",
        )
        .unwrap();
    }

    #[test]
    fn the_first_open_of_a_history_made_before_the_cache_fills_it_for_every_category() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.sqlite");
        let history = History::open(&path).unwrap();
        history
            .import(&interleaved(&["a", "b", "b", "c"], 4 * 500))
            .unwrap();
        drop(history);
        as_made_before_the_cache(&path);
        let history = History::open(&path).unwrap();
        for category in ["a", "b", "c"] {
            let window = history.window_from_runs(Some(category)).unwrap();
            assert!(!window.is_empty());
            assert!(as_cached(&history, category) == window, "{category}");
        }
        // Once: an open after it leaves the cache as it finds it (here emptied by hand).
        (history.connection)
            .execute("DELETE FROM sizing_window WHERE category = 'c'", [])
            .unwrap();
        drop(history);
        let history = History::open(&path).unwrap();
        assert!(as_cached(&history, "c").is_empty());
        right_window(&history, "c");
    }

    #[test]
    fn a_category_without_runs_has_an_empty_window() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(&dir.path().join("h.sqlite")).unwrap();
        history.import(&interleaved(&["a"], 3)).unwrap();
        assert!(history.sizing_rows(Some("nothing")).unwrap().is_empty());
        assert_eq!(cached(&history, "nothing"), 0);
    }
}
