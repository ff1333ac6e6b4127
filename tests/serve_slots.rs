//! `lfm serve`'s slot cgroups, made once and reused by later calls (issue 54): a call that ran
//! in a cgroup an earlier call used is measured as itself, never with the earlier call's peak,
//! CPU or page cache. On cgroup v1 as root (where this machine offers it) and on the rlimit
//! backend as nobody (setpriv); cgroup v2 is checked in the QEMU guest (tests/cgroup2.rs).

mod common;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use common::serve::{Containment, ServeClient};

const MIB: f64 = 1_048_576.0;

/// What the calls run: one large in memory, CPU and page cache, one small, and what cgroup
/// each ran in.
const FUNCTIONS: &str = r#"
import time

def cgroup():
    with open("/proc/self/cgroup") as f:
        return [line.split(":", 2)[2].strip() for line in f if ":memory:" in line or line.startswith("0::")][0]

def large(mib, cpu_seconds, cache_file):
    data = bytearray(b"\x01") * (mib << 20)
    with open(cache_file, "wb") as f:
        f.write(b"\x02" * (64 << 20))
    start = time.process_time()
    while time.process_time() - start < cpu_seconds:
        pass
    return cgroup()

def small(mib):
    data = bytearray(b"\x01") * (mib << 20)
    return cgroup()
"#;

struct Setup {
    dir: tempfile::TempDir,
    lfm: PathBuf,
    how: Containment,
}

/// A world-writable directory holding lfm and the functions, so nobody can run them too.
fn setup(how: Containment) -> Setup {
    let (dir, lfm) = common::shared_dir_with_lfm("lfm-slots");
    std::fs::write(dir.path().join("slots.py"), FUNCTIONS).unwrap();
    Setup { dir, lfm, how }
}

impl Setup {
    /// Serve `requests` one at a time (each sent once the previous one's reply is in, and a
    /// second after the first's: its cgroup is usually back in the pool by then) on one slot,
    /// while `go_on` says so of the replies so far, and return the replies in order.
    fn serve_in_turn_while(
        &self,
        requests: impl IntoIterator<Item = Value>,
        go_on: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let mut command = self.how.serve_command(&self.lfm);
        command
            .args(["--slots", "1", "--no-history", "--cache-dir"])
            .arg(self.dir.path().join("cache"))
            .current_dir(self.dir.path());
        let mut server = ServeClient::spawn(&mut command);
        let mut replies = Vec::new();
        for request in requests {
            let reply = server.ask(&request);
            assert_eq!(reply["ok"], true, "{}: {reply}", self.how.name);
            if replies.is_empty() {
                // Releasing a cgroup that 64 MiB were written from waits for their writeback.
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            replies.push(reply);
            if !go_on(&replies) {
                break;
            }
        }
        server.end();
        replies
    }

    fn cache_file(&self) -> String {
        self.dir.path().join("cache.bin").display().to_string()
    }
}

fn call(id: usize, function: &str, args: Value) -> Value {
    json!({"id": id.to_string(), "function": format!("slots.py:{function}"),
           "import_module": true, "args": args})
}

/// A large call (300 MiB, 1 s of CPU, 64 MiB written to a file outside its sandbox, whose
/// page cache stays charged where it was written), then small calls (10 MiB) after it: four,
/// and more while `go_on` says so (at most 40 in all).
fn large_then_small(setup: &Setup, go_on: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let large = call(0, "large", json!([300, 1.0, setup.cache_file()]));
    let small = (1..40).map(|n| call(n, "small", json!([10])));
    setup.serve_in_turn_while(std::iter::once(large).chain(small), |replies| {
        replies.len() < 5 || go_on(replies)
    })
}

/// Whether a small call has run in the large call's cgroup (the result is the call's cgroup).
fn one_ran_in_the_large_cgroup(replies: &[Value]) -> bool {
    replies[1..]
        .iter()
        .any(|r| r["result"] == replies[0]["result"])
}

fn mib(report: &Value, figure: &str) -> f64 {
    report["memory"][figure].as_f64().unwrap_or(0.0) / MIB
}

/// Every small call's Report is its own: peak, cgroup peak, page cache and CPU.
fn assert_small_calls_measured_alone(replies: &[Value], backend: &str) {
    let large = &replies[0]["report"];
    assert!(mib(large, "peak_bytes") > 290.0, "{backend}: {large}");
    for reply in &replies[1..] {
        let report = &reply["report"];
        let id = &reply["id"];
        assert!(
            mib(report, "peak_bytes") < 100.0,
            "{backend}: call {id} measured {:.1} MiB after the 300 MiB call: {report}",
            mib(report, "peak_bytes")
        );
        assert!(
            mib(report, "cgroup_peak_bytes") < 100.0,
            "{backend}: call {id}'s cgroup peak {:.1} MiB",
            mib(report, "cgroup_peak_bytes")
        );
        assert!(
            mib(report, "file_bytes") < 32.0,
            "{backend}: call {id} counts {:.1} MiB of page cache (the large call wrote 64)",
            mib(report, "file_bytes")
        );
        // A forked small call uses milliseconds; half a second leaves a loaded host room and
        // still fails if the large call's second were counted.
        let cpu = report["cpu_time"]["total"].as_f64().unwrap();
        assert!(
            cpu < 0.5,
            "{backend}: call {id} used {cpu} s of CPU, the large call's 1 s counted"
        );
    }
}

#[test]
fn on_cgroup_v1_a_call_after_a_large_one_in_its_cgroup_is_measured_alone() {
    if !common::cgroup1_available() {
        eprintln!("SKIPPED: needs a writable cgroup v1 hierarchy (root)");
        return;
    }
    let setup = setup(Containment::new("cgroup1", "cgroup1", false));
    // Until the janitor hands the large call's cgroup back and a small call runs in it: its
    // release waits for writeback, which a loaded machine may make slow.
    let replies = large_then_small(&setup, |r| !one_ran_in_the_large_cgroup(r));
    assert_small_calls_measured_alone(&replies, "cgroup1");
    // Some small call ran where the large one had: else this tested fresh cgroups only.
    assert!(
        one_ran_in_the_large_cgroup(&replies),
        "no small call ran in the large call's cgroup {}: {:?}",
        replies[0]["result"],
        replies.iter().map(|r| &r["result"]).collect::<Vec<_>>()
    );
}

#[test]
fn on_rlimit_as_nobody_a_call_after_a_large_one_is_measured_alone() {
    if !common::is_root() || !Path::new("/usr/bin/python3").exists() {
        eprintln!("SKIPPED: needs root (to setpriv to nobody) and /usr/bin/python3");
        return;
    }
    let setup = setup(Containment::new("rlimit-as-nobody", "rlimit", true));
    let replies = large_then_small(&setup, |_| false);
    assert_small_calls_measured_alone(&replies, "rlimit");
}

#[test]
fn a_serve_keeps_its_slot_cgroups_rather_than_making_one_per_call() {
    if !common::cgroup1_available() {
        eprintln!("SKIPPED: needs a writable cgroup v1 hierarchy (root)");
        return;
    }
    let setup = setup(Containment::new("cgroup1", "cgroup1", false));
    let requests = (0..24).map(|n| call(n, "small", json!([1])));
    let replies = setup.serve_in_turn_while(requests, |_| true);
    let mut cgroups: Vec<&str> = replies
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    assert!(
        cgroups.iter().all(|c| c.contains("/lfm/run-")),
        "{cgroups:?}"
    );
    cgroups.sort();
    cgroups.dedup();
    // One slot: its call's cgroup, its spare's, and those the janitor is still releasing (a
    // fresh cgroup per call would be 24; a slow janitor on a loaded machine makes a few more).
    assert!(
        cgroups.len() <= 12,
        "24 calls in turn on one slot used {} cgroups: {cgroups:?}",
        cgroups.len()
    );
}
