//! Traces of finished tasks: CSV with a header naming the resources and usually `category`
//! (bioblast's columns: category, cores, memory (MB), disk (MB), cpu_time, wall_time). Without
//! a `category` column every row is of one category, named [`ONE_CATEGORY`]. An optional
//! `input_bytes` column gives each task's input size (known before it ran), which the
//! input-aware strategies size from; it must not be negative.

use std::path::Path;

use super::simulate::TaskUse;

/// The optional column of each task's input size in bytes.
pub const INPUT_BYTES: &str = "input_bytes";

/// The category of every row of a trace without a `category` column.
pub const ONE_CATEGORY: &str = "trace";

/// One row: its category, and each column's value by header name.
pub struct Trace {
    pub columns: Vec<String>,
    pub rows: Vec<(String, Vec<f64>)>,
    /// Each row's line in the file (1-based), for errors about a row's values.
    pub lines: Vec<usize>,
}

/// How to read a trace that is not in lfm's own columns (a Nextflow trace, say).
#[derive(Debug, Clone, Default)]
pub struct TraceOptions {
    /// The columns whose values, joined by `:`, name a row's category (default: `category`).
    pub category_columns: Vec<String>,
    /// (lfm's name, the trace's column): read `memory` from `memory_mb`, say.
    pub renames: Vec<(String, String)>,
    /// (column, value): only the rows whose field is exactly that value.
    pub filters: Vec<(String, String)>,
    /// The columns read as numbers (the others may hold text); None: all but the category's.
    pub numeric: Option<Vec<String>>,
}

impl Trace {
    /// A trace in lfm's columns, every column but `category` and `exit` a number.
    pub fn read(path: &Path) -> Result<Trace, String> {
        Trace::read_with(path, &TraceOptions::default())
    }

    /// Fields are CSV's (RFC 4180: a quoted field may hold commas, quotes and newlines), each
    /// trimmed; blank lines are passed over.
    pub fn read_with(path: &Path, options: &TraceOptions) -> Result<Trace, String> {
        let in_file = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_path(path)
            .map_err(|e| in_file(&e))?;
        let mut records = reader.records().filter(|r| !r.as_ref().is_ok_and(is_blank));
        let header = records
            .next()
            .ok_or_else(|| in_file(&"empty trace"))?
            .map_err(|e| in_file(&e))?;
        let layout = Layout::new(&header, options).map_err(|e| in_file(&e))?;
        let mut rows = Vec::new();
        let mut lines_of_rows = Vec::new();
        for record in records {
            let record = record.map_err(|e| in_file(&e))?;
            let line = record.position().map_or(0, |p| p.line() as usize);
            let at = |e: String| format!("{}:{line}: {e}", path.display());
            if let Some(row) = layout.row(&record).map_err(at)? {
                rows.push(row);
                lines_of_rows.push(line);
            }
        }
        Ok(Trace {
            columns: layout.columns,
            rows,
            lines: lines_of_rows,
        })
    }

    /// Each category's tasks for `resource`, in arrival order, with wall times when the trace
    /// has a non-zero `wall_time` column and input sizes when it has `input_bytes`.
    pub fn tasks(&self, resource: &str) -> Result<Vec<(String, Vec<TaskUse>)>, String> {
        let column = self.column(resource)?;
        let wall = self.columns.iter().position(|c| c == "wall_time");
        let input = self.columns.iter().position(|c| c == INPUT_BYTES);
        let mut categories: Vec<(String, Vec<TaskUse>)> = Vec::new();
        for (category, values) in &self.rows {
            let task = TaskUse {
                used: values[column],
                time: wall.map(|w| values[w]).filter(|t| *t > 0.0),
                input: input.map(|i| values[i]),
            };
            match categories.iter_mut().find(|(c, _)| c == category) {
                Some((_, tasks)) => tasks.push(task),
                None => categories.push((category.clone(), vec![task])),
            }
        }
        Ok(categories)
    }

    /// The index of a column, or an error naming the columns there are.
    pub fn column(&self, name: &str) -> Result<usize, String> {
        self.columns.iter().position(|c| c == name).ok_or_else(|| {
            format!(
                "the trace has no {name:?} column (it has {})",
                self.columns.join(", ")
            )
        })
    }
}

/// The header of a trace read with [`TraceOptions`]: the columns under lfm's names, and which
/// of them name the category, filter the rows and hold numbers.
struct Layout {
    columns: Vec<String>,
    category: Vec<usize>,
    filters: Vec<(usize, String)>,
    numeric: Vec<bool>,
}

impl Layout {
    fn new(header: &csv::StringRecord, options: &TraceOptions) -> Result<Layout, String> {
        let mut columns: Vec<String> = header.iter().map(str::to_string).collect();
        let position = |columns: &[String], name: &str| {
            columns.iter().position(|c| c == name).ok_or_else(|| {
                format!("no {name:?} column (the header has {})", columns.join(", "))
            })
        };
        for (name, column) in &options.renames {
            if columns.contains(name) {
                return Err(format!(
                    "both a {name:?} column and {column:?} to read as it"
                ));
            }
            let at = position(&columns, column)?;
            columns[at] = name.clone();
        }
        let category: Vec<usize> = if options.category_columns.is_empty() {
            position(&columns, "category").into_iter().collect()
        } else {
            let named = options.category_columns.iter();
            named
                .map(|c| position(&columns, c))
                .collect::<Result<_, _>>()?
        };
        let filters = options
            .filters
            .iter()
            .map(|(c, v)| Ok((position(&columns, c)?, v.clone())))
            .collect::<Result<_, String>>()?;
        let numeric = (0..columns.len())
            .map(|i| match &options.numeric {
                Some(names) => names.contains(&columns[i]),
                // Text columns: the category, and the exit type of `lfm history --format csv`.
                None => !category.contains(&i) && columns[i] != "exit",
            })
            .collect();
        Ok(Layout {
            columns,
            category,
            filters,
            numeric,
        })
    }

    /// A row's category and values (0 for text columns), or None if a filter drops it.
    fn row(&self, record: &csv::StringRecord) -> Result<Option<(String, Vec<f64>)>, String> {
        let fields: Vec<&str> = record.iter().collect();
        if fields.len() != self.columns.len() {
            return Err(format!(
                "{} fields, the header has {}",
                fields.len(),
                self.columns.len()
            ));
        }
        if self.filters.iter().any(|(c, v)| fields[*c] != v) {
            return Ok(None);
        }
        let mut values = Vec::with_capacity(fields.len());
        for (column, field) in fields.iter().enumerate() {
            if !self.numeric[column] {
                values.push(0.0);
                continue;
            }
            let name = &self.columns[column];
            let value: f64 = field.parse().map_err(|_| {
                format!("column {} ({name}): {field:?} is not a number", column + 1)
            })?;
            if name == INPUT_BYTES && value < 0.0 {
                return Err(format!(
                    "column {} ({name}): {value} is negative",
                    column + 1
                ));
            }
            values.push(value);
        }
        let name = if self.category.is_empty() {
            ONE_CATEGORY.to_string()
        } else {
            let parts: Vec<&str> = self.category.iter().map(|&c| fields[c]).collect();
            parts.join(":")
        };
        Ok(Some((name, values)))
    }
}

/// A line of nothing but blanks (one empty field once trimmed).
fn is_blank(record: &csv::StringRecord) -> bool {
    record.len() == 1 && record[0].is_empty()
}
