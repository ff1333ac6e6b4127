//! One line of a site usage log, as python/lfm_site_hook.py writes it: tab-separated
//! `lfm-site/1 uid host python installation venv job process time module kind distribution
//! version`.

pub const FORMAT: &str = "lfm-site/1";
const FIELDS: usize = 13;

/// A parsed line, borrowing from the text it was read from.
#[derive(Debug, PartialEq)]
pub struct Line<'a> {
    pub uid: u32,
    pub host: &'a str,
    pub python: &'a str,
    pub installation: &'a str,
    pub venv: bool,
    /// `slurm:123`; empty outside a batch job.
    pub job: &'a str,
    pub process: &'a str,
    pub time: f64,
    /// Empty on a process's own line (`kind` is `process`).
    pub module: &'a str,
    pub kind: Kind,
    pub distribution: &'a str,
    pub version: &'a str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Process,
    Stdlib,
    Site,
}

impl Line<'_> {
    pub fn batch(&self) -> bool {
        !self.job.is_empty()
    }
}

/// The line, or why it is not one (a torn or foreign line names its field).
pub fn parse(text: &str) -> Result<Line<'_>, String> {
    let fields: Vec<&str> = text.split('\t').collect();
    if fields.first() != Some(&FORMAT) {
        return Err(format!("not a {FORMAT} line"));
    }
    if fields.len() != FIELDS {
        return Err(format!("{} fields, {FIELDS} expected", fields.len()));
    }
    let number = |index: usize, name: &str| {
        fields[index]
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .ok_or_else(|| format!("field {name}: {:?} is not a number", fields[index]))
    };
    let uid = fields[1]
        .parse::<u32>()
        .map_err(|_| format!("field uid: {:?} is not a user id", fields[1]))?;
    let kind = match fields[10] {
        "process" => Kind::Process,
        "stdlib" => Kind::Stdlib,
        "site" => Kind::Site,
        other => {
            return Err(format!(
                "field kind: {other:?} is not process, stdlib or site"
            ))
        }
    };
    Ok(Line {
        uid,
        host: fields[2],
        python: fields[3],
        installation: fields[4],
        venv: fields[5] == "1",
        job: fields[6],
        process: fields[7],
        time: number(8, "time")?,
        module: fields[9],
        kind,
        distribution: fields[11],
        version: fields[12],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "lfm-site/1\t1000\tn1\t3.11.7\t/opt/py\t0\tslurm:42\tn1:7:ab\t1795392000.250\tnumpy\tsite\tnumpy\t2.4.6";

    #[test]
    fn a_whole_line_parses_into_its_fields() {
        let line = parse(LINE).unwrap();
        assert_eq!(line.uid, 1000);
        assert_eq!(line.module, "numpy");
        assert_eq!(line.kind, Kind::Site);
        assert_eq!(line.version, "2.4.6");
        assert!(line.batch());
        assert_eq!(line.time, 1_795_392_000.25);
    }

    #[test]
    fn a_torn_or_foreign_line_names_what_is_wrong() {
        assert!(parse(&LINE[..40]).unwrap_err().contains("fields"));
        assert!(parse("hello")
            .unwrap_err()
            .contains("not a lfm-site/1 line"));
        let bad_uid = LINE.replace("\t1000\t", "\tbob\t");
        assert!(parse(&bad_uid).unwrap_err().contains("field uid"));
        let bad_kind = LINE.replace("\tsite\t", "\tuser\t");
        assert!(parse(&bad_kind).unwrap_err().contains("field kind"));
    }
}
