//! A test's own `lfm serve`: the backends this machine offers it, the command that starts it
//! as root or as nobody, and a client that asks it one request at a time over stdin/stdout.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use serde_json::Value;

/// How a test serve contains its calls, and as whom it runs.
#[derive(Clone, Copy, Debug)]
pub struct Containment {
    pub name: &'static str,
    pub backend: &'static str,
    pub as_nobody: bool,
}

impl Containment {
    /// Every containment this machine offers (cgroup v1 as root, rlimit as nobody, else
    /// rlimit as this user), each one missing said on stderr.
    pub fn available() -> Vec<Containment> {
        let mut out = Vec::new();
        if super::cgroup1_available() {
            out.push(Containment::new("cgroup1", "cgroup1", false));
        } else {
            eprintln!("SKIPPED cgroup1: no writable cgroup v1 hierarchy here");
        }
        if super::is_root() && Path::new("/usr/bin/python3").exists() {
            out.push(Containment::new("rlimit-as-nobody", "rlimit", true));
        } else {
            eprintln!("SKIPPED rlimit as nobody: needs root (to setpriv) and /usr/bin/python3");
            out.push(Containment::new("rlimit", "rlimit", false));
        }
        out
    }

    pub fn new(name: &'static str, backend: &'static str, as_nobody: bool) -> Containment {
        Containment {
            name,
            backend,
            as_nobody,
        }
    }

    /// `LFM serve --python P --backend B`, as nobody through setpriv where asked (nobody runs
    /// the system's python3, which needs nothing of root's home).
    pub fn serve_command(&self, lfm: &Path) -> Command {
        let mut command = if self.as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
            c.arg(lfm);
            c
        } else {
            Command::new(lfm)
        };
        let python = if self.as_nobody {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        command.args(["serve", "--python", python, "--backend", self.backend]);
        command
    }
}

/// A started serve, asked over its stdin and answering on its stdout.
pub struct ServeClient {
    pub child: Child,
    stdout: BufReader<ChildStdout>,
}

impl ServeClient {
    /// Started under `SPAWN` (why: there), as lfm is often a test's own copy.
    pub fn spawn(command: &mut Command) -> ServeClient {
        let spawning = super::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start lfm serve");
        drop(spawning);
        let stdout = BufReader::new(child.stdout.take().unwrap());
        ServeClient { child, stdout }
    }

    /// Send `request`, and the next reply line.
    pub fn ask(&mut self, request: &Value) -> Value {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
        self.next_reply()
    }

    pub fn next_reply(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    /// Close its stdin and wait for it: it must exit cleanly.
    pub fn end(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "serve exited with {status}");
    }
}

/// The example of docs/serve.md's section `heading`: its request line whose `id` is 2 and the
/// first JSON block after it (what a real reply's `report.function` must be).
pub fn documented_example(heading: &str) -> (Value, Value) {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/serve.md"))
        .unwrap();
    let section = &doc[doc
        .find(heading)
        .unwrap_or_else(|| panic!("docs/serve.md has no {heading:?}"))..];
    let request_line = section
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("{\"id\": 2"))
        .expect("the example's request");
    let block = section.split("```json").nth(1).unwrap();
    let block = &block[..block.find("```").unwrap()];
    (
        serde_json::from_str(request_line).expect("the example's request JSON"),
        serde_json::from_str(block).expect("the example's JSON"),
    )
}
