//! The serve's zygotes: several, so that the forks (and the exits) of calls' big address
//! spaces run on several cores at once; one zygote forks every call in turn otherwise.
//!
//! Each is started alike (same interpreter, preloads and functions) and all at once, so a
//! serve of N zygotes is ready as soon as one of one would be on N free cores. A call is
//! forked by the zygote with the fewest calls and spares on it; what is sent to "the zygote"
//! (learning, contexts) goes to every one through [`Zygotes::broadcast`]. A zygote
//! that dies or is shed leaves its place empty; [`Zygotes::start_missing`] fills it.

use std::os::fd::RawFd;

use anyhow::Result;

use super::zygote::{Event, Zygote, ZygoteConfig};

pub struct Zygotes {
    members: Vec<Option<Zygote>>,
}

impl Zygotes {
    /// Start `count` zygotes (at least one) and wait until every one is ready.
    pub fn start(config: &ZygoteConfig, count: usize) -> Result<Zygotes> {
        let members = Zygote::start_many(config, count.max(1))?;
        Ok(Zygotes {
            members: members.into_iter().map(Some).collect(),
        })
    }

    pub fn get(&self, at: usize) -> Option<&Zygote> {
        self.members.get(at).and_then(Option::as_ref)
    }

    /// The zygotes that run now, with their places.
    pub fn alive(&self) -> impl Iterator<Item = (usize, &Zygote)> {
        self.members
            .iter()
            .enumerate()
            .filter_map(|(at, member)| member.as_ref().map(|z| (at, z)))
    }

    pub fn any_missing(&self) -> bool {
        self.members.iter().any(Option::is_none)
    }

    /// Start a zygote in every empty place; the number started. One that fails is reported
    /// and left empty (the next call tries again).
    pub fn start_missing(&mut self, config: &ZygoteConfig) -> u64 {
        let missing = self.members.iter().filter(|m| m.is_none()).count();
        if missing == 0 {
            return 0;
        }
        match Zygote::start_many(config, missing) {
            Ok(started) => {
                let mut started = started.into_iter();
                for member in self.members.iter_mut().filter(|m| m.is_none()) {
                    *member = started.next();
                }
                missing as u64
            }
            Err(error) => {
                eprintln!("lfm serve: restarting the zygote failed: {error:#}");
                0
            }
        }
    }

    /// The live zygote with the least `load` (ties: the first).
    pub fn least_loaded(&self, load: impl Fn(usize) -> usize) -> Option<usize> {
        self.alive().map(|(at, _)| at).min_by_key(|&at| load(at))
    }

    /// The descriptors to poll: every live zygote's control socket.
    pub fn fds(&self) -> Vec<RawFd> {
        self.alive().map(|(_, zygote)| zygote.fd()).collect()
    }

    pub fn pids(&self) -> Vec<i32> {
        self.alive().map(|(_, zygote)| zygote.pid).collect()
    }

    /// Every message waiting now from every zygote, with the place it came from.
    pub fn events(&mut self) -> Vec<(usize, Event)> {
        let mut events = Vec::new();
        for (at, member) in self.members.iter_mut().enumerate() {
            if let Some(zygote) = member {
                events.extend(zygote.events().into_iter().map(|event| (at, event)));
            }
        }
        events
    }

    /// Send one message to every live zygote: what one must know, all must (each forks calls
    /// that expect it). The number it reached; an error names the first that failed, after
    /// every other was tried.
    pub fn broadcast(&self, message: &serde_json::Value) -> Result<usize> {
        let mut reached = 0;
        let mut failed = None;
        for (_, zygote) in self.alive() {
            match zygote.send_message(message) {
                Ok(()) => reached += 1,
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(reached),
        }
    }

    /// Modules calls imported, to every zygote ([`super::zygote::learn_messages`]): the
    /// number of `learned` answers to expect.
    pub fn learn(&self, modules: &[(String, Option<String>)]) -> Result<usize> {
        let mut answers = 0;
        for message in super::zygote::learn_messages(modules) {
            answers += self
                .broadcast(&message)
                .map_err(|e| e.context("sending modules to learn to the zygotes"))?;
        }
        Ok(answers)
    }

    /// The zygote at `at` died: it is reaped and its place left empty.
    pub fn remove_dead(&mut self, at: usize) {
        if let Some(zygote) = self.members.get_mut(at).and_then(Option::take) {
            zygote.reap();
        }
    }

    /// Stop every zygote (the serve ends, or they are shed); their places stay, empty.
    pub fn stop_all(&mut self) {
        for member in &mut self.members {
            if let Some(zygote) = member.take() {
                zygote.stop();
            }
        }
    }
}
