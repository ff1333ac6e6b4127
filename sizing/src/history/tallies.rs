//! `best-so-far`'s tallies (docs/sizing.md "The default"): per category and resource, what
//! each candidate strategy would have allocated on the runs replayed so far, and the last run
//! replayed. A decision resumes from them and replays only the runs since, so its cost does
//! not grow with the history. They are a cache: a missing or unreadable tally is replayed
//! again from the category's sizing window, and a tally that cannot be saved only costs that.

use rusqlite::{params, Connection, OptionalExtension};

use super::History;
use crate::best_so_far::Tally;

/// Added in place to histories made before it (older lfm versions ignore it).
const CREATE: &str = "
    CREATE TABLE IF NOT EXISTS sizing_tallies (
        category TEXT NOT NULL, resource TEXT NOT NULL, last_id INTEGER NOT NULL,
        tally TEXT NOT NULL, PRIMARY KEY (category, resource));";

pub(super) fn prepare(c: &Connection) -> Result<(), String> {
    let exists: Option<String> = c
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'sizing_tallies'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| e.to_string())?;
    if exists.is_none() {
        c.execute_batch(CREATE).map_err(|e| e.to_string())?;
    }
    Ok(())
}

impl History {
    /// The category's tally of `resource`, if one was saved and still reads.
    pub fn tally(&self, category: &str, resource: &str) -> Option<Tally> {
        let text: String = self
            .connection
            .prepare_cached(
                "SELECT tally FROM sizing_tallies WHERE category = ?1 AND resource = ?2",
            )
            .and_then(|mut s| s.query_row(params![category, resource], |r| r.get(0)))
            .ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Keep `tally`, unless a tally further along was saved meanwhile (by another lfm).
    pub fn save_tally(&self, category: &str, resource: &str, tally: &Tally) -> Result<(), String> {
        let text = serde_json::to_string(tally).map_err(|e| e.to_string())?;
        self.without_checkpoint(|| {
            self.connection
                .prepare_cached(
                    "INSERT INTO sizing_tallies (category, resource, last_id, tally)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (category, resource) DO UPDATE
                     SET last_id = excluded.last_id, tally = excluded.tally
                     WHERE excluded.last_id >= sizing_tallies.last_id",
                )
                .and_then(|mut s| s.execute(params![category, resource, tally.last_id, text]))
        })
        .map(|_| ())
        .map_err(|e| {
            format!(
                "history {}: saving a sizing tally: {e}",
                self.path.display()
            )
        })
    }
}
