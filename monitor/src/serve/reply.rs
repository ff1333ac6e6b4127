//! Replies of the serve protocol (docs/serve.md): one JSON object per call.

use std::path::Path;

use base64::Engine;

use crate::outcome::Outcome;
use crate::report::{ExitKind, Report};

use super::CallSpec;

pub const PROTOCOL_FORMAT: &str = "lfm-serve/1";
/// The last bytes of a call's stdout and stderr that a reply carries.
const OUTPUT_TAIL: u64 = 64 * 1024;

pub struct Reply {
    pub client: u64,
    pub message: serde_json::Value,
}

impl Reply {
    /// The call never ran (bad target, no cgroup, shutdown).
    pub fn refused(spec: &CallSpec, message: &str) -> Reply {
        Reply {
            client: spec.client,
            message: serde_json::json!({
                "format": PROTOCOL_FORMAT,
                "id": spec.id,
                "ok": false,
                "error": {"reason": "refused", "message": message},
            }),
        }
    }

    /// A request that could not be parsed.
    pub fn malformed(client: u64, id: serde_json::Value, message: &str) -> Reply {
        Reply {
            client,
            message: serde_json::json!({
                "format": PROTOCOL_FORMAT,
                "id": id,
                "ok": false,
                "error": {"reason": "malformed", "message": message},
            }),
        }
    }

    pub fn failed(spec: &CallSpec, report: Report, reason: &str, message: &str) -> Reply {
        Reply {
            client: spec.client,
            message: serde_json::json!({
                "format": PROTOCOL_FORMAT,
                "id": spec.id,
                "ok": false,
                "error": {"reason": reason, "message": message},
                "report": report,
            }),
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
        let mut message = serde_json::json!({
            "format": PROTOCOL_FORMAT,
            "id": spec.id,
            "stdout": tail(&dir.join("stdout")),
            "stderr": tail(&dir.join("stderr")),
        });
        match applied {
            Outcome::Returned { result, not_json } => {
                message["ok"] = true.into();
                let bytes = value
                    .or_else(|| std::fs::read(dir.join("result")).ok())
                    .unwrap_or_default();
                if result.format == "pickle" {
                    message["result_pickle"] = base64::engine::general_purpose::STANDARD
                        .encode(&bytes)
                        .into();
                    if let Some(reason) = not_json {
                        message["result_not_json"] = reason.into();
                    }
                } else {
                    message["result"] = serde_json::from_slice(&bytes).unwrap_or_default();
                }
            }
            _ => {
                message["ok"] = false.into();
                message["error"] = error_of(&report);
                if let Ok(bytes) = std::fs::read(dir.join("exception")) {
                    message["error"]["exception_pickle"] =
                        base64::engine::general_purpose::STANDARD
                            .encode(&bytes)
                            .into();
                }
            }
        }
        message["report"] = serde_json::to_value(&report).unwrap_or_default();
        if let Some(auto) = &spec.auto {
            message["attempts"] = (auto.attempts.retried + 1).into();
            message["retries"] = auto.retries.clone().into();
        }
        Reply {
            client: spec.client,
            message,
        }
    }
}

/// `reason` is one of: exception, limits, signal, no-result, error.
fn error_of(report: &Report) -> serde_json::Value {
    match report.exit.kind {
        ExitKind::Exception => {
            let e = report.exit.exception.as_ref();
            serde_json::json!({
                "reason": "exception",
                "type": e.map(|e| e.type_name.clone()),
                "message": e.map(|e| e.message.clone()),
                "traceback": e.map(|e| e.traceback.clone()),
            })
        }
        ExitKind::Limits => serde_json::json!({
            "reason": "limits",
            "message": format!("limit exceeded: {}", report.limits_exceeded.keys().cloned().collect::<Vec<_>>().join(", ")),
            "limits_exceeded": report.limits_exceeded,
        }),
        ExitKind::Signal => serde_json::json!({
            "reason": "signal",
            "message": format!("the call died of signal {}", report.exit.signal.unwrap_or(0)),
            "signal": report.exit.signal,
        }),
        ExitKind::Error if report.exit.status.is_some() => serde_json::json!({
            "reason": "no-result",
            "message": report.exit.error,
            "status": report.exit.status,
        }),
        _ => serde_json::json!({"reason": "error", "message": report.exit.error}),
    }
}

fn tail(path: &Path) -> serde_json::Value {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return serde_json::Value::Null;
    };
    let length = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = length.saturating_sub(OUTPUT_TAIL);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return serde_json::Value::Null;
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if start > 0 {
        format!("[... {start} bytes not shown ...]\n{text}").into()
    } else {
        text.into()
    }
}
