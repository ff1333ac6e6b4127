//! The zygote process of `lfm serve` and its control socket (python/lfm_runner/zygote.py
//! documents the messages).

use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::runner::request::{Request, Target};
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};

/// Where the zygote's interpreter comes from and what it loads before forking.
#[derive(Clone)]
pub struct ZygoteConfig {
    /// The interpreter command (`python3`, an env's python, a pack's `run python3`).
    pub interpreter: Vec<OsString>,
    pub runner: PathBuf,
    /// The config file the zygote reads (preload, functions, cores per slot; control_fd set
    /// here).
    pub config: serde_json::Value,
    pub work_dir: PathBuf,
}

/// A message from the zygote.
#[derive(Debug)]
pub enum Event {
    /// A child was forked: `done` is where it will say its call is over, `go` (a spare's)
    /// where its request is to be written.
    Started {
        id: u64,
        pid: i32,
        done: Option<OwnedFd>,
        go: Option<OwnedFd>,
    },
    Exited {
        id: Option<u64>,
        pid: i32,
        status: i32,
        user: f64,
        system: f64,
        maxrss: u64,
    },
    /// It imported modules calls had imported ([`Zygote::learn`]).
    Learned(Learned),
    /// It ran a context's initialiser, or could not ([`Zygote::load_context`]).
    Context(super::context::Answer),
    /// The zygote is gone (its socket closed).
    Died,
}

/// The zygote's answer to a `learn`: what it imported for the next calls, and its size after.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct Learned {
    pub imported: u64,
    pub failed: u64,
    pub skipped: u64,
    /// The top-level names of the modules it imported.
    pub packages: Vec<String>,
    /// Those of them from installed distributions (not the standard library).
    #[serde(default)]
    pub installed: Vec<String>,
    pub seconds: f64,
    /// Its resident size after the imports.
    pub rss: u64,
    /// A module whose import initialised a GPU driver: the zygote stopped there and must
    /// be replaced (context.rs).
    #[serde(default)]
    pub device: Option<super::context::DeviceSeen>,
}

pub struct Zygote {
    pub pid: i32,
    child: std::process::Child,
    control: OwnedFd,
}

/// The zygote's end of the control socket appears as this descriptor in it.
const CONTROL_FD: RawFd = 3;
const MAX_MESSAGE: usize = 1 << 16;

impl Zygote {
    /// Start the zygote and wait until it has imported everything (or failed to).
    pub fn start(config: &ZygoteConfig) -> Result<Zygote> {
        let mut one = Zygote::start_many(config, 1)?;
        Ok(one.remove(0))
    }

    /// Start `count` zygotes at once (each imports its preloads on its own core, where there
    /// are as many) and wait until every one is ready; one that fails stops the others.
    pub fn start_many(config: &ZygoteConfig, count: usize) -> Result<Vec<Zygote>> {
        let mut file_config = config.config.clone();
        file_config["control_fd"] = CONTROL_FD.into();
        let config_path = config.work_dir.join("zygote.json");
        std::fs::write(&config_path, file_config.to_string())
            .with_context(|| format!("writing {}", config_path.display()))?;
        let mut zygotes = Vec::with_capacity(count);
        for _ in 0..count {
            zygotes.push(Zygote::spawn_one(config, &config_path)?);
        }
        for at in 0..zygotes.len() {
            if let Err(error) = zygotes[at].wait_ready() {
                zygotes.into_iter().for_each(Zygote::reap);
                return Err(error);
            }
        }
        Ok(zygotes)
    }

    fn spawn_one(config: &ZygoteConfig, config_path: &Path) -> Result<Zygote> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .context("creating the zygote's control socket")?;
        let child = spawn(config, config_path, theirs.as_raw_fd())?;
        drop(theirs);
        Ok(Zygote {
            pid: child.id() as i32,
            child,
            control: ours,
        })
    }

    fn wait_ready(&mut self) -> Result<()> {
        // Preloading pandas and sklearn takes seconds; a broken preload fails at once.
        let deadline = Instant::now() + Duration::from_secs(600);
        while Instant::now() < deadline {
            if !self.readable(Duration::from_millis(100)) {
                if let Ok(Some(status)) = self.child.try_wait() {
                    return Err(exited_while_starting(Some(status)));
                }
                continue;
            }
            let message = self.receive()?.map(|(message, _)| message);
            match message.as_ref().and_then(|m| m["op"].as_str()) {
                Some("ready") => return Ok(()),
                Some("failed") => {
                    let error = &message
                        .as_ref()
                        .map(|m| m["error"].clone())
                        .unwrap_or_default();
                    bail!(
                        "the zygote could not preload: {}",
                        error["traceback"].as_str().unwrap_or("unknown error")
                    );
                }
                None => {
                    // The socket closed: the process is gone or about to be.
                    std::thread::sleep(Duration::from_millis(50));
                    return Err(exited_while_starting(self.child.try_wait().ok().flatten()));
                }
                Some(other) => bail!("unexpected message from the zygote: {other}"),
            }
        }
        bail!("the zygote did not become ready within 10 minutes")
    }

    pub fn fd(&self) -> RawFd {
        self.control.as_raw_fd()
    }

    fn readable(&self, timeout: Duration) -> bool {
        let mut poll = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut poll, 1, timeout.as_millis() as libc::c_int) > 0 }
    }

    /// One message and the descriptors it carried, or `None` when the zygote closed the
    /// socket.
    fn receive(&self) -> Result<Option<(serde_json::Value, Vec<OwnedFd>)>> {
        let mut buffer = vec![0u8; MAX_MESSAGE];
        let mut iov = [IoSliceMut::new(&mut buffer)];
        let mut space = nix::cmsg_space!([RawFd; 4]);
        let received = recvmsg::<()>(
            self.fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .context("reading from the zygote")?;
        let mut fds = Vec::new();
        for message in received.cmsgs().context("reading from the zygote")? {
            if let ControlMessageOwned::ScmRights(raw) = message {
                // SAFETY: descriptors the kernel just installed in this process for us.
                fds.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        let n = received.bytes;
        if n == 0 {
            return Ok(None);
        }
        let message = serde_json::from_slice(&buffer[..n]).context("a malformed zygote message")?;
        Ok(Some((message, fds)))
    }

    /// Every message waiting now, without blocking.
    pub fn events(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while self.readable(Duration::ZERO) {
            match self.receive() {
                Ok(Some((message, fds))) => events.extend(parse_event(&message, fds)),
                Ok(None) | Err(_) => {
                    events.push(Event::Died);
                    break;
                }
            }
        }
        events
    }

    /// Ask for a call: the zygote forks, the child joins the cgroups behind `join_fds` and
    /// sets `rlimits` (resource number, value) on itself. `target` (the request's) lets the
    /// zygote prepare what later calls of the same function can reuse.
    pub fn call_with_rlimits(
        &self,
        id: u64,
        request: &Path,
        target: &Target,
        dir: &Path,
        join_fds: &[RawFd],
        rlimits: &[(libc::__rlimit_resource_t, libc::rlim_t)],
    ) -> Result<()> {
        let message = serde_json::json!({
            "op": "call", "id": id, "request": request, "dir": dir, "rlimits": rlimits,
            "target": target,
        });
        self.send(&message, join_fds)
            .context("sending a call to the zygote")
    }

    /// Ask for a spare: a call's child, set up as [`Zygote::call_with_rlimits`] sets one up,
    /// that waits for its request on the pipe handed over with its `started` ([`go`]).
    pub fn spare(
        &self,
        id: u64,
        dir: &Path,
        join_fds: &[RawFd],
        rlimits: &[(libc::__rlimit_resource_t, libc::rlim_t)],
    ) -> Result<()> {
        let message = serde_json::json!({"op": "spare", "id": id, "dir": dir, "rlimits": rlimits});
        self.send(&message, join_fds)
            .context("asking the zygote for a spare")
    }

    /// A call of `target` started in a spare: the zygote prepares what later calls of the
    /// same function can reuse (its compiled slice).
    pub fn remember(&self, target: &Target) {
        if matches!(target, Target::Slice { .. }) {
            let message = serde_json::json!({"op": "remember", "target": target});
            let _ = self.send(&message, &[]);
        }
    }

    /// A message without descriptors (those every zygote gets: [`super::zygotes::Zygotes::broadcast`]).
    pub fn send_message(&self, message: &serde_json::Value) -> Result<()> {
        self.send(message, &[])
            .with_context(|| format!("sending {} to the zygote", message["op"]))
    }

    fn send(&self, message: &serde_json::Value, fds: &[RawFd]) -> Result<()> {
        let message = message.to_string();
        let iov = [IoSlice::new(message.as_bytes())];
        let rights = [ControlMessage::ScmRights(fds)];
        let control: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
        sendmsg::<()>(self.fd(), &iov, control, MsgFlags::empty(), None)?;
        Ok(())
    }

    /// Ask the zygote to leave, then make sure it has.
    pub fn stop(mut self) {
        let message = br#"{"op": "exit"}"#;
        let _ = nix::sys::socket::send(self.fd(), message, MsgFlags::empty());
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Reap the zygote after it died.
    pub fn reap(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Modules calls imported (name, file) as `learn` messages: the zygote imports those of the
/// standard library and installed distributions, and answers [`Event::Learned`] for each
/// message. A long list goes in several, each under the zygote's message size.
pub fn learn_messages(modules: &[(String, Option<String>)]) -> Vec<serde_json::Value> {
    let mut messages = Vec::new();
    let mut batch: Vec<&(String, Option<String>)> = Vec::new();
    let mut size = 0;
    for module in modules {
        let entry = module.0.len() + module.1.as_ref().map_or(4, |f| f.len()) + 8;
        if size + entry > MAX_MESSAGE / 2 && !batch.is_empty() {
            messages
                .push(serde_json::json!({"op": "learn", "modules": std::mem::take(&mut batch)}));
            size = 0;
        }
        batch.push(module);
        size += entry;
    }
    if !batch.is_empty() {
        messages.push(serde_json::json!({"op": "learn", "modules": batch}));
    }
    messages
}

/// Hand a spare its request through its go pipe (`go`, closed after): inline when the pipe
/// holds it whole, else by the path of `request_file`, written for it. The pipe is empty and
/// non-blocking here, so a write either fits or fails; never does the server wait on it.
/// The message that has a zygote run a context's initialiser (`module:qualname`) once, for
/// the calls forked after; it answers [`Event::Context`].
pub fn context_message(name: &str) -> serde_json::Value {
    serde_json::json!({"op": "context", "name": name})
}

pub fn go(go: OwnedFd, request: &Request, request_file: &Path) -> Result<()> {
    let inline = serde_json::json!({ "request": request }).to_string();
    let capacity = fcntl(go.as_raw_fd(), FcntlArg::F_GETPIPE_SZ).unwrap_or(4096) as usize;
    let handed = if inline.len() <= capacity {
        inline
    } else {
        std::fs::write(request_file, request.to_json())
            .with_context(|| format!("writing {}", request_file.display()))?;
        serde_json::json!({ "request_path": request_file }).to_string()
    };
    fcntl(go.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
        .context("handing a spare its request")?;
    let written =
        nix::unistd::write(&go, handed.as_bytes()).context("handing a spare its request")?;
    if written != handed.len() {
        bail!(
            "handing a spare its request: {written} of {} bytes went",
            handed.len()
        );
    }
    Ok(())
}

fn parse_event(message: &serde_json::Value, fds: Vec<OwnedFd>) -> Option<Event> {
    if message["op"] == "context" {
        return serde_json::from_value(message.clone())
            .ok()
            .map(Event::Context);
    }
    if message["op"] == "learned" {
        return serde_json::from_value(message.clone())
            .ok()
            .map(Event::Learned);
    }
    let pid = message["pid"].as_i64()? as i32;
    match message["op"].as_str()? {
        "started" => {
            let mut fds = fds.into_iter();
            Some(Event::Started {
                id: message["id"].as_u64()?,
                pid,
                done: fds.next(),
                go: fds.next(),
            })
        }
        "exited" => Some(Event::Exited {
            id: message["id"].as_u64(),
            pid,
            status: message["status"].as_i64()? as i32,
            user: message["user"].as_f64().unwrap_or(0.0),
            system: message["system"].as_f64().unwrap_or(0.0),
            maxrss: message["maxrss"].as_u64().unwrap_or(0),
        }),
        _ => None,
    }
}

fn spawn(config: &ZygoteConfig, config_path: &Path, control: RawFd) -> Result<std::process::Child> {
    let (program, rest) = config
        .interpreter
        .split_first()
        .context("no interpreter given")?;
    let mut command = std::process::Command::new(program);
    command
        .args(rest)
        .arg(&config.runner)
        .arg("zygote")
        .arg(config_path)
        .stdin(std::process::Stdio::null())
        // The zygote's own output (preload messages) must not mix with replies on stdout.
        .stdout(std::process::Stdio::from(stderr_copy()?))
        .current_dir(&config.work_dir);
    // SAFETY: between fork and exec only async-signal-safe calls (dup2, prctl).
    unsafe {
        command.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            // dup2 onto itself would keep close-on-exec: clear it instead.
            let result = if control == CONTROL_FD {
                libc::fcntl(control, libc::F_SETFD, 0)
            } else {
                libc::dup2(control, CONTROL_FD)
            };
            if result < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
        .spawn()
        .with_context(|| format!("starting the zygote with {}", program.to_string_lossy()))
}

fn stderr_copy() -> Result<OwnedFd> {
    use std::os::fd::AsFd;
    Ok(std::io::stderr().as_fd().try_clone_to_owned()?)
}

fn exited_while_starting(status: Option<std::process::ExitStatus>) -> anyhow::Error {
    match status {
        Some(status) if status.code() == Some(crate::runner::EXIT_UNSUPPORTED_PYTHON) => {
            anyhow::anyhow!("this Python is older than lfm supports (3.8): see above")
        }
        Some(status) => {
            anyhow::anyhow!("the zygote exited while starting ({status}): see its stderr above")
        }
        None => anyhow::anyhow!("the zygote exited while starting: see its stderr above"),
    }
}
