//! Traces of finished tasks: CSV with a header naming at least `category` and the resources
//! (bioblast's columns: category, cores, memory (MB), disk (MB), cpu_time, wall_time).

use std::path::Path;

use super::simulate::TaskUse;

/// One row: its category, and each column's value by header name.
pub struct Trace {
    pub columns: Vec<String>,
    pub rows: Vec<(String, Vec<f64>)>,
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
        let category = columns
            .iter()
            .position(|c| c == "category")
            .ok_or_else(|| format!("{}:1: no `category` column in {header:?}", path.display()))?;
        let mut rows = Vec::new();
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
                if column == category || columns[column] == "exit" {
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
                values.push(value);
            }
            rows.push((fields[category].to_string(), values));
        }
        Ok(Trace { columns, rows })
    }

    /// Each category's tasks for `resource`, in arrival order, with wall times when the trace
    /// has a non-zero `wall_time` column.
    pub fn tasks(&self, resource: &str) -> Result<Vec<(String, Vec<TaskUse>)>, String> {
        let column = self
            .columns
            .iter()
            .position(|c| c == resource)
            .ok_or_else(|| {
                format!(
                    "the trace has no {resource:?} column (it has {})",
                    self.columns.join(", ")
                )
            })?;
        let wall = self.columns.iter().position(|c| c == "wall_time");
        let mut categories: Vec<(String, Vec<TaskUse>)> = Vec::new();
        for (category, values) in &self.rows {
            let task = TaskUse {
                used: values[column],
                time: wall.map(|w| values[w]).filter(|t| *t > 0.0),
            };
            match categories.iter_mut().find(|(c, _)| c == category) {
                Some((_, tasks)) => tasks.push(task),
                None => categories.push((category.clone(), vec![task])),
            }
        }
        Ok(categories)
    }
}
