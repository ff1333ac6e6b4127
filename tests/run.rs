//! `lfm run` with real workloads, on every backend this machine offers.
//!
//! The workloads are a small C program (tests/workloads/workload.c) compiled once with `cc`, so
//! memory and CPU use are known exactly. Each test runs on cgroup1 when a writable v1 memory
//! hierarchy exists, on cgroup2 when a writable cgroup2 hierarchy exists (with or without
//! controllers), and on rlimit always; an unavailable backend is skipped with a printed reason.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_succeeded, lfm_in, workload};

fn lfm(args: &[&str]) -> std::process::Output {
    lfm_in("/", args)
}

const MIB: f64 = 1_048_576.0;

/// Tests that measure CPU, or load it heavily, take turns: in parallel they would skew each other.
fn cpu_heavy() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Backends to test here, each with why it is or is not available.
fn backends() -> Vec<&'static str> {
    let mut out = Vec::new();
    let probe = |backend: &str| {
        lfm(&["run", "--quiet", "--backend", backend, "--", "true"])
            .status
            .success()
    };
    for backend in ["cgroup1", "cgroup2"] {
        if probe(backend) {
            if backend == "cgroup2" && !cgroup2_has_controllers() {
                eprintln!("NOTE cgroup2: the hierarchy here has no controllers (cgroup.controllers is empty), so tests run its controller-free path: tracking, cgroup.kill, cpu.stat; memory, cores and processes are enforced by the supervisor");
            }
            out.push(backend);
        } else {
            eprintln!(
                "SKIPPED backend {backend}: this kernel/user offers no writable hierarchy for it"
            );
        }
    }
    out.push("rlimit");
    out
}

fn cgroup2_has_controllers() -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("cgroup2"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .any(|mount| {
            std::fs::read_to_string(format!("{mount}/cgroup.controllers"))
                .is_ok_and(|c| c.contains("memory"))
        })
}

fn run_report(backend: &str, extra: &[&str], command: &[&str]) -> (Output, serde_json::Value) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let mut args = vec![
        "run",
        "--quiet",
        "--backend",
        backend,
        "--report",
        report.path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(command);
    let output = lfm(&args);
    let text = std::fs::read_to_string(report.path()).unwrap_or_default();
    let value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "{backend}: no report ({e}); stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output, value)
}

fn peak_mib(report: &serde_json::Value) -> f64 {
    report["memory"]["peak_bytes"].as_f64().unwrap() / MIB
}

#[test]
fn peak_memory_of_a_process_touching_n_mib() {
    let workload = workload();
    for backend in backends() {
        let (output, report) = run_report(
            backend,
            &[],
            &[workload.to_str().unwrap(), "touch", "200", "200"],
        );
        assert!(output.status.success(), "{backend}");
        let peak = peak_mib(&report);
        // The C program itself adds well under 1 MiB; allow 2% or 2 MiB.
        let tolerance = (200.0 * 0.02f64).max(2.0);
        assert!(
            (peak - 200.0).abs() <= tolerance,
            "{backend}: peak {peak:.2} MiB for 200 MiB touched"
        );
        assert_eq!(report["backend"], backend);
        assert_eq!(report["exit"]["type"], "normal");
        assert_eq!(report["exit"]["status"], 0);
    }
}

#[test]
fn a_50ms_spike_is_caught() {
    let workload = workload();
    for backend in backends() {
        let (_, report) = run_report(
            backend,
            &[],
            &[workload.to_str().unwrap(), "spike", "300", "50", "300"],
        );
        let peak = peak_mib(&report);
        assert!(
            peak >= 298.0,
            "{backend}: spike to 300 MiB reported as {peak:.1} MiB ({})",
            report["memory"]
        );
    }
}

/// The workload's own rusage, which `busy` prints on stdout.
fn workload_cpu_seconds(output: &Output) -> f64 {
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("cpu_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no cpu_seconds in {stdout:?}"))
}

#[test]
fn busy_threads_are_measured_as_the_workload_measures_itself() {
    // Whatever else the machine does, the Report must agree with the workload's own rusage
    // from the same run; the cores figures must be consistent with that CPU time.
    let _turn = cpu_heavy();
    let workload = workload();
    let cores_here = std::thread::available_parallelism().map_or(2, |n| n.get()) as f64;
    for backend in backends() {
        let (output, report) = run_report(
            backend,
            &[],
            &[workload.to_str().unwrap(), "busy", "2", "1500"],
        );
        let own = workload_cpu_seconds(&output);
        let cpu = report["cpu_time"]["total"].as_f64().unwrap();
        assert!(
            (cpu - own).abs() <= (own * 0.05).max(0.05),
            "{backend}: report cpu_time {cpu} vs the workload's own {own}"
        );
        let wall = report["wall_time"].as_f64().unwrap();
        let average = report["cores"]["average"].as_f64().unwrap();
        assert!(
            (average - cpu / wall).abs() < 0.01,
            "{backend}: average {average}"
        );
        let peak = report["cores"]["peak"].as_f64().unwrap();
        assert!(
            peak >= average * 0.9 && peak <= cores_here + 0.3,
            "{backend}: peak cores {peak} (average {average}, {cores_here} cores here)"
        );
    }
}

#[test]
fn a_cores_limit_is_enforced() {
    let _turn = cpu_heavy();
    let workload = workload();
    for backend in backends() {
        let (output, report) = run_report(
            backend,
            &["--cores", "0.5"],
            &[workload.to_str().unwrap(), "busy", "2", "2500"],
        );
        let enforced_by_kernel =
            backend == "cgroup1" || (backend == "cgroup2" && cgroup2_has_controllers());
        if enforced_by_kernel {
            // cpu.cfs_quota / cpu.max throttle the tree to half a core.
            assert!(output.status.success(), "{backend}");
            let average = report["cores"]["average"].as_f64().unwrap();
            assert!(
                average < 0.7,
                "{backend}: average cores {average} under --cores 0.5"
            );
            // The limit was binding, and the Report says so; unless a loaded machine gave the
            // two busy threads less than the limit all along (then nothing was throttled).
            let throttling = &report["cpu_throttling"];
            let throttled = throttling["throttled_periods"].as_u64().unwrap();
            if throttled == 0 {
                assert!(
                    average < 0.45,
                    "{backend}: never throttled at {average} cores: {throttling}"
                );
                println!("NOTE {backend}: the machine gave the workload {average} cores, under the limit: nothing to throttle");
            } else {
                assert!(
                    throttling["throttled_seconds"].as_f64().unwrap() > 0.0,
                    "{backend}: {throttling}"
                );
            }
        } else {
            // No cpu controller: the supervisor kills a tree using more than limit + 0.25 cores;
            // unless a loaded machine never gave the two busy threads that much.
            // (Unlimited, the two busy threads take ~2 cores on an idle machine.)
            let average = report["cores"]["average"].as_f64().unwrap();
            if output.status.code() != Some(125) && average < 0.75 {
                println!("NOTE {backend}: the machine gave the workload {average} cores on average, under the limit's tolerance: not killed");
                continue;
            }
            assert_eq!(
                output.status.code(),
                Some(125),
                "{backend}: average {average}"
            );
            assert_eq!(
                report["limits_exceeded"]["cores"].as_f64(),
                Some(0.5),
                "{backend}"
            );
            assert!(report["cpu_throttling"].is_null(), "{backend}");
        }
    }
}

#[test]
fn the_summary_line_flags_throttling() {
    let _turn = cpu_heavy();
    let workload = workload();
    let Some(backend) = backends().into_iter().find(|b| *b == "cgroup1") else {
        eprintln!("SKIPPED: no cgroup v1 cpu controller here to throttle with");
        return;
    };
    let output = lfm(&[
        "run",
        "--backend",
        backend,
        "--cores",
        "0.5",
        "--",
        workload.to_str().unwrap(),
        "busy",
        "2",
        "1000",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("THROTTLED"), "{stderr}");
    assert!(stderr.contains("the --cores limit was binding"), "{stderr}");
}

#[test]
fn a_memory_limit_is_enforced_and_reported() {
    let workload = workload();
    for backend in backends() {
        let (output, report) = run_report(
            backend,
            &["--memory", "100M"],
            &[workload.to_str().unwrap(), "touch", "300", "2000"],
        );
        assert_eq!(output.status.code(), Some(125), "{backend}");
        assert_eq!(report["exit"]["type"], "limits", "{backend}");
        assert_eq!(
            report["limits_exceeded"]["memory"].as_f64(),
            Some(100.0 * MIB),
            "{backend}"
        );
        assert!(
            report["wall_time"].as_f64().unwrap() < 1.9,
            "{backend}: the tree was not killed promptly"
        );
    }
}

#[test]
fn a_wall_limit_kills_a_setsid_double_forked_tree() {
    let workload = workload();
    for backend in backends() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        let started = Instant::now();
        let (output, report) = run_report(
            backend,
            &["--wall", "1s"],
            &[
                workload.to_str().unwrap(),
                "doublefork",
                pidfile.to_str().unwrap(),
            ],
        );
        assert_eq!(output.status.code(), Some(125), "{backend}");
        assert_eq!(report["limits_exceeded"]["wall_time"].as_f64(), Some(1.0));
        assert!(started.elapsed() < Duration::from_secs(8));
        let grandchild: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            !alive(grandchild),
            "{backend}: setsid grandchild {grandchild} survived"
        );
        assert!(
            report["total_processes"].as_u64().unwrap() >= 2,
            "{backend}: {}",
            report["total_processes"]
        );
    }
}

#[test]
fn a_fork_bomb_is_contained_by_processes() {
    let _turn = cpu_heavy();
    // A copy under a unique name, so survivors can be told apart from other tests' workloads.
    let dir = tempfile::tempdir().unwrap();
    let bomb = dir.path().join(format!("bomb-{}", std::process::id()));
    std::fs::copy(workload(), &bomb).unwrap();
    let name = bomb.file_name().unwrap().to_str().unwrap().to_string();
    for backend in backends() {
        let (output, report) = run_report(
            backend,
            &["--processes", "40", "--wall", "20s"],
            &[bomb.to_str().unwrap(), "forkbomb"],
        );
        assert_eq!(output.status.code(), Some(125), "{backend}");
        assert!(
            report["limits_exceeded"]["max_concurrent_processes"].as_f64() == Some(40.0),
            "{backend}: {}",
            report["limits_exceeded"]
        );
        assert!(
            report["wall_time"].as_f64().unwrap() < 10.0,
            "{backend}: not contained promptly"
        );
        assert_eq!(
            count_processes_named(&name),
            0,
            "{backend}: fork bomb survivors"
        );
    }
}

#[test]
fn a_disk_limit_on_the_sandbox_is_enforced() {
    let workload = workload();
    for backend in backends() {
        let sandbox = tempfile::tempdir().unwrap();
        let (output, report) = run_report(
            backend,
            &[
                "--sandbox",
                sandbox.path().to_str().unwrap(),
                "--disk",
                "10M",
            ],
            &[workload.to_str().unwrap(), "write", "out.bin", "50"],
        );
        assert_eq!(output.status.code(), Some(125), "{backend}");
        assert_eq!(
            report["limits_exceeded"]["disk"].as_f64(),
            Some(10.0 * MIB),
            "{backend}"
        );
        assert!(report["disk"]["path"]
            .as_str()
            .unwrap()
            .ends_with(sandbox.path().file_name().unwrap().to_str().unwrap()));
    }
}

#[test]
fn sigterm_to_lfm_still_yields_a_report() {
    // A duration no other process on the machine uses, so that the count below finds only
    // this test's sleeper (a plain "sleep 30" elsewhere made it fail).
    let duration = format!("30.{}", std::process::id());
    for backend in backends() {
        let report = tempfile::NamedTempFile::new().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_lfm"))
            .current_dir("/")
            .args([
                "run",
                "--quiet",
                "--grace",
                "1s",
                "--backend",
                backend,
                "--report",
            ])
            .arg(report.path())
            .args(["--", "sleep", &duration])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Signalled once its command runs (lfm's handlers are set by then), however slow the
        // machine is to start it.
        let deadline = Instant::now() + Duration::from_secs(30);
        while count_processes_named(&format!("sleep {duration}")) == 0 && Instant::now() < deadline
        {
        }
        send_signal(child.id() as i32, 15);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(128 + 15), "{backend}");
        let value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(report.path()).unwrap()).unwrap();
        assert_eq!(value["exit"]["type"], "signal", "{backend}");
        assert_eq!(value["exit"]["signal"], 15, "{backend}");
        assert_eq!(count_processes_named(&format!("sleep {duration}")), 0);
    }
}

#[test]
fn bad_input_is_refused_before_anything_runs() {
    let marker = tempfile::tempdir().unwrap();
    let touched = marker.path().join("ran");
    let touch = format!("touch {}", touched.display());
    for (args, code, message) in [
        (vec!["--memory", "2X"], 2, "not a size"),
        (vec!["--memory", "0"], 2, "greater than zero"),
        (vec!["--cores", "-1"], 2, "greater than zero"),
        (vec!["--wall", "soon"], 2, "not a duration"),
    ] {
        let mut full = vec!["run"];
        full.extend(args.iter().copied());
        full.extend(["--", "sh", "-c", touch.as_str()]);
        let output = lfm(&full);
        assert_eq!(output.status.code(), Some(code), "{args:?}");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains(message),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let unwritable = lfm(&[
        "run",
        "--report",
        "/nonexistent-dir/r.json",
        "--",
        "sh",
        "-c",
        touch.as_str(),
    ]);
    assert_eq!(unwritable.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unwritable.stderr)
        .contains("cannot write the report to /nonexistent-dir/r.json"));
    assert!(!touched.exists(), "a command ran despite bad input");
    let missing = lfm(&["run", "--", "no-such-command-xyz"]);
    assert_eq!(missing.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("command not found: no-such-command-xyz")
    );
    let plain = marker.path().join("plain.txt");
    std::fs::write(&plain, "not a program").unwrap();
    let not_executable = lfm(&["run", "--", plain.to_str().unwrap()]);
    assert_eq!(not_executable.status.code(), Some(126));
}

#[test]
fn exit_status_and_signals_pass_through() {
    for backend in backends() {
        let (output, report) = run_report(backend, &[], &["sh", "-c", "exit 7"]);
        assert_eq!(output.status.code(), Some(7));
        assert_eq!(report["exit"]["status"], 7);
        let (output, report) = run_report(backend, &[], &["sh", "-c", "kill -9 $$"]);
        assert_eq!(output.status.code(), Some(128 + 9));
        assert_eq!(report["exit"]["type"], "signal");
    }
}

#[test]
fn resource_monitor_summary_and_series() {
    let workload = workload();
    let dir = tempfile::tempdir().unwrap();
    let series = dir.path().join("ts.jsonl");
    let summary = dir.path().join("summary.json");
    let output = lfm(&[
        "run",
        "--quiet",
        "--memory",
        "100M",
        "--summary-format",
        "resource-monitor",
        "--report",
        summary.to_str().unwrap(),
        "--series",
        series.to_str().unwrap(),
        "--",
        workload.to_str().unwrap(),
        "touch",
        "300",
        "500",
    ]);
    assert_eq!(output.status.code(), Some(125));
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(value["exit_type"], "limits");
    assert_eq!(
        value["limits_exceeded"]["memory"],
        serde_json::json!([100.0, "MB"])
    );
    assert_eq!(value["memory"][1], "MB");
    assert_eq!(value["wall_time"][1], "s");
    assert_eq!(value["cores"][1], "cores");
    // The series of a run that lasts: a sample every 10 ms for its first second.
    let output = lfm(&[
        "run",
        "--quiet",
        "--series",
        series.to_str().unwrap(),
        "--",
        workload.to_str().unwrap(),
        "touch",
        "50",
        "1000",
    ]);
    assert!(output.status.success());
    // ~100 at a 10 ms interval; a loaded machine may delay the sampler, not stop it.
    let lines = std::fs::read_to_string(&series).unwrap();
    assert!(lines.lines().count() >= 10, "series: {lines}");
    let peak = lines
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["memory_bytes"]
                .as_u64()
                .unwrap()
        })
        .max()
        .unwrap();
    // The memory cgroup charges pages in per-CPU batches: its usage may read up to a few
    // hundred KiB under what was touched (49.93 MiB for these 50 MiB, once in CI).
    assert!(peak > 48 << 20, "series never saw the 50 MiB: {lines}");
    for line in lines.lines() {
        let sample: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(sample["memory_bytes"].is_u64() && sample["t"].is_f64());
    }
}

#[test]
fn no_cgroup_is_left_behind() {
    // Only this test's runs count: a run cgroup made before it (an lfm killed on this machine
    // earlier, in another parent cgroup that no later run cleaned) is not its leftover.
    let started = std::time::SystemTime::now() - Duration::from_secs(1);
    for backend in backends() {
        let _ = run_report(backend, &["--wall", "1s"], &["sleep", "5"]);
    }
    let leftovers: Vec<String> = [
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/cpu",
    ]
    .iter()
    .flat_map(|root| walk_run_dirs(Path::new(root)))
    .filter(|dir| {
        // Only runs of lfm processes that are gone count as leftovers: other tests run in parallel.
        let pid = dir
            .rsplit('/')
            .next()
            .and_then(|n| n.strip_prefix("run-"))
            .and_then(|r| r.split('-').next());
        // Read after the walk: a run that ended between the walk and the pid check removed
        // its cgroup just before it exited, and has no metadata now.
        let made_since = std::fs::metadata(dir)
            .and_then(|m| m.modified())
            .is_ok_and(|made| made >= started);
        pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) && made_since
    })
    .collect();
    assert!(leftovers.is_empty(), "stale run cgroups: {leftovers:?}");
}

#[test]
fn a_killed_lfm_leaves_nothing_once_the_next_run_starts() {
    let workload = workload();
    for backend in backends().into_iter().filter(|b| *b != "rlimit") {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        let mut monitor = Command::new(env!("CARGO_BIN_EXE_lfm"))
            .args(["run", "--quiet", "--backend", backend, "--"])
            .arg(&workload)
            .arg("doublefork")
            .arg(&pidfile)
            .stdin(Stdio::null())
            .current_dir("/")
            .spawn()
            .unwrap();
        let grandchild = common::pid_written_to(&pidfile, Duration::from_secs(5))
            .expect("the workload wrote its grandchild's pid");
        monitor.kill().unwrap(); // SIGKILL: no cleanup code of lfm runs
        monitor.wait().unwrap();
        assert!(
            alive(grandchild),
            "{backend}: expected the orphan to outlive a SIGKILLed lfm"
        );
        let output = lfm(&["run", "--quiet", "--backend", backend, "--", "true"]);
        assert!(output.status.success());
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !alive(grandchild),
            "{backend}: the next run did not kill the stale run's processes"
        );
        let stale = format!("run-{}-", monitor.id());
        let left: Vec<String> = [
            "/sys/fs/cgroup/memory",
            "/sys/fs/cgroup/unified",
            "/sys/fs/cgroup/pids",
            "/sys/fs/cgroup/cpu",
        ]
        .iter()
        .flat_map(|root| walk_run_dirs(Path::new(root)))
        .filter(|d| d.contains(&stale))
        .collect();
        assert!(left.is_empty(), "{backend}: stale cgroups left: {left:?}");
    }
}

#[test]
fn rlimit_backend_works_for_an_unprivileged_user() {
    let _turn = cpu_heavy();
    if !is_root() {
        eprintln!("SKIPPED unprivileged test: not root, so cannot switch to nobody (the other tests already ran unprivileged)");
        return;
    }
    let workload = workload();
    // nobody needs to reach the binaries: copy them somewhere world-readable.
    let (dir, lfm_copy) = common::shared_dir_with_lfm("lfm-nobody");
    let workload_copy = dir.path().join("workload");
    std::fs::copy(&workload, &workload_copy).unwrap();
    // As nobody (uid 65534), with lfm and the workloads copied where nobody can run them.
    let as_nobody = |limits: &[&str], command: &[&str]| -> serde_json::Value {
        let report = dir.path().join("report.json");
        let output = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&lfm_copy)
            .args(["run", "--quiet", "--report"])
            .arg(&report)
            .args(limits)
            .arg("--")
            .args(command)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(125),
            "stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap()
    };
    let value = as_nobody(
        &["--memory", "100M"],
        &[workload_copy.to_str().unwrap(), "touch", "300", "2000"],
    );
    // auto must fall back: nobody cannot write any cgroup here.
    assert_eq!(value["backend"], "rlimit");
    assert_eq!(
        value["limits_exceeded"]["memory"].as_f64(),
        Some(100.0 * MIB)
    );

    // RLIMIT_NPROC contains a fork bomb for an unprivileged user.
    let bomb = dir
        .path()
        .join(format!("nobody-bomb-{}", std::process::id()));
    std::fs::copy(&workload, &bomb).unwrap();
    let value = as_nobody(
        &["--processes", "40", "--wall", "20s"],
        &[bomb.to_str().unwrap(), "forkbomb"],
    );
    assert_eq!(
        value["limits_exceeded"]["max_concurrent_processes"].as_f64(),
        Some(40.0),
        "{value}"
    );
    assert!(value["wall_time"].as_f64().unwrap() < 10.0);
    assert_eq!(
        count_processes_named(bomb.file_name().unwrap().to_str().unwrap()),
        0
    );
}

/// RLIMIT_NPROC counts the user's threads, not only processes: with a 60-thread process of the
/// same user running beside it, a run limited to 10 processes still forks its three children.
#[test]
fn a_process_limit_leaves_room_beside_the_users_threaded_processes() {
    // Not beside the other test whose runs are nobody's: its fork bomb's tasks, made after
    // this run counted nobody's, would eat this run's room (and these threads the bomb's).
    let _turn = cpu_heavy();
    if !is_root() || !Path::new("/usr/bin/python3").exists() {
        eprintln!("SKIPPED: needs root (to switch to nobody) and /usr/bin/python3");
        return;
    }
    let (dir, lfm_copy) = common::shared_dir_with_lfm("lfm-nproc");
    let nobody = |program: &Path| {
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(program)
            .current_dir(dir.path());
        command
    };
    let threads = "import threading, time\n\
                   for _ in range(60): threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n\
                   print('ready', flush=True)\n\
                   time.sleep(60)";
    let mut threaded = nobody(Path::new("/usr/bin/python3"))
        .args(["-c", threads])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(threaded.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    let report = dir.path().join("report.json");
    let output = nobody(&lfm_copy)
        .args(["run", "--quiet", "--backend", "rlimit", "--processes", "10"])
        .arg("--report")
        .arg(&report)
        .args(["--", "sh", "-c", "sleep 0.2 & sleep 0.2 & sleep 0.2 & wait"])
        .output()
        .unwrap();
    threaded.kill().unwrap();
    threaded.wait().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(value["exit"]["type"], "normal", "{value}");
    assert_eq!(value["limits_exceeded"], serde_json::json!({}), "{value}");
    assert!(value["total_processes"].as_u64().unwrap() >= 4, "{value}");
}

fn walk_run_dirs(root: &Path) -> Vec<String> {
    walkdir_names(root, 0)
}

fn walkdir_names(dir: &Path, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    if depth > 4 {
        return out;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("run-") && dir.ends_with("lfm") {
                out.push(entry.path().display().to_string());
            }
            out.extend(walkdir_names(&entry.path(), depth + 1));
        }
    }
    out
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

fn count_processes_named(needle: &str) -> usize {
    std::thread::sleep(Duration::from_millis(100));
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| alive(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(needle)
                })
                .unwrap_or(false)
        })
        .count()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn send_signal(pid: i32, signal: i32) {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
}

/// A file of `mib` MiB written by the test and then dropped from the page cache, so that the
/// run reading it really reads storage (and is charged the page cache it fills).
fn cold_file(dir: &Path, name: &str, mib: usize) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join(name);
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![7u8; 1 << 20];
    for _ in 0..mib {
        file.write_all(&block).unwrap();
    }
    file.sync_all().unwrap();
    evict(&path);
    path
}

fn evict(path: &Path) {
    let status = Command::new(workload())
        .arg("evict")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn headline_memory_is_what_the_run_needs_not_the_page_cache_it_read() {
    let workload = workload();
    let w = workload.to_str().unwrap();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let big = cold_file(dir.path(), "big.bin", 500);
    let script = format!("{w} read {} && exec {w} touch 100 300", big.display());
    for backend in backends() {
        evict(&big);
        let (output, report) = run_report(backend, &[], &["sh", "-c", &script]);
        assert!(output.status.success(), "{backend}: {report}");
        let headline = peak_mib(&report);
        assert!(
            (99.0..=110.0).contains(&headline),
            "{backend}: headline {headline:.1} MiB for 100 MiB anon + 500 MB read: {}",
            report["memory"]
        );
        if let Some(raw) = report["memory"]["cgroup_peak_bytes"].as_f64() {
            // The kernel's raw peak counts the page cache; the Report keeps it apart.
            assert!(raw / MIB > 400.0, "{backend}: raw peak {raw}");
            let cache = report["memory"]["file_bytes"].as_f64().unwrap() / MIB;
            assert!(cache > 350.0, "{backend}: page cache {cache:.1} MiB");
        }
        // The headline predicts the limit the run needs: 1.25x of it is enough.
        evict(&big);
        let limit = format!("{}", (headline * 1.25 * MIB) as u64);
        let (output, again) = run_report(backend, &["--memory", &limit], &["sh", "-c", &script]);
        assert!(
            output.status.success() && again["exit"]["type"] == "normal",
            "{backend}: failed under --memory {limit} (1.25x the headline): {again}"
        );
    }
}

#[test]
fn io_is_the_trees_own_on_every_backend() {
    let workload = workload();
    let w = workload.to_str().unwrap();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let input = cold_file(dir.path(), "input.bin", 100);
    for backend in backends() {
        evict(&input);
        let sandbox = dir.path().join(format!("sandbox-{backend}"));
        let script = format!(
            "{w} read {} && dd if=/dev/zero of=out.bin bs=1M count=200 status=none && sync",
            input.display()
        );
        let (output, report) = run_report(
            backend,
            &["--sandbox", sandbox.to_str().unwrap()],
            &["sh", "-c", &script],
        );
        assert!(output.status.success(), "{backend}: {report}");
        let written = report["bytes_written"].as_f64().unwrap() / MIB;
        let read = report["bytes_read"].as_f64().unwrap() / MIB;
        assert!(
            (written - 200.0).abs() <= 10.0,
            "{backend}: bytes_written {written:.1} MiB for a 200 MiB write"
        );
        assert!(
            (read - 100.0).abs() <= 5.0,
            "{backend}: bytes_read {read:.1} MiB for a 100 MiB read"
        );
    }
}

#[test]
fn disk_is_measured_only_where_asked() {
    let workload = workload();
    // A fresh temporary working directory, as a worker's task sandbox: not measured unasked.
    let cwd = tempfile::tempdir().unwrap();
    let report_file = cwd.path().join("report.json");
    let output = lfm_in(
        cwd.path().to_str().unwrap(),
        &[
            "run",
            "--quiet",
            "--report",
            report_file.to_str().unwrap(),
            "--",
            workload.to_str().unwrap(),
            "write",
            "out.bin",
            "5",
        ],
    );
    assert!(output.status.success());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report_file).unwrap()).unwrap();
    assert!(report["disk"].is_null(), "{}", report["disk"]);
    // `--sandbox .` measures the working directory.
    let output = lfm_in(
        cwd.path().to_str().unwrap(),
        &[
            "run",
            "--quiet",
            "--sandbox",
            ".",
            "--report",
            "-",
            "--",
            workload.to_str().unwrap(),
            "write",
            "again.bin",
            "5",
        ],
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let bytes = report["disk"]["bytes"].as_f64().unwrap() / MIB;
    assert!(bytes >= 10.0, "disk {bytes:.1} MiB: {}", report["disk"]);
}

#[test]
fn a_write_refused_by_the_disk_limit_is_a_limit_even_if_the_writer_survives() {
    // Python ignores SIGXFSZ: the write fails with EFBIG and the interpreter exits 1.
    let script = "open('big.bin', 'wb').write(b'x' * 50_000_000)";
    for backend in backends() {
        let sandbox = tempfile::tempdir().unwrap();
        let (output, report) = run_report(
            backend,
            &[
                "--sandbox",
                sandbox.path().to_str().unwrap(),
                "--disk",
                "10M",
            ],
            &["python3", "-c", script],
        );
        assert_eq!(output.status.code(), Some(125), "{backend}: {report}");
        assert_eq!(report["exit"]["type"], "limits", "{backend}");
        assert_eq!(
            report["limits_exceeded"]["disk"].as_f64(),
            Some(10.0 * MIB),
            "{backend}"
        );
    }
}

#[test]
fn a_process_that_leaves_the_cgroup_stays_measured_limited_and_killed() {
    if !is_root() {
        eprintln!("SKIPPED: only root can move a process out of the run's cgroup");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runaway = dir.path().join(format!("runaway-{}", std::process::id()));
    std::fs::copy(workload(), &runaway).unwrap();
    let name = runaway.file_name().unwrap().to_str().unwrap().to_string();
    for backend in backends().into_iter().filter(|b| *b != "rlimit") {
        let root_procs = match backend {
            "cgroup1" => "/sys/fs/cgroup/memory/cgroup.procs".to_string(),
            _ => format!("{}/cgroup.procs", cgroup2_mount()),
        };
        let script = format!(
            "echo $$ > {root_procs} && exec {} touch 300 1500",
            runaway.display()
        );
        let (_, report) = run_report(backend, &[], &["sh", "-c", &script]);
        assert!(
            peak_mib(&report) >= 295.0,
            "{backend}: an escaped 300 MiB process reported as {}",
            report["memory"]
        );
        let notes = report["notes"].to_string();
        assert!(
            notes.contains("left the run's cgroup"),
            "{backend}: {notes}"
        );

        let (output, report) = run_report(backend, &["--memory", "100M"], &["sh", "-c", &script]);
        assert_eq!(output.status.code(), Some(125), "{backend}: {report}");
        assert_eq!(
            report["limits_exceeded"]["memory"].as_f64(),
            Some(100.0 * MIB)
        );
        assert_eq!(count_processes_named(&name), 0, "{backend}: survivor");
    }
}

fn cgroup2_mount() -> String {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    mounts
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some("cgroup2"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .to_string()
}

#[test]
fn a_relative_command_runs_from_a_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("simulate");
    std::fs::write(&script, "#!/bin/sh\necho ran in \"$PWD\"\n").unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&script, mode).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(["run", "-q", "--sandbox", "./work", "--", "./simulate"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_succeeded(&output);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.trim().ends_with("/work"), "{said}");
}
