//! What each recorded call imported, beside the runs table: `lfm usage` reads it.
//!
//! Three tables with their own schema version (meta key `imports_schema`), so that they change
//! apart from the runs table. A history made before them is migrated in place when opened: the
//! tables are added and filled from the `imports` of the Reports already stored. A newer
//! version than this lfm knows is an error, never recreated.

use rusqlite::{params, Connection, OptionalExtension};

use lfm_monitor::imports::StaticClosure;
use lfm_monitor::report::Report;

pub const IMPORTS_SCHEMA: &str = "lfm-imports/1";

const CREATE: &str = "
    CREATE TABLE IF NOT EXISTS call_closures (
        id INTEGER PRIMARY KEY, digest TEXT NOT NULL UNIQUE, closure TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS calls (
        run_id INTEGER PRIMARY KEY REFERENCES runs (id), target TEXT NOT NULL,
        mode TEXT NOT NULL, closure_id INTEGER REFERENCES call_closures (id),
        preloaded TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS call_imports (
        run_id INTEGER NOT NULL REFERENCES runs (id), seq INTEGER NOT NULL,
        module TEXT NOT NULL, distribution TEXT, found INTEGER NOT NULL,
        missed INTEGER NOT NULL, PRIMARY KEY (run_id, seq));
    CREATE INDEX IF NOT EXISTS call_imports_module ON call_imports (module);";

/// Reports stored before these tables existed keep their imports in their JSON (a damaged
/// one is skipped: it must not keep the whole history from opening).
const BACKFILL: &str = "
    INSERT OR IGNORE INTO calls (run_id, target, mode, closure_id, preloaded)
        SELECT id, json_extract(report, '$.function.target'),
               coalesce(json_extract(report, '$.function.mode'), ''), NULL,
               coalesce(json_extract(report, '$.imports.preloaded'), '[]')
        FROM runs
        WHERE json_valid(report) AND json_extract(report, '$.function.target') IS NOT NULL;
    INSERT OR IGNORE INTO call_imports (run_id, seq, module, distribution, found, missed)
        SELECT runs.id, m.key, json_extract(m.value, '$.name'),
               json_extract(m.value, '$.distribution'),
               coalesce(json_extract(m.value, '$.found'), 1),
               json_extract(m.value, '$.name') IN
                   (SELECT value FROM json_each(runs.report, '$.imports.not_in_closure'))
        FROM (SELECT id, report FROM runs WHERE json_valid(report)) AS runs,
             json_each(runs.report, '$.imports.modules') AS m;";

/// Check the import tables' version; add them (and fill them) to a history that has none.
pub(super) fn prepare(c: &Connection) -> Result<(), String> {
    let version = || -> Result<Option<String>, String> {
        c.query_row(
            "SELECT value FROM meta WHERE key = 'imports_schema'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| e.to_string())
    };
    if version()?.is_none() {
        let migrate = format!(
            "BEGIN IMMEDIATE; {CREATE}
             INSERT OR IGNORE INTO meta VALUES ('imports_schema', '{IMPORTS_SCHEMA}');
             {BACKFILL} COMMIT;"
        );
        if let Err(error) = c.execute_batch(&migrate) {
            let _ = c.execute_batch("ROLLBACK");
            return Err(format!(
                "adding the import tables ({IMPORTS_SCHEMA}) failed: {error}"
            ));
        }
    }
    match version()?.as_deref() {
        Some(IMPORTS_SCHEMA) => Ok(()),
        other => Err(format!(
            "import tables of schema {}, this lfm reads {IMPORTS_SCHEMA}",
            other.unwrap_or("?")
        )),
    }
}

/// Record a call's imports (and the closure they were compared with) under its run row.
pub(super) fn record(c: &Connection, run: i64, report: &Report) -> rusqlite::Result<()> {
    let Some(function) = &report.function else {
        return Ok(());
    };
    let imports = report.imports.as_ref();
    let closure = match imports.and_then(|i| i.closure.as_deref()) {
        Some(closure) => Some(closure_id(c, closure)?),
        None => None,
    };
    let preloaded = imports.map_or(&[][..], |i| &i.preloaded[..]);
    c.execute(
        "INSERT INTO calls (run_id, target, mode, closure_id, preloaded)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            run,
            function.target,
            function.mode,
            closure,
            serde_json::to_string(preloaded).unwrap_or_default()
        ],
    )?;
    let Some(imports) = imports else {
        return Ok(());
    };
    let mut insert = c.prepare_cached(
        "INSERT INTO call_imports (run_id, seq, module, distribution, found, missed)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (seq, module) in imports.modules.iter().enumerate() {
        let missed = imports.not_in_closure.contains(&module.name);
        insert.execute(params![
            run,
            seq as i64,
            module.name,
            module.distribution,
            module.found,
            missed
        ])?;
    }
    Ok(())
}

/// The closure's row, stored once however many calls share it.
fn closure_id(c: &Connection, closure: &StaticClosure) -> rusqlite::Result<i64> {
    let json = serde_json::to_string(closure).unwrap_or_default();
    let digest = blake3::hash(json.as_bytes()).to_hex().to_string();
    c.execute(
        "INSERT OR IGNORE INTO call_closures (digest, closure) VALUES (?1, ?2)",
        params![digest, json],
    )?;
    c.query_row(
        "SELECT id FROM call_closures WHERE digest = ?1",
        params![digest],
        |r| r.get(0),
    )
}
