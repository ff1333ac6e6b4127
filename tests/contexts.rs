//! Contexts in `lfm serve` (docs/serve.md "Contexts"): an initialiser the zygote runs once,
//! whose state every later call inherits, with each call's Report its own; on cgroup v1 (as
//! root, where the machine has it) and on the rlimit backend as nobody. Fixtures:
//! tests/fixtures/state (model.py keeps a 200 MiB model that takes 0.3 s of CPU to make).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use common::serve::{Containment, ServeClient};

const MIB: f64 = 1_048_576.0;
const CONTEXT: &str = "model:load";

/// A serve's world: lfm and the fixtures in a directory anyone may read and write.
struct Setup {
    name: &'static str,
    dir: tempfile::TempDir,
    how: Containment,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state")
}

fn setup(how: Containment) -> Setup {
    use std::os::unix::fs::PermissionsExt;
    let (dir, _) = common::shared_dir_with_lfm("lfm-contexts");
    for file in ["model.py", "uses_device.py"] {
        std::fs::copy(fixtures().join(file), dir.path().join(file)).unwrap();
    }
    let torch = dir.path().join("site-packages/torch");
    std::fs::create_dir_all(&torch).unwrap();
    std::fs::copy(
        fixtures().join("site-packages/torch/__init__.py"),
        torch.join("__init__.py"),
    )
    .unwrap();
    for path in [dir.path().join("site-packages"), torch] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
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

struct Server {
    client: ServeClient,
    /// The serve's log, line by line as it comes.
    log: mpsc::Receiver<String>,
}

impl Setup {
    fn loads_file(&self) -> PathBuf {
        self.dir.path().join("loads")
    }

    /// A serve whose zygote finds the fixtures (`model`, and with `device` the fake torch).
    fn start(&self, device: bool) -> Server {
        let mut command = self.how.serve_command(&self.dir.path().join("lfm"));
        let mut path = self.dir.path().to_string_lossy().into_owned();
        if device {
            path = format!("{}:{path}", self.dir.path().join("site-packages").display());
        }
        command
            .args(["--no-history", "--cache-dir"])
            .arg(self.dir.path().join("cache"))
            .env("PYTHONPATH", path)
            .env("MODEL_LOADS", self.loads_file())
            .current_dir(self.dir.path())
            .stderr(Stdio::piped());
        let mut client = ServeClient::spawn(&mut command);
        let stderr = BufReader::new(client.child.stderr.take().unwrap());
        let (sender, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                eprintln!("serve: {line}");
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Server { client, log }
    }

    fn loads(&self) -> usize {
        std::fs::read_to_string(self.loads_file())
            .map(|text| text.lines().count())
            .unwrap_or(0)
    }
}

impl Server {
    fn ask(&mut self, request: &Value) -> Value {
        self.client.ask(request)
    }

    /// Wait (at most 30 s) for a log line containing `text`.
    fn wait_for_log(&self, text: &str) -> String {
        loop {
            match self.log.recv_timeout(Duration::from_secs(30)) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) => continue,
                Err(_) => panic!("the serve never logged {text:?}"),
            }
        }
    }

    fn end(self) {
        self.client.end();
    }
}

fn call(id: &str, function: &str, args: Value, context: &str, limits: Value) -> Value {
    json!({"id": id, "function": format!("model.py:{function}"), "import_module": true,
           "args": args, "limits": limits, "context": context})
}

fn peak_mib(reply: &Value) -> f64 {
    reply["report"]["memory"]["peak_bytes"].as_f64().unwrap() / MIB
}

fn cpu(reply: &Value) -> f64 {
    reply["report"]["cpu_time"]["total"].as_f64().unwrap()
}

fn context_of(reply: &Value) -> &Value {
    &reply["report"]["function"]["context"]
}

#[test]
fn the_first_call_pays_the_load_later_calls_share_it_and_pay_nothing() {
    for setup in setups() {
        let mut server = setup.start(false);
        let first = server.ask(&call("first", "use", json!([]), CONTEXT, json!({})));
        assert_eq!(first["result"], 1, "{}: {first}", setup.name);
        assert_eq!(context_of(&first)["loaded"], "call", "{}", setup.name);
        assert!(context_of(&first)["seconds"].as_f64().unwrap() >= 0.3);
        assert!(
            peak_mib(&first) >= 150.0 && cpu(&first) >= 0.3,
            "{}: the first call ran the initialiser and must show it: {:.0} MiB, {:.2} s",
            setup.name,
            peak_mib(&first),
            cpu(&first)
        );
        server.wait_for_log("the zygote loaded context model:load");
        // Sliced (no import_module) as well as imported: the same module, filled.
        let mut sliced = call("second", "use", json!([]), CONTEXT, json!({}));
        sliced["import_module"] = json!(false);
        let second = server.ask(&sliced);
        assert_eq!(second["result"], 1, "{}: {second}", setup.name);
        assert_eq!(
            context_of(&second),
            &json!({"name": CONTEXT, "loaded": "zygote"})
        );
        assert!(
            peak_mib(&second) < 30.0 && cpu(&second) < 0.2,
            "{}: a call forked with the context is charged for it: {:.0} MiB, {:.2} s",
            setup.name,
            peak_mib(&second),
            cpu(&second)
        );
        server.end();
        assert_eq!(
            setup.loads(),
            2,
            "{}: the first call's and the zygote's",
            setup.name
        );
    }
}

#[test]
fn a_call_over_its_memory_fails_alone_and_its_writes_stay_its_own() {
    for setup in setups() {
        let mut server = setup.start(false);
        server.ask(&call("first", "use", json!([]), CONTEXT, json!({})));
        server.wait_for_log("the zygote loaded context model:load");
        let wrote = server.ask(&call("write", "overwrite", json!([]), CONTEXT, json!({})));
        assert_eq!(wrote["result"], 99, "{}: {wrote}", setup.name);
        let over = server.ask(&call(
            "over",
            "grow",
            json!([300]),
            CONTEXT,
            json!({"memory": "100M"}),
        ));
        assert_eq!(over["ok"], false, "{}: {over}", setup.name);
        assert!(
            over["report"]["limits_exceeded"].get("memory").is_some(),
            "{}: {over}",
            setup.name
        );
        let after = server.ask(&call("after", "use", json!([]), CONTEXT, json!({})));
        assert_eq!(
            after["result"], 1,
            "{}: another call's write leaked",
            setup.name
        );
        assert_eq!(context_of(&after)["loaded"], "zygote", "{}", setup.name);
        server.end();
        assert_eq!(setup.loads(), 2, "{}", setup.name);
    }
}

#[test]
fn a_failing_initialiser_fails_its_calls_with_its_traceback_and_the_zygote_stays_clean() {
    let setup = setups().pop().unwrap();
    let mut server = setup.start(false);
    for id in ["broken-1", "broken-2"] {
        let reply = server.ask(&call(id, "use", json!([]), "model:broken", json!({})));
        assert_eq!(reply["ok"], false, "{reply}");
        let traceback = reply["error"]["traceback"].as_str().unwrap();
        assert!(traceback.contains("no model here"), "{traceback}");
        assert_eq!(
            context_of(&reply)["loaded"],
            "call",
            "the call ran it: {reply}"
        );
        if id == "broken-1" {
            server.wait_for_log("context model:broken failed in the zygote");
        }
    }
    let fine = server.ask(&call("fine", "use", json!([]), CONTEXT, json!({})));
    assert_eq!(fine["result"], 1, "{fine}");
    server.end();
}

#[test]
fn a_context_that_initialises_a_gpu_driver_is_never_kept_in_a_zygote() {
    let setup = setups().pop().unwrap();
    let mut server = setup.start(true);
    let context = "model:with_device";
    let first = server.ask(&call("first", "value", json!([]), context, json!({})));
    assert_eq!(first["result"], true, "{first}");
    server.wait_for_log("context model:with_device initialised a GPU driver in the zygote");
    for id in ["second", "third"] {
        let reply = server.ask(&call(id, "value", json!([]), context, json!({})));
        assert_eq!(reply["result"], true, "{reply}");
        let used = context_of(&reply);
        assert_eq!(used["loaded"], "call", "{reply}");
        assert!(
            used["why"].as_str().unwrap().contains("GPU driver"),
            "{reply}"
        );
    }
    server.end();
}

#[test]
fn a_module_that_initialises_a_gpu_driver_is_not_learned_again_and_reports_say_so() {
    let setup = setups().pop().unwrap();
    let mut server = setup.start(true);
    let request = json!({"id": "1", "function": "uses_device.py:run", "import_module": true});
    let first = server.ask(&request);
    assert_eq!(first["result"], true, "{first}");
    server.wait_for_log("importing torch initialised a GPU driver in the zygote");
    for id in ["2", "3"] {
        let mut again = request.clone();
        again["id"] = json!(id);
        let reply = server.ask(&again);
        assert_eq!(reply["result"], true, "{reply}");
        let notes = reply["report"]["notes"].to_string();
        assert!(notes.contains("the call imported torch itself"), "{reply}");
    }
    server.end();
}

/// docs/serve.md "Contexts": the example's `report.function`, as a real second call has it.
#[test]
fn the_documented_context_example_is_what_a_serve_replies() {
    let (request, documented) = common::serve::documented_example("## Contexts");
    let setup = setups().pop().unwrap();
    let mut server = setup.start(false);
    let mut first = request.clone();
    first["id"] = json!(1);
    server.ask(&first);
    server.wait_for_log("the zygote loaded context model:load");
    let second = server.ask(&request);
    assert_eq!(second["report"]["function"], documented, "{second}");
    server.end();
}

#[test]
fn a_context_not_named_module_colon_qualname_is_malformed_and_says_so() {
    let setup = setups().pop().unwrap();
    let mut server = setup.start(false);
    let reply = server.ask(&call("bad", "use", json!([]), "load", json!({})));
    assert_eq!(reply["error"]["reason"], "malformed", "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("'module:qualname'") && message.contains("\"load\""),
        "{message}"
    );
    server.end();
}
