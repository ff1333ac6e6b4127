//! `lfm serve` with calls that misbehave in every way, on the cgroup1 backend (where this
//! machine offers it) and on the rlimit backend as an ordinary user (setpriv to nobody).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const MIB: f64 = 1_048_576.0;

/// Where a server runs: as root with auto/cgroup1, or as nobody with rlimit.
struct Setup {
    name: &'static str,
    dir: tempfile::TempDir,
    lfm: PathBuf,
    python: &'static str,
    backend: &'static str,
    as_nobody: bool,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/serve")
}

/// A world-readable directory holding lfm and the fixtures, so nobody can run them too.
fn setup(name: &'static str, backend: &'static str, as_nobody: bool) -> Setup {
    let (dir, lfm) = common::shared_dir_with_lfm("lfm-serve");
    for file in ["faults.py", "big.py"] {
        std::fs::copy(fixtures().join(file), dir.path().join(file)).unwrap();
    }
    Setup {
        name,
        dir,
        lfm,
        python: if as_nobody {
            "/usr/bin/python3"
        } else {
            "python3"
        },
        backend,
        as_nobody,
    }
}

/// Every setup this machine offers, each with why one is missing.
fn setups() -> Vec<Setup> {
    let mut out = Vec::new();
    if common::cgroup1_available() {
        out.push(setup("cgroup1", "cgroup1", false));
    } else {
        eprintln!("SKIPPED cgroup1: no writable cgroup v1 hierarchy here");
    }
    if common::is_root() && Path::new("/usr/bin/python3").exists() {
        out.push(setup("rlimit-as-nobody", "rlimit", true));
    } else {
        eprintln!("SKIPPED rlimit as nobody: needs root (to setpriv) and /usr/bin/python3");
        out.push(setup("rlimit", "rlimit", false));
    }
    out
}

impl Setup {
    fn command(&self, extra: &[&str]) -> Command {
        let mut command = if self.as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
            c.arg(&self.lfm);
            c
        } else {
            Command::new(&self.lfm)
        };
        command
            .args(["serve", "--python", self.python, "--backend", self.backend])
            .args(["--cache-dir"])
            .arg(self.dir.path().join("cache"))
            // Never the user's own history: a test names one, or none.
            .args(if extra.contains(&"--history") {
                &[][..]
            } else {
                &["--no-history"][..]
            })
            .args(extra)
            .current_dir(self.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        command
    }

    fn start(&self, extra: &[&str]) -> Server {
        let mut child = self.command(extra).spawn().expect("start lfm serve");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Server { child, stdout }
    }

    /// Send every request, close stdin, and collect every reply by id.
    fn serve_all(&self, extra: &[&str], requests: &[Value]) -> Vec<Value> {
        let mut server = self.start(extra);
        for request in requests {
            server.send(request);
        }
        drop(server.child.stdin.take());
        let replies: Vec<Value> = (&mut server.stdout)
            .lines()
            .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
            .collect();
        let status = server.child.wait().unwrap();
        assert!(
            status.success(),
            "{}: serve exited with {status}",
            self.name
        );
        replies
    }
}

struct Server {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Server {
    fn send(&mut self, request: &Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
    }

    fn reply(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }
}

fn by_id<'a>(replies: &'a [Value], id: &str) -> &'a Value {
    replies
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no reply for {id}: {replies:?}"))
}

fn call(id: &str, function: &str, args: Value, limits: Value) -> Value {
    json!({"id": id, "function": format!("faults.py:{function}"), "import_module": true,
           "args": args, "limits": limits})
}

#[test]
fn every_fault_gets_one_reply_and_the_server_keeps_serving() {
    for setup in setups() {
        let name = setup.name;
        let requests = vec![
            call("add", "add", json!([2, 3]), json!({})),
            call("boom", "boom", json!([]), json!({})),
            call("segfault", "segfault", json!([]), json!({})),
            call("hard_exit", "hard_exit", json!([]), json!({})),
            call("soft_exit", "soft_exit", json!([]), json!({})),
            call("oom", "alloc", json!([300]), json!({"memory": "100M"})),
            call("forever", "forever", json!([]), json!({"wall": "1s"})),
            call(
                "bomb",
                "bomb",
                json!([]),
                json!({"processes": 20, "wall": "20s"}),
            ),
            call("loud", "loud", json!([]), json!({})),
            call("unpicklable", "unpicklable", json!([]), json!({})),
            json!("not an object"),
            json!({"id": "no-function", "args": []}),
            call("bad-limit", "noop", json!([]), json!({"memory": "lots"})),
            call("after", "add", json!([40, 2]), json!({})),
        ];
        let started = Instant::now();
        let replies = setup.serve_all(&["--slots", "2"], &requests);
        assert_eq!(
            replies.len(),
            requests.len(),
            "{name}: one reply per request: {replies:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{name}: too slow"
        );

        let ok = by_id(&replies, "add");
        assert_eq!(ok["ok"], true, "{name}: {ok}");
        assert_eq!(ok["result"], 5);
        assert_eq!(ok["report"]["backend"], setup.backend, "{name}");
        assert_eq!(ok["report"]["function"]["target"], "faults.py:add");
        let logged = |id: &str| by_id(&replies, id)["report"]["imports"]["modules"].to_string();
        assert!(
            logged("add").contains("\"faults\""),
            "{name}: {}",
            logged("add")
        );
        // The log is written as imports happen: a segfault keeps it.
        assert!(
            logged("segfault").contains("\"ctypes\""),
            "{name}: {}",
            logged("segfault")
        );

        let error = |id: &str| by_id(&replies, id)["error"].clone();
        assert_eq!(error("boom")["reason"], "exception", "{name}");
        assert_eq!(error("boom")["type"], "ValueError", "{name}");
        assert!(error("boom")["traceback"]
            .as_str()
            .unwrap()
            .contains("raise ValueError"));
        assert_eq!(error("segfault")["reason"], "signal", "{name}");
        assert_eq!(error("segfault")["signal"], 11, "{name}");
        assert_eq!(error("hard_exit")["reason"], "no-result", "{name}");
        assert_eq!(error("hard_exit")["status"], 3, "{name}");
        assert_eq!(error("soft_exit")["type"], "SystemExit", "{name}");
        assert_eq!(error("oom")["reason"], "limits", "{name}: {}", error("oom"));
        assert!(
            error("oom")["limits_exceeded"]["memory"].is_number(),
            "{name}"
        );
        assert_eq!(error("forever")["reason"], "limits", "{name}");
        assert!(
            error("forever")["limits_exceeded"]["wall_time"].is_number(),
            "{name}"
        );
        assert_eq!(
            error("bomb")["reason"],
            "limits",
            "{name}: {}",
            error("bomb")
        );
        assert!(
            error("bomb")["limits_exceeded"]["max_concurrent_processes"].is_number(),
            "{name}: {}",
            error("bomb")
        );
        let loud = by_id(&replies, "loud");
        assert_eq!(loud["result"], "done", "{name}");
        let stdout = loud["stdout"].as_str().unwrap();
        assert!(
            stdout.starts_with("[... ") && stdout.len() < 70_000,
            "{name}"
        );
        assert_eq!(error("unpicklable")["reason"], "exception", "{name}");
        for id in ["no-function", "bad-limit"] {
            assert_eq!(error(id)["reason"], "malformed", "{name}: {id}");
        }
        assert!(replies
            .iter()
            .any(|r| r["id"].is_null() && r["error"]["reason"] == "malformed"));
        assert_eq!(by_id(&replies, "after")["result"], 42, "{name}");
        assert_no_leftovers(&setup);
    }
}

/// No process runs from the setup's directory, and no run cgroup of a gone lfm is left.
fn assert_no_leftovers(setup: &Setup) {
    std::thread::sleep(Duration::from_millis(100));
    let marker = setup.dir.path().to_str().unwrap().to_string();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let cwd = std::fs::read_link(entry.path().join("cwd")).unwrap_or_default();
        if text.contains(&marker) || cwd.starts_with(setup.dir.path()) {
            left.push(text);
        }
    }
    assert!(left.is_empty(), "{}: processes left: {left:?}", setup.name);
    let cache = setup.dir.path().join("cache");
    let serve_dirs: Vec<_> = std::fs::read_dir(&cache)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("serve-"))
                .collect()
        })
        .unwrap_or_default();
    assert!(serve_dirs.is_empty(), "{}: work dirs left", setup.name);
}

#[test]
fn a_call_is_measured_by_what_it_allocates_not_by_the_zygote() {
    if !common::cgroup1_available() {
        eprintln!("SKIPPED: needs a cgroup v1 memory hierarchy (a fresh cgroup per call)");
        return;
    }
    let setup = setup("cgroup1", "cgroup1", false);
    let requests = vec![
        call("noop", "noop", json!([]), json!({})),
        call("alloc", "alloc", json!([100]), json!({})),
    ];
    let replies = setup.serve_all(&["--preload", "big"], &requests);
    let peak = |id: &str| {
        by_id(&replies, id)["report"]["memory"]["peak_bytes"]
            .as_f64()
            .unwrap()
            / MIB
    };
    assert!(
        peak("noop") < 5.0,
        "noop call measured {:.1} MiB",
        peak("noop")
    );
    assert!(
        (peak("alloc") - 100.0).abs() <= 3.0,
        "100 MiB call measured {:.1} MiB while the zygote holds 300 MiB",
        peak("alloc")
    );
}

/// The history's rows of a category, as `lfm history --format json` prints them.
fn history_rows(history: &Path, category: &str) -> Vec<Value> {
    let rows = common::history_json("history", history.to_str().unwrap(), category);
    serde_json::from_value(rows).unwrap()
}

#[test]
fn serve_records_every_call_and_auto_retries_a_call_that_outgrows_its_history() {
    for setup in setups() {
        let name = setup.name;
        let history = setup.dir.path().join("history.sqlite");
        let with_history = ["--history", history.to_str().unwrap()];
        let hold = |id: String, mib: u64| {
            json!({"id": id, "function": "faults.py:alloc_hold", "import_module": true,
                   "args": [mib, 0.2]})
        };
        // Twelve calls of 30 MiB: past bucketing's ten sampling points.
        let requests: Vec<Value> = (0..12).map(|i| hold(format!("h{i}"), 30)).collect();
        let replies = setup.serve_all(&with_history, &requests);
        assert!(
            replies.iter().all(|r| r["ok"] == true),
            "{name}: {replies:?}"
        );
        let rows = history_rows(&history, "alloc_hold");
        assert_eq!(
            rows.len(),
            12,
            "{name}: the category is the function's name"
        );
        assert!(rows
            .iter()
            .all(|r| r["exit"] == "normal" && r["sized"] == false));

        // A 60 MiB call sized from them: killed at its sized memory, run again larger.
        let mut request = hold("auto".into(), 60);
        request["auto"] = true.into();
        request["max_retries"] = 6.into();
        let replies = setup.serve_all(&with_history, &[request.clone()]);
        let reply = by_id(&replies, "auto");
        assert_eq!(reply["ok"], true, "{name}: {reply}");
        assert_eq!(
            reply["report"]["limits_from_sizing"],
            json!(["memory", "cores", "disk"]),
            "{name}"
        );
        let attempts = reply["attempts"].as_u64().unwrap() as usize;
        assert!(attempts >= 2, "{name}: {attempts} attempts");
        let retries = reply["retries"].as_array().unwrap();
        assert_eq!(retries.len(), attempts - 1, "{name}: {reply}");
        let limit = |r: &Value| r["limits"]["memory_bytes"].as_f64().unwrap();
        assert!(retries
            .iter()
            .all(|r| r["limits_exceeded"]["memory"].is_number()));
        assert!(
            limit(&retries[0]) < limit(&reply["report"]),
            "{name}: retried larger"
        );
        let rows = history_rows(&history, "alloc_hold");
        assert_eq!(rows.len(), 12 + attempts, "{name}: every attempt recorded");
        let (last, failed) = rows[12..].split_last().unwrap();
        let first = failed[0]["memory_limit_mb"].as_f64().unwrap();
        assert!(
            first < 60.0,
            "{name}: first attempt sized at {first} MiB from 30 MiB calls"
        );
        for attempt in failed {
            assert_eq!(attempt["exit"], "limits", "{name}: {attempt}");
            assert_eq!(attempt["exceeded"], "memory", "{name}: {attempt}");
            assert_eq!(attempt["sized"], true);
        }
        assert_eq!(last["exit"], "normal", "{name}: {last}");

        // Without a history nothing is recorded, and "auto" is refused, saying why.
        let replies = setup.serve_all(&[], &[hold("plain".into(), 1), request]);
        assert_eq!(by_id(&replies, "plain")["ok"], true, "{name}");
        let refused = by_id(&replies, "auto");
        assert_eq!(refused["error"]["reason"], "refused", "{name}: {refused}");
        assert!(refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--no-history"));
        assert_eq!(
            history_rows(&history, "alloc_hold").len(),
            12 + attempts,
            "{name}"
        );
    }
}

#[test]
fn a_bad_auto_request_is_malformed_and_names_the_field() {
    let setup = setup("rlimit", "rlimit", false);
    let mut unknown = call("s", "noop", json!([]), json!({}));
    unknown["auto"] = true.into();
    unknown["strategy"] = "best".into();
    let mut retries = call("r", "noop", json!([]), json!({}));
    retries["auto"] = true.into();
    retries["max_retries"] = (-1).into();
    let mut auto = call("a", "noop", json!([]), json!({}));
    auto["auto"] = "yes".into();
    let replies = setup.serve_all(&[], &[unknown, retries, auto]);
    let message = |id: &str| {
        let reply = by_id(&replies, id);
        assert_eq!(reply["error"]["reason"], "malformed", "{reply}");
        reply["error"]["message"].as_str().unwrap().to_string()
    };
    assert!(message("s").contains("known: fixed"), "{}", message("s"));
    assert!(message("r").contains("max_retries"), "{}", message("r"));
    assert!(
        message("a").contains("\"auto\" is true or false"),
        "{}",
        message("a")
    );
}

#[test]
fn large_arguments_come_from_a_file_and_a_large_value_goes_back_as_one() {
    let setup = setup("rlimit", "rlimit", false);
    let args_file = setup.dir.path().join("args.pickle");
    let written = Command::new(setup.python)
        .args(["-c", "import pickle,sys; pickle.dump((('a' * 300000,), {'b': 'b' * 300000}), open(sys.argv[1], 'wb'))"])
        .arg(&args_file)
        .status()
        .unwrap();
    assert!(written.success());
    let by_file = |id: &str, memory: &str| {
        let mut request = call(id, "add", json!(null), json!({"memory": memory}));
        request["args"] = Value::Null;
        request["args_file"] = args_file.to_str().unwrap().into();
        request["result_by_file"] = true.into();
        request
    };
    let mut both = by_file("both", "1G");
    both["args_pickle"] = "AA==".into();
    let mut relative = by_file("relative", "1G");
    relative["args_file"] = "args.pickle".into();
    let mut server = setup.start(&[]);
    server.send(&by_file("big", "1G"));
    let big = server.reply();
    assert_eq!(big["ok"], true, "{big}");
    assert!(big.get("result").is_none(), "{big}");
    let handed = PathBuf::from(big["result_file"].as_str().unwrap());
    assert_eq!(handed.parent().unwrap().file_name().unwrap(), "results");
    let value: Value = serde_json::from_slice(&std::fs::read(&handed).unwrap()).unwrap();
    assert_eq!(value.as_str().unwrap().len(), 600_000);
    for request in [by_file("small", "200K"), both, relative] {
        server.send(&request);
    }
    let replies = [server.reply(), server.reply(), server.reply()];
    drop(server.child.stdin.take());
    assert!(server.child.wait().unwrap().success());
    assert!(
        !handed.exists(),
        "the serve removes what clients left when it exits"
    );
    let refused = |id: &str| {
        let reply = by_id(&replies, id);
        assert_eq!(reply["error"]["reason"], "malformed", "{reply}");
        reply["error"]["message"].as_str().unwrap().to_string()
    };
    assert!(
        refused("small").contains("over the call's memory limit of 0.2 MiB"),
        "{}",
        refused("small")
    );
    assert!(refused("both").contains("not both"), "{}", refused("both"));
    assert!(refused("relative").contains("not an absolute path"));
}

#[test]
fn a_dead_zygote_fails_its_calls_cleanly_and_is_restarted() {
    let setup = setup("auto", "auto", false);
    let mut server = setup.start(&[]);
    let pidfile = setup.dir.path().join("call.pid");
    server.send(&call(
        "sleeper",
        "pid_then_sleep",
        json!([pidfile, 30]),
        json!({}),
    ));
    let call_pid =
        common::pid_written_to(&pidfile, Duration::from_secs(10)).expect("the call wrote its pid");
    let zygote = parent_of(call_pid);
    // SAFETY: kill(2) on the zygote this test's server started.
    unsafe { libc::kill(zygote, libc::SIGKILL) };
    let reply = server.reply();
    assert_eq!(reply["id"], "sleeper");
    assert_eq!(reply["error"]["reason"], "zygote", "{reply}");
    server.send(&call("after", "add", json!([1, 1]), json!({})));
    let reply = server.reply();
    assert_eq!(reply["result"], 2, "{reply}");
    drop(server.child.stdin.take());
    assert!(server.child.wait().unwrap().success());
    assert!(
        !Path::new(&format!("/proc/{call_pid}")).exists(),
        "the call outlived its zygote"
    );
}

#[test]
fn sigterm_lets_running_calls_finish_then_leaves_nothing() {
    let setup = setup("auto", "auto", false);
    let mut server = setup.start(&["--grace", "10s"]);
    let pidfile = setup.dir.path().join("call.pid");
    server.send(&call(
        "short",
        "pid_then_sleep",
        json!([pidfile, 0.5]),
        json!({}),
    ));
    wait_until(10, || pidfile.exists());
    // SAFETY: kill(2) on the server this test started.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    let reply = server.reply();
    assert_eq!(reply["result"], 0.5, "{reply}");
    assert!(server.child.wait().unwrap().success());
    assert_no_leftovers(&setup);
}

#[test]
fn socket_clients_are_served_at_once_and_a_gone_client_loses_only_its_call() {
    use std::os::unix::net::UnixStream;
    let setup = setup("auto", "auto", false);
    let socket = setup.dir.path().join("private/serve.sock");
    let mut server = setup.start(&["--socket", socket.to_str().unwrap(), "--slots", "2"]);
    wait_until(20, || socket.exists());
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(socket.parent().unwrap()), 0o700);

    // A client that leaves mid-call: its call is killed.
    let pidfile = setup.dir.path().join("gone.pid");
    let mut gone = UnixStream::connect(&socket).unwrap();
    writeln!(
        gone,
        "{}",
        call("gone", "pid_then_sleep", json!([pidfile, 30]), json!({}))
    )
    .unwrap();
    // Generous: on a machine busy with other builds the zygote's start alone can take seconds.
    let call_pid =
        common::pid_written_to(&pidfile, Duration::from_secs(60)).expect("the call wrote its pid");
    drop(gone);

    // Two clients at once.
    let clients: Vec<_> = (0..2)
        .map(|n| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut stream = UnixStream::connect(&socket).unwrap();
                writeln!(
                    stream,
                    "{}",
                    call(&format!("c{n}"), "add", json!([n, 10]), json!({}))
                )
                .unwrap();
                let mut line = String::new();
                BufReader::new(stream).read_line(&mut line).unwrap();
                serde_json::from_str::<Value>(&line).unwrap()
            })
        })
        .collect();
    for (n, client) in clients.into_iter().enumerate() {
        let reply = client.join().unwrap();
        assert_eq!(reply["result"], 10 + n as i64, "{reply}");
    }
    wait_until(20, || !Path::new(&format!("/proc/{call_pid}")).exists());
    assert!(!alive(call_pid), "the gone client's call still runs");
    // SAFETY: kill(2) on the server this test started.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    assert!(server.child.wait().unwrap().success());
    assert!(!socket.exists(), "the socket is removed at shutdown");
}

#[test]
fn what_a_call_leaves_running_is_killed_once_its_reply_is_out() {
    for setup in setups() {
        let mut server = setup.start(&["--slots", "1"]);
        let leave = |n: usize, seconds: f64| {
            let path = setup.dir.path().join(format!("left-{n}"));
            let args = json!([path.to_str().unwrap(), seconds]);
            (path, call(&n.to_string(), "leave_behind", args, json!({})))
        };
        let left_by = |n: usize, path: &Path| {
            // The call writes the pid as it starts: wait for it whole.
            let pid = (0..200).find_map(|_| {
                let text = std::fs::read_to_string(path).ok();
                text.and_then(|t| t.parse::<i32>().ok()).or_else(|| {
                    std::thread::sleep(Duration::from_millis(25));
                    None
                })
            });
            pid.unwrap_or_else(|| panic!("{}: call {n} never started", setup.name))
        };
        // When it was seen gone, in seconds since the epoch as a Report's times are.
        let assert_gone = |n: usize, pid: i32| -> f64 {
            let gone = (0..200).any(|_| {
                std::thread::sleep(Duration::from_millis(25));
                !alive(pid)
            });
            assert!(gone, "{}: call {n}'s process {pid} outlived it", setup.name);
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.unwrap().as_secs_f64()
        };
        // A short call: what it left goes at once.
        let (path1, request1) = leave(1, 0.0);
        server.send(&request1);
        assert_eq!(server.reply()["ok"], true, "{}", setup.name);
        assert_gone(1, left_by(1, &path1));
        // Long calls back to back: what one left goes while the next (3 s) runs...
        let (path2, request2) = leave(2, 0.1);
        let (path3, request3) = leave(3, 3.0);
        server.send(&request2);
        assert_eq!(server.reply()["ok"], true, "{}", setup.name);
        server.send(&request3);
        let gone2 = assert_gone(2, left_by(2, &path2));
        let pid3 = left_by(3, &path3);
        // ...and what the last one left goes with the server idle.
        let reply3 = server.reply();
        assert_eq!(reply3["ok"], true, "{}", setup.name);
        let end3 = reply3["report"]["end"].as_f64().unwrap();
        assert!(
            gone2 < end3,
            "{}: call 2's leftovers went only once call 3 had ended ({gone2} >= {end3})",
            setup.name
        );
        assert_gone(3, pid3);
        drop(server.child.stdin.take());
        assert!(server.child.wait().unwrap().success());
    }
}

/// Polls `done` until it holds or `seconds` have passed; the caller asserts what it needs.
fn wait_until(seconds: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
        .unwrap_or(false)
}

fn parent_of(pid: i32) -> i32 {
    parent_if_alive(pid).unwrap()
}

/// `pid`'s parent, from one read of its stat: none once it is gone (a process listed in /proc
/// a moment ago may have been reaped since).
fn parent_if_alive(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(1)?.parse().ok()
}

fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The fewest descriptors `pid` holds over 300 ms: the server's cleanup thread holds a finished
/// call's cgroup files for a moment after its reply; a leak holds them for good.
fn settled_fd_count(pid: i32) -> usize {
    (0..30)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(10));
            fd_count(pid)
        })
        .min()
        .unwrap()
}

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| parent_if_alive(p) == Some(pid))
        .collect()
}

fn run_cgroups_of(server: i32) -> Vec<String> {
    let prefix = format!("run-{server}-");
    [
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/cpuacct",
        "/sys/fs/cgroup/unified",
    ]
    .iter()
    .flat_map(|root| walkdir(Path::new(root), 4))
    .filter(|name| {
        name.rsplit('/')
            .next()
            .is_some_and(|n| n.starts_with(&prefix))
    })
    .collect()
}

fn walkdir(dir: &Path, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    if depth == 0 {
        return out;
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(entry.path().display().to_string());
            out.extend(walkdir(&entry.path(), depth - 1));
        }
    }
    out
}

#[test]
fn ten_thousand_calls_leave_no_process_cgroup_or_descriptor_behind() {
    let backend = if common::cgroup1_available() {
        "cgroup1"
    } else {
        "rlimit"
    };
    let setup = setup(backend, backend, false);
    let mut server = setup.start(&["--preload", "faults", "--slots", "2"]);
    let server_pid = server.child.id() as i32;
    let mut stdin = server.child.stdin.take().unwrap();
    let round = |server: &mut Server, from: usize, to: usize| {
        let requests: Vec<String> = (from..to)
            .map(|n| call(&n.to_string(), "add", json!([n, 1]), json!({})).to_string())
            .collect();
        let writer = {
            let mut stdin = stdin.try_clone_for_test();
            std::thread::spawn(move || {
                for line in requests {
                    writeln!(stdin, "{line}").unwrap();
                }
                stdin.flush().unwrap();
            })
        };
        for _ in from..to {
            let reply = server.reply();
            assert_eq!(reply["ok"], true, "{reply}");
        }
        writer.join().unwrap();
    };
    round(&mut server, 0, 200);
    let zygote = children_of(server_pid)[0];
    let (server_fds, zygote_fds, zygote_rss) = (
        settled_fd_count(server_pid),
        settled_fd_count(zygote),
        rss_kib(zygote),
    );
    round(&mut server, 200, 10_000);
    // Idle slot cgroups keep their files open (two joins and ~6 counters on v1), so the count
    // moves with how many are idle now (at most 2 a slot); a descriptor left by each call
    // would add thousands.
    let settled = settled_fd_count(server_pid);
    assert!(
        settled <= server_fds + 2 * 2 * 8,
        "the server's descriptors grew from {server_fds} to {settled}"
    );
    // Settled as the server's: a spare being set up holds its pipes for a moment.
    assert_eq!(
        settled_fd_count(zygote),
        zygote_fds,
        "the zygote's descriptors grew"
    );
    let growth = rss_kib(zygote) as i64 - zygote_rss as i64;
    assert!(
        growth < 4096,
        "the zygote grew by {growth} KiB over 9,800 calls"
    );
    // Between calls a spare child per slot waits, set up in its own cgroup, for the next call.
    // The last calls' processes may still be exiting (or not yet reaped) just after their reply.
    let live_children = || -> Vec<i32> {
        children_of(zygote)
            .into_iter()
            .filter(|&p| alive(p))
            .collect()
    };
    wait_until(10, || live_children().len() <= 2);
    let waiting = live_children();
    assert!(waiting.len() <= 2, "calls still running: {waiting:?}");
    // And the slot cgroups kept for the next calls: up to two idle a slot, and one a slot that
    // the last calls left and the cleanup thread hands back.
    let cgroups = run_cgroups_of(server_pid);
    assert!(
        cgroups.len() <= (waiting.len() + 3 * 2) * cgroup_hierarchies(backend),
        "call cgroups left: {cgroups:?}"
    );
    stdin.flush().unwrap();
    drop(stdin);
    assert!(server.child.wait().unwrap().success());
    assert_no_leftovers(&setup);
    let cgroups = run_cgroups_of(server_pid);
    assert!(
        cgroups.is_empty(),
        "cgroups left after the serve: {cgroups:?}"
    );
}

/// How many cgroup directories one call has (v1: one per joined hierarchy, memory and cpuacct).
fn cgroup_hierarchies(backend: &str) -> usize {
    match backend {
        "cgroup1" => 2,
        _ => 0,
    }
}

/// The server's stdin, shared by the test and its writer thread.
trait CloneForTest {
    fn try_clone_for_test(&self) -> std::fs::File;
}

impl CloneForTest for std::process::ChildStdin {
    fn try_clone_for_test(&self) -> std::fs::File {
        use std::os::fd::AsFd;
        std::fs::File::from(self.as_fd().try_clone_to_owned().unwrap())
    }
}

/// `--idle-timeout`: a connected client keeps the server up however long it waits; once the
/// last client is gone and nothing runs, the server unlinks its socket and exits by itself.
#[test]
fn an_idle_socket_server_exits_by_itself_but_not_while_a_client_is_connected() {
    use std::os::unix::net::UnixStream;
    let setup = setup("auto", "auto", false);
    let socket = setup.dir.path().join("private/idle.sock");
    let socket_arg = socket.to_str().unwrap();
    let mut server = setup.start(&["--socket", socket_arg, "--idle-timeout", "1s"]);
    wait_until(20, || socket.exists());
    let mut stream = UnixStream::connect(&socket).unwrap();
    // Longer than the idle timeout, connected: the server must still answer.
    std::thread::sleep(Duration::from_secs(3));
    writeln!(stream, "{}", call("late", "add", json!([1, 2]), json!({}))).unwrap();
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).unwrap();
    let reply: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(reply["result"], 3, "{reply}");
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the idle server did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "idle exit is a clean exit: {status}");
    assert!(!socket.exists(), "the idle server removed its socket");
}

#[test]
fn idle_timeout_needs_a_socket() {
    let setup = setup("auto", "auto", false);
    let output = setup.command(&["--idle-timeout", "1s"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
}

/// The next call's spare is made once a call runs, not as it starts (it would take the CPU the
/// call needs to start): a spare waits beside a long call before it ends.
#[test]
fn a_spare_is_made_while_a_long_call_runs() {
    for setup in setups() {
        let name = setup.name;
        let mut server = setup.start(&["--preload", "faults"]);
        let server_pid = server.child.id() as i32;
        server.send(&call("first", "add", json!([1, 2]), json!({})));
        assert_eq!(server.reply()["ok"], true, "{name}");
        let marker = setup.dir.path().join("long.pid");
        let args = json!([marker, 2.0]);
        server.send(&call("long", "pid_then_sleep", args, json!({})));
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !marker.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let zygote = children_of(server_pid)[0];
        let mut children = children_of(zygote);
        while children.len() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            children = children_of(zygote);
        }
        assert!(marker.exists(), "{name}: the long call never started");
        assert_eq!(
            children.len(),
            2,
            "{name}: the call and a spare: {children:?}"
        );
        let reply = server.reply();
        assert_eq!(reply["ok"], true, "{name}: {reply}");
        drop(server.child.stdin.take());
        assert!(server.child.wait().unwrap().success(), "{name}");
        assert_no_leftovers(&setup);
    }
}

/// Between calls the zygote holds spare children set up for the last call's limits. A call
/// with other limits must not run in one (its cgroup and rlimits were set for those), and a
/// spare killed from outside is replaced, never handed a call.
#[test]
fn spares_run_only_calls_of_their_limits_and_a_killed_spare_is_replaced() {
    for setup in setups() {
        let name = setup.name;
        let mut server = setup.start(&["--preload", "faults"]);
        let server_pid = server.child.id() as i32;
        let mut ask = |id: &str, function: &str, args: Value, memory: &str| {
            server.send(&call(id, function, args, json!({"memory": memory})));
            let reply = server.reply();
            assert_eq!(reply["id"], id, "{name}: {reply}");
            // Time for the server to set up its spares for the next call.
            std::thread::sleep(Duration::from_millis(300));
            reply
        };
        let roomy = ask("roomy", "alloc", json!([20]), "400M");
        assert_eq!(roomy["ok"], true, "{name}: {roomy}");
        let zygote = children_of(server_pid)[0];
        wait_until(20, || !children_of(zygote).is_empty());
        assert!(!children_of(zygote).is_empty(), "{name}: no spare waits");
        // Spares were made for 400M: this call is limited at 100M all the same. It holds its
        // 200M for a second: the rlimit backend enforces memory by sampling /proc, and a
        // loaded host once let a bare allocation end between two samples.
        let tight = ask("tight", "alloc_hold", json!([200, 1.0]), "100M");
        assert_eq!(tight["ok"], false, "{name}: {tight}");
        assert_eq!(tight["error"]["reason"], "limits", "{name}: {tight}");
        assert_eq!(tight["report"]["limits"]["memory_bytes"], 100 * 1_048_576);
        let fits = ask("fits", "alloc", json!([20]), "100M");
        assert_eq!(fits["ok"], true, "{name}: {fits}");
        for spare in children_of(zygote) {
            // SAFETY: kill(2) on a child of the test's own server's zygote.
            unsafe { libc::kill(spare, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(300));
        let after = ask("after", "alloc", json!([20]), "100M");
        assert_eq!(after["ok"], true, "{name}: {after}");
        drop(server.child.stdin.take());
        assert!(server.child.wait().unwrap().success(), "{name}");
        assert_no_leftovers(&setup);
    }
}

/// The calls' allocations held at `t` (between their Report's start and end).
fn held_at(replies: &[Value], t: f64) -> u64 {
    replies
        .iter()
        .map(|r| &r["report"])
        .filter(|r| r["start"].as_f64().unwrap() <= t && t < r["end"].as_f64().unwrap())
        .map(|r| r["allocation"]["memory_bytes"].as_u64().unwrap())
        .sum()
}

#[test]
fn calls_start_when_their_memory_fits_the_node_and_a_large_one_is_not_starved() {
    const MIB: u64 = 1 << 20;
    for setup in setups() {
        let name = setup.name;
        let hold = |id: String, mib: u64, seconds: f64, limit: &str| {
            call(
                &id,
                "alloc_hold",
                json!([mib, seconds]),
                json!({"memory": limit}),
            )
        };
        // 600M runs; 700M cannot beside it; 100M ones can, four at a time, and go first, but
        // at most OVERTAKE_LIMIT (8) of them before the 700M one.
        let mut requests = vec![
            hold("big".into(), 20, 1.5, "600M"),
            hold("large".into(), 20, 0.3, "700M"),
        ];
        requests.extend((0..20).map(|i| hold(format!("s{i}"), 10, 0.3, "100M")));
        let replies = setup.serve_all(&["--node-memory", "1G", "--slots", "8"], &requests);
        assert!(
            replies.iter().all(|r| r["ok"] == true),
            "{name}: {replies:?}"
        );
        for reply in &replies {
            let allocation = &reply["report"]["allocation"];
            assert_eq!(allocation["node_memory_bytes"], 1024 * MIB, "{name}");
            assert_eq!(
                allocation["memory_bytes"], reply["report"]["limits"]["memory_bytes"],
                "{name}: the allocation is the limit"
            );
        }
        for reply in &replies {
            let start = reply["report"]["start"].as_f64().unwrap();
            let held = held_at(&replies, start);
            assert!(held <= 1024 * MIB, "{name}: {held} bytes held at {start}");
        }
        let start = |id: &str| by_id(&replies, id)["report"]["start"].as_f64().unwrap();
        let big_end = by_id(&replies, "big")["report"]["end"].as_f64().unwrap();
        // The large one has room only once the big one ends, so the small calls that started
        // before that went before it. Those admitted just after it may open their window first
        // (forks run in parallel): a Report's start is not the order of admission.
        let overtook: Vec<f64> = (0..20)
            .map(|i| start(&format!("s{i}")))
            .filter(|&s| s < big_end)
            .collect();
        assert!(
            (1..=8).contains(&overtook.len()),
            "{name}: {} small calls started before the big one ended (large started {:.3} s \
             after it): {overtook:?}, big ended {big_end}",
            overtook.len(),
            start("large") - big_end,
        );
        assert!(
            start("large") >= big_end,
            "{name}: the large one waited for room"
        );
        let waited = by_id(&replies, "large")["report"]["allocation"]["queue_wait_seconds"]
            .as_f64()
            .unwrap();
        assert!(waited > 0.0, "{name}");
    }
}

#[test]
fn a_call_larger_than_the_node_is_refused_at_once_naming_both() {
    let setup = setups().remove(0);
    let requests = [
        call("huge", "add", json!([1]), json!({"memory": "2G"})),
        call("fine", "add", json!([1]), json!({"memory": "100M"})),
    ];
    let replies = setup.serve_all(&["--node-memory", "1G"], &requests);
    let refused = by_id(&replies, "huge");
    assert_eq!(refused["error"]["reason"], "refused", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("2048.0 MiB") && message.contains("1024.0 MiB"),
        "{message}"
    );
    assert_eq!(by_id(&replies, "fine")["ok"], true);
}

#[test]
fn a_call_without_a_memory_limit_is_held_to_its_share_of_the_node() {
    for setup in setups() {
        let name = setup.name;
        let requests = [call("share", "alloc", json!([300]), json!({}))];
        let replies = setup.serve_all(&["--node-memory", "400M", "--slots", "2"], &requests);
        let report = &by_id(&replies, "share")["report"];
        // Half of what the node has for calls: 400M less what the serve and its zygote hold.
        let serve = report["allocation"]["serve_memory_bytes"].as_u64().unwrap();
        assert!(
            serve > 0 && serve.is_multiple_of(16 << 20),
            "{name}: {report}"
        );
        let share = ((400u64 << 20) - serve) / 2;
        assert_eq!(report["limits"]["memory_bytes"], share, "{name}");
        assert_eq!(report["allocation"]["memory_bytes"], share, "{name}");
        assert!(
            report["limits_exceeded"]["memory"].is_number(),
            "{name}: stopped by its own limit: {report}"
        );
    }
}

#[test]
fn a_retried_call_waits_for_room_at_its_larger_allocation_then_succeeds() {
    let setup = setups().remove(0);
    let history = setup.dir.path().join("history.sqlite");
    let with_history = ["--history", history.to_str().unwrap()];
    let hold = |id: String, mib: u64, seconds: f64| {
        json!({"id": id, "function": "faults.py:alloc_hold", "import_module": true,
               "args": [mib, seconds], "category": "grow"})
    };
    let past: Vec<Value> = (0..12).map(|i| hold(format!("h{i}"), 30, 0.0)).collect();
    assert!(setup
        .serve_all(&with_history, &past)
        .iter()
        .all(|r| r["ok"] == true));

    // 240M held for 3 s of a 300M node: the first attempt (sized from 30 MiB calls) fits
    // beside it, runs out; the attempt that holds 60 MiB cannot fit until the holder ends.
    let holder = call(
        "holder",
        "alloc_hold",
        json!([10, 3.0]),
        json!({"memory": "240M"}),
    );
    let mut grow = hold("grow".into(), 60, 0.2);
    grow["auto"] = true.into();
    grow["max_retries"] = 6.into();
    let mut args = with_history.to_vec();
    args.extend(["--node-memory", "300M", "--slots", "4"]);
    let replies = setup.serve_all(&args, &[holder, grow]);
    let grown = by_id(&replies, "grow");
    assert_eq!(grown["ok"], true, "{grown}");
    assert!(grown["attempts"].as_u64().unwrap() >= 2, "{grown}");
    let first_limit = grown["retries"][0]["limits"]["memory_bytes"]
        .as_u64()
        .unwrap();
    assert!(
        first_limit <= 60 << 20,
        "the first attempt fitted beside: {grown}"
    );
    let report = &grown["report"];
    let holder_end = by_id(&replies, "holder")["report"]["end"].as_f64().unwrap();
    assert!(
        report["start"].as_f64().unwrap() >= holder_end,
        "the last attempt waited for the holder: {grown}"
    );
    assert!(report["allocation"]["queue_wait_seconds"].as_f64().unwrap() > 0.0);
    assert_eq!(
        report["allocation"]["memory_bytes"],
        report["limits"]["memory_bytes"]
    );
    // Every attempt's allocation and wait are in the history too.
    let rows = history_rows(&history, "grow");
    let attempts = &rows[12..];
    assert_eq!(attempts.len() as u64, grown["attempts"].as_u64().unwrap());
    for row in attempts {
        assert_eq!(row["allocation_mb"], row["memory_limit_mb"], "{row}");
        assert!(row["queue_wait_seconds"].is_number(), "{row}");
    }
    let last_wait = attempts.last().unwrap()["queue_wait_seconds"].as_f64();
    assert_eq!(
        last_wait,
        report["allocation"]["queue_wait_seconds"].as_f64()
    );
}

#[test]
fn a_status_request_says_what_runs_what_is_held_and_what_the_zygote_learned() {
    let setup = setups().remove(0);
    let mut server = setup.start(&["--node-memory", "1G", "--slots", "2"]);
    let status = json!({"id": "s", "status": true});
    server.send(&call(
        "long",
        "alloc_hold",
        json!([20, 1.0]),
        json!({"memory": "300M"}),
    ));
    server.send(&status);
    let reply = server.reply();
    assert_eq!(reply["id"], "s", "the status comes first: {reply}");
    assert_eq!(reply["ok"], true);
    let now = &reply["status"];
    assert_eq!(now["running"], 1, "{reply}");
    assert_eq!(now["queued"], 0);
    assert_eq!(now["slots"], 2);
    assert_eq!(now["node_memory_bytes"], 1u64 << 30);
    assert_eq!(now["held_memory_bytes"], 300u64 << 20);
    assert!(now["zygote"]["pid"].as_i64().unwrap() > 0);
    assert!(now["zygote"]["rss_bytes"].as_u64().unwrap() > 0);
    assert_eq!(now["zygote"]["learning"], true);
    assert_eq!(server.reply()["id"], "long");

    // What a call imported from the standard library, the zygote learns and says so.
    server.send(&call("fractions", "uses_fractions", json!([]), json!({})));
    assert_eq!(server.reply()["result"], "1/3");
    let mut learned = Value::Null;
    for _ in 0..100 {
        server.send(&status);
        let reply = server.reply();
        assert_eq!(reply["status"]["running"], 0);
        assert_eq!(reply["status"]["held_memory_bytes"], 0);
        learned = reply["status"]["zygote"]["learned"].clone();
        if learned.as_array().unwrap().iter().any(|p| p == "fractions") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        learned.as_array().unwrap().iter().any(|p| p == "fractions"),
        "{learned}"
    );

    // A status request with a call's fields is refused, naming why.
    server.send(&json!({"id": "both", "status": true, "function": "faults.py:noop"}));
    let refused = server.reply();
    assert_eq!(refused["error"]["reason"], "malformed", "{refused}");
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("status"));
    drop(server.child.stdin.take());
    assert!(server.child.wait().unwrap().success());
}

/// Each call's [zygote pid, colorsys loaded at its start, start, end], from its reply.
fn zygote_run(reply: &Value) -> (i64, bool, f64, f64) {
    let r = &reply["result"];
    assert!(r.is_array(), "{reply}");
    let number = |v: &Value| v.as_f64().unwrap();
    (
        r[0].as_i64().unwrap(),
        r[1].as_bool().unwrap(),
        number(&r[2]),
        number(&r[3]),
    )
}

#[test]
fn two_zygotes_serve_at_once_and_both_learn() {
    let setup = setups().remove(0);
    let mut server = setup.start(&["--slots", "2", "--zygotes", "2"]);
    let run = |id: &str, seconds: f64| call(id, "zygote_and_colorsys", json!([seconds]), json!({}));
    // A first call imports colorsys: every zygote is sent it before its reply is out, so
    // every call forked after finds it loaded, whichever zygote forks it.
    server.send(&run("teach", 0.0));
    let (_, loaded, _, _) = zygote_run(&server.reply());
    assert!(!loaded, "colorsys was loaded before any call imported it");
    let mut zygotes = std::collections::BTreeSet::new();
    for round in 0..3 {
        let (a, b) = (format!("a{round}"), format!("b{round}"));
        // 2 s each: on a loaded machine the second fork may come a second after the first.
        server.send(&run(&a, 2.0));
        server.send(&run(&b, 2.0));
        let replies = [server.reply(), server.reply()];
        let runs: Vec<_> = replies.iter().map(zygote_run).collect();
        for (reply, (_, loaded, _, _)) in replies.iter().zip(&runs) {
            assert!(
                loaded,
                "a call forked by a zygote that did not learn colorsys: {reply}"
            );
        }
        let (first, second) = (runs[0], runs[1]);
        assert!(
            first.2 < second.3 && second.2 < first.3,
            "the two calls did not run at once: {runs:?}"
        );
        assert_ne!(
            first.0, second.0,
            "both calls of a round came from one zygote: {runs:?}"
        );
        zygotes.extend([first.0, second.0]);
    }
    assert_eq!(
        zygotes.len(),
        2,
        "calls came from more zygotes than two: {zygotes:?}"
    );
    drop(server.child.stdin.take());
    assert!(server.child.wait().unwrap().success());
}

#[test]
fn sizing_in_a_serve_counts_its_node_budget_as_the_whole_node() {
    let setup = setups().remove(0);
    let history = setup.dir.path().join("history.sqlite");
    // max-seen without history gives the whole node: the serve's 300M (less what the serve
    // and its zygote hold), not the machine's.
    let mut request = call("first", "alloc_hold", json!([10, 0.0]), json!({}));
    request["auto"] = true.into();
    request["strategy"] = "max-seen".into();
    let args = [
        "--history",
        history.to_str().unwrap(),
        "--node-memory",
        "300M",
    ];
    let replies = setup.serve_all(&args, &[request]);
    let reply = by_id(&replies, "first");
    assert_eq!(reply["ok"], true, "{reply}");
    let serve = reply["report"]["allocation"]["serve_memory_bytes"]
        .as_u64()
        .unwrap();
    let whole = (300u64 << 20) - serve;
    assert_eq!(reply["report"]["limits"]["memory_bytes"], whole);
    assert_eq!(reply["report"]["allocation"]["memory_bytes"], whole);
}

/// A v1 memory cgroup with a limit, standing for a node (or a batch job) the serve runs in;
/// removed, with anything left in it, when dropped.
struct NodeCgroup(PathBuf);

impl NodeCgroup {
    fn new(limit: u64) -> NodeCgroup {
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/memory/lfm-test-node-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string()).unwrap();
        NodeCgroup(dir)
    }

    /// The kernel's count of OOM kills this cgroup's own limit caused (v1 counts them where
    /// the limit was hit, not in the parents of a call's cgroup).
    fn oom_kills(&self) -> u64 {
        let text = std::fs::read_to_string(self.0.join("memory.oom_control")).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .expect("memory.oom_control has oom_kill")
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for NodeCgroup {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
            // SAFETY: kill(2) on a pid of the test's own cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn the_node_is_never_oom_killed_only_a_call_that_outgrows_its_allocation() {
    if !common::is_root() || !common::cgroup1_available() {
        eprintln!("SKIPPED: needs root and a cgroup v1 memory hierarchy (a cgroup for the node)");
        return;
    }
    const MIB: u64 = 1 << 20;
    let setup = setup("cgroup1", "cgroup1", false);
    // The zygote holds 300 MiB (big.py); calls of 250M fill 200 MiB each and hold it. Admitted
    // against the node's 800M alone, three would run beside the zygote: 900 MiB in 800M.
    let node = NodeCgroup::new(800 * MIB);
    let mut requests: Vec<Value> = (0..6)
        .map(|i| {
            let id = format!("hold{i}");
            call(
                &id,
                "alloc_hold",
                json!([200, 0.5]),
                json!({"memory": "250M"}),
            )
        })
        .collect();
    requests.push(call(
        "outgrows",
        "alloc",
        json!([400]),
        json!({"memory": "250M"}),
    ));
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
        .arg(&node.0)
        .arg(
            setup
                .command(&["--preload", "big", "--slots", "4"])
                .get_program(),
        )
        .args(
            setup
                .command(&["--preload", "big", "--slots", "4"])
                .get_args(),
        )
        .current_dir(setup.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for request in &requests {
        writeln!(stdin, "{request}").unwrap();
    }
    drop(stdin);
    let replies: Vec<Value> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(child.wait().unwrap().success());
    // The kernel counts an OOM kill in the victim's cgroup: the serve's and the zygote's is
    // the node's, a call's is its own, where lfm tells its own limit from one above it.
    assert_eq!(
        node.oom_kills(),
        0,
        "the serve or zygote was killed: {replies:?}"
    );
    for reply in &replies {
        let notes = reply["report"]["notes"].to_string();
        assert!(!notes.contains("OOM killer"), "{reply}");
    }
    for i in 0..6 {
        let reply = by_id(&replies, &format!("hold{i}"));
        assert_eq!(reply["ok"], true, "{reply}");
        let allocation = &reply["report"]["allocation"];
        assert_eq!(
            allocation["node_memory_bytes"],
            800 * MIB,
            "detected from the cgroup"
        );
        let serve = allocation["serve_memory_bytes"].as_u64().unwrap();
        assert!(
            serve >= 300 * MIB,
            "the zygote's 300 MiB is the serve's: {allocation}"
        );
        let start = reply["report"]["start"].as_f64().unwrap();
        let held = held_at(&replies, start);
        assert!(
            held + serve <= 800 * MIB,
            "{held} + {serve} bytes held at {start}"
        );
    }
    let outgrown = by_id(&replies, "outgrows");
    assert_eq!(outgrown["error"]["reason"], "limits", "{outgrown}");
    assert!(
        outgrown["report"]["limits_exceeded"]["memory"].is_number(),
        "stopped by its own cgroup: {outgrown}"
    );
}

/// A forked call's memory comes from its own high-water mark too, reset at its start: a spike
/// freed before the next /proc sample is in its Report, and over a sampled limit it is the
/// limit's failure (the cgroup backends' kernel peak and limit do the same).
#[test]
fn a_calls_memory_spike_between_samples_is_measured_and_over_its_limit_fails_it() {
    for setup in setups() {
        let name = setup.name;
        let replies = setup.serve_all(
            &["--preload", "faults", "--slots", "2"],
            &[
                call("free", "spike", json!([10.2, 200]), json!({"memory": "1G"})),
                call(
                    "limited",
                    "spike",
                    json!([10.2, 200]),
                    json!({"memory": "100M"}),
                ),
            ],
        );
        let free = by_id(&replies, "free");
        assert_eq!(free["ok"], true, "{name}: {free}");
        let peak = free["report"]["memory"]["peak_bytes"].as_u64().unwrap();
        assert!(peak >= 190 * 1_048_576, "{name}: peak {peak}: {free}");
        let limited = by_id(&replies, "limited");
        assert_eq!(limited["ok"], false, "{name}: {limited}");
        assert_eq!(limited["error"]["reason"], "limits", "{name}: {limited}");
    }
}
