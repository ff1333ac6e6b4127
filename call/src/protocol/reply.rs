//! Replies of the serve protocol (docs/serve.md): one JSON object per call.

use std::path::Path;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Serialize};

use lfm_monitor::outcome::Outcome;
use lfm_monitor::report::{ExitKind, Report};

use crate::serve::engine::{CallSpec, Status};

pub const PROTOCOL_FORMAT: &str = "lfm-serve/1";
/// The last bytes of a call's stdout and stderr that a reply carries.
const OUTPUT_TAIL: u64 = 64 * 1024;

pub struct Reply {
    pub client: u64,
    pub message: Box<Message>,
}

/// One reply line (docs/serve.md, "Reply"; its example is read back into this type).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    pub format: String,
    pub id: serde_json::Value,
    pub ok: bool,
    /// The value, when JSON was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_pickle: Option<String>,
    /// The value's bytes (in the format asked) in a file the client reads and removes; with
    /// `result_by_file`, for values the child wrote to a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_file: Option<std::path::PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_not_json: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<Box<Report>>,
    /// With `auto`: the attempts that ran out, and how many there were in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<Vec<serde_json::Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// The tails of what the call printed (null when there was no file to read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<Option<String>>,
    /// The reply to a status request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Box<Status>>,
}

/// Why a call has no value: `reason` and `message`, and what the reason adds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    pub reason: String,
    pub message: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exception_pickle: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits_exceeded: Option<std::collections::BTreeMap<String, f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<i32>,
}

impl Message {
    fn new(id: serde_json::Value, ok: bool) -> Message {
        Message {
            format: PROTOCOL_FORMAT.into(),
            id,
            ok,
            result: None,
            result_pickle: None,
            result_file: None,
            result_not_json: None,
            error: None,
            report: None,
            retries: None,
            attempts: None,
            stdout: None,
            stderr: None,
            status: None,
        }
    }

    /// A status reply, before its `status` is set.
    pub(crate) fn status(id: serde_json::Value) -> Message {
        Message::new(id, true)
    }

    fn error(id: serde_json::Value, reason: &'static str, message: &str) -> Message {
        Message {
            error: Some(ErrorBody {
                reason: reason.into(),
                message: Some(message.to_string()),
                ..ErrorBody::default()
            }),
            ..Message::new(id, false)
        }
    }

    /// The line sent: compact JSON.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a reply is plain data")
    }
}

impl Reply {
    /// The call never ran (bad target, no cgroup, shutdown).
    pub fn refused(spec: &CallSpec, message: &str) -> Reply {
        Reply {
            client: spec.client,
            message: Box::new(Message::error(spec.id.clone(), "refused", message)),
        }
    }

    /// A request that could not be parsed.
    pub fn malformed(client: u64, id: serde_json::Value, message: &str) -> Reply {
        Reply {
            client,
            message: Box::new(Message::error(id, "malformed", message)),
        }
    }

    pub fn failed(spec: &CallSpec, report: Report, reason: &'static str, message: &str) -> Reply {
        let mut message = Message::error(spec.id.clone(), reason, message);
        message.report = Some(Box::new(report));
        Reply {
            client: spec.client,
            message: Box::new(message),
        }
    }

    /// The call ran: its value or why it has none (`applied`: its outcome, already applied to
    /// the Report), its Report, and the tail of its output. `value`: the value's bytes when
    /// the child sent them rather than writing its `result` file.
    pub fn finished(
        spec: &CallSpec,
        report: Report,
        applied: Outcome,
        dir: &Path,
        value: Option<Vec<u8>>,
    ) -> Reply {
        let returned = matches!(applied, Outcome::Returned { .. });
        let mut message = Message::new(spec.id.clone(), returned);
        message.stdout = Some(tail(&dir.join("stdout")));
        message.stderr = Some(tail(&dir.join("stderr")));
        match applied {
            Outcome::Returned { result, not_json } => {
                message.result_not_json = not_json;
                message.set_value(&result.format, dir, value, spec.result_by_file);
            }
            _ => {
                let mut error = error_of(&report);
                error.exception_pickle = std::fs::read(dir.join("exception"))
                    .ok()
                    .map(|bytes| BASE64.encode(&bytes));
                message.error = Some(error);
            }
        }
        message.report = Some(Box::new(report));
        if let Some(auto) = &spec.auto {
            message.attempts = Some(auto.attempts.retried + 1);
            message.retries = Some(auto.retries.clone());
        }
        Reply {
            client: spec.client,
            message: Box::new(message),
        }
    }
}

impl Message {
    /// The value: sent inline (`value`), else in the call's `result` file, which is handed
    /// over as it is when the client takes files.
    fn set_value(&mut self, format: &str, dir: &Path, value: Option<Vec<u8>>, by_file: bool) {
        if value.is_none() && by_file {
            self.result_file = hand_over(dir);
            if self.result_file.is_some() {
                return;
            }
        }
        let bytes = value
            .or_else(|| std::fs::read(dir.join("result")).ok())
            .unwrap_or_default();
        if format == "pickle" {
            self.result_pickle = Some(BASE64.encode(&bytes));
        } else {
            self.result = Some(serde_json::from_slice(&bytes).unwrap_or_default());
            self.result_not_json = None;
        }
    }
}

/// The call's value file moved out of its directory (which is removed after the reply) into
/// the serve's `results/`, beside it: the client reads it there and removes it. None when
/// there is no file to move (the client then gets the value inline).
fn hand_over(dir: &Path) -> Option<std::path::PathBuf> {
    let results = dir.parent()?.join("results");
    std::fs::create_dir_all(&results).ok()?;
    let handed = results.join(dir.file_name()?);
    std::fs::rename(dir.join("result"), &handed).ok()?;
    Some(handed)
}

/// `reason` is one of: exception, limits, signal, no-result, error.
fn error_of(report: &Report) -> ErrorBody {
    match report.exit.kind {
        ExitKind::Exception => {
            let e = report.exit.exception.as_ref();
            ErrorBody {
                reason: "exception".into(),
                message: e.map(|e| e.message.clone()),
                type_name: e.map(|e| e.type_name.clone()),
                traceback: e.map(|e| e.traceback.clone()),
                ..ErrorBody::default()
            }
        }
        ExitKind::Limits => ErrorBody {
            reason: "limits".into(),
            message: Some(format!(
                "limit exceeded: {}",
                report
                    .limits_exceeded
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            limits_exceeded: Some(report.limits_exceeded.clone()),
            ..ErrorBody::default()
        },
        ExitKind::Signal => ErrorBody {
            reason: "signal".into(),
            message: Some(format!(
                "the call died of signal {}",
                report.exit.signal.unwrap_or(0)
            )),
            signal: report.exit.signal,
            ..ErrorBody::default()
        },
        ExitKind::Error if report.exit.status.is_some() => ErrorBody {
            reason: "no-result".into(),
            message: report.exit.error.clone(),
            status: report.exit.status,
            ..ErrorBody::default()
        },
        _ => ErrorBody {
            reason: "error".into(),
            message: report.exit.error.clone(),
            ..ErrorBody::default()
        },
    }
}

fn tail(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return None;
    };
    let length = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = length.saturating_sub(OUTPUT_TAIL);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return None;
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if start > 0 {
        Some(format!("[... {start} bytes not shown ...]\n{text}"))
    } else {
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_value_goes_back_with_every_float_as_python_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let written = "[0.22320164740085602, 1e-310, 0.1, 123456789.98765433]";
        std::fs::write(dir.path().join("result"), written).unwrap();
        let mut message = Message::new(serde_json::Value::Null, true);
        message.set_value("json", dir.path(), None, false);
        let sent = serde_json::to_string(&message.result).unwrap();
        assert_eq!(sent, written.replace(' ', ""));
    }
}
