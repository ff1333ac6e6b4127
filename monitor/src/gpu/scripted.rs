//! A scripted device model (`lfm-gpu-model/1`, docs/gpu.md): devices from a JSON file, and
//! their processes from a usage directory that workloads write to, as a real driver lists the
//! contexts processes open. It lets the real binary be tested end to end without a GPU.
//!
//! A process "uses" a device by writing `<memory_bytes> [<utilization_percent>]` to
//! `<usage_dir>/<device uuid>/<its pid>`; the entry lasts while the process lives, as a
//! driver frees a dead process's memory. Each entry listed is marked `<pid>.seen`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{Device, DeviceReading, GpuDriver, GpuProcess};

pub const MODEL_FORMAT: &str = "lfm-gpu-model/1";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    format: String,
    devices: Vec<ModelDevice>,
    /// Relative to the model file; default `usage` beside it.
    #[serde(default)]
    usage_dir: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelDevice {
    uuid: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    memory_total_bytes: Option<u64>,
}

pub struct Scripted {
    devices: Vec<Device>,
    usage_dir: PathBuf,
}

impl Scripted {
    /// Read the model; every error names the file and what is wrong in it.
    pub fn load(path: &Path) -> Result<Scripted, String> {
        let at = |reason: String| format!("GPU model {} (LFM_GPU_MODEL): {reason}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| at(e.to_string()))?;
        let model: ModelFile = serde_json::from_str(&text).map_err(|e| at(e.to_string()))?;
        if model.format != MODEL_FORMAT {
            return Err(at(format!(
                "format: {:?} is not {MODEL_FORMAT:?}",
                model.format
            )));
        }
        for (i, device) in model.devices.iter().enumerate() {
            if device.uuid.is_empty() || device.uuid.contains(['/', ',']) {
                return Err(at(format!(
                    "devices[{i}].uuid: {:?} is empty or holds '/' or ','",
                    device.uuid
                )));
            }
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let usage_dir = base.join(model.usage_dir.unwrap_or_else(|| "usage".into()));
        let devices = model
            .devices
            .into_iter()
            .enumerate()
            .map(|(index, d)| Device {
                index: index as u32,
                uuid: Some(d.uuid),
                name: d.name,
                memory_total_bytes: d.memory_total_bytes,
            })
            .collect();
        Ok(Scripted { devices, usage_dir })
    }
}

impl GpuDriver for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn devices(&self) -> Result<Vec<Device>, String> {
        Ok(self.devices.clone())
    }

    fn read(&self, device: &Device) -> Result<DeviceReading, String> {
        let dir = self.usage_dir.join(device.visible_name());
        let mut reading = DeviceReading::default();
        let mut utilization = 0.0;
        for (pid, path) in crate::proctree::numbered_entries(&dir) {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            // A half-written file reads as empty: the process is listed, its memory not yet.
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
            let memory_bytes = fields.next().flatten().map(|b| b as u64);
            utilization += fields.next().flatten().unwrap_or(0.0);
            reading.processes.push(GpuProcess { pid, memory_bytes });
            // Tells a workload it was seen: tests then wait for this, not for time to pass.
            let _ = std::fs::write(dir.join(format!("{pid}.seen")), "");
        }
        reading.processes.sort_by_key(|p| p.pid);
        reading.utilization_percent = Some(utilization.min(100.0));
        Ok(reading)
    }
}
