//! Reused call processes in `lfm serve` (docs/serve.md "Reused processes"): the calls of a
//! `reuse` function run in one process that keeps its state, each with its own Report and
//! limits; on cgroup v1 (as root, where the machine has it) and on the rlimit backend as
//! nobody. Fixture: tests/fixtures/reuse/work.py (a module global that remembers its calls).

mod common;

use std::path::Path;

use common::serve::{Containment, ServeClient};

use serde_json::{json, Value};

const MIB: f64 = 1_048_576.0;

/// A serve's world: lfm and the fixture in a directory anyone may read and write.
struct Setup {
    name: &'static str,
    dir: tempfile::TempDir,
    how: Containment,
}

fn setup(how: Containment) -> Setup {
    let (dir, _) = common::shared_dir_with_lfm("lfm-reuse");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reuse/work.py");
    std::fs::copy(fixture, dir.path().join("work.py")).unwrap();
    Setup {
        name: how.name,
        dir,
        how,
    }
}

/// Every setup this machine offers, each missing one said.
fn setups() -> Vec<Setup> {
    Containment::available().into_iter().map(setup).collect()
}

impl Setup {
    fn start(&self, slots: usize) -> ServeClient {
        let mut command = self.how.serve_command(&self.dir.path().join("lfm"));
        command
            .args(["--slots", &slots.to_string(), "--no-history", "--cache-dir"])
            .arg(self.dir.path().join("cache"))
            .env("PYTHONPATH", self.dir.path())
            .current_dir(self.dir.path());
        ServeClient::spawn(&mut command)
    }
}

fn call(label: &str, megabytes: u64, reuse: bool, limits: Value) -> Value {
    json!({"id": label, "function": "work.py:remember", "import_module": true,
           "args": [label, megabytes], "limits": limits, "reuse": reuse})
}

fn process(reply: &Value) -> &Value {
    &reply["report"]["function"]["process"]
}

fn peak_mib(reply: &Value) -> f64 {
    reply["report"]["memory"]["peak_bytes"].as_f64().unwrap() / MIB
}

/// Whether process `pid` is gone (or a zombie) within 10 s.
fn ends_soon(pid: i64) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat)
                if stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z') =>
            {
                return true
            }
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
    false
}

fn pid(reply: &Value) -> i64 {
    reply["result"]["pid"].as_i64().unwrap()
}

#[test]
fn two_calls_of_a_reuse_function_share_a_process_and_its_globals() {
    for setup in setups() {
        let mut server = setup.start(1);
        let first = server.ask(&call("a", 0, true, json!({})));
        assert_eq!(first["ok"], true, "{}: {first}", setup.name);
        assert_eq!(
            process(&first),
            &json!({"pid": pid(&first), "calls": 1, "reused": false}),
            "{}",
            setup.name
        );
        let second = server.ask(&call("b", 0, true, json!({})));
        assert_eq!(second["ok"], true, "{}: {second}", setup.name);
        assert_eq!(pid(&second), pid(&first), "{}: {second}", setup.name);
        assert_eq!(
            second["result"]["seen"],
            json!(["a", "b"]),
            "{}",
            setup.name
        );
        assert_eq!(
            process(&second),
            &json!({"pid": pid(&first), "calls": 2, "reused": true}),
            "{}",
            setup.name
        );
        server.end();
        assert!(
            ends_soon(pid(&first)),
            "{}: the serve's end ends its kept process",
            setup.name
        );
    }
}

#[test]
fn a_reused_call_has_its_own_memory_peak_and_cpu() {
    for setup in setups() {
        let mut server = setup.start(1);
        let big = server.ask(&call("big", 300, true, json!({})));
        assert_eq!(big["ok"], true, "{}: {big}", setup.name);
        assert!(peak_mib(&big) > 250.0, "{}: {big}", setup.name);
        let small = server.ask(&call("small", 10, true, json!({})));
        assert_eq!(pid(&small), pid(&big), "{}: {small}", setup.name);
        assert!(
            peak_mib(&small) < 100.0,
            "{}: the second call's peak holds the first's: {:.0} MiB",
            setup.name,
            peak_mib(&small)
        );
        // The kernel's own peak too, where the cgroup keeps one: reset as the call began.
        if let Some(kernel) = small["report"]["memory"]["cgroup_peak_bytes"].as_f64() {
            assert!(kernel / MIB < 100.0, "{}: {small}", setup.name);
        }
        let cpu = |reply: &Value| reply["report"]["cpu_time"]["total"].as_f64().unwrap();
        assert!(
            cpu(&small) < cpu(&big),
            "{}: the second call's CPU holds the first's: {} >= {}",
            setup.name,
            cpu(&small),
            cpu(&big)
        );
        server.end();
    }
}

#[test]
fn a_call_over_its_memory_fails_alone_and_the_next_starts_a_fresh_process() {
    for setup in setups() {
        let mut server = setup.start(1);
        let limits = json!({"memory": "200M"});
        let first = server.ask(&call("first", 0, true, limits.clone()));
        assert_eq!(first["ok"], true, "{}: {first}", setup.name);
        let over = server.ask(&call("over", 400, true, limits.clone()));
        assert_eq!(over["ok"], false, "{}: {over}", setup.name);
        assert!(
            over["report"]["limits_exceeded"].get("memory").is_some(),
            "{}: {over}",
            setup.name
        );
        assert_eq!(process(&over)["reused"], true, "{}: {over}", setup.name);
        let after = server.ask(&call("after", 0, true, limits));
        assert_eq!(after["ok"], true, "{}: {after}", setup.name);
        assert_ne!(pid(&after), pid(&first), "{}: {after}", setup.name);
        assert_eq!(after["result"]["seen"], json!(["after"]), "{}", setup.name);
        assert_eq!(
            process(&after),
            &json!({"pid": pid(&after), "calls": 1, "reused": false}),
            "{}",
            setup.name
        );
        server.end();
    }
}

#[test]
fn a_function_without_reuse_never_reuses_a_process() {
    for setup in setups() {
        let mut server = setup.start(1);
        let first = server.ask(&call("a", 0, false, json!({})));
        let second = server.ask(&call("b", 0, false, json!({})));
        assert_eq!(second["ok"], true, "{}: {second}", setup.name);
        assert_ne!(pid(&second), pid(&first), "{}", setup.name);
        assert_eq!(second["result"]["seen"], json!(["b"]), "{}", setup.name);
        assert!(process(&second).is_null(), "{}: {second}", setup.name);
        server.end();
    }
}

#[test]
fn an_idle_process_gives_its_slot_to_a_call_of_another_function() {
    for setup in setups() {
        let mut server = setup.start(1);
        let kept = server.ask(&call("kept", 0, true, json!({})));
        // Another function: another process; the one slot is the idle process's until it ends.
        let mut request = call("other", 0, true, json!({}));
        request["function"] = json!("work.py:other");
        request["args"] = json!([]);
        let other = server.ask(&request);
        assert_eq!(other["ok"], true, "{}: {other}", setup.name);
        assert_ne!(pid(&other), pid(&kept), "{}", setup.name);
        assert!(
            ends_soon(pid(&kept)),
            "{}: the idle process still lives",
            setup.name
        );
        let again = server.ask(&call("again", 0, true, json!({})));
        assert_eq!(process(&again)["reused"], false, "{}: {again}", setup.name);
        server.end();
    }
}

/// docs/serve.md "Reused processes": the example's `report.function`, as a real second call
/// has it (its pid aside).
#[test]
fn the_documented_reuse_example_is_what_a_serve_replies() {
    let (second, mut documented) = common::serve::documented_example("## Reused processes");
    let setup = setups().pop().unwrap();
    let mut server = setup.start(1);
    let mut first = second.clone();
    first["id"] = json!(1);
    first["args"] = json!(["a", 0]);
    server.ask(&first);
    let reply = server.ask(&second);
    documented["process"]["pid"] = json!(pid(&reply));
    assert_eq!(reply["report"]["function"], documented, "{reply}");
    server.end();
}

#[test]
fn each_call_in_a_kept_process_is_held_to_its_own_memory_limit() {
    for setup in setups() {
        let mut server = setup.start(1);
        let roomy = server.ask(&call("roomy", 300, true, json!({"memory": "600M"})));
        assert_eq!(roomy["ok"], true, "{}: {roomy}", setup.name);
        // The same process takes a call of a smaller memory limit, and holds it to that one.
        let tight = server.ask(&call("tight", 300, true, json!({"memory": "200M"})));
        assert_eq!(process(&tight)["reused"], true, "{}: {tight}", setup.name);
        assert_eq!(process(&tight)["pid"], json!(pid(&roomy)), "{}", setup.name);
        assert_eq!(tight["ok"], false, "{}: {tight}", setup.name);
        assert!(
            tight["report"]["limits_exceeded"].get("memory").is_some(),
            "{}: {tight}",
            setup.name
        );
        server.end();
    }
}
