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

impl Trace {
    pub fn read(path: &Path) -> Result<Trace, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, header) = lines
            .next()
            .ok_or_else(|| format!("{}: empty trace", path.display()))?;
        let columns: Vec<String> = header.split(',').map(|c| c.trim().to_string()).collect();
        let category = columns.iter().position(|c| c == "category");
        let mut rows = Vec::new();
        let mut lines_of_rows = Vec::new();
        for (index, line) in lines {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            if fields.len() != columns.len() {
                return Err(format!(
                    "{}:{}: {} fields, the header has {}",
                    path.display(),
                    index + 1,
                    fields.len(),
                    columns.len()
                ));
            }
            let mut values = Vec::with_capacity(fields.len());
            for (column, field) in fields.iter().enumerate() {
                // Text columns: the category, and the exit type of `lfm history --format csv`.
                if Some(column) == category || columns[column] == "exit" {
                    values.push(0.0);
                    continue;
                }
                let value: f64 = field.parse().map_err(|_| {
                    format!(
                        "{}:{}: column {} ({}): {field:?} is not a number",
                        path.display(),
                        index + 1,
                        column + 1,
                        columns[column]
                    )
                })?;
                if columns[column] == INPUT_BYTES && value < 0.0 {
                    return Err(format!(
                        "{}:{}: column {} ({INPUT_BYTES}): {value} is negative",
                        path.display(),
                        index + 1,
                        column + 1,
                    ));
                }
                values.push(value);
            }
            let name = category.map_or(ONE_CATEGORY, |c| fields[c]);
            rows.push((name.to_string(), values));
            lines_of_rows.push(index + 1);
        }
        Ok(Trace {
            columns,
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
