//! GPUs as a resource of a run: which devices the node has, which of them a run holds
//! ([`ledger`]), and what the run did on them ([`meter`]).
//!
//! Everything lfm asks of the GPU driver goes through one small trait, [`GpuDriver`]: NVML
//! loaded at run time ([`nvml`], only for runs that ask for GPUs), or a scripted device model
//! ([`scripted`], `LFM_GPU_MODEL=model.json`) so that assignment, measurement, violations and
//! the limit are tested end to end on machines without a GPU (docs/gpu.md).

pub mod ledger;
pub mod meter;
pub mod nvml;
pub mod scripted;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use ledger::{Claim, Ledger};
pub use meter::GpuMeter;

/// Selects the scripted device model instead of NVML: the path of its JSON file.
pub const MODEL_ENV: &str = "LFM_GPU_MODEL";
/// Restricts the devices lfm hands out (comma-separated indices or UUIDs, as Slurm's gres).
pub const DEVICES_ENV: &str = "LFM_GPUS";

/// One device as the driver numbers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// The driver's index (NVML order, which ignores CUDA_VISIBLE_DEVICES).
    pub index: u32,
    /// `GPU-...`: stable across reboots and renumbering; null when unknown (LFM_GPUS without
    /// a driver).
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub memory_total_bytes: Option<u64>,
}

impl Device {
    /// How CUDA_VISIBLE_DEVICES names it: by UUID where known, which survives renumbering.
    pub fn visible_name(&self) -> String {
        self.uuid.clone().unwrap_or_else(|| self.index.to_string())
    }
}

/// A process the driver lists on a device.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuProcess {
    pub pid: i32,
    /// None where the driver does not account per process (e.g. some MIG or WDDM setups).
    pub memory_bytes: Option<u64>,
}

/// One look at one device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceReading {
    /// Percent of the last sample period in which a kernel ran.
    pub utilization_percent: Option<f64>,
    pub processes: Vec<GpuProcess>,
}

/// The one door to the GPU driver.
pub trait GpuDriver {
    /// `nvml` or `scripted`, as the Report names the source of its figures.
    fn name(&self) -> &'static str;
    /// Every device of the node, in index order.
    fn devices(&self) -> Result<Vec<Device>, String>;
    /// Utilisation of `device` and the processes using it now.
    fn read(&self, device: &Device) -> Result<DeviceReading, String>;
}

/// The node's driver: the scripted model when `LFM_GPU_MODEL` names one, else NVML.
pub fn driver() -> Result<Box<dyn GpuDriver>, String> {
    match std::env::var_os(MODEL_ENV) {
        Some(path) => Ok(Box::new(scripted::Scripted::load(path.as_ref())?)),
        None => Ok(Box::new(nvml::Nvml::load()?)),
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GpuError {
    #[error("--gpus {asked}: this node has no GPU lfm can use ({reason}); list devices in LFM_GPUS to hand them out without NVML")]
    NoDevices { asked: u64, reason: String },
    #[error("--gpus {asked}: this node has only {present} GPU(s) lfm may hand out ({which})")]
    TooFew {
        asked: u64,
        present: usize,
        which: String,
    },
    #[error("--gpus {asked}: only {free} of {present} GPU(s) were free after waiting {waited:.1}s (other lfm runs hold the rest); raise --gpu-wait-timeout to wait longer")]
    Busy {
        asked: u64,
        free: usize,
        present: usize,
        waited: f64,
    },
    #[error("LFM_GPUS={value:?}: {reason}")]
    BadList { value: String, reason: String },
    #[error("GPU ledger {path}: {reason}")]
    Ledger { path: String, reason: String },
}

/// How a run given GPUs (`Limits::gpus`) gets and keeps them: how long it waits for free
/// devices, and what a violation does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuPolicy {
    pub wait: Duration,
    pub violation: ViolationPolicy,
}

/// What happens to a process of the run found on a device it was not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViolationPolicy {
    /// Named in the Report's notes; the run goes on.
    #[default]
    Note,
    /// Named, and that process is killed.
    Kill,
}

/// The devices lfm may hand out: the driver's, restricted to `LFM_GPUS` when set; without a
/// driver, `LFM_GPUS` alone (assignment works, measurement is null).
pub fn node_devices(
    driver: &Result<Box<dyn GpuDriver>, String>,
    list: Option<&str>,
) -> Result<Vec<Device>, GpuError> {
    let no_devices = |reason: String| GpuError::NoDevices { asked: 0, reason };
    match (driver, list) {
        (Ok(driver), list) => {
            let known = driver.devices().map_err(no_devices)?;
            match list {
                Some(list) => select(list, Some(&known)),
                None => Ok(known),
            }
        }
        (Err(reason), None) => Err(no_devices(reason.clone())),
        (Err(_), Some(list)) => select(list, None),
    }
}

/// `LFM_GPUS` entries (indices or UUIDs) resolved against the driver's devices, if any.
fn select(list: &str, known: Option<&[Device]>) -> Result<Vec<Device>, GpuError> {
    let bad = |reason: String| GpuError::BadList {
        value: list.to_string(),
        reason,
    };
    let mut out: Vec<Device> = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let index = entry.parse::<u32>().ok();
        let device = match known {
            Some(known) => known
                .iter()
                .find(|d| Some(d.index) == index || d.uuid.as_deref() == Some(entry))
                .cloned()
                .ok_or_else(|| bad(format!("no device {entry:?} on this node")))?,
            None => Device {
                index: index.unwrap_or(out.len() as u32),
                uuid: index.is_none().then(|| entry.to_string()),
                name: None,
                memory_total_bytes: None,
            },
        };
        if out
            .iter()
            .any(|d| d.visible_name() == device.visible_name())
        {
            return Err(bad(format!("device {entry:?} is listed twice")));
        }
        out.push(device);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
