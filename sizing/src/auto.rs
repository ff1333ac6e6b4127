//! `--auto`: the limits a run did not give, from its category's history, and after a run ran
//! out of one of them the next allocation of that one (the others keep their value, as cctools'
//! bucketing manager does).

use std::collections::BTreeMap;
use std::path::Path;

use super::best_so_far::{Tally, REPLAY_PER_DECISION};
use super::history::{cores_needed, History, Row};
use super::{sizer_from_history, Resource, Sizer, Strategy};
use lfm_monitor::limits::Limits;

const MIB: f64 = 1_048_576.0;

/// A resource `--auto` sizes, by its Report name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoLimit {
    /// MiB, from the Report's headline memory.
    Memory,
    /// Whole cores, from the measured peak, raised where the kernel throttled the run.
    Cores,
    /// MiB of the sandbox, from the Report's disk (runs with `--sandbox` only).
    Disk,
    /// MiB of GPU memory, from the Report's `gpu.memory_peak_bytes`, sized like memory.
    GpuMemory,
    /// Whole devices, from the Report's `gpu.devices_used`, in buckets of 1 as cores.
    Gpus,
}

impl AutoLimit {
    pub fn name(self) -> &'static str {
        match self {
            AutoLimit::Memory => "memory",
            AutoLimit::Cores => "cores",
            AutoLimit::Disk => "disk",
            AutoLimit::GpuMemory => "gpu_memory",
            AutoLimit::Gpus => "gpus",
        }
    }

    /// What a history row says the run used of this resource (None: not measured).
    pub fn used(self, row: &Row) -> Option<f64> {
        match self {
            AutoLimit::Memory => Some(row.memory_mb),
            AutoLimit::Cores => Some(cores_needed(row)),
            AutoLimit::Disk => row.disk_mb,
            AutoLimit::GpuMemory => row.gpu_memory_mb,
            AutoLimit::Gpus => row.gpus,
        }
    }

    /// The limit in `limits`, in this resource's unit (MiB or cores).
    pub fn limit(self, limits: &Limits) -> Option<f64> {
        match self {
            AutoLimit::Memory => limits.memory_bytes.map(|b| b as f64 / MIB),
            AutoLimit::Cores => limits.cores,
            AutoLimit::Disk => limits.disk_bytes.map(|b| b as f64 / MIB),
            AutoLimit::GpuMemory => limits.gpu_memory_bytes.map(|b| b as f64 / MIB),
            AutoLimit::Gpus => limits.gpus.map(|n| n as f64),
        }
    }

    pub fn set(self, limits: &mut Limits, value: f64) {
        match self {
            AutoLimit::Memory => limits.memory_bytes = Some((value * MIB) as u64),
            AutoLimit::Cores => limits.cores = Some(value),
            AutoLimit::Disk => limits.disk_bytes = Some((value * MIB) as u64),
            AutoLimit::GpuMemory => limits.gpu_memory_bytes = Some((value * MIB) as u64),
            AutoLimit::Gpus => limits.gpus = Some(value.ceil().max(1.0) as u64),
        }
    }

    /// A Sizer of this resource that has seen `rows` (a window of one category's). With the
    /// `history` they came from, `best-so-far` resumes from the tally kept there and saves it
    /// further along.
    pub fn sizer(
        self,
        rows: &[Row],
        strategy: Strategy,
        node: f64,
        history: Option<&History>,
    ) -> Sizer {
        let resource = match self {
            AutoLimit::Memory | AutoLimit::GpuMemory => Resource::memory_mb(node),
            AutoLimit::Cores | AutoLimit::Gpus => Resource::cores(node),
            AutoLimit::Disk => Resource::disk_mb(node),
        };
        let last = rows.last().filter(|_| strategy == Strategy::BestSoFar);
        let kept = history
            .zip(last)
            .and_then(|(h, row)| h.tally(&row.category, self.name()));
        let used = |r: &Row| self.used(r);
        // Without a history to keep the tally in, the next decision could not go on from it.
        let at_most = match history {
            Some(_) => REPLAY_PER_DECISION,
            None => usize::MAX,
        };
        let name = self.name();
        let sizer =
            sizer_from_history(rows, strategy, resource, name, used, kept.as_ref(), at_most);
        let tallied_to = sizer.tallied_to().or(last.map(|row| row.id));
        let further = sizer.tally(tallied_to.unwrap_or(0));
        if let (Some(h), Some(row), Some(tally)) = (history, last, further) {
            // Not again when only the node moved (a disk's is the space left, which moves
            // between any two decisions): a write per decision for nothing.
            if kept.as_ref().is_none_or(|k| !same_tally(k, &tally)) {
                if let Err(error) = h.save_tally(&row.category, self.name(), &tally) {
                    eprintln!("lfm: warning: {error}");
                }
            }
        }
        sizer
    }

    /// The allocation sizing gives the next run of `input` bytes (None: unknown): its first
    /// attempt, or after an attempt at `failed` ran out, the next one. Cores are whole: a
    /// limit below the measured fraction of a core would only throttle.
    pub fn allocation(self, rows: &[Row], ask: &Ask, history: Option<&History>) -> f64 {
        let node = ask.node;
        let mut sizer = self.sizer(rows, ask.strategy, node, history);
        let value = match ask.failed {
            None => sizer.first_allocation_for(ask.input),
            Some(failed) => {
                sizer.retrying(ask.input);
                sizer.retry_allocation(failed)
            }
        };
        match self {
            AutoLimit::Cores | AutoLimit::Gpus => value.ceil().clamp(1.0, node.max(1.0)),
            _ => value,
        }
    }

    /// The unit of this resource's allocations.
    pub fn unit(self) -> &'static str {
        match self {
            AutoLimit::Cores => "cores",
            AutoLimit::Gpus => "GPUs",
            _ => "MiB",
        }
    }
}

/// Whether two tallies hold the same counts, whatever node each was made against.
fn same_tally(a: &Tally, b: &Tally) -> bool {
    a == &Tally {
        node: a.node,
        ..b.clone()
    }
}

/// What one sizing decision is asked.
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    pub strategy: Strategy,
    /// The whole node of the resource.
    pub node: f64,
    /// The run's input size in bytes, when known.
    pub input: Option<f64>,
    /// The allocation its last attempt ran out of: a retry's is asked.
    pub failed: Option<f64>,
}

impl Ask {
    pub fn first(strategy: Strategy, node: f64) -> Ask {
        Ask {
            strategy,
            node,
            input: None,
            failed: None,
        }
    }
}

/// The whole node of each resource: this machine's memory and CPUs, and the space left on the
/// sandbox's filesystem.
pub fn node(resource: AutoLimit, sandbox: Option<&Path>) -> f64 {
    match resource {
        AutoLimit::Memory => super::node_memory_mb(),
        AutoLimit::Cores => std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64),
        AutoLimit::Disk => sandbox.and_then(free_mb).unwrap_or(1024.0),
        AutoLimit::GpuMemory => gpu_node().1,
        AutoLimit::Gpus => gpu_node().0,
    }
}

/// The node's GPUs lfm may hand out and their memory (MiB). Only sizing of a GPU run asks,
/// so only such runs load the driver here. Without a driver (devices from LFM_GPUS) nothing
/// measures GPU memory: 1024 MiB stands in, as for disk without a sandbox.
fn gpu_node() -> (f64, f64) {
    let driver = lfm_monitor::gpu::driver();
    let list = std::env::var(lfm_monitor::gpu::DEVICES_ENV).ok();
    let devices = lfm_monitor::gpu::node_devices(&driver, list.as_deref()).unwrap_or_default();
    let memory: Option<u64> = devices.iter().map(|d| d.memory_total_bytes).sum();
    (
        (devices.len() as f64).max(1.0),
        memory.map_or(1024.0, |bytes| bytes as f64 / MIB),
    )
}

fn free_mb(path: &Path) -> Option<f64> {
    // The sandbox may not exist yet: its nearest existing ancestor is on the same filesystem
    // (or the one it will be created on).
    let existing = path.ancestors().find(|p| p.exists())?;
    let stat = nix::sys::statvfs::statvfs(existing).ok()?;
    Some(stat.blocks_available() as f64 * stat.fragment_size() as f64 / MIB)
}

/// The limits `--auto` sizes for a run: memory and cores unless given, disk unless given and
/// only with a sandbox (where disk is measured), GPU memory unless given and only for a run
/// with GPUs, and the GPUs themselves when asked (`gpus_sized`: `--gpus auto`).
pub fn to_size(limits: &Limits, sandbox: Option<&Path>, gpus_sized: bool) -> Vec<AutoLimit> {
    let gpu_run = gpus_sized || limits.gpus.is_some();
    [
        AutoLimit::Memory,
        AutoLimit::Cores,
        AutoLimit::Disk,
        AutoLimit::GpuMemory,
        AutoLimit::Gpus,
    ]
    .into_iter()
    .filter(|r| r.limit(limits).is_none())
    .filter(|r| *r != AutoLimit::Disk || sandbox.is_some())
    .filter(|r| *r != AutoLimit::GpuMemory || gpu_run)
    .filter(|r| *r != AutoLimit::Gpus || gpus_sized)
    .collect()
}

/// The sized resources a run ran out of, when retrying can help: every exceeded limit is a
/// sized one (a limit the user gave stays as given). Empty otherwise.
pub fn exhausted(limits_exceeded: &BTreeMap<String, f64>, sized: &[AutoLimit]) -> Vec<AutoLimit> {
    let exceeded: Vec<Option<AutoLimit>> = limits_exceeded
        .keys()
        .map(|name| sized.iter().copied().find(|r| r.name() == name))
        .collect();
    if exceeded.iter().any(Option::is_none) {
        return Vec::new();
    }
    exceeded.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        exit: &str,
        exceeded: &str,
        cores: f64,
        limit: Option<f64>,
        throttled: Option<f64>,
    ) -> Row {
        Row {
            id: 0,
            category: "c".into(),
            time: 0.0,
            exit: exit.into(),
            exceeded: exceeded.into(),
            memory_mb: 100.0,
            cores,
            disk_mb: None,
            wall_time: 1.0,
            memory_limit_mb: None,
            sized: false,
            cores_limit: limit,
            throttled,
            gpu_memory_mb: None,
            gpus: None,
            allocation_mb: None,
            queue_wait_seconds: None,
            input_bytes: None,
        }
    }

    #[test]
    fn a_run_throttled_at_its_cores_limit_needed_a_core_more() {
        // Held back in 40% of its periods at 2 cores: it measured 1.98, it wanted more.
        assert_eq!(
            cores_needed(&row("normal", "", 1.98, Some(2.0), Some(0.4))),
            3.0
        );
        // Throttled in 5% of them (a burst): its measured peak stands.
        assert_eq!(
            cores_needed(&row("normal", "", 1.5, Some(2.0), Some(0.05))),
            1.5
        );
        assert_eq!(cores_needed(&row("normal", "", 0.7, None, None)), 0.7);
    }

    #[test]
    fn cores_are_sized_in_whole_cores_and_climb_past_throttling() {
        let strategy = Strategy::MaxSeen;
        // Max-seen: 1.2 + floor(1/3) = 1.2, rounded up to the bucket: 2 cores.
        let rows = vec![row("normal", "", 1.2, None, None)];
        assert_eq!(
            AutoLimit::Cores.allocation(&rows, &Ask::first(strategy, 8.0), None),
            2.0
        );
        // The same runs, throttled at 2: 3 (and max-seen rounds 3 + 0 to 3).
        let throttled = vec![row("normal", "", 2.0, Some(2.0), Some(0.5))];
        assert_eq!(
            AutoLimit::Cores.allocation(&throttled, &Ask::first(strategy, 8.0), None),
            3.0
        );
        // A tiny measured use still gets a whole core.
        let idle = vec![row("normal", "", 0.01, None, None); 12];
        let greedy = Strategy::GreedyBucketing;
        assert_eq!(
            AutoLimit::Cores.allocation(&idle, &Ask::first(greedy, 8.0), None),
            1.0
        );
        // Never more than the node.
        assert_eq!(
            AutoLimit::Cores.allocation(&idle, &Ask::first(Strategy::Fixed, 2.0), None),
            2.0
        );
    }

    #[test]
    fn only_limits_not_given_are_sized_and_disk_only_in_a_sandbox() {
        let none = Limits::default();
        assert_eq!(
            to_size(&none, None, false),
            vec![AutoLimit::Memory, AutoLimit::Cores]
        );
        let sandbox = Path::new("/tmp/x");
        assert_eq!(
            to_size(&none, Some(sandbox), false),
            vec![AutoLimit::Memory, AutoLimit::Cores, AutoLimit::Disk]
        );
        let given = Limits {
            memory_bytes: Some(1 << 30),
            cores: Some(1.0),
            ..Limits::default()
        };
        assert_eq!(to_size(&given, Some(sandbox), false), vec![AutoLimit::Disk]);
        let one_gpu = Limits {
            gpus: Some(1),
            ..given.clone()
        };
        assert_eq!(to_size(&one_gpu, None, false), vec![AutoLimit::GpuMemory]);
        assert_eq!(
            to_size(&given, None, true),
            vec![AutoLimit::GpuMemory, AutoLimit::Gpus]
        );
    }

    #[test]
    fn gpu_memory_is_sized_like_memory_and_gpus_in_whole_devices() {
        let gpu_row = |mb: f64, gpus: f64| Row {
            gpu_memory_mb: Some(mb),
            gpus: Some(gpus),
            ..row("normal", "", 1.0, None, None)
        };
        let rows = vec![gpu_row(3000.0, 1.0), gpu_row(5100.0, 2.0)];
        let strategy = Strategy::MaxSeen;
        // Max-seen: 5100 + 83 rounded up to 250 MiB buckets, as memory.
        assert_eq!(
            AutoLimit::GpuMemory.allocation(&rows, &Ask::first(strategy, 40960.0), None),
            5250.0
        );
        assert_eq!(
            AutoLimit::Gpus.allocation(&rows, &Ask::first(strategy, 4.0), None),
            2.0
        );
        // Never more devices than the node has.
        assert_eq!(
            AutoLimit::Gpus.allocation(&rows, &Ask::first(strategy, 1.0), None),
            1.0
        );
        // A run killed over its GPU memory raises what a retry gets.
        let mut killed = gpu_row(9000.0, 1.0);
        killed.exit = "limits".into();
        killed.exceeded = "gpu_memory".into();
        let rows = vec![gpu_row(3000.0, 1.0), killed];
        assert_eq!(
            AutoLimit::GpuMemory.allocation(
                &rows,
                &Ask {
                    failed: Some(3250.0),
                    ..Ask::first(strategy, 40960.0)
                },
                None
            ),
            9000.0
        );
    }

    #[test]
    fn a_run_is_retried_only_when_every_limit_it_broke_was_sized() {
        let sized = [AutoLimit::Memory, AutoLimit::Disk];
        let broke = |names: &[&str]| -> BTreeMap<String, f64> {
            names.iter().map(|n| (n.to_string(), 1.0)).collect()
        };
        assert_eq!(
            exhausted(&broke(&["memory"]), &sized),
            vec![AutoLimit::Memory]
        );
        assert_eq!(
            exhausted(&broke(&["disk", "memory"]), &sized),
            vec![AutoLimit::Disk, AutoLimit::Memory]
        );
        // The user's cores limit broke too: a larger memory would not help.
        assert!(exhausted(&broke(&["cores", "memory"]), &sized).is_empty());
        assert!(exhausted(&broke(&["wall_time"]), &sized).is_empty());
        assert!(exhausted(&broke(&[]), &sized).is_empty());
    }
}
