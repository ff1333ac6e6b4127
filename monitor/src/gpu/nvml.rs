//! The real driver: NVIDIA's management library, opened with dlopen when a run asks for GPUs,
//! so lfm builds and runs without CUDA and a run without `--gpus` never loads it.

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use super::{Device, DeviceReading, GpuDriver, GpuProcess};

pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
}

/// The driver package installs the versioned name; the unversioned one comes with the
/// development files only.
const LIBRARY_NAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

impl Nvml {
    pub fn load() -> Result<Nvml, String> {
        for name in LIBRARY_NAMES {
            match nvml_wrapper::Nvml::builder()
                .lib_path(std::ffi::OsStr::new(name))
                .init()
            {
                Ok(nvml) => return Ok(Nvml { nvml }),
                Err(NvmlError::LibloadingError(_)) => continue,
                Err(e) => return Err(format!("NVML ({name}) failed to start: {e}")),
            }
        }
        Err(format!(
            "no NVML: neither {} could be loaded",
            LIBRARY_NAMES.join(" nor ")
        ))
    }
}

impl GpuDriver for Nvml {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn devices(&self) -> Result<Vec<Device>, String> {
        let count = self.nvml.device_count().map_err(|e| e.to_string())?;
        (0..count)
            .map(|index| {
                let device = self
                    .nvml
                    .device_by_index(index)
                    .map_err(|e| format!("NVML device {index}: {e}"))?;
                Ok(Device {
                    index,
                    uuid: device.uuid().ok(),
                    name: device.name().ok(),
                    memory_total_bytes: device.memory_info().ok().map(|m| m.total),
                })
            })
            .collect()
    }

    fn read(&self, device: &Device) -> Result<DeviceReading, String> {
        let handle = self
            .nvml
            .device_by_index(device.index)
            .map_err(|e| format!("NVML device {}: {e}", device.index))?;
        let mut processes = Vec::new();
        // Compute (CUDA) and graphics contexts are listed apart; a process can be in both.
        for list in [
            handle.running_compute_processes(),
            handle.running_graphics_processes(),
        ] {
            for info in list.unwrap_or_default() {
                let memory_bytes = match info.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                };
                add_process(&mut processes, info.pid as i32, memory_bytes);
            }
        }
        Ok(DeviceReading {
            utilization_percent: handle.utilization_rates().ok().map(|u| u.gpu as f64),
            processes,
        })
    }
}

fn add_process(processes: &mut Vec<GpuProcess>, pid: i32, memory_bytes: Option<u64>) {
    match processes.iter_mut().find(|p| p.pid == pid) {
        Some(seen) => seen.memory_bytes = seen.memory_bytes.max(memory_bytes),
        None => processes.push(GpuProcess { pid, memory_bytes }),
    }
}
