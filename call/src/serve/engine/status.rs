//! The status request (`{"id": 1, "status": true}`, docs/serve.md "Status"): what the serve
//! holds and runs now, and what its zygote preloaded and learned, without running anything.

use serde::{Deserialize, Serialize};

use super::admission::resident_bytes;
use super::{Message, Reply, Server};
use lfm_sizing::admission::Allocation;

/// The `status` of a status reply.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Status {
    pub running: usize,
    pub queued: usize,
    pub slots: usize,
    /// The node's budget, and what the running calls hold of it.
    pub node_memory_bytes: u64,
    pub node_cores: f64,
    pub held_memory_bytes: u64,
    pub held_cores: f64,
    /// What the serve and its zygote hold resident: no call is admitted against it.
    pub serve_memory_bytes: u64,
    /// None between a zygote's end and the next call, which starts a fresh one.
    pub zygote: Option<ZygoteStatus>,
    /// Zygotes started again after one died.
    pub restarts: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ZygoteStatus {
    pub pid: i32,
    /// Its resident size now (None when /proc no longer has it).
    pub rss_bytes: Option<u64>,
    /// The `--preload` modules, and the top-level packages it imported because calls used them.
    pub preloaded: Vec<String>,
    pub learned: Vec<String>,
    /// Whether it still learns (on, and under `--learn-max`).
    pub learning: bool,
}

impl Server {
    /// The reply to a status request of `client`.
    pub fn status(&self, client: u64, id: serde_json::Value) -> Reply {
        let held = Allocation::sum(
            self.running
                .values()
                .map(|r| super::admission::allocation(&r.allocated)),
        );
        // The first live zygote: every one preloaded and learned the same.
        let zygote = self.zygotes.alive().next().map(|(_, zygote)| ZygoteStatus {
            pid: zygote.pid,
            rss_bytes: resident_bytes(zygote.pid),
            preloaded: self.options.preloaded.clone(),
            learned: self.learner.packages.iter().cloned().collect(),
            learning: self.learner.active(),
        });
        let status = Status {
            running: self.running.len(),
            queued: self.admission.queue.len(),
            slots: self.options.slots,
            node_memory_bytes: self.options.node.memory_bytes,
            node_cores: self.options.node.cores,
            held_memory_bytes: held.memory_bytes,
            held_cores: held.cores,
            serve_memory_bytes: self.serve_resident_bytes(),
            zygote,
            restarts: self.restarts,
        };
        let mut message = Message::status(id);
        message.status = Some(Box::new(status));
        Reply {
            client,
            message: Box::new(message),
        }
    }
}
