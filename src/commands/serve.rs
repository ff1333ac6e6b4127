//! `lfm serve`: transports (stdin/stdout or a Unix socket) and request parsing around the
//! serve engine of lfm-monitor. Every accepted line gets exactly one reply line.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lfm_monitor::gpu::{GpuPolicy, ViolationPolicy};
use lfm_monitor::imports::StaticClosure;
use lfm_monitor::limits::{parse_duration, parse_positive, parse_size, LimitError};
use lfm_monitor::report::FunctionCall;
use lfm_monitor::serve::zygote::ZygoteConfig;
use lfm_monitor::serve::{Auto, CallSpec, Reply, Server, ServerOptions};
use lfm_monitor::sizing::history::default_path;
use lfm_monitor::sizing::{Strategy, DEFAULT_STRATEGY};
use lfm_monitor::Limits;

use crate::cli::{GpuViolationArg, ServeArgs};
use crate::commands::call::{self, Interpreter};
use crate::commands::run::backend_choice;

const EXIT_FAILED: i32 = 1;
const EXIT_USAGE: i32 = 2;
/// As `lfm run --max-retries`.
const DEFAULT_MAX_RETRIES: u32 = 3;

/// What the transport threads tell the main loop.
enum Input {
    Line(u64, String),
    /// A client connected: where its replies go.
    Connected(u64, Arc<Mutex<UnixStream>>),
    Gone(u64),
    /// stdin closed: serve what was asked, then stop.
    StdinClosed,
}

pub fn serve(args: ServeArgs) -> i32 {
    let durations = parse_duration("--grace", &args.grace).and_then(|grace| {
        let idle = args
            .idle_timeout
            .as_deref()
            .map(|idle| parse_duration("--idle-timeout", idle))
            .transpose()?;
        Ok((grace, idle))
    });
    let (grace, idle) = match durations {
        Ok((grace, idle)) => (
            Duration::from_secs_f64(grace),
            idle.map(Duration::from_secs_f64),
        ),
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_USAGE;
        }
    };
    let interpreter = match call::interpreter(&args.interpreter) {
        Ok(interpreter) => interpreter,
        Err((code, message)) => {
            eprintln!("error: {message}");
            return code;
        }
    };
    let mut targets = Targets::new(interpreter);
    let work_dir = match prepare_work_dir(&args) {
        Ok(dir) => dir,
        Err(error) => {
            eprintln!("error: {error:#}");
            return EXIT_FAILED;
        }
    };
    let code = match start(&args, &mut targets, &work_dir) {
        Ok(server) => run_loop(server, targets, &args, (grace, idle)),
        Err((code, message)) => {
            eprintln!("error: {message}");
            code
        }
    };
    let _ = std::fs::remove_dir_all(&work_dir);
    code
}

fn prepare_work_dir(args: &ServeArgs) -> anyhow::Result<PathBuf> {
    let cache = args
        .cache_dir
        .clone()
        .unwrap_or_else(lfm_monitor::runner::default_cache);
    let dir = cache.join(format!("serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn start(
    args: &ServeArgs,
    targets: &mut Targets,
    work_dir: &Path,
) -> Result<Server, call::Failure> {
    let cache = work_dir.parent().unwrap_or(work_dir).to_path_buf();
    let runner = lfm_monitor::runner::install(&cache).map_err(call::failed)?;
    let mut functions = serde_json::Map::new();
    for function in &args.functions {
        let (target, _) = targets.resolve(function, false)?;
        functions.insert(function.clone(), target);
        targets.registered.push(function.clone());
    }
    let zygote = ZygoteConfig {
        interpreter: targets.interpreter.argv.clone(),
        runner,
        config: serde_json::json!({
            "preload": args.preload,
            // Preloaded modules are found where the calls' local modules are.
            "sys_path": targets.interpreter.source_roots.iter().chain(&targets.interpreter.roots).collect::<Vec<_>>(),
            "functions": functions,
            "cores_per_slot": args.cores_per_slot,
        }),
        work_dir: work_dir.to_path_buf(),
    };
    let history = (!args.no_history).then(|| args.history.clone().unwrap_or_else(default_path));
    Server::start(ServerOptions {
        zygote,
        backend: backend_choice(args.backend),
        slots: args.slots as usize,
        preloaded: args.preload.clone(),
        history,
        gpus_per_slot: args.gpus_per_slot,
        gpu: GpuPolicy {
            wait: Duration::ZERO,
            violation: match args.gpu_violation {
                GpuViolationArg::Note => ViolationPolicy::Note,
                GpuViolationArg::Kill => ViolationPolicy::Kill,
            },
        },
    })
    .map_err(call::failed)
}

/// Targets as the runner loads them: registered ones by name, others located and sliced once.
struct Targets {
    interpreter: Interpreter,
    registered: Vec<String>,
    resolved: HashMap<(String, bool), Resolved>,
}

/// The runner's target, and for a sliced one the closure its imports are compared with.
type Resolved = (serde_json::Value, Option<Arc<StaticClosure>>);

impl Targets {
    fn new(interpreter: Interpreter) -> Targets {
        Targets {
            interpreter,
            registered: Vec::new(),
            resolved: HashMap::new(),
        }
    }

    fn resolve(&mut self, function: &str, import_module: bool) -> Result<Resolved, call::Failure> {
        let key = (function.to_string(), import_module);
        if !import_module && self.registered.iter().any(|r| r == function) {
            // Resolved when it was registered: its closure is kept.
            let closure = self.resolved.get(&key).and_then(|(_, c)| c.clone());
            let target = serde_json::json!({"mode": "registered", "name": function});
            return Ok((target, closure));
        }
        if let Some(resolved) = self.resolved.get(&key) {
            return Ok(resolved.clone());
        }
        let interpreter = &self.interpreter;
        let located = call::locate(function, &interpreter.source_roots, &interpreter.roots)?;
        let resolved = if import_module {
            (call::runner_target(&located, None), None)
        } else {
            let (slice, analysis) = call::sliced(&located, interpreter)?;
            let closure = call::static_closure(&analysis, &located, interpreter);
            (
                call::runner_target(&located, Some(&slice)),
                Some(Arc::new(closure)),
            )
        };
        self.resolved.insert(key, resolved.clone());
        Ok(resolved)
    }
}

fn run_loop(
    mut server: Server,
    mut targets: Targets,
    args: &ServeArgs,
    (grace, idle): (Duration, Option<Duration>),
) -> i32 {
    let (wake_read, wake_write) = match wake_pipe() {
        Ok(pipe) => pipe,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_FAILED;
        }
    };
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let _ =
            signal_hook::low_level::pipe::register(signal, wake_write.try_clone().expect("dup"));
    }
    let terminated = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let _ = signal_hook::flag::register(signal, terminated.clone());
    }
    let (sender, inputs) = mpsc::channel();
    let transport = match &args.socket {
        Some(path) => listen(path, sender, wake_write),
        None => read_stdin(sender, wake_write),
    };
    if let Err(error) = transport {
        eprintln!("error: {error:#}");
        return EXIT_FAILED;
    }
    let mut clients: HashMap<u64, Arc<Mutex<UnixStream>>> = HashMap::new();
    let mut ending = false;
    let mut idle_since = std::time::Instant::now();
    let mut draining = false;
    loop {
        wait(&server, &wake_read);
        for input in inputs.try_iter() {
            match input {
                Input::Line(client, line) => submit(&mut server, &mut targets, client, &line),
                Input::Connected(client, stream) => {
                    clients.insert(client, stream);
                }
                Input::Gone(client) => {
                    clients.remove(&client);
                    server.abandon_client(client);
                }
                Input::StdinClosed => ending = true,
            }
        }
        deliver(server.step(), &mut clients);
        // After the replies are out: the finished calls' history and cleanup, and the next
        // call's child set up between calls.
        server.after_delivery(!ending);
        if terminated.load(std::sync::atomic::Ordering::SeqCst) || (ending && !server.busy()) {
            break;
        }
        if let Some(idle) = idle {
            let quiet = clients.is_empty() && !server.busy();
            if idle_over(&mut idle_since, &mut draining, idle, quiet, args) {
                break;
            }
        }
    }
    deliver(server.shutdown(grace), &mut clients);
    // A draining server already unlinked its socket: the path may be a newer server's now.
    if let Some(path) = args.socket.as_ref().filter(|_| !draining) {
        let _ = std::fs::remove_file(path);
    }
    0
}

/// Idle means nobody connected and nothing running for `idle`. Then the socket is unlinked
/// first (new clients start a fresh server) and the server lingers one more idle second, so
/// that a client which connected just before is accepted and served rather than dropped.
fn idle_over(
    since: &mut std::time::Instant,
    draining: &mut bool,
    idle: Duration,
    quiet: bool,
    args: &ServeArgs,
) -> bool {
    if !quiet {
        *since = std::time::Instant::now();
        return false;
    }
    let waited = since.elapsed();
    if *draining {
        return waited >= idle + Duration::from_secs(1);
    }
    if waited >= idle {
        if let Some(path) = &args.socket {
            let _ = std::fs::remove_file(path);
        }
        *draining = true;
    }
    false
}

fn wait(server: &Server, wake: &OwnedFd) {
    let mut fds = vec![libc::pollfd {
        fd: wake.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    fds.extend(server.fds().into_iter().map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }));
    // Rounded up: rounded down, the last millisecond before a sample was spent polling with a
    // zero timeout (a busy loop: ~5 ms of CPU per 100 ms call).
    let timeout = server.timeout().as_micros().div_ceil(1000).min(1000) as libc::c_int;
    // SAFETY: valid pollfds for the length given.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
    if fds[0].revents != 0 {
        let mut buffer = [0u8; 256];
        // SAFETY: reading into a local buffer from our own nonblocking pipe.
        unsafe { libc::read(wake.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
    }
}

fn submit(server: &mut Server, targets: &mut Targets, client: u64, line: &str) {
    if line.trim().is_empty() {
        return;
    }
    match parse_request(targets, client, line) {
        Ok(spec) => server.submit(spec),
        Err(reply) => server_reply_now(server, reply),
    }
}

fn server_reply_now(server: &mut Server, reply: Reply) {
    server.push_reply(reply);
}

/// A request line (docs/serve.md) into a call, or the error reply naming what is wrong.
fn parse_request(targets: &mut Targets, client: u64, line: &str) -> Result<CallSpec, Reply> {
    let request: serde_json::Value = serde_json::from_str(line).map_err(|e| {
        Reply::malformed(client, serde_json::Value::Null, &format!("not JSON: {e}"))
    })?;
    let id = request.get("id").cloned().unwrap_or_default();
    let bad = |message: String| Reply::malformed(client, id.clone(), &message);
    if !request.is_object() {
        return Err(bad("a request is a JSON object".into()));
    }
    let import_module = request["import_module"].as_bool().unwrap_or(false);
    let (target, function, closure) = match (&request["function"], &request["function_pickle"]) {
        (serde_json::Value::String(name), serde_json::Value::Null) => {
            let (target, closure) = targets
                .resolve(name, import_module)
                .map_err(|(_, m)| bad(m))?;
            let mode = target["mode"].as_str().unwrap_or("slice").to_string();
            (
                target,
                FunctionCall {
                    target: name.clone(),
                    mode,
                },
                closure,
            )
        }
        (serde_json::Value::Null, serde_json::Value::String(pickle)) => (
            serde_json::json!({"mode": "pickle", "pickle": pickle}),
            FunctionCall {
                target: request["name"]
                    .as_str()
                    .map_or("pickle".into(), |n| format!("pickle:{n}")),
                mode: "pickle".into(),
            },
            None,
        ),
        _ => {
            return Err(bad(
                "give \"function\" (a target) or \"function_pickle\" (base64)".into(),
            ))
        }
    };
    let args = match (
        &request["args_pickle"],
        &request["args"],
        &request["kwargs"],
    ) {
        (serde_json::Value::String(pickle), _, _) => serde_json::json!({"pickle": pickle}),
        (serde_json::Value::Null, positional, keywords) => {
            let positional = if positional.is_null() {
                serde_json::json!([])
            } else {
                positional.clone()
            };
            let keywords = if keywords.is_null() {
                serde_json::json!({})
            } else {
                keywords.clone()
            };
            if !positional.is_array() || !keywords.is_object() {
                return Err(bad(
                    "\"args\" must be a list and \"kwargs\" an object".into()
                ));
            }
            serde_json::json!({"json": [positional, keywords]})
        }
        _ => return Err(bad("\"args_pickle\" must be a base64 string".into())),
    };
    let limits = parse_limits(&request["limits"]).map_err(|e| bad(e.to_string()))?;
    let auto = parse_auto(&request).map_err(bad)?;
    let result_format = match request["result"].as_str().unwrap_or("json") {
        "json" => "json",
        "pickle" => "pickle",
        other => return Err(bad(format!("\"result\" is json or pickle, not {other:?}"))),
    };
    Ok(CallSpec {
        client,
        id,
        target,
        category: request["category"]
            .as_str()
            .map(str::to_string)
            .or_else(|| {
                Some(
                    function
                        .target
                        .rsplit(':')
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                )
            }),
        function,
        args,
        result_format: result_format.into(),
        limits,
        auto,
        closure,
    })
}

/// `"auto": true`, with optional `"strategy"` and `"max_retries"` (docs/serve.md).
fn parse_auto(request: &serde_json::Value) -> Result<Option<Auto>, String> {
    match &request["auto"] {
        serde_json::Value::Null | serde_json::Value::Bool(false) => return Ok(None),
        serde_json::Value::Bool(true) => {}
        other => return Err(format!("\"auto\" is true or false, not {other}")),
    }
    let strategy = match &request["strategy"] {
        serde_json::Value::Null => DEFAULT_STRATEGY,
        serde_json::Value::String(name) => {
            Strategy::parse(name).map_err(|e| format!("\"strategy\": {e}"))?
        }
        other => return Err(format!("\"strategy\" is a name, not {other}")),
    };
    let max_retries = match &request["max_retries"] {
        serde_json::Value::Null => DEFAULT_MAX_RETRIES,
        value => value
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("\"max_retries\" is a count, not {value}"))?,
    };
    Ok(Some(Auto::new(strategy, max_retries)))
}

/// `{"memory": "2G" | bytes, "cores": 1.5, "wall": "10m" | seconds, "processes": 64, "disk": "1G"}`.
fn parse_limits(value: &serde_json::Value) -> Result<Limits, LimitError> {
    let text = |key: &str| -> Option<String> {
        match &value[key] {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    Ok(Limits {
        memory_bytes: text("memory")
            .map(|v| parse_size("limits.memory", &v))
            .transpose()?,
        cores: text("cores")
            .map(|v| parse_positive("limits.cores", &v))
            .transpose()?,
        wall_seconds: text("wall")
            .map(|v| parse_duration("limits.wall", &v))
            .transpose()?,
        disk_bytes: text("disk")
            .map(|v| parse_size("limits.disk", &v))
            .transpose()?,
        processes: text("processes")
            .map(|v| parse_positive("limits.processes", &v).map(|n| n.ceil() as u64))
            .transpose()?,
        gpus: text("gpus")
            .map(|v| parse_positive("limits.gpus", &v).map(|n| n.ceil() as u64))
            .transpose()?,
        gpu_memory_bytes: text("gpu_memory")
            .map(|v| parse_size("limits.gpu_memory", &v))
            .transpose()?,
        ..Limits::default()
    })
}

fn deliver(replies: Vec<Reply>, clients: &mut HashMap<u64, Arc<Mutex<UnixStream>>>) {
    for reply in replies {
        let mut line = reply.message.to_string();
        line.push('\n');
        if reply.client == 0 {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(line.as_bytes());
            let _ = out.flush();
        } else if let Some(stream) = clients.get(&reply.client) {
            let mut stream = stream.lock().unwrap_or_else(|p| p.into_inner());
            let _ = stream.write_all(line.as_bytes());
        }
    }
}

fn wake_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(std::io::Error::from)?;
    Ok((read, write))
}

fn wake(fd: &OwnedFd) {
    // SAFETY: one byte from a local to our own nonblocking pipe; a full pipe already wakes.
    unsafe { libc::write(fd.as_raw_fd(), b"x".as_ptr().cast(), 1) };
}

fn read_stdin(sender: mpsc::Sender<Input>, wake_write: OwnedFd) -> anyhow::Result<()> {
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if sender.send(Input::Line(0, line)).is_err() {
                return;
            }
            wake(&wake_write);
        }
        let _ = sender.send(Input::StdinClosed);
        wake(&wake_write);
    });
    Ok(())
}

/// A 0600 socket in a 0700 directory; connections from other users are refused.
fn listen(path: &Path, sender: mpsc::Sender<Input>, wake_write: OwnedFd) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| anyhow::anyhow!("making {} private (0700): {e}", dir.display()))?;
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            anyhow::bail!("{} is in use by a running server", path.display());
        }
        std::fs::remove_file(path)?;
    }
    // Made 0600 by the umask at bind, not chmod-ed after: a client (or a test) that sees the
    // socket appear never sees it with wider permissions.
    // SAFETY: umask only swaps the process's file mode mask; it is restored at once.
    let previous = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    unsafe { libc::umask(previous) };
    let listener = bound.map_err(|e| anyhow::anyhow!("binding {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let wake_write = Arc::new(wake_write);
    std::thread::spawn(move || {
        let mut next_client = 1u64;
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            if !same_user(&stream) {
                continue;
            }
            let client = next_client;
            next_client += 1;
            let Ok(writer) = stream.try_clone() else {
                continue;
            };
            let _ = sender.send(Input::Connected(client, Arc::new(Mutex::new(writer))));
            let sender = sender.clone();
            let wake_write = wake_write.clone();
            std::thread::spawn(move || {
                let reader = std::io::BufReader::new(stream);
                for line in reader.lines() {
                    let Ok(line) = line else { break };
                    if sender.send(Input::Line(client, line)).is_err() {
                        return;
                    }
                    wake(&wake_write);
                }
                let _ = sender.send(Input::Gone(client));
                wake(&wake_write);
            });
        }
    });
    Ok(())
}

fn same_user(stream: &UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    match getsockopt(stream, PeerCredentials) {
        // SAFETY: getuid has no preconditions.
        Ok(credentials) => credentials.uid() == unsafe { libc::getuid() },
        Err(_) => false,
    }
}
