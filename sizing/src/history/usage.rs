//! `lfm usage` (docs/usage.md): what the recorded calls really imported, per distribution and
//! module, and against the static closures they were compared with when they ran.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::Serialize;

use super::History;
use lfm_monitor::imports::{ancestry, top, StaticClosure};

pub const USAGE_FORMAT: &str = "lfm-usage/1";

/// Which calls: one category or all, recorded at or after `since` (Unix time).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub category: Option<String>,
    pub since: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Usage {
    pub format: &'static str,
    pub category: Option<String>,
    pub since: Option<f64>,
    /// Calls recorded in the window.
    pub calls: i64,
    /// Modules the calls imported that their closures do not list: the analyzer's misses.
    pub not_in_closure: Vec<Miss>,
    pub distributions: Vec<Used>,
    pub modules: Vec<Used>,
    /// Per category: what its closures hold that none of its calls imported.
    pub never_imported: Vec<Unused>,
    /// Categories with calls that had no closure to compare with (`--import-module`, pickled
    /// functions, Reports recorded before the import tables): their `never_imported` covers
    /// the other calls only.
    pub no_closure: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Used {
    pub name: String,
    /// A module's distribution (`name==version`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
    pub calls: i64,
    pub categories: Vec<String>,
    /// Unix time of the last call that imported it.
    pub last_used: f64,
}

#[derive(Debug, Serialize)]
pub struct Miss {
    pub category: String,
    pub target: String,
    pub module: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
    pub calls: i64,
    /// The history row of the last such call (`lfm history`).
    pub last_run: i64,
    pub last_used: f64,
}

#[derive(Debug, Serialize)]
pub struct Unused {
    pub category: String,
    pub calls: i64,
    pub targets: Vec<String>,
    pub distributions: Vec<String>,
    pub modules: Vec<String>,
}

/// The calls in the window, as a `FROM` clause: `?1` category or NULL, `?2` since.
const WINDOW: &str = "calls k JOIN runs r ON r.id = k.run_id
     WHERE (?1 IS NULL OR r.category = ?1) AND r.time >= ?2";

/// The totals retention folded older calls into (docs/usage.md), as a `WHERE` clause with the
/// same parameters: a total counts whole when its last call is in the window.
const FOLDED: &str = "(?1 IS NULL OR category = ?1) AND last_time >= ?2";

/// What [`History::used`] groups by.
#[derive(Clone, Copy)]
enum Grouping {
    Module,
    Distribution,
}

impl History {
    pub fn usage(&self, filter: &Filter) -> Result<Usage, String> {
        let fail = |e: rusqlite::Error| format!("history {}: {e}", self.path.display());
        let calls = self
            .connection
            .query_row(
                &format!(
                    "SELECT (SELECT count(*) FROM {WINDOW})
                          + (SELECT coalesce(sum(calls), 0) FROM pruned_calls WHERE {FOLDED})"
                ),
                self.window(filter),
                |r| r.get(0),
            )
            .map_err(fail)?;
        let (never_imported, no_closure) = self.never_imported(filter).map_err(fail)?;
        Ok(Usage {
            format: USAGE_FORMAT,
            category: filter.category.clone(),
            since: filter.since,
            calls,
            not_in_closure: self.misses(filter).map_err(fail)?,
            distributions: self.used(filter, Grouping::Distribution).map_err(fail)?,
            modules: self.used(filter, Grouping::Module).map_err(fail)?,
            never_imported,
            no_closure,
        })
    }

    fn window(&self, filter: &Filter) -> [rusqlite::types::Value; 2] {
        [
            filter.category.clone().into(),
            filter.since.unwrap_or(f64::NEG_INFINITY).into(),
        ]
    }

    /// Imported modules (or distributions), most called first.
    fn used(&self, filter: &Filter, grouping: Grouping) -> rusqlite::Result<Vec<Used>> {
        let (kept, folded) = match grouping {
            Grouping::Module => (
                "SELECT i.module, i.distribution, count(DISTINCT r.id),
                        json_group_array(DISTINCT r.category), max(r.time)
                 FROM call_imports i JOIN {WINDOW} AND i.run_id = k.run_id AND i.found
                 GROUP BY 1, 2",
                "SELECT module, nullif(distribution, ''), sum(calls),
                        json_group_array(DISTINCT category), max(last_time)
                 FROM pruned_imports WHERE {FOLDED} AND found GROUP BY 1, 2",
            ),
            Grouping::Distribution => (
                "SELECT i.distribution, NULL, count(DISTINCT r.id),
                        json_group_array(DISTINCT r.category), max(r.time)
                 FROM call_imports i JOIN {WINDOW} AND i.run_id = k.run_id AND i.found
                      AND i.distribution IS NOT NULL
                 GROUP BY 1",
                "SELECT distribution, NULL, sum(calls), json_group_array(DISTINCT category),
                        max(last_time)
                 FROM pruned_distributions WHERE {FOLDED} GROUP BY 1",
            ),
        };
        let mut merged: BTreeMap<(String, Option<String>), Used> = BTreeMap::new();
        for sql in [kept, folded] {
            let sql = sql.replace("{WINDOW}", WINDOW).replace("{FOLDED}", FOLDED);
            let mut statement = self.connection.prepare(&sql)?;
            let mut rows = statement.query(self.window(filter))?;
            while let Some(r) = rows.next()? {
                let (name, distribution): (String, Option<String>) = (r.get(0)?, r.get(1)?);
                let entry = merged
                    .entry((name.clone(), distribution.clone()))
                    .or_insert_with(|| Used {
                        name,
                        distribution,
                        calls: 0,
                        categories: Vec::new(),
                        last_used: f64::NEG_INFINITY,
                    });
                entry.calls += r.get::<_, i64>(2)?;
                entry.categories.extend(json_list(&r.get::<_, String>(3)?));
                entry.last_used = entry.last_used.max(r.get(4)?);
            }
        }
        let mut used: Vec<Used> = merged.into_values().collect();
        for entry in &mut used {
            entry.categories.sort();
            entry.categories.dedup();
        }
        // Most called first, then by name (the map's order).
        used.sort_by_key(|entry| std::cmp::Reverse(entry.calls));
        Ok(used)
    }

    fn misses(&self, filter: &Filter) -> rusqlite::Result<Vec<Miss>> {
        let kept = format!(
            "SELECT r.category, k.target, i.module, i.distribution, count(*), max(r.id),
                    max(r.time)
             FROM call_imports i JOIN {WINDOW} AND i.run_id = k.run_id AND i.missed
             GROUP BY 1, 2, 3, 4"
        );
        let folded = format!(
            "SELECT category, target, module, nullif(distribution, ''), sum(calls),
                    max(last_run), max(last_time)
             FROM pruned_imports WHERE {FOLDED} AND missed GROUP BY 1, 2, 3, 4"
        );
        type Key = (String, String, String, Option<String>);
        let mut merged: BTreeMap<Key, Miss> = BTreeMap::new();
        for sql in [kept, folded] {
            let mut statement = self.connection.prepare(&sql)?;
            let mut rows = statement.query(self.window(filter))?;
            while let Some(r) = rows.next()? {
                let key: Key = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
                let entry = merged.entry(key.clone()).or_insert_with(|| Miss {
                    category: key.0,
                    target: key.1,
                    module: key.2,
                    distribution: key.3,
                    calls: 0,
                    last_run: 0,
                    last_used: f64::NEG_INFINITY,
                });
                entry.calls += r.get::<_, i64>(4)?;
                entry.last_run = entry.last_run.max(r.get(5)?);
                entry.last_used = entry.last_used.max(r.get(6)?);
            }
        }
        Ok(merged.into_values().collect())
    }

    /// Per category, the closures' modules and distributions no call imported. A module the
    /// server preloaded (or one of its package) is left out: a call uses it without importing.
    fn never_imported(&self, filter: &Filter) -> rusqlite::Result<(Vec<Unused>, Vec<String>)> {
        let mut categories: BTreeMap<String, CategoryCalls> = BTreeMap::new();
        let kept = format!(
            "SELECT r.category, k.target, c.closure, k.preloaded, count(*)
             FROM call_closures c RIGHT JOIN {WINDOW} AND c.id IS k.closure_id
             GROUP BY 1, 2, 3, 4"
        );
        let folded = format!(
            "SELECT p.category, p.target, c.closure, p.preloaded, sum(p.calls)
             FROM pruned_calls p LEFT JOIN call_closures c ON c.id = p.closure_id
             WHERE {FOLDED} GROUP BY 1, 2, 3, 4"
        )
        .replace("(?1 IS NULL OR category", "(?1 IS NULL OR p.category")
        .replace("last_time >=", "p.last_time >=");
        for sql in [kept, folded] {
            self.closures_by_category(&sql, filter, &mut categories)?;
        }
        let kept = format!(
            "SELECT DISTINCT r.category, i.module, i.distribution
             FROM call_imports i JOIN {WINDOW} AND i.run_id = k.run_id AND i.found"
        );
        let folded = format!(
            "SELECT DISTINCT category, module, nullif(distribution, '')
             FROM pruned_imports WHERE {FOLDED} AND found"
        );
        for sql in [kept, folded] {
            let mut statement = self.connection.prepare(&sql)?;
            let mut rows = statement.query(self.window(filter))?;
            while let Some(row) = rows.next()? {
                if let Some(entry) = categories.get_mut(&row.get::<_, String>(0)?) {
                    entry.modules.insert(row.get(1)?);
                    entry.distributions.extend(row.get::<_, Option<String>>(2)?);
                }
            }
        }
        let no_closure = categories
            .iter()
            .filter(|(_, c)| c.without_closure)
            .map(|(name, _)| name.clone())
            .collect();
        let unused = categories
            .into_iter()
            .filter(|(_, c)| !c.closures.is_empty())
            .map(|(name, calls)| calls.unused(name))
            .collect();
        Ok((unused, no_closure))
    }

    /// Each category's targets, closures, preloaded modules and calls, from `sql`.
    fn closures_by_category(
        &self,
        sql: &str,
        filter: &Filter,
        categories: &mut BTreeMap<String, CategoryCalls>,
    ) -> rusqlite::Result<()> {
        let mut statement = self.connection.prepare(sql)?;
        let mut rows = statement.query(self.window(filter))?;
        while let Some(row) = rows.next()? {
            let entry = categories.entry(row.get(0)?).or_default();
            entry.targets.insert(row.get(1)?);
            let closure: Option<String> = row.get(2)?;
            match closure.and_then(|c| serde_json::from_str::<StaticClosure>(&c).ok()) {
                Some(closure) => entry.closures.push(closure),
                None => entry.without_closure = true,
            }
            let preloaded: String = row.get(3)?;
            entry.preloaded.extend(json_list(&preloaded));
            entry.calls += row.get::<_, i64>(4)?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct CategoryCalls {
    calls: i64,
    targets: BTreeSet<String>,
    closures: Vec<StaticClosure>,
    without_closure: bool,
    preloaded: HashSet<String>,
    modules: HashSet<String>,
    distributions: HashSet<String>,
}

impl CategoryCalls {
    fn unused(self, category: String) -> Unused {
        let preloaded: HashSet<&str> = self.preloaded.iter().map(|p| top(p)).collect();
        let mut modules = BTreeSet::new();
        let mut distributions = BTreeSet::new();
        let mut used_distributions = self.distributions.clone();
        for closure in &self.closures {
            let own: HashSet<&str> = ancestry(&closure.module).collect();
            for module in &closure.modules {
                let touched = preloaded.contains(top(&module.name));
                if touched {
                    used_distributions.extend(module.distribution.clone());
                }
                if !touched && !own.contains(module.name.as_str()) {
                    modules.insert(module.name.clone());
                }
            }
            distributions.extend(closure.distributions.iter().cloned());
        }
        modules.retain(|m| !self.modules.contains(m));
        distributions.retain(|d| !used_distributions.contains(d));
        Unused {
            category,
            calls: self.calls,
            targets: self.targets.into_iter().collect(),
            distributions: distributions.into_iter().collect(),
            modules: modules.into_iter().collect(),
        }
    }
}

fn json_list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}
