//! One run's GPUs: the devices it holds, what its processes used on them (matched against the
//! run's process tree), and the violations: a process of the run on a device it was not
//! given, or a process of someone else on one it was.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Instant;

use super::{
    node_devices, Claim, Device, DeviceReading, GpuDriver, GpuError, GpuPolicy, Ledger,
    ViolationPolicy, DEVICES_ENV,
};
use crate::report::{Gpu, GpuViolation};

pub struct GpuMeter {
    /// None where no driver could be loaded: the figures are then null, never invented.
    driver: Option<Box<dyn GpuDriver>>,
    claim: Claim,
    /// Every device the driver lists: a run's process on any of them but its own is a violation.
    node: Vec<Device>,
    policy: ViolationPolicy,
    memory_peak: Option<u64>,
    utilization: Utilization,
    used: BTreeSet<String>,
    violations: BTreeMap<(i32, String), GpuViolation>,
    /// A process of the run was listed without a memory figure (MIG, some drivers).
    unaccounted: bool,
    notes: Vec<String>,
    last: Instant,
}

/// What one sample saw.
#[derive(Debug, Default, PartialEq)]
pub struct GpuSample {
    /// GPU memory of the run's processes, summed over every device.
    pub memory_bytes: Option<u64>,
    /// Mean utilisation of the run's devices.
    pub utilization_percent: Option<f64>,
    /// Processes of the run to kill (`--gpu-violation kill`).
    pub kill: Vec<i32>,
}

#[derive(Default)]
struct Utilization {
    weighted_sum: f64,
    seconds: f64,
    peak: Option<f64>,
}

/// Claim `count` devices on the node's ledger (waiting up to `policy.wait`) and meter them.
/// The driver is loaded here, only for runs that ask for GPUs.
pub fn assign(count: u64, policy: &GpuPolicy, ledger: &Ledger) -> Result<GpuMeter, GpuError> {
    let driver = super::driver();
    let list = std::env::var(DEVICES_ENV).ok();
    let devices = node_devices(&driver, list.as_deref()).map_err(|e| match e {
        GpuError::NoDevices { reason, .. } => GpuError::NoDevices {
            asked: count,
            reason,
        },
        other => other,
    })?;
    if (devices.len() as u64) < count {
        let which = match &list {
            Some(list) => format!("{DEVICES_ENV}={list}"),
            None => format!("{} lists {}", source_name(&driver), devices.len()),
        };
        return Err(GpuError::TooFew {
            asked: count,
            present: devices.len(),
            which,
        });
    }
    let claim = ledger.claim(&devices, count as usize, policy.wait)?;
    Ok(GpuMeter::new(claim, driver, policy.violation))
}

fn source_name(driver: &Result<Box<dyn GpuDriver>, String>) -> &'static str {
    driver.as_ref().map(|d| d.name()).unwrap_or("none")
}

impl GpuMeter {
    pub fn new(
        claim: Claim,
        driver: Result<Box<dyn GpuDriver>, String>,
        policy: ViolationPolicy,
    ) -> GpuMeter {
        let mut notes = Vec::new();
        let (driver, node) = match driver {
            Ok(driver) => {
                let node = driver.devices().unwrap_or_else(|_| claim.devices.clone());
                (Some(driver), node)
            }
            Err(reason) => {
                notes.push(format!(
                    "GPU use not measured (figures are null): {reason}; the devices were assigned from {DEVICES_ENV}"
                ));
                (None, Vec::new())
            }
        };
        GpuMeter {
            driver,
            claim,
            node,
            policy,
            memory_peak: None,
            utilization: Utilization::default(),
            used: BTreeSet::new(),
            violations: BTreeMap::new(),
            unaccounted: false,
            notes,
            last: Instant::now(),
        }
    }

    /// CUDA_VISIBLE_DEVICES for the run: its devices by UUID where known.
    pub fn visible_devices(&self) -> String {
        self.claim
            .devices
            .iter()
            .map(Device::visible_name)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether a driver measures the devices (else the figures stay null).
    pub fn measures(&self) -> bool {
        self.driver.is_some()
    }

    /// The run starts now: utilisation is averaged over its time from here.
    pub fn started(&mut self) {
        self.last = Instant::now();
    }

    /// Look at every device once; `run` is the run's live processes.
    pub fn sample(&mut self, run: &HashSet<i32>) -> GpuSample {
        let Some(driver) = self.driver.as_ref() else {
            return GpuSample::default();
        };
        let readings: Vec<(Device, DeviceReading)> = self
            .node
            .iter()
            .filter_map(|d| driver.read(d).ok().map(|r| (d.clone(), r)))
            .collect();
        let mut sample = GpuSample::default();
        let mut memory = 0u64;
        let mut utilization = Vec::new();
        for (device, reading) in &readings {
            if self.claim.devices.contains(device) {
                utilization.extend(reading.utilization_percent);
            }
            memory += self.observe_device(device, reading, run, &mut sample.kill);
        }
        sample.memory_bytes = Some(memory);
        self.memory_peak = Some(self.memory_peak.unwrap_or(0).max(memory));
        sample.utilization_percent = mean(&utilization);
        self.observe_utilization(sample.utilization_percent);
        sample
    }

    /// The run's GPU memory on `device`; its violations noted, offenders to kill added.
    fn observe_device(
        &mut self,
        device: &Device,
        reading: &DeviceReading,
        run: &HashSet<i32>,
        kill: &mut Vec<i32>,
    ) -> u64 {
        let ours = self.claim.devices.contains(device);
        let mut memory = 0;
        for process in &reading.processes {
            let of_run = run.contains(&process.pid);
            if of_run {
                match process.memory_bytes {
                    Some(bytes) => memory += bytes,
                    None => self.unaccounted = true,
                }
                self.used.insert(device.visible_name());
            }
            if of_run && !ours {
                let killed = self.policy == ViolationPolicy::Kill;
                if killed {
                    kill.push(process.pid);
                }
                self.violate("other-device", process.pid, device, killed);
            } else if !of_run && ours {
                self.violate("foreign-process", process.pid, device, false);
            }
        }
        memory
    }

    fn observe_utilization(&mut self, now: Option<f64>) {
        let elapsed = self.last.elapsed().as_secs_f64();
        self.last = Instant::now();
        let Some(now) = now else { return };
        let u = &mut self.utilization;
        u.weighted_sum += now * elapsed;
        u.seconds += elapsed;
        u.peak = Some(u.peak.unwrap_or(0.0).max(now));
    }

    fn violate(&mut self, kind: &str, pid: i32, device: &Device, killed: bool) {
        let key = (pid, device.visible_name());
        self.violations.entry(key).or_insert_with(|| GpuViolation {
            kind: kind.to_string(),
            pid,
            process: process_name(pid),
            device: device.visible_name(),
            action: if killed { "killed" } else { "noted" }.to_string(),
        });
    }

    /// The Report's `gpu` section, and the notes that name each violation.
    pub fn finish(self) -> (Gpu, Vec<String>) {
        let visible_devices = self.visible_devices();
        let mut notes = self.notes;
        if self.unaccounted {
            notes.push("the GPU driver gave no memory figure for some of the run's processes: gpu.memory_peak_bytes leaves them out".into());
        }
        for v in self.violations.values() {
            notes.push(match v.kind.as_str() {
                "other-device" => format!(
                    "GPU violation: process {} ({}) of the run used GPU {} it was not given ({})",
                    v.pid, v.process, v.device, v.action
                ),
                _ => format!(
                    "GPU violation: process {} ({}), not of this run, used the run's GPU {}",
                    v.pid, v.process, v.device
                ),
            });
        }
        let u = &self.utilization;
        let measured = self.driver.is_some();
        let gpu = Gpu {
            source: self
                .driver
                .as_ref()
                .map(|d| d.name())
                .unwrap_or("none")
                .into(),
            visible_devices,
            devices: self.claim.devices.clone(),
            wait_seconds: self.claim.waited.as_secs_f64(),
            memory_peak_bytes: self.memory_peak,
            // A mean never exceeds the peak; the clamp drops float noise of the weighting.
            utilization_average_percent: (u.seconds > 0.0)
                .then(|| (u.weighted_sum / u.seconds).min(u.peak.unwrap_or(0.0))),
            utilization_peak_percent: u.peak,
            devices_used: measured.then_some(self.used.len() as u64),
            violations: self.violations.into_values().collect(),
        };
        (gpu, notes)
    }
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// A foreign process may be another user's, or in another PID namespace: the name is best
/// effort.
fn process_name(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}
