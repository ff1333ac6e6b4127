//! `lfm serve` without its command line: start the serve engine ([`engine`]) on a zygote of
//! the chosen interpreter, take request lines from a transport, parse them (the typed protocol),
//! and deliver one reply per accepted line.

pub mod engine;
mod transport;

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use lfm_monitor::backend::BackendChoice;
use lfm_monitor::gpu::GpuPolicy;
use lfm_sizing::admission::NodeBudget;

use crate::runner::request::Target;
use engine::zygote::ZygoteConfig;
use engine::{Server, ServerOptions};

use crate::error::{CallError, Result};
use crate::interpreter::Interpreter;
use crate::protocol::Asked;
use crate::target::Targets;
use transport::{Clients, Input};

/// Everything a serve is started with (docs/serve.md).
pub struct ServeConfig {
    pub interpreter: Interpreter,
    /// Targets the zygote loads once at start, called by name.
    pub functions: Vec<String>,
    pub preload: Vec<String>,
    pub cores_per_slot: u32,
    pub slots: usize,
    /// How many zygotes fork the calls (0: one per 4 slots, no more than the node's cores).
    pub zygotes: usize,
    /// What the node has for calls: they start when their allocations fit in it.
    pub node: NodeBudget,
    pub gpus_per_slot: u64,
    pub gpu: GpuPolicy,
    pub backend: BackendChoice,
    /// None: calls are not recorded (and `auto` is refused).
    pub history: Option<PathBuf>,
    /// lfm's cache: the runner, and this serve's working directory.
    pub cache: PathBuf,
    /// Where the functions' analyses are kept (`--cache-dir`; none: the analyzer's default).
    pub analysis_cache: Option<PathBuf>,
    /// None: stdin and stdout.
    pub socket: Option<PathBuf>,
    pub grace: Duration,
    pub idle: Option<Duration>,
    /// The zygote's budget for what it learns from calls (none: it learns nothing).
    pub learn_budget: Option<u64>,
}

/// Serve until stdin closes, a signal arrives, or the socket was idle; the working directory
/// is removed in every case.
pub fn serve(config: ServeConfig) -> Result<()> {
    // A serve killed with SIGKILL left its directory: the next one removes it.
    crate::files::remove_dead_owners(&config.cache, "serve-");
    let work_dir = config.cache.join(format!("serve-{}", std::process::id()));
    std::fs::create_dir_all(&work_dir)
        .map_err(|e| CallError::failed(format!("creating {}: {e}", work_dir.display())))?;
    let mut targets = Targets::new(config.interpreter.clone(), config.analysis_cache.clone());
    let served = start(&config, &mut targets, &work_dir)
        .and_then(|server| run_loop(server, targets, &config));
    let _ = std::fs::remove_dir_all(&work_dir);
    served
}

fn start(
    config: &ServeConfig,
    targets: &mut Targets,
    work_dir: &std::path::Path,
) -> Result<Server> {
    let runner = crate::runner::install(&config.cache).map_err(|e| CallError::failed_chain(&e))?;
    let mut functions = serde_json::Map::new();
    for function in &config.functions {
        let target: Target = targets.register(function)?;
        let target = serde_json::to_value(target).map_err(CallError::failed)?;
        functions.insert(function.clone(), target);
    }
    let interpreter = targets.interpreter();
    let zygote = ZygoteConfig {
        interpreter: interpreter.argv.clone(),
        runner,
        config: serde_json::json!({
            "preload": config.preload,
            // Preloaded modules are found where the calls' local modules are.
            "sys_path": interpreter.search_path(),
            "functions": functions,
            "cores_per_slot": config.cores_per_slot,
        }),
        work_dir: work_dir.to_path_buf(),
    };
    Server::start(ServerOptions {
        zygote,
        backend: config.backend,
        slots: config.slots,
        zygotes: zygote_count(config.zygotes, config.slots, config.node.cores),
        node: config.node,
        preloaded: config.preload.clone(),
        history: config.history.clone(),
        gpus_per_slot: config.gpus_per_slot,
        gpu: config.gpu.clone(),
        learn_budget: config.learn_budget,
    })
    .map_err(|e| CallError::failed_chain(&e))
}

/// The zygotes a serve starts: as asked, else one per 4 slots (a fork of a big address space
/// takes a core for milliseconds; one zygote forking every call in turn caps the serve's rate
/// whatever the node), never more than the node has cores or the serve has slots.
fn zygote_count(asked: usize, slots: usize, cores: f64) -> usize {
    if asked > 0 {
        return asked;
    }
    let cores = (cores.floor() as usize).max(1);
    slots.div_ceil(4).min(cores).clamp(1, slots.max(1))
}

/// The loop's own state besides the engine's.
struct Session {
    clients: Clients,
    /// stdin closed: stop once nothing is running.
    ending: bool,
    idle_since: Instant,
    /// Idle: the socket is unlinked, and the serve lingers a second for late clients.
    draining: bool,
}

fn run_loop(mut server: Server, mut targets: Targets, config: &ServeConfig) -> Result<()> {
    let (wake_read, wake_write) = transport::wake_pipe().map_err(CallError::failed)?;
    let terminated = on_signals(&wake_write);
    let (sender, inputs) = mpsc::channel();
    match &config.socket {
        Some(path) => transport::listen(path, sender, wake_write),
        None => transport::read_stdin(sender, wake_write),
    }
    .map_err(|e| CallError::failed_chain(&e))?;
    let mut session = Session {
        clients: Clients::new(),
        ending: false,
        idle_since: Instant::now(),
        draining: false,
    };
    loop {
        wait(&server, &wake_read);
        for input in inputs.try_iter() {
            take(input, &mut server, &mut targets, &mut session);
        }
        transport::deliver(server.step(), &mut session.clients);
        // After the replies are out: the finished calls' history and cleanup, and the next
        // call's child set up between calls.
        server.after_delivery(!session.ending);
        if terminated.load(Ordering::SeqCst) || (session.ending && !server.busy()) {
            break;
        }
        if let Some(idle) = config.idle {
            let quiet = session.clients.is_empty() && !server.busy();
            if idle_over(&mut session, idle, quiet, config) {
                break;
            }
        }
    }
    transport::deliver(server.shutdown(config.grace), &mut session.clients);
    // A draining server already unlinked its socket: the path may be a newer server's now.
    if let Some(path) = config.socket.as_ref().filter(|_| !session.draining) {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// SIGTERM and SIGINT wake the loop and end it.
fn on_signals(wake_write: &OwnedFd) -> Arc<AtomicBool> {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let _ =
            signal_hook::low_level::pipe::register(signal, wake_write.try_clone().expect("dup"));
    }
    let terminated = Arc::new(AtomicBool::new(false));
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let _ = signal_hook::flag::register(signal, terminated.clone());
    }
    terminated
}

fn take(input: Input, server: &mut Server, targets: &mut Targets, session: &mut Session) {
    match input {
        Input::Line(client, line) => submit(server, targets, client, &line),
        Input::Connected(client, stream) => {
            session.clients.insert(client, stream);
        }
        Input::Gone(client) => {
            session.clients.remove(&client);
            server.abandon_client(client);
        }
        Input::StdinClosed => session.ending = true,
    }
}

/// Idle means nobody connected and nothing running for `idle`. Then the socket is unlinked
/// first (new clients start a fresh server) and the server lingers one more idle second, so
/// that a client which connected just before is accepted and served rather than dropped.
fn idle_over(session: &mut Session, idle: Duration, quiet: bool, config: &ServeConfig) -> bool {
    if !quiet {
        session.idle_since = Instant::now();
        return false;
    }
    let waited = session.idle_since.elapsed();
    if session.draining {
        return waited >= idle + Duration::from_secs(1);
    }
    if waited >= idle {
        if let Some(path) = &config.socket {
            let _ = std::fs::remove_file(path);
        }
        session.draining = true;
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
    match crate::protocol::parse(targets, client, line) {
        Ok(Asked::Call(spec)) => server.submit(*spec),
        Ok(Asked::Status(client, id)) => server.push_reply(server.status(client, id)),
        Err(reply) => server.push_reply(reply),
    }
}

#[cfg(test)]
mod tests {
    use super::zygote_count;

    #[test]
    fn one_zygote_per_four_slots_within_the_cores_unless_asked() {
        assert_eq!(zygote_count(0, 2, 2.0), 1);
        assert_eq!(zygote_count(0, 16, 16.0), 4);
        assert_eq!(zygote_count(0, 16, 2.0), 2, "no more than the node's cores");
        assert_eq!(zygote_count(0, 1, 0.5), 1, "at least one");
        assert_eq!(zygote_count(3, 2, 1.0), 3, "as asked");
    }
}
