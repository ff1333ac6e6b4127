//! How requests reach a serve and replies leave it: stdin and stdout, or a Unix socket that
//! only the same user may connect to. Each transport thread hands lines to the serve loop and
//! wakes it through a pipe.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use crate::protocol::Reply;

/// What the transport threads tell the main loop.
pub(super) enum Input {
    Line(u64, String),
    /// A client connected: where its replies go.
    Connected(u64, Arc<Mutex<UnixStream>>),
    Gone(u64),
    /// stdin closed: serve what was asked, then stop.
    StdinClosed,
}

pub(super) type Clients = HashMap<u64, Arc<Mutex<UnixStream>>>;

pub(super) fn deliver(replies: Vec<Reply>, clients: &mut Clients) {
    for reply in replies {
        let mut line = reply.message.to_line();
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

pub(super) fn wake_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(std::io::Error::from)?;
    Ok((read, write))
}

fn wake(fd: &OwnedFd) {
    // SAFETY: one byte from a local to our own nonblocking pipe; a full pipe already wakes.
    unsafe { libc::write(fd.as_raw_fd(), b"x".as_ptr().cast(), 1) };
}

pub(super) fn read_stdin(sender: mpsc::Sender<Input>, wake_write: OwnedFd) -> anyhow::Result<()> {
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
pub(super) fn listen(
    path: &Path,
    sender: mpsc::Sender<Input>,
    wake_write: OwnedFd,
) -> anyhow::Result<()> {
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
