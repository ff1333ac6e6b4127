//! GPUs end to end: the real binary against the scripted device model (`LFM_GPU_MODEL`,
//! docs/gpu.md), each test with its own model, usage directory and ledger. Workloads use the
//! model through tests/fixtures/gpu/use-gpu.sh, which waits until the model has listed it, so
//! nothing here depends on timing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use common::assert_succeeded;

/// A node with `n` scripted GPUs GPU-0..GPU-(n-1).
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn with(n: usize) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let devices: Vec<_> = (0..n)
            .map(|i| {
                serde_json::json!({"uuid": format!("GPU-{i}"), "name": "Scripted GPU",
                                   "memory_total_bytes": 17179869184u64})
            })
            .collect();
        let model = serde_json::json!({"format": "lfm-gpu-model/1", "devices": devices});
        std::fs::write(dir.path().join("model.json"), model.to_string()).unwrap();
        Node { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lfm"));
        command
            .args(args)
            .current_dir("/")
            .stdin(Stdio::null())
            .env("LFM_GPU_MODEL", self.path("model.json"))
            .env("LFM_GPU_LEDGER", self.path("ledger"))
            .env("LFM_TEST_USAGE", self.path("usage"))
            // Calls are recorded: never in the user's own history.
            .env("LFM_HISTORY", self.path("history.sqlite"))
            .env_remove("LFM_GPUS");
        command
    }

    fn lfm(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `lfm run --backend rlimit --report R ARGS -- use-gpu.sh WORKLOAD...`, and its Report.
    fn run(&self, args: &[&str], workload: &[&str]) -> (Output, serde_json::Value) {
        let report = self.path("report.json");
        let mut full = vec!["run", "--quiet", "--backend", "rlimit", "--report"];
        full.push(report.to_str().unwrap());
        full.extend_from_slice(args);
        full.extend(["--", "sh", USE_GPU]);
        full.extend_from_slice(workload);
        let output = self.lfm(&full);
        let text = std::fs::read_to_string(&report).unwrap_or_default();
        let report = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&output.stderr));
        });
        (output, report)
    }
}

const USE_GPU: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gpu/use-gpu.sh");

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn notes(report: &serde_json::Value) -> Vec<String> {
    report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_run_gets_its_own_device_and_the_report_says_what_it_used_there() {
    let node = Node::with(2);
    let series = node.path("series.jsonl");
    let series_arg = series.to_str().unwrap();
    let (output, report) = node.run(
        &["--gpus", "1", "--series", series_arg],
        &["-", "300000000", "70", "exit"],
    );
    assert_succeeded(&output);
    let gpu = &report["gpu"];
    assert_eq!(gpu["source"], "scripted");
    assert_eq!(gpu["visible_devices"], "GPU-0");
    assert_eq!(gpu["devices"][0]["uuid"], "GPU-0");
    assert_eq!(gpu["devices"][0]["memory_total_bytes"], 17179869184u64);
    assert_eq!(gpu["memory_peak_bytes"], 300000000);
    assert_eq!(gpu["utilization_peak_percent"], 70.0);
    assert!(gpu["utilization_average_percent"].as_f64().unwrap() <= 70.0);
    assert_eq!(gpu["devices_used"], 1);
    assert_eq!(gpu["violations"], serde_json::json!([]));
    assert_eq!(report["limits"]["gpus"], 1);
    let lines = std::fs::read_to_string(&series).unwrap();
    assert!(
        lines
            .lines()
            .any(|l| l.contains("\"gpu_memory_bytes\":300000000")),
        "{lines}"
    );
}

#[test]
fn the_workload_sees_its_device_in_cuda_visible_devices() {
    let node = Node::with(2);
    let output = node.lfm(&[
        "run",
        "--quiet",
        "--backend",
        "rlimit",
        "--gpus",
        "2",
        "--",
        "sh",
        USE_GPU,
        "GPU-1",
        "1",
        "1",
        "exit",
    ]);
    assert_succeeded(&output);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "visible=GPU-0,GPU-1\n"
    );
}

#[test]
fn over_its_gpu_memory_limit_the_run_is_killed() {
    let node = Node::with(1);
    let (output, report) = node.run(
        &["--gpus", "1", "--gpu-memory", "100M"],
        &["-", "300000000", "50", "stay"],
    );
    assert_eq!(output.status.code(), Some(125), "{}", stderr(&output));
    assert_eq!(report["exit"]["type"], "limits");
    assert_eq!(report["limits_exceeded"]["gpu_memory"], 104857600.0);
    assert_eq!(report["limits"]["gpu_memory_bytes"], 104857600);
    assert_eq!(report["gpu"]["memory_peak_bytes"], 300000000);
}

#[test]
fn a_process_on_a_device_it_was_not_given_is_named_or_killed() {
    let node = Node::with(2);
    let (output, report) = node.run(&["--gpus", "1"], &["GPU-1", "1000", "5", "exit"]);
    assert_succeeded(&output);
    let violation = &report["gpu"]["violations"][0];
    assert_eq!(violation["kind"], "other-device");
    assert_eq!(violation["device"], "GPU-1");
    assert_eq!(violation["action"], "noted");
    assert!(notes(&report)
        .iter()
        .any(|n| n.contains("GPU-1 it was not given")));

    let (output, report) = node.run(
        &["--gpus", "1", "--gpu-violation", "kill"],
        &["GPU-1", "1000", "5", "stay"],
    );
    assert_eq!(output.status.code(), Some(128 + 9), "{}", stderr(&output));
    assert_eq!(report["gpu"]["violations"][0]["action"], "killed");
}

#[test]
fn a_foreign_process_on_the_runs_device_is_named() {
    let node = Node::with(1);
    // This test process is not of the run: it "uses" the device the run will get.
    let usage = node.path("usage/GPU-0");
    std::fs::create_dir_all(&usage).unwrap();
    std::fs::write(usage.join(std::process::id().to_string()), "5000 10").unwrap();
    let (output, report) = node.run(&["--gpus", "1"], &["-", "1000", "5", "exit"]);
    assert_succeeded(&output);
    let violation = &report["gpu"]["violations"][0];
    assert_eq!(violation["kind"], "foreign-process");
    assert_eq!(violation["pid"], std::process::id());
    assert!(notes(&report).iter().any(|n| n.contains("not of this run")));
    // Its memory is not the run's.
    assert_eq!(report["gpu"]["memory_peak_bytes"], 1000);
}

#[test]
fn too_few_devices_fail_before_anything_runs() {
    let node = Node::with(2);
    let marker = node.path("ran");
    let output = node.lfm(&[
        "run",
        "--gpus",
        "3",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    assert!(stderr(&output).contains("--gpus 3: this node has only 2 GPU(s)"));
    assert!(!marker.exists());
}

#[test]
fn a_gpu_less_node_fails_with_a_clear_error() {
    let node = Node::with(0);
    let mut command = node.command(&["run", "--gpus", "1", "--", "true"]);
    command.env_remove("LFM_GPU_MODEL");
    let output = command.output().unwrap();
    if output.status.success() {
        eprintln!("SKIPPED: this machine has a GPU that NVML lists");
        return;
    }
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("--gpus 1: this node has no GPU"),
        "{message}"
    );
    assert!(message.contains("LFM_GPUS"), "{message}");
}

#[test]
fn lfm_gpus_hands_out_devices_without_a_driver_and_measures_nothing() {
    let node = Node::with(0);
    let mut command = node.command(&[
        "run",
        "--quiet",
        "--backend",
        "rlimit",
        "--gpus",
        "1",
        "--report",
        "-",
        "--",
        "true",
    ]);
    command.env_remove("LFM_GPU_MODEL").env("LFM_GPUS", "1,0");
    let output = command.output().unwrap();
    assert_succeeded(&output);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    if report["gpu"]["source"] == "nvml" {
        eprintln!("SKIPPED: this machine has NVML; the figures are real");
        return;
    }
    assert_eq!(report["gpu"]["source"], "none");
    assert_eq!(report["gpu"]["visible_devices"], "1");
    assert_eq!(report["gpu"]["memory_peak_bytes"], serde_json::Value::Null);
    assert_eq!(
        report["gpu"]["utilization_average_percent"],
        serde_json::Value::Null
    );
    assert!(notes(&report).iter().any(|n| n.contains("not measured")));
}

#[test]
fn a_run_without_gpus_never_opens_the_driver() {
    let node = Node::with(1);
    // A model that cannot be read: a run that opened it would fail.
    let mut command = node.command(&[
        "run",
        "--quiet",
        "--backend",
        "rlimit",
        "--report",
        "-",
        "--",
        "true",
    ]);
    command.env("LFM_GPU_MODEL", "/nonexistent/model.json");
    let output = command.output().unwrap();
    assert_succeeded(&output);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(report.get("gpu").is_none());
    assert!(report["limits"].get("gpus").is_none());
    // With --gpus the same model is read, and the error names it.
    let mut command = node.command(&["run", "--gpus", "1", "--", "true"]);
    command.env("LFM_GPU_MODEL", "/nonexistent/model.json");
    let output = command.output().unwrap();
    assert!(
        stderr(&output).contains("/nonexistent/model.json"),
        "{}",
        stderr(&output)
    );
}

fn wait_for(path: &Path) {
    for _ in 0..6000 {
        if path.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{} never appeared", path.display());
}

fn holder(node: &Node, ready: &Path) -> Child {
    node.command(&[
        "run",
        "--quiet",
        "--backend",
        "rlimit",
        "--gpus",
        "1",
        "--",
        "sh",
        "-c",
        &format!("touch {}; exec sleep 600", ready.display()),
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap()
}

#[test]
fn a_busy_device_makes_a_run_fail_or_wait_and_a_killed_holder_frees_it() {
    let node = Node::with(1);
    let ready = node.path("ready");
    let mut first = holder(&node, &ready);
    wait_for(&ready);
    let busy = node.lfm(&["run", "--gpus", "1", "--", "true"]);
    assert_eq!(busy.status.code(), Some(75), "{}", stderr(&busy));
    assert!(
        stderr(&busy).contains("only 0 of 1 GPU(s) were free"),
        "{}",
        stderr(&busy)
    );
    // A waiter gets the device once the holder is gone, however it went.
    let waiter = node
        .command(&[
            "run",
            "--quiet",
            "--gpus",
            "1",
            "--gpu-wait-timeout",
            "10m",
            "--",
            "true",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    let waited = waiter.wait_with_output().unwrap();
    assert_succeeded(&waited);
    let after = node.lfm(&["run", "--quiet", "--gpus", "1", "--", "true"]);
    assert_succeeded(&after);
}

/// Eight lfm processes at once on three devices: each run's devices are marked taken with
/// mkdir (which fails when the directory exists), so two runs on one device fail the test.
#[test]
fn eight_concurrent_runs_never_share_a_device() {
    let node = Node::with(3);
    let marks = node.path("marks");
    std::fs::create_dir(&marks).unwrap();
    let script = format!(
        "for d in $(echo $CUDA_VISIBLE_DEVICES | tr , ' '); do mkdir {m}/$d || exit 3; done; \
         sleep 0.05; \
         for d in $(echo $CUDA_VISIBLE_DEVICES | tr , ' '); do rmdir {m}/$d; done",
        m = marks.display()
    );
    let runs: Vec<Child> = (0..8)
        .map(|i| {
            let gpus = if i % 3 == 0 { "2" } else { "1" };
            node.command(&[
                "run",
                "--quiet",
                "--backend",
                "rlimit",
                "--gpus",
                gpus,
                "--gpu-wait-timeout",
                "10m",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    for run in runs {
        let output = run.wait_with_output().unwrap();
        assert_succeeded(&output);
    }
    assert_eq!(std::fs::read_dir(&marks).unwrap().count(), 0);
}

#[test]
fn auto_sizes_gpu_memory_like_memory_and_retries_a_run_killed_over_it() {
    let node = Node::with(2);
    let history = node.path("history.sqlite");
    let history = history.to_str().unwrap();
    let auto = ["--category", "train", "--history", history, "--auto"];
    let mut args = vec!["--gpus", "1", "--memory", "1G", "--cores", "1"];
    args.extend(auto);
    // 3000 MiB: bucketing starts at 1000 MiB and doubles until the run fits.
    let (output, report) = node.run(&args, &["-", "3145728000", "40", "exit"]);
    assert_succeeded(&output);
    assert_eq!(report["limits"]["gpu_memory_bytes"], 4000u64 << 20);
    assert_eq!(
        report["limits_from_sizing"],
        serde_json::json!(["gpu_memory"])
    );
    let message = stderr(&output);
    assert!(
        message.contains("ran out of its sized gpu_memory limit of 1000.0 MiB"),
        "{message}"
    );

    // Two devices used: `--gpus auto` under max-seen gives the next run two.
    let mut args = vec!["--gpus", "2", "--gpu-memory", "8G"];
    args.extend(auto);
    let (output, _) = node.run(&args, &["-", "1000", "40", "exit"]);
    assert_succeeded(&output);
    let mut args = vec![
        "--gpus",
        "auto",
        "--strategy",
        "max-seen",
        "--gpu-memory",
        "8G",
    ];
    args.extend(auto);
    let (output, report) = node.run(&args, &["-", "1000", "40", "exit"]);
    assert_succeeded(&output);
    assert_eq!(report["limits"]["gpus"], 2);
    assert_eq!(report["gpu"]["visible_devices"], "GPU-0,GPU-1");

    let size = node.lfm(&[
        "size",
        "--category",
        "train",
        "--history",
        history,
        "--format",
        "json",
    ]);
    let advice: serde_json::Value = serde_json::from_slice(&size.stdout).unwrap();
    assert_eq!(advice["resources"]["gpus"]["unit"], "GPUs");
    assert_eq!(advice["resources"]["gpu_memory"]["unit"], "MiB");
}

const CALLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/gpu/gpu_calls.py"
);

fn python_available() -> bool {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIPPED: no python3");
    }
    ok
}

#[test]
fn lfm_call_gives_a_function_its_gpu_and_measures_it() {
    if !python_available() {
        return;
    }
    let node = Node::with(2);
    let report = node.path("report.json");
    let target = format!("{CALLS}:use");
    let output = node.lfm(&[
        "call",
        &target,
        "--args",
        "[5000000, 30]",
        "--gpus",
        "1",
        "--backend",
        "rlimit",
        "--quiet",
        "--report",
        report.to_str().unwrap(),
        "--history",
        node.path("history.sqlite").to_str().unwrap(),
    ]);
    assert_succeeded(&output);
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "\"GPU-0\"");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    assert_eq!(report["gpu"]["memory_peak_bytes"], 5000000);
    assert_eq!(report["gpu"]["utilization_peak_percent"], 30.0);
}

/// `lfm serve` with EXTRA flags, every request sent at once; the replies by id.
fn serve(node: &Node, extra: &[&str], requests: &[serde_json::Value]) -> Vec<serde_json::Value> {
    use std::io::Write;
    let mut server = node
        .command(&[
            "serve",
            "--python",
            "python3",
            "--backend",
            "rlimit",
            "--no-history",
        ])
        .args(extra)
        .arg("--cache-dir")
        .arg(node.path("cache"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    for request in requests {
        writeln!(stdin, "{request}").unwrap();
    }
    drop(stdin);
    let output = server.wait_with_output().unwrap();
    assert!(output.status.success());
    let replies: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    requests
        .iter()
        .map(|q| replies.iter().find(|r| r["id"] == q["id"]).unwrap().clone())
        .collect()
}

#[test]
fn serve_slots_hold_different_devices_at_once() {
    if !python_available() {
        return;
    }
    let node = Node::with(2);
    let marks = node.path("marks");
    std::fs::create_dir(&marks).unwrap();
    let function = format!("{CALLS}:meet");
    let request = |id: &str| serde_json::json!({"id": id, "function": function, "args": [marks.to_str().unwrap(), 2]});
    let replies = serve(
        &node,
        &["--slots", "2", "--gpus-per-slot", "1"],
        &[request("a"), request("b")],
    );
    let mut got: Vec<&str> = replies
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    got.sort();
    assert_eq!(got, ["GPU-0", "GPU-1"], "{replies:?}");
    for reply in &replies {
        assert_eq!(reply["result"], reply["report"]["gpu"]["visible_devices"]);
    }
}

/// One slot: each call is alone, so only its own monitor lists its process.
#[test]
fn serve_measures_each_calls_gpu_memory_and_enforces_its_limit() {
    if !python_available() {
        return;
    }
    let node = Node::with(2);
    let function = format!("{CALLS}:use");
    let replies = serve(
        &node,
        &["--gpus-per-slot", "1"],
        &[
            serde_json::json!({"id": "a", "function": function, "args": [1000, 10]}),
            serde_json::json!({"id": "over", "function": function, "args": [5000000, 20],
                               "limits": {"gpu_memory": "1M"}}),
            serde_json::json!({"id": "three", "function": function, "args": [1, 1],
                               "limits": {"gpus": 3}}),
        ],
    );
    let a = &replies[0];
    assert_eq!(a["ok"], true, "{a}");
    assert_eq!(a["report"]["gpu"]["memory_peak_bytes"], 1000);
    assert_eq!(a["report"]["limits"]["gpus"], 1);
    let over = &replies[1];
    assert_eq!(over["error"]["reason"], "limits", "{over}");
    assert_eq!(over["report"]["limits_exceeded"]["gpu_memory"], 1048576.0);
    let three = &replies[2];
    assert_eq!(three["error"]["reason"], "refused", "{three}");
    assert!(three["error"]["message"]
        .as_str()
        .unwrap()
        .contains("only 2 GPU(s)"));
}

#[test]
fn bad_gpu_input_is_refused_naming_the_flag_or_variable() {
    let node = Node::with(2);
    for (args, message) in [
        (vec!["--gpus", "0"], "greater than zero"),
        (vec!["--gpus", "1.5"], "--gpus: \"1.5\" is not a number"),
        (vec!["--gpus", "many"], "--gpus: \"many\" is not a number"),
        (
            vec!["--gpus", "1", "--gpu-memory", "2X"],
            "--gpu-memory: \"2X\" is not a size",
        ),
        (
            vec!["--gpus", "1", "--gpu-wait-timeout", "soon"],
            "--gpu-wait-timeout",
        ),
        (vec!["--gpu-memory", "1G"], "--gpus"),
        (vec!["--gpus", "auto"], "--gpus auto sizes from the history"),
    ] {
        let mut full = vec!["run"];
        full.extend(args.iter().copied());
        full.extend(["--", "true"]);
        let output = node.lfm(&full);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(message),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let mut command = node.command(&["run", "--gpus", "1", "--", "true"]);
    let output = command.env("LFM_GPUS", "GPU-0,GPU-9").output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("LFM_GPUS=\"GPU-0,GPU-9\": no device \"GPU-9\""));
}

#[test]
fn the_resource_monitor_summary_carries_measured_gpus_not_the_limit() {
    let node = Node::with(3);
    let (output, summary) = node.run(
        &["--gpus", "3", "--summary-format", "resource-monitor"],
        &["GPU-1", "104857600", "50", "exit"],
    );
    assert_succeeded(&output);
    // Three held, one used.
    assert_eq!(summary["gpus"], serde_json::json!([1, "gpus"]));
    assert_eq!(summary["gpu_memory"], serde_json::json!([100.0, "MB"]));
}

#[test]
fn lfm_call_fails_like_lfm_run_when_the_node_has_too_few_gpus() {
    if !python_available() {
        return;
    }
    let node = Node::with(1);
    let target = format!("{CALLS}:visible");
    let output = node.lfm(&["call", &target, "--gpus", "2", "--no-import-log"]);
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--gpus 2: this node has only 1 GPU(s)"),
        "{}",
        stderr(&output)
    );
}
