//! docs/serve.md carries a real request and reply; a fresh reply must have the same fields.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

/// The example's request and reply, as the protocol's own types read them: a field the
/// types do not know fails here, on any machine.
#[test]
fn serve_example_is_read_by_the_protocol_types() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/serve.md")).unwrap();
    let request = doc
        .lines()
        .find_map(|l| {
            l.strip_prefix("echo '")
                .and_then(|r| r.split("' | lfm serve").next())
        })
        .expect("the example request");
    let request: lfm_call::protocol::Request =
        serde_json::from_str(request).expect("the example request is a protocol request");
    assert_eq!(request.function.as_deref(), Some("faults.py:add"));
    let reply = doc
        .split("```json\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    let reply: lfm_call::protocol::Message =
        serde_json::from_str(reply).expect("the example reply is a protocol reply");
    assert!(reply.ok && reply.report.is_some());
}

#[test]
fn serve_example_matches_a_real_reply() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/serve.md")).unwrap();
    let request = doc
        .lines()
        .find_map(|l| {
            l.strip_prefix("echo '")
                .and_then(|r| r.split("' | lfm serve").next())
        })
        .expect("the example request");
    let documented = doc
        .split("```json\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    let documented: serde_json::Value = serde_json::from_str(documented).expect("example parses");
    assert_eq!(documented["format"], "lfm-serve/1");
    if !common::lfm_in(
        "/",
        &["run", "--quiet", "--backend", "cgroup1", "--", "true"],
    )
    .status
    .success()
    {
        eprintln!("SKIPPED comparison with a fresh reply: the example was made on cgroup v1, which this machine does not offer");
        return;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(["serve", "--backend", "cgroup1", "--no-history"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/serve"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{request}").unwrap();
    let output = child.wait_with_output().unwrap();
    let reply: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON reply");
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(reply["result"], documented["result"]);
    // `imports.preloaded` is there once the zygote has learned a package, which it may do
    // from this very call's log while the call runs (docs/serve.md "Warm calls"): whether it
    // did before the reply depends on timing.
    let mut paths = common::key_paths(&reply);
    paths.remove("report.imports.preloaded");
    assert_eq!(paths, common::key_paths(&documented));
}

/// The Status section's example: read by the reply type, and the same fields as a real one.
#[test]
fn status_example_is_a_reply_and_matches_a_real_one() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/serve.md")).unwrap();
    let section = doc.split("## Status").nth(1).expect("a Status section");
    let documented = section
        .split("```json\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    let message: lfm_call::protocol::Message =
        serde_json::from_str(documented).expect("the status example is a protocol reply");
    assert!(message.ok && message.status.is_some() && message.report.is_none());
    let request = section
        .lines()
        .find_map(|l| {
            l.strip_prefix("echo '")
                .and_then(|r| r.split("' | lfm serve").next())
        })
        .expect("the status request");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args([
            "serve",
            "--backend",
            "rlimit",
            "--no-history",
            "--preload",
            "json",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/serve"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{request}").unwrap();
    let output = child.wait_with_output().unwrap();
    let reply: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one reply");
    let documented: serde_json::Value = serde_json::from_str(documented).unwrap();
    assert_eq!(common::key_paths(&reply), common::key_paths(&documented));
    assert_eq!(reply["status"]["zygote"]["preloaded"], json_list(&["json"]));
}

fn json_list(items: &[&str]) -> serde_json::Value {
    serde_json::Value::from(items.to_vec())
}
