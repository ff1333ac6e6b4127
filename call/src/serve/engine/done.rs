//! A call's end as its child tells it: one message on the `done` socket the zygote handed
//! over when it forked the child (python/lfm_runner/zygote.py), read here without the zygote
//! in between. It carries the child's CPU time and, when they fit, the outcome and the value
//! that would otherwise be in the call's files.

use std::os::fd::{AsRawFd, OwnedFd};

use base64::Engine;

/// What a child said as its call ended.
#[derive(Debug, Default)]
pub(super) struct Delivered {
    pub user: f64,
    pub system: f64,
    /// The outcome (`outcome.json`'s content) when it came in the message.
    pub outcome: Option<serde_json::Value>,
    /// The value's bytes (the `result` file's) when they came in the message.
    pub result: Option<Vec<u8>>,
    /// The child waits for a next call on its done socket (a reused process, reuse.rs).
    pub reuse: bool,
}

pub(super) enum Heard {
    /// Nothing yet.
    Nothing,
    Done(Delivered),
    /// The child is gone without a message (it died), or sent one that does not parse: its
    /// exit says how the call ended.
    Closed,
}

/// The child's done message sits below this size (`MAX_DONE` in zygote.py).
const MAX_DONE: usize = 1 << 16;

/// Read the done socket without waiting.
pub(super) fn hear(done: &OwnedFd) -> Heard {
    // Most reads find nothing: one buffer per thread, not one per read.
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; MAX_DONE]);
    }
    BUFFER.with_borrow_mut(|buffer| hear_into(done, buffer))
}

fn hear_into(done: &OwnedFd, buffer: &mut [u8]) -> Heard {
    // SAFETY: a valid descriptor and a buffer of the length given.
    let n = unsafe {
        libc::recv(
            done.as_raw_fd(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let error = std::io::Error::last_os_error();
        return match error.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Heard::Nothing,
            _ => Heard::Closed,
        };
    }
    match parse(&buffer[..n as usize]) {
        Some(delivered) => Heard::Done(delivered),
        None => Heard::Closed,
    }
}

fn parse(bytes: &[u8]) -> Option<Delivered> {
    if bytes.is_empty() {
        return None;
    }
    let message: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let result = match message["result"].as_str() {
        Some(text) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .ok()?,
        ),
        None => None,
    };
    Some(Delivered {
        user: message["user"].as_f64().unwrap_or(0.0),
        system: message["system"].as_f64().unwrap_or(0.0),
        outcome: message.get("outcome").filter(|o| o.is_object()).cloned(),
        result,
        reuse: message["reuse"].as_bool().unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (OwnedFd, OwnedFd) {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::empty(),
        )
        .unwrap()
    }

    fn send(fd: &OwnedFd, bytes: &[u8]) {
        // SAFETY: a valid descriptor and buffer.
        let n = unsafe { libc::send(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), 0) };
        assert_eq!(n as usize, bytes.len());
    }

    #[test]
    fn a_done_message_carries_cpu_outcome_and_value() {
        let (ours, theirs) = pair();
        assert!(matches!(hear(&ours), Heard::Nothing));
        send(
            &theirs,
            br#"{"user": 0.5, "system": 0.25, "outcome": {"ok": true}, "result": "WzFd"}"#,
        );
        let Heard::Done(done) = hear(&ours) else {
            panic!("no done message heard");
        };
        assert_eq!((done.user, done.system), (0.5, 0.25));
        assert_eq!(done.outcome.unwrap()["ok"], true);
        assert_eq!(done.result.unwrap(), b"[1]");
    }

    #[test]
    fn cpu_alone_leaves_outcome_and_value_to_the_files() {
        let (ours, theirs) = pair();
        send(&theirs, br#"{"user": 1.0, "system": 0.0}"#);
        let Heard::Done(done) = hear(&ours) else {
            panic!("no done message heard");
        };
        assert!(done.outcome.is_none() && done.result.is_none());
    }

    #[test]
    fn a_child_gone_or_garbled_is_closed() {
        let (ours, theirs) = pair();
        send(&theirs, b"{not json");
        assert!(matches!(hear(&ours), Heard::Closed));
        drop(theirs);
        assert!(matches!(hear(&ours), Heard::Closed));
    }
}
