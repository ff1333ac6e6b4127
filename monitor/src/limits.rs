//! Resource limits and the units people write them in.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a run may use. `None` means unlimited (measured only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub cores: Option<f64>,
    pub wall_seconds: Option<f64>,
    pub disk_bytes: Option<u64>,
    pub processes: Option<u64>,
    /// RLIMIT_AS: opt-in only, it breaks numpy/OpenBLAS/JVM which reserve huge address space.
    pub address_space_bytes: Option<u64>,
    /// GPUs the run holds alone on the node (absent from Reports of runs without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u64>,
    /// GPU memory of the run's processes, enforced by sampling: no kernel control exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_bytes: Option<u64>,
}

impl Limits {
    pub fn wall(&self) -> Option<Duration> {
        self.wall_seconds.map(Duration::from_secs_f64)
    }

    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

/// A limit as people write it: `2G` on the command line, `"2G"` or `2147483648` in JSON.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Amount {
    Number(serde_json::Number),
    Text(String),
}

impl Amount {
    fn text(&self) -> String {
        match self {
            Amount::Number(number) => number.to_string(),
            Amount::Text(text) => text.clone(),
        }
    }
}

impl From<&str> for Amount {
    fn from(text: &str) -> Amount {
        Amount::Text(text.to_string())
    }
}

/// Where limits were written, for the names errors give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// `--memory 2G`
    Flags,
    /// `{"limits": {"memory": "2G"}}` (a serve request)
    Json,
}

/// Limits as written, before they are checked: `lfm run`'s flags and a serve request's
/// `limits` go through this one parser, so both accept and refuse the same values.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitValues {
    pub memory: Option<Amount>,
    pub cores: Option<Amount>,
    pub wall: Option<Amount>,
    pub disk: Option<Amount>,
    pub processes: Option<Amount>,
    pub address_space: Option<Amount>,
    pub gpus: Option<Amount>,
    pub gpu_memory: Option<Amount>,
}

impl LimitValues {
    pub fn parse(&self, written: Written) -> Result<Limits, LimitError> {
        let name = |flag: &'static str, key: &'static str| match written {
            Written::Flags => flag,
            Written::Json => key,
        };
        let size = |value: &Option<Amount>, flag, key| {
            value
                .as_ref()
                .map(|v| parse_limit_size(name(flag, key), &v.text()))
                .transpose()
        };
        let processes = self.processes.as_ref().map(|v| {
            parse_positive(name("--processes", "limits.processes"), &v.text())
                .map(|n| n.ceil() as u64)
        });
        Ok(Limits {
            memory_bytes: size(&self.memory, "--memory", "limits.memory")?,
            cores: self
                .cores
                .as_ref()
                .map(|v| parse_positive(name("--cores", "limits.cores"), &v.text()))
                .transpose()?,
            wall_seconds: self
                .wall
                .as_ref()
                .map(|v| parse_duration(name("--wall", "limits.wall"), &v.text()))
                .transpose()?,
            disk_bytes: size(&self.disk, "--disk", "limits.disk")?,
            processes: processes.transpose()?,
            address_space_bytes: size(
                &self.address_space,
                "--address-space",
                "limits.address_space",
            )?,
            gpus: self
                .gpus
                .as_ref()
                .map(|v| parse_count(name("--gpus", "limits.gpus"), &v.text()))
                .transpose()?,
            gpu_memory_bytes: size(&self.gpu_memory, "--gpu-memory", "limits.gpu_memory")?,
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LimitError {
    #[error("{flag}: {value:?} is not a size (examples: 512M, 2G, 1.5GiB, 1048576)")]
    BadSize { flag: &'static str, value: String },
    #[error("{flag}: {value} is less than 4 MiB and has no unit: write one (examples: 512M, 2G, 1.5GiB, 4194304)")]
    BareNumberTooSmall { flag: &'static str, value: String },
    #[error("{flag}: {value:?} is not a duration (examples: 90, 90s, 10m, 2h, 1.5m)")]
    BadDuration { flag: &'static str, value: String },
    #[error("{flag}: {value:?} is not a number")]
    BadNumber { flag: &'static str, value: String },
    #[error("{flag}: must be greater than zero (got {value:?})")]
    NotPositive { flag: &'static str, value: String },
}

/// `1.5GiB` -> (1.5, "GiB"): a leading decimal number and what follows it.
fn number_and_unit(text: &str) -> Option<(f64, &str)> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    Some((number.parse().ok()?, unit.trim()))
}

/// `2G`, `512M`, `1.5GiB`, `100k`, `1048576` (bytes). K/M/G/T are powers of 1024, as for
/// memory everywhere in HPC schedulers.
pub fn parse_size(flag: &'static str, text: &str) -> Result<u64, LimitError> {
    let bad = || LimitError::BadSize {
        flag,
        value: text.to_string(),
    };
    let (number, unit) = number_and_unit(text).ok_or_else(bad)?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    let bytes = number * multiplier as f64;
    if !bytes.is_finite() || bytes < 1.0 {
        return Err(LimitError::NotPositive {
            flag,
            value: text.to_string(),
        });
    }
    Ok(bytes as u64)
}

/// The smallest limit written without a unit. A bare number is bytes, and a limit of a few
/// bytes is always a unit left out (`--memory 2` meant 2G): the run would be killed at once,
/// its note blaming the kernel. The Python client refuses the same (python/lfm/calls.py; both
/// read tests/fixtures/sizes.json).
pub const BARE_LIMIT_MIN: u64 = 4 << 20;

/// A size given as a limit: [`parse_size`], and a bare number below [`BARE_LIMIT_MIN`] is
/// refused (a unit was left out).
pub fn parse_limit_size(flag: &'static str, text: &str) -> Result<u64, LimitError> {
    let bytes = parse_size(flag, text)?;
    let unitless = number_and_unit(text).is_some_and(|(_, unit)| unit.is_empty());
    if unitless && bytes < BARE_LIMIT_MIN {
        return Err(LimitError::BareNumberTooSmall {
            flag,
            value: text.trim().to_string(),
        });
    }
    Ok(bytes)
}

/// `90`, `90s`, `10m`, `2h`, `1.5m`, `250ms`.
pub fn parse_duration(flag: &'static str, text: &str) -> Result<f64, LimitError> {
    let bad = || LimitError::BadDuration {
        flag,
        value: text.to_string(),
    };
    let (number, unit) = number_and_unit(text).ok_or_else(bad)?;
    let seconds = match unit.trim() {
        "" | "s" => number,
        "ms" => number / 1000.0,
        "m" | "min" => number * 60.0,
        "h" => number * 3600.0,
        "d" => number * 86400.0,
        _ => return Err(bad()),
    };
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(LimitError::NotPositive {
            flag,
            value: text.to_string(),
        });
    }
    Ok(seconds)
}

pub fn parse_positive(flag: &'static str, text: &str) -> Result<f64, LimitError> {
    let value: f64 = text.trim().parse().map_err(|_| LimitError::BadNumber {
        flag,
        value: text.to_string(),
    })?;
    if !value.is_finite() || value <= 0.0 {
        return Err(LimitError::NotPositive {
            flag,
            value: text.to_string(),
        });
    }
    Ok(value)
}

/// A whole number of at least one (`--gpus 2`): a device is held whole.
pub fn parse_count(flag: &'static str, text: &str) -> Result<u64, LimitError> {
    let value = parse_positive(flag, text)?;
    if value.fract() != 0.0 {
        return Err(LimitError::BadNumber {
            flag,
            value: text.to_string(),
        });
    }
    Ok(value as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("--memory", "2G"), Ok(2 << 30));
        assert_eq!(parse_size("--memory", "512M"), Ok(512 << 20));
        assert_eq!(parse_size("--memory", "1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("--memory", "4096"), Ok(4096));
        assert!(matches!(
            parse_size("--memory", "2X"),
            Err(LimitError::BadSize { .. })
        ));
        assert!(matches!(
            parse_size("--memory", "0"),
            Err(LimitError::NotPositive { .. })
        ));
        assert!(matches!(
            parse_size("--memory", "-1G"),
            Err(LimitError::BadSize { .. })
        ));
    }

    /// The kind of an error, as tests/fixtures/sizes.json names it.
    fn error_kind(error: LimitError) -> &'static str {
        match error {
            LimitError::BadSize { .. } => "not-a-size",
            LimitError::NotPositive { .. } => "not-positive",
            LimitError::BareNumberTooSmall { .. } => "bare-number-too-small",
            LimitError::BadDuration { .. } | LimitError::BadNumber { .. } => "other",
        }
    }

    fn outcome(parsed: Result<u64, LimitError>) -> serde_json::Value {
        match parsed {
            Ok(bytes) => bytes.into(),
            Err(error) => error_kind(error).into(),
        }
    }

    /// The vectors the Python client's parser is checked against too
    /// (python/tests/test_sizes.py): one rule, two parsers.
    #[test]
    fn sizes_as_the_shared_vectors_say() {
        let text = include_str!("../../tests/fixtures/sizes.json");
        let vectors: serde_json::Value = serde_json::from_str(text).unwrap();
        let cases = vectors["cases"].as_array().unwrap();
        assert!(cases.len() > 20);
        for case in cases {
            let input: Amount = serde_json::from_value(case["input"].clone()).unwrap();
            let written = input.text();
            assert_eq!(
                outcome(parse_size("--memory", &written)),
                case["size"],
                "size {written:?}"
            );
            assert_eq!(
                outcome(parse_limit_size("--memory", &written)),
                case["limit"],
                "limit {written:?}"
            );
        }
    }

    #[test]
    fn a_bare_number_of_a_few_bytes_is_a_unit_left_out() {
        let flags = LimitValues {
            memory: Some("2".into()),
            ..LimitValues::default()
        };
        let error = flags.parse(Written::Flags).unwrap_err();
        assert!(error
            .to_string()
            .contains("--memory: 2 is less than 4 MiB and has no unit"));
        assert!(error.to_string().contains("examples: 512M, 2G"));
        let json: LimitValues = serde_json::from_str(r#"{"disk": 100}"#).unwrap();
        assert!(matches!(
            json.parse(Written::Json),
            Err(LimitError::BareNumberTooSmall {
                flag: "limits.disk",
                ..
            })
        ));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("--wall", "10m"), Ok(600.0));
        assert_eq!(parse_duration("--wall", "1.5"), Ok(1.5));
        assert_eq!(parse_duration("--wall", "250ms"), Ok(0.25));
        assert!(parse_duration("--wall", "soon").is_err());
        assert!(parse_duration("--wall", "0s").is_err());
    }

    #[test]
    fn flags_and_json_go_through_one_parser() {
        let json: LimitValues =
            serde_json::from_str(r#"{"memory": "2G", "cores": 1.5, "wall": 90, "gpus": 2}"#)
                .unwrap();
        let flags = LimitValues {
            memory: Some("2G".into()),
            cores: Some("1.5".into()),
            wall: Some("90".into()),
            gpus: Some("2".into()),
            ..LimitValues::default()
        };
        assert_eq!(json.parse(Written::Json), flags.parse(Written::Flags));
        let half_a_gpu: LimitValues = serde_json::from_str(r#"{"gpus": 1.5}"#).unwrap();
        assert_eq!(
            half_a_gpu.parse(Written::Json),
            Err(LimitError::BadNumber {
                flag: "limits.gpus",
                value: "1.5".into()
            })
        );
        assert!(serde_json::from_str::<LimitValues>(r#"{"mem": "2G"}"#).is_err());
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_positive("--cores", "1.5"), Ok(1.5));
        assert!(parse_positive("--cores", "0").is_err());
        assert!(parse_positive("--cores", "-2").is_err());
        assert!(parse_positive("--cores", "many").is_err());
    }
}
