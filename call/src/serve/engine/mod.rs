//! The engine of `lfm serve`: its zygotes (zygotes.rs), one [`RunMonitor`] per call.
//!
//! Each call gets a fresh backend (its own cgroup where one is writable), whose `cgroup.procs`
//! descriptors travel to the zygote with the call; the forked child joins them before any user
//! code runs, so the cgroup's counters are exactly the call's. The engine samples every running
//! call, enforces its limits, and turns the zygote's exit message plus the runner's outcome
//! into one reply. It knows nothing of transports (stdin, sockets) or of how targets are found.

mod admission;
pub mod context;
mod done;
mod janitor;
mod learn;
mod pool;
mod reuse;
mod sizing;
mod spare;
mod status;
pub mod zygote;
mod zygotes;

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use lfm_monitor::backend::BackendChoice;
use lfm_monitor::gpu::{meter::GpuMeter, GpuError, GpuPolicy, Ledger};
use lfm_monitor::limits::Limits;
use lfm_monitor::report::FunctionCall;
use lfm_monitor::supervisor::{self, Ending, MonitorOptions, RunMonitor};
use lfm_sizing::admission::NodeBudget;

use crate::protocol::{Message, Reply};
use crate::runner::request::{Arguments, Outputs, Request, ResultFormat, Target};
pub use sizing::Auto;
pub use status::{Status, ZygoteStatus};
use zygote::{Event, ZygoteConfig};
use zygotes::Zygotes;

/// How long a call handed to its child is "starting": the CPU is left to it meanwhile.
const STARTING: Duration = Duration::from_millis(5);
/// The longest a finished call's processes wait to be killed for calls starting.
const LINGER: Duration = Duration::from_millis(20);

/// One call as the transport parsed it and the target resolver completed it.
#[derive(Clone)]
pub struct CallSpec {
    /// Which client connection the reply goes to.
    pub client: u64,
    /// The client's own request id, echoed in the reply.
    pub id: serde_json::Value,
    pub target: Target,
    pub function: FunctionCall,
    pub args: Arguments,
    pub result_format: ResultFormat,
    /// A value in a file goes back as a file (`result_file`), not inline.
    pub result_by_file: bool,
    pub limits: Limits,
    pub category: Option<String>,
    /// `"auto": true`: limits not given come from the category's history, and a call that
    /// ran out of one is run again larger.
    pub auto: Option<Auto>,
    /// The function's static closure, which the call's imports are compared with (sliced
    /// targets only).
    pub closure: Option<std::sync::Arc<lfm_monitor::imports::StaticClosure>>,
    /// The call's input size in bytes (the request's `input_bytes`, or measured from its
    /// arguments): recorded in its Report, and what `auto` sizes from.
    pub input_bytes: Option<u64>,
    /// Modules the client says the call will import (the request's `warm`): the zygote
    /// imports those it may before it forks the call (learn.rs).
    pub warm: Vec<(String, Option<String>)>,
    /// The request's `context`: an initialiser the zygote runs once for the calls after
    /// (context.rs).
    pub context: Option<String>,
    /// The request's `reuse`: the call may run in a kept process of its function, and its
    /// own is kept after it (reuse.rs).
    pub reuse: bool,
}

pub struct ServerOptions {
    pub zygote: ZygoteConfig,
    /// How many zygotes fork the calls (at least one): forks then run on as many cores.
    pub zygotes: usize,
    pub backend: BackendChoice,
    /// The most calls running at once; how many do is up to their allocations and `node`.
    pub slots: usize,
    /// What the node has for calls (admission.rs).
    pub node: NodeBudget,
    /// Modules the zygote imports before forking (named in each call's import log).
    pub preloaded: Vec<String>,
    /// The history every call is recorded in (and `auto` sizes from); none: not recorded.
    pub history: Option<PathBuf>,
    /// GPUs each call holds while it runs, unless its request says (0: none).
    pub gpus_per_slot: u64,
    /// How calls' GPUs are kept; a call waits in the queue, not in the ledger, for busy ones.
    pub gpu: GpuPolicy,
    /// What calls import is imported in the zygote for the next calls, until the zygote's
    /// resident size passes this (learn.rs); none: nothing is learned.
    pub learn_budget: Option<u64>,
}

/// What a finished call leaves to do once its reply is out ([`Server::after_delivery`]): its
/// history row, and what is left of it ([`Leftover`]).
struct Aftermath {
    record: Option<(lfm_monitor::report::Report, bool)>,
    /// None: a reused process kept it all (reuse.rs).
    leftover: Option<Leftover>,
}

/// A finished call's processes to kill (its child waits on `done` until then), then its cgroup
/// and directory to remove. Its child's exit takes a millisecond or more of CPU (more for a
/// larger zygote): done before the reply is out it would delay the reply, done as the next
/// call starts it would delay that call. So it waits for both ([`Server::call_starting`]).
struct Leftover {
    remains: supervisor::Remains,
    done: Option<OwnedFd>,
    cgroup: Box<dyn lfm_monitor::backend::Backend>,
    /// The call's limits, which its cgroup keeps when pooled.
    limits: Limits,
    dir: PathBuf,
    since: Instant,
}

struct Running {
    spec: CallSpec,
    /// The place of the zygote that forked it.
    zygote: usize,
    monitor: RunMonitor,
    dir: PathBuf,
    pid: Option<i32>,
    next_sample: Instant,
    /// The client left: the call is killed and its reply dropped.
    abandoned: bool,
    /// Where the child says its call is over (until it has).
    done: Option<OwnedFd>,
    /// What it said.
    delivered: Option<done::Delivered>,
    /// How far its import log was read while it ran (learn.rs).
    import_log_read: u64,
    /// What it holds of the node's budget, and how long it waited for that.
    allocated: lfm_monitor::report::Allocated,
    /// A reuse call's process (reuse.rs); none for other calls.
    process: Option<reuse::InProcess>,
}

pub struct Server {
    options: ServerOptions,
    zygotes: Zygotes,
    next_id: u64,
    admission: admission::Admission,
    running: HashMap<u64, Running>,
    replies: Vec<Reply>,
    /// Zygote restarts after a crash, for the notes of later calls.
    pub restarts: u64,
    history: Option<lfm_sizing::history::History>,
    /// Children set up for the next calls ([`Server::prepare_spare`]).
    spares: Vec<spare::Spare>,
    /// Spares sent away, until the zygote reports them reaped.
    retired: Vec<spare::Spare>,
    /// The limits of the last call started: a spare is made for them.
    last_limits: Option<Limits>,
    /// When the last call was handed to its child: the next spare waits for it to be running.
    last_start: Option<Instant>,
    /// How long the last call that ended ran.
    last_wall: Option<Duration>,
    aftermath: Vec<Aftermath>,
    leftovers: Vec<Leftover>,
    janitor: janitor::Janitor,
    /// Slot cgroups no call holds now (pool.rs).
    pool: pool::Pool,
    learner: learn::Learner,
    contexts: context::Contexts,
    reuse: reuse::Reuse,
    /// How often a call ended or went to the history: queued calls are sized again after.
    history_changes: u64,
    /// The history rows sizing read since the history last changed, by category.
    sizing_rows: std::cell::RefCell<HashMap<Option<String>, Vec<lfm_sizing::history::Row>>>,
}

impl Server {
    pub fn start(options: ServerOptions) -> Result<Server> {
        // A damaged or foreign history stops the server before it takes a call.
        let history = options
            .history
            .as_deref()
            .map(lfm_sizing::history::History::open)
            .transpose()
            .map_err(anyhow::Error::msg)?;
        let pool = pool::Pool::default();
        let janitor = janitor::Janitor::start(options.history.as_deref(), pool.returns())
            .map_err(anyhow::Error::msg)?;
        supervisor::become_subreaper();
        std::fs::create_dir_all(&options.zygote.work_dir)
            .with_context(|| format!("creating {}", options.zygote.work_dir.display()))?;
        let zygotes = Zygotes::start(&options.zygote, options.zygotes)?;
        let learner = learn::Learner::new(options.learn_budget);
        Ok(Server {
            options,
            zygotes,
            next_id: 0,
            admission: admission::Admission::default(),
            running: HashMap::new(),
            replies: Vec::new(),
            restarts: 0,
            history,
            spares: Vec::new(),
            aftermath: Vec::new(),
            leftovers: Vec::new(),
            janitor,
            pool,
            learner,
            contexts: context::Contexts::default(),
            reuse: reuse::Reuse::default(),
            retired: Vec::new(),
            last_limits: None,
            last_start: None,
            last_wall: None,
            history_changes: 0,
            sizing_rows: Default::default(),
        })
    }

    /// The descriptors to poll: the zygote's messages, and each running call's end.
    pub fn fds(&self) -> Vec<RawFd> {
        let dones = self.running.values().filter_map(|r| r.done.as_ref());
        let mut fds = self.zygotes.fds();
        fds.extend(dones.map(AsRawFd::as_raw_fd));
        fds
    }

    /// How long the caller may sleep before [`Server::step`] has sampling to do.
    pub fn timeout(&self) -> Duration {
        let now = Instant::now();
        self.running
            .values()
            .filter(|r| r.pid.is_some())
            .map(|r| r.next_sample)
            .chain(self.leftovers_due())
            .map(|due| due.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_millis(200))
    }

    pub fn busy(&self) -> bool {
        !self.running.is_empty() || !self.admission.queue.is_empty()
    }

    /// A reply made without running anything (a malformed request), sent with the next step's.
    pub fn push_reply(&mut self, reply: Reply) {
        self.replies.push(reply);
    }

    pub fn submit(&mut self, spec: CallSpec) {
        self.admission.queue.push_back(admission::Queued::new(spec));
        self.dispatch();
    }

    /// Handle the zygote's messages, sample the running calls, start queued ones; return the
    /// replies that are ready.
    pub fn step(&mut self) -> Vec<Reply> {
        for (at, event) in self.zygotes.events() {
            self.handle(at, event);
        }
        self.hear_dones();
        self.sample_due();
        reap_orphans(&self.zygotes.pids());
        self.dispatch();
        std::mem::take(&mut self.replies)
    }

    /// The client is gone: its queued calls are dropped, its running calls killed.
    pub fn abandon_client(&mut self, client: u64) {
        let queue = &mut self.admission.queue;
        let head = queue.front().map(|q| q.spec.client);
        queue.retain(|queued| queued.spec.client != client);
        if head == Some(client) {
            self.admission.head_left();
        }
        for running in self
            .running
            .values_mut()
            .filter(|r| r.spec.client == client)
        {
            running.abandoned = true;
            running.monitor.kill();
        }
    }

    /// Stop taking calls: running ones get `grace` to finish, then are killed; queued ones
    /// are refused. Returns the last replies; the zygote is stopped.
    pub fn shutdown(&mut self, grace: Duration) -> Vec<Reply> {
        self.drop_spares();
        for queued in std::mem::take(&mut self.admission.queue) {
            self.replies
                .push(Reply::refused(&queued.spec, "the server is shutting down"));
        }
        let mut replies = Vec::new();
        let deadline = Instant::now() + grace;
        while !self.running.is_empty() && Instant::now() < deadline {
            replies.extend(self.step());
            // Nothing waits for a next call now: what finished calls left goes at once.
            self.after_delivery(false);
            std::thread::sleep(Duration::from_millis(2).min(self.timeout()));
        }
        for running in self.running.values() {
            running.monitor.kill();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.running.is_empty() && Instant::now() < deadline {
            replies.extend(self.step());
            std::thread::sleep(Duration::from_millis(2));
        }
        for id in self.running.keys().copied().collect::<Vec<_>>() {
            self.fail(id, "the call outlived the shutdown and was abandoned");
        }
        replies.extend(std::mem::take(&mut self.replies));
        self.after_delivery(false);
        self.end_all_idle();
        for cgroup in self.pool.drain() {
            self.janitor.discard(cgroup);
        }
        self.zygotes.stop_all();
        replies
    }

    fn dispatch(&mut self) {
        while self.running.len() < self.options.slots.max(1) {
            if self.replace_spoilt_zygote() {
                return;
            }
            let Some((mut spec, allocated)) = self.admit() else {
                return;
            };
            // Devices: a call that must wait for them goes back to its place.
            let gpus = match self.claim_gpus(&mut spec) {
                Ok(gpus) => gpus,
                Err(GpuError::Busy { .. }) => {
                    // Held by other lfm processes: the next step tries again.
                    self.admission.put_back(spec, &allocated);
                    return;
                }
                Err(error) => {
                    self.replies.push(Reply::refused(&spec, &error.to_string()));
                    continue;
                }
            };
            if self.zygotes.any_missing() {
                self.restart_zygotes();
            }
            self.last_limits = Some(spec.limits.clone());
            self.last_start = Some(Instant::now());
            self.send_learned_before_fork();
            self.warm_zygote_for(&spec);
            let Some((spec, gpus)) = self.run_in_kept(spec, gpus, &allocated) else {
                continue;
            };
            self.make_room_for_fork();
            let context = spec.context.clone();
            if let Some((spec, gpus)) = self.start_in_spare(spec, gpus, &allocated) {
                if let Err(error) = self.start_call(spec, gpus, allocated) {
                    self.replies.push(error);
                }
            }
            self.load_context_after_fork(context.as_deref());
        }
    }

    /// The call's GPUs (its request's `gpus`, else `--gpus-per-slot`), held until it ends.
    fn claim_gpus(&self, spec: &mut CallSpec) -> Result<Option<GpuMeter>, GpuError> {
        let per_slot = (self.options.gpus_per_slot > 0).then_some(self.options.gpus_per_slot);
        let Some(count) = spec.limits.gpus.or(per_slot) else {
            return Ok(None);
        };
        spec.limits.gpus = Some(count);
        let policy = GpuPolicy {
            wait: Duration::ZERO,
            ..self.options.gpu.clone()
        };
        lfm_monitor::gpu::meter::assign(count, &policy, &Ledger::of_node()).map(Some)
    }

    fn start_call(
        &mut self,
        spec: CallSpec,
        gpus: Option<GpuMeter>,
        allocated: lfm_monitor::report::Allocated,
    ) -> Result<(), Reply> {
        self.next_id += 1;
        let id = self.next_id;
        let dir = self.options.zygote.work_dir.join(format!("call-{id}"));
        let visible = gpus.as_ref().map(GpuMeter::visible_devices);
        let prepared = prepare_call_dir(&dir, &spec, visible, self.options.backend)
            .and_then(|request| self.create_monitor(&spec, &dir).map(|m| (request, m)));
        let (request, mut monitor) = match prepared {
            Ok(prepared) => prepared,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(Reply::refused(&spec, &format!("{error:#}")));
            }
        };
        self.settle_backend(&monitor);
        if let Some(meter) = gpus {
            monitor.attach_gpus(meter);
        }
        let rlimits = supervisor::child_rlimits(&spec.limits, monitor.backend());
        let Some((at, zygote)) = self.least_loaded_zygote() else {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(Reply::refused(
                &spec,
                "no zygote could be started: see the serve's stderr",
            ));
        };
        if let Err(error) = zygote.call_with_rlimits(
            id,
            &request,
            &spec.target,
            &dir,
            &monitor.join_fds(),
            &rlimits,
        ) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(Reply::refused(&spec, &format!("{error:#}")));
        }
        let spec_reuse = spec.reuse;
        self.running.insert(
            id,
            Running {
                spec,
                zygote: at,
                monitor,
                dir,
                pid: None,
                next_sample: Instant::now(),
                abandoned: false,
                done: None,
                delivered: None,
                import_log_read: 0,
                allocated,
                process: spec_reuse.then(reuse::InProcess::fresh),
            },
        );
        Ok(())
    }

    fn create_monitor(&mut self, spec: &CallSpec, dir: &std::path::Path) -> Result<RunMonitor> {
        let mut monitor = self.monitor_for(&spec.limits, dir)?;
        label(&mut monitor, spec);
        Ok(monitor)
    }

    /// A call's monitor (and backend: a pooled cgroup, else a fresh one) for these limits, its
    /// sandbox in `dir`.
    fn monitor_for(&mut self, limits: &Limits, dir: &std::path::Path) -> Result<RunMonitor> {
        let options = MonitorOptions {
            command: Vec::new(),
            category: None,
            limits: limits.clone(),
            backend: self.options.backend,
            sandbox: Some(dir.join("sandbox")),
            series: None,
            forked: true,
        };
        let pooled = match self.options.backend {
            BackendChoice::Cgroup1 | BackendChoice::Cgroup2 => true,
            // Which backend `auto` gives is known after the first call (settle_backend).
            BackendChoice::Auto | BackendChoice::Rlimit => false,
        };
        if !pooled {
            return RunMonitor::create(options, 0);
        }
        // Two idle a slot: with one, calls ending in bursts found the pool empty and made a
        // fresh cgroup for one call in six (tests/serve.rs's 10,000 calls at 2 slots made
        // 1,800; with two, 250).
        let keep = 2 * self.options.slots.max(1);
        let janitor = &self.janitor;
        self.pool
            .monitor(options, keep, |cgroup| janitor.discard(cgroup))
    }

    /// `auto` probes every backend in turn: once one worked, later calls go straight to it.
    fn settle_backend(&mut self, monitor: &RunMonitor) {
        if self.options.backend == BackendChoice::Auto {
            self.options.backend = match monitor.backend().kind() {
                lfm_monitor::BackendKind::Cgroup2 => BackendChoice::Cgroup2,
                lfm_monitor::BackendKind::Cgroup1 => BackendChoice::Cgroup1,
                lfm_monitor::BackendKind::Rlimit => BackendChoice::Rlimit,
            };
        }
    }

    /// A message of the zygote at place `at`.
    fn handle(&mut self, at: usize, event: Event) {
        match event {
            Event::Started { id, pid, done, go } => {
                let Some(running) = self.running.get_mut(&id) else {
                    self.spare_started(id, pid, done, go);
                    return;
                };
                running.pid = Some(pid);
                running.done = done;
                running.monitor.set_process(pid);
                running.monitor.started(Some(pid));
                running.next_sample = Instant::now() + running.monitor.interval();
                if running.abandoned {
                    running.monitor.kill();
                }
            }
            Event::Exited { id: Some(id), .. } if self.spare_exited(id) => {}
            Event::Exited {
                id: Some(id),
                status,
                user,
                system,
                pid,
                ..
            } => {
                let id = self.call_in_process(id, pid);
                // A child that said it was done and was then killed (a limit, in the same
                // instant) ended as it said, as if its word had been read first.
                let early = self.hear_done(id);
                let (status, cpu) = match early {
                    Some(cpu) => (0, cpu),
                    None => (status, (user, system)),
                };
                self.finish(id, status, cpu);
            }
            Event::Exited { id: None, .. } => {}
            Event::Learned(learned) => {
                if let Some(seen) = &learned.device {
                    self.contexts.learned_device(seen);
                }
                self.learner.learned(learned);
                self.learn_from(&[]);
            }
            Event::Context(answer) => self.contexts.answered(answer),
            Event::Died => self.zygote_died(at),
        }
    }

    /// Calls whose child said it is over end now; a call holding GPUs ends with its exit
    /// (the devices' memory is freed then), keeping what its child said until then.
    fn hear_dones(&mut self) {
        let listening: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| r.done.is_some())
            .map(|(&id, _)| id)
            .collect();
        for id in listening {
            if let Some(cpu) = self.hear_done(id) {
                // Exit status 0 is what the child exits with after a call that ran.
                self.finish(id, 0, cpu);
            }
        }
    }

    /// Read call `id`'s done socket once; the child's CPU time when its call is to end now.
    fn hear_done(&mut self, id: u64) -> Option<(f64, f64)> {
        let running = self.running.get_mut(&id)?;
        match done::hear(running.done.as_ref()?) {
            done::Heard::Nothing => None,
            done::Heard::Closed => {
                running.done = None;
                None
            }
            done::Heard::Done(delivered) => {
                let cpu = (delivered.user, delivered.system);
                running.delivered = Some(delivered);
                if running.monitor.holds_gpus() {
                    // Closing our end lets the child exit.
                    running.done = None;
                    return None;
                }
                Some(cpu)
            }
        }
    }

    fn sample_due(&mut self) {
        let now = Instant::now();
        let learning = self.learner.active();
        let mut imported = Vec::new();
        for running in self.running.values_mut() {
            if running.pid.is_none() || running.next_sample > now {
                continue;
            }
            if running.monitor.sample() {
                running.monitor.kill();
            }
            running.next_sample = Instant::now() + running.monitor.interval();
            // The zygote imports what a long call imports while it runs: the next call then
            // finds it loaded instead of waiting for the zygote after this one ends.
            if learning {
                let log = running.dir.join("imports.log");
                imported.extend(lfm_monitor::imports::read_new(
                    &log,
                    &mut running.import_log_read,
                ));
            }
        }
        self.learn_from(&imported);
    }

    fn finish(&mut self, id: u64, status: i32, total_cpu: (f64, f64)) {
        let Some(mut running) = self.running.remove(&id) else {
            return;
        };
        let cpu = Server::own_cpu(&running, total_cpu);
        self.history_changed();
        // Nothing the call started outlives it: killed once the reply is out, and waited for
        // (before its cgroup is removed) by the janitor. A call's devices are free for the
        // next call from here: whatever of it could still use them is killed now.
        if running.monitor.holds_gpus() {
            running.monitor.signal(libc::SIGKILL);
        }
        let remains = running.monitor.remains();
        self.last_wall = Some(running.monitor.elapsed());
        let delivered = running.delivered.take().unwrap_or_default();
        let outcome = delivered
            .outcome
            .or_else(|| lfm_monitor::outcome::read(&running.dir.join("outcome.json")));
        let ending = Ending {
            status: Some(status),
            forwarded_signal: None,
            reaped_cpu: Some(cpu),
            io: lfm_monitor::outcome::io(outcome.as_ref()),
            maxrss_bytes: None,
            memory_growth: lfm_monitor::outcome::memory_growth(outcome.as_ref()),
        };
        let (mut report, cgroup) = running.monitor.finish_keeping_cgroup(ending);
        report.function = Some(running.spec.function.clone());
        Server::name_process(running.process.as_ref(), running.pid, &mut report);
        report.input_bytes = running.spec.input_bytes;
        report.allocation = Some(running.allocated.clone());
        report.imports = self.imports_of(&running.dir, &running.spec);
        if let Some(imports) = &report.imports {
            self.learn_from(&imports.modules);
        }
        self.contexts
            .annotate(&mut report, &running.spec, outcome.as_ref());
        let applied = lfm_monitor::outcome::apply(&mut report, outcome.as_ref());
        let sized = Server::mark_sized(&running.spec, &mut report);
        let leftover = Leftover {
            remains,
            done: running.done.take(),
            cgroup,
            limits: running.spec.limits.clone(),
            dir: running.dir.clone(),
            since: Instant::now(),
        };
        let leftover = self.keep_process(
            reuse::Kept {
                spec: &running.spec,
                zygote: running.zygote,
                pid: running.pid,
                abandoned: running.abandoned,
                process: running.process.as_ref(),
            },
            delivered.reuse,
            status,
            total_cpu,
            &report,
            leftover,
        );
        self.aftermath.push(Aftermath {
            record: self.record_now_or_later(&running.spec, &report, sized),
            leftover,
        });
        let again = if running.abandoned {
            None
        } else {
            self.retry(&running.spec, &report)
        };
        match again {
            Some(again) => self.admission.retry(again),
            None if !running.abandoned => self.replies.push(Reply::finished(
                &running.spec,
                report,
                applied,
                &running.dir,
                delivered.result,
            )),
            None => {}
        }
    }

    /// Once the replies of a step are out: the finished calls' history rows handed to the
    /// janitor, what is left of them killed and handed to it too once no call is starting,
    /// and the next call's spare (`more`: unless the server is ending).
    pub fn after_delivery(&mut self, more: bool) {
        for done in std::mem::take(&mut self.aftermath) {
            if let Some((report, sized)) = done.record {
                self.janitor.record(report, sized);
                self.history_changed();
            }
            self.leftovers.extend(done.leftover);
        }
        self.remove_reuse_dirs();
        self.shed_zygote();
        let starting = more && self.call_starting();
        let (mut due, mut wait): (Vec<Leftover>, Vec<Leftover>) =
            std::mem::take(&mut self.leftovers)
                .into_iter()
                .partition(|left| {
                    let age = left.since.elapsed();
                    !more || self.short_calls() || age >= LINGER || (!starting && age >= STARTING)
                });
        // Calls ending back to back on many slots may never leave 5 ms without a start: no
        // more leftovers wait than there are slots.
        let slots = self.options.slots.max(1);
        if wait.len() > slots {
            wait.sort_by_key(|left| left.since);
            due.extend(wait.drain(..wait.len() - slots));
        }
        self.leftovers = wait;
        for left in due {
            left.remains.kill(left.cgroup.as_ref());
            drop(left.done);
            if pool::poolable(left.cgroup.kind()) {
                let pooled = pool::Pooled {
                    limits: left.limits,
                    cgroup: left.cgroup,
                };
                self.janitor.release(pooled, left.dir);
            } else {
                self.janitor.remove(Some(left.cgroup), left.dir);
            }
        }
        if more && !starting {
            self.prepare_spare();
        }
    }

    /// When the leftovers waiting now may go (the caller wakes for it).
    fn leftovers_due(&self) -> Option<Instant> {
        let oldest = self.leftovers.iter().map(|left| left.since).min()?;
        let started = self.last_start.filter(|_| !self.running.is_empty());
        let quiet = oldest.max(started.unwrap_or(oldest)) + STARTING;
        Some(quiet.min(oldest + LINGER))
    }

    /// A call was just handed to its child: making the next spare now (the zygote's fork, the
    /// cgroup's creation) would take the CPU the call needs to start, on a small node as its
    /// previous child's exit also does. The spare is made once the call runs (at its first
    /// sample) or has ended; at once when calls end sooner than that (the next one would find
    /// no spare ready).
    fn call_starting(&self) -> bool {
        !self.short_calls()
            && !self.running.is_empty()
            && self.last_start.is_some_and(|t| t.elapsed() < STARTING)
    }

    fn short_calls(&self) -> bool {
        self.last_wall.is_some_and(|wall| wall < 2 * STARTING)
    }

    /// Every in-flight call of the zygote at `at` fails with the reason; the next call starts
    /// a fresh zygote in its place. The spares go too (they are replaced from the live ones),
    /// and what was learned is sent again: the fresh one has none of it.
    fn zygote_died(&mut self, at: usize) {
        self.zygotes.remove_dead(at);
        self.drop_spares();
        self.end_all_idle();
        let forked_there = self.running.iter().filter(|(_, r)| r.zygote == at);
        for id in forked_there.map(|(&id, _)| id).collect::<Vec<_>>() {
            self.fail(id, "the zygote died during the call; it was restarted");
        }
    }

    fn fail(&mut self, id: u64, reason: &str) {
        let Some(running) = self.running.remove(&id) else {
            return;
        };
        self.history_changed();
        running.monitor.kill();
        let mut report = running.monitor.finish(Ending::default());
        report.function = Some(running.spec.function.clone());
        report.input_bytes = running.spec.input_bytes;
        report.allocation = Some(running.allocated.clone());
        report.imports = self.imports_of(&running.dir, &running.spec);
        let sized = Server::mark_sized(&running.spec, &mut report);
        self.record(&report, sized);
        if !running.abandoned {
            self.replies
                .push(Reply::failed(&running.spec, report, "zygote", reason));
        }
        let _ = std::fs::remove_dir_all(&running.dir);
    }

    /// A call ended, or its row went to the history: what queued calls were sized from is old.
    fn history_changed(&mut self) {
        self.history_changes += 1;
        self.sizing_rows.get_mut().clear();
    }

    /// The zygote learns what a call imported; the spares forked before it did lack it.
    fn learn_from(&mut self, modules: &[lfm_monitor::report::ImportedModule]) {
        if self.learner.offer(&self.zygotes, modules) {
            for spare in std::mem::take(&mut self.spares) {
                self.drop_spare(spare);
            }
        }
    }

    /// What earlier calls imported and the zygote was not sent yet (gathered while it answered
    /// a batch) goes before the next fork; the spares forked before lack it.
    fn send_learned_before_fork(&mut self) {
        if self.learner.send_before_fork(&self.zygotes) {
            for spare in std::mem::take(&mut self.spares) {
                self.drop_spare(spare);
            }
        }
    }

    /// The zygote imports what the call's client said it will import before it forks the
    /// call (its messages are handled in order); the spares forked before lack it.
    fn warm_zygote_for(&mut self, spec: &CallSpec) {
        if !spec.warm.is_empty() && self.learner.warm(&self.zygotes, &spec.warm) {
            for spare in std::mem::take(&mut self.spares) {
                self.drop_spare(spare);
            }
        }
    }

    /// Zygotes past their budget go once no call runs under them; the next call starts
    /// fresh ones (with the configured preloads).
    fn shed_zygote(&mut self) {
        if !self.learner.must_shed || !self.running.is_empty() {
            return;
        }
        self.drop_spares();
        self.end_all_idle();
        self.zygotes.stop_all();
        self.learner.forget();
    }

    /// What the call's log says it imported, compared with its function's closure.
    fn imports_of(
        &self,
        dir: &std::path::Path,
        spec: &CallSpec,
    ) -> Option<lfm_monitor::report::Imports> {
        let log = dir.join("imports.log");
        let mut preloaded = self.options.preloaded.clone();
        preloaded.extend(self.learner.packages.iter().cloned());
        let mut imports = lfm_monitor::imports::read(&log, &preloaded)?;
        if let Some(closure) = &spec.closure {
            lfm_monitor::imports::compare(&mut imports, closure.clone());
        }
        Some(imports)
    }

    fn restart_zygotes(&mut self) {
        self.learner.forget();
        self.contexts.forget();
        self.restarts += self.zygotes.start_missing(&self.options.zygote);
    }

    /// The live zygote with the fewest calls and spares on it, and its place.
    fn least_loaded_zygote(&self) -> Option<(usize, &zygote::Zygote)> {
        let at = self.zygotes.least_loaded(|at| self.load_of(at))?;
        Some((at, self.zygotes.get(at)?))
    }

    /// The calls running on the zygote at `at` and the spares it forked.
    fn load_of(&self, at: usize) -> usize {
        let calls = self.running.values().filter(|r| r.zygote == at).count();
        calls + self.spares.iter().filter(|s| s.zygote == at).count()
    }
}

/// The Report of `monitor` is `spec`'s: its command and category.
fn label(monitor: &mut RunMonitor, spec: &CallSpec) {
    monitor.relabel(
        vec!["serve".into(), spec.function.target.clone()],
        spec.category.clone(),
    );
}

/// The call's directory: `sandbox/` (its working directory, the disk measure) and the
/// runner's request; the child writes stdout, stderr, result and outcome.json beside them.
fn prepare_call_dir(
    dir: &std::path::Path,
    spec: &CallSpec,
    visible_devices: Option<String>,
    backend: BackendChoice,
) -> Result<PathBuf> {
    make_call_dirs(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("request.json");
    std::fs::write(
        &path,
        call_request(dir, spec, visible_devices, backend).to_json(),
    )
    .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// A call's directory and its `sandbox/`, in the serve's existing work directory: two mkdirs
/// (`create_dir_all` tries the deepest first, a failed syscall on every call).
fn make_call_dirs(dir: &std::path::Path) -> std::io::Result<()> {
    let make = |path: &std::path::Path| match std::fs::create_dir(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        made => made,
    };
    make(dir).or_else(|_| std::fs::create_dir_all(dir))?;
    make(&dir.join("sandbox"))
}

/// The runner's request for `spec` in `dir`. `visible_devices` is the call's
/// CUDA_VISIBLE_DEVICES, set by the child before user code.
fn call_request(
    dir: &std::path::Path,
    spec: &CallSpec,
    visible_devices: Option<String>,
    backend: BackendChoice,
) -> Request {
    let outputs = Outputs {
        result_file: dir.join("result"),
        outcome_file: dir.join("outcome.json"),
        import_log: Some(dir.join("imports.log")),
    };
    let mut request = Request::new(
        spec.target.clone(),
        spec.args.clone(),
        spec.result_format,
        outputs,
    );
    // A caller that takes pickles can re-raise the exception itself, not only its text.
    if spec.result_format == ResultFormat::Pickle {
        request.exception_file = Some(dir.join("exception"));
    }
    request.env =
        visible_devices.map(|visible| [("CUDA_VISIBLE_DEVICES".to_string(), visible)].into());
    request.context = spec.context.clone();
    // A cgroup v1 always keeps the kernel's peak (max_usage_in_bytes), which a forked call's
    // Report takes instead of the call's own growth (run_monitor.rs, MemoryFigures). A reused
    // process's later calls still measure theirs: their window's peak counts what the process
    // kept from earlier calls.
    if backend == BackendChoice::Cgroup1 && !spec.reuse {
        request.memory_growth = Some(false);
    }
    request.reuse = spec.reuse;
    request
}

/// Processes the calls left behind are reparented to lfm (a subreaper): reap them, but never
/// the zygote, whose end is noticed on its socket.
fn reap_orphans(zygotes: &[i32]) {
    loop {
        let mut status = 0;
        // SAFETY: zeroed siginfo_t is a valid value for this plain C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid with WNOWAIT only inspects.
        let peeked = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: reading the pid field of a siginfo filled by waitid.
        let pid = unsafe { info.si_pid() };
        if peeked != 0 || pid == 0 || zygotes.contains(&pid) {
            return;
        }
        // SAFETY: waitpid on a known exited child.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}
