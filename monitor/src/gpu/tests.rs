use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use super::meter::GpuMeter;
use super::scripted::Scripted;
use super::*;

fn device(index: u32, uuid: &str) -> Device {
    Device {
        index,
        uuid: Some(uuid.into()),
        name: Some("Scripted GPU".into()),
        memory_total_bytes: Some(16 << 30),
    }
}

/// A model file with `n` devices GPU-0..GPU-n-1 and its usage directory.
fn model(dir: &Path, n: usize) -> std::path::PathBuf {
    let devices: Vec<_> = (0..n)
        .map(|i| serde_json::json!({"uuid": format!("GPU-{i}"), "memory_total_bytes": 1u64 << 34}))
        .collect();
    let path = dir.join("model.json");
    let text = serde_json::json!({"format": "lfm-gpu-model/1", "devices": devices});
    std::fs::write(&path, text.to_string()).unwrap();
    path
}

/// `pid` uses `bytes` of the device at `percent`, as a workload writes it.
fn use_device(dir: &Path, uuid: &str, pid: u32, bytes: u64, percent: u32) {
    let usage = dir.join("usage").join(uuid);
    std::fs::create_dir_all(&usage).unwrap();
    std::fs::write(usage.join(pid.to_string()), format!("{bytes} {percent}\n")).unwrap();
}

fn scripted(dir: &Path, n: usize) -> Result<Box<dyn GpuDriver>, String> {
    Ok(Box::new(Scripted::load(&model(dir, n)).unwrap()))
}

#[test]
fn lfm_gpus_selects_devices_by_index_or_uuid_and_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let driver = scripted(dir.path(), 3);
    let all = node_devices(&driver, None).unwrap();
    assert_eq!(all.len(), 3);
    let picked = node_devices(&driver, Some("2, GPU-0")).unwrap();
    assert_eq!(picked, vec![all[2].clone(), all[0].clone()]);
    let unknown = node_devices(&driver, Some("7")).unwrap_err();
    assert!(unknown.to_string().contains("no device \"7\""), "{unknown}");
    let twice = node_devices(&driver, Some("1,GPU-1")).unwrap_err();
    assert!(twice.to_string().contains("listed twice"), "{twice}");
}

#[test]
fn without_a_driver_lfm_gpus_alone_gives_devices_and_nothing_gives_a_reason() {
    let none: Result<Box<dyn GpuDriver>, String> = Err("libnvidia-ml.so.1 not found".into());
    let listed = node_devices(&none, Some("0,1")).unwrap();
    assert_eq!(
        listed.iter().map(Device::visible_name).collect::<Vec<_>>(),
        ["0", "1"]
    );
    let error = node_devices(&none, None).unwrap_err();
    assert!(matches!(error, GpuError::NoDevices { .. }));
    assert!(error.to_string().contains("libnvidia-ml.so.1 not found"));
}

#[test]
fn the_ledger_never_gives_a_device_twice_and_a_dropped_claim_frees_it() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::at(&dir.path().join("ledger"));
    let devices: Vec<Device> = (0..3).map(|i| device(i, &format!("GPU-{i}"))).collect();
    let first = ledger.claim(&devices, 2, Duration::ZERO).unwrap();
    let second = ledger.claim(&devices, 1, Duration::ZERO).unwrap();
    assert_eq!(second.devices, vec![devices[2].clone()]);
    for held in &first.devices {
        assert!(!second.devices.contains(held));
    }
    let busy = ledger.claim(&devices, 1, Duration::ZERO).unwrap_err();
    assert!(
        matches!(
            busy,
            GpuError::Busy {
                free: 0,
                present: 3,
                ..
            }
        ),
        "{busy}"
    );
    drop(first);
    let again = ledger.claim(&devices, 2, Duration::ZERO).unwrap();
    assert_eq!(again.devices, devices[..2].to_vec());
}

#[test]
fn a_partial_claim_is_given_back_so_two_waiters_cannot_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::at(dir.path());
    let devices: Vec<Device> = (0..2).map(|i| device(i, &format!("GPU-{i}"))).collect();
    let one = ledger.claim(&devices[1..], 1, Duration::ZERO).unwrap();
    assert!(ledger.claim(&devices, 2, Duration::ZERO).is_err());
    // GPU-0 was not kept by the failed claim.
    let zero = ledger.claim(&devices, 1, Duration::ZERO).unwrap();
    assert_eq!(zero.devices, vec![devices[0].clone()]);
    drop(one);
}

fn meter_on(dir: &Path, n: usize, given: &[usize], policy: ViolationPolicy) -> GpuMeter {
    let driver = scripted(dir, n);
    let devices = node_devices(&driver, None).unwrap();
    let wanted: Vec<Device> = given.iter().map(|&i| devices[i].clone()).collect();
    let claim = Ledger::at(&dir.join("ledger"))
        .claim(&wanted, wanted.len(), Duration::ZERO)
        .unwrap();
    GpuMeter::new(claim, driver, policy)
}

#[test]
fn the_meter_counts_the_runs_processes_and_names_violations() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let mut meter = meter_on(dir.path(), 2, &[0], ViolationPolicy::Kill);
    assert_eq!(meter.visible_devices(), "GPU-0");
    use_device(dir.path(), "GPU-0", me, 300 << 20, 80);
    // init is alive and not of the run: a foreign process on the run's device.
    use_device(dir.path(), "GPU-0", 1, 5 << 20, 10);
    let run: HashSet<i32> = [me as i32].into();
    let first = meter.sample(&run);
    assert_eq!(first.memory_bytes, Some(300 << 20));
    assert_eq!(first.utilization_percent, Some(90.0));
    assert!(first.kill.is_empty());
    // The run's process also opens the device it was not given.
    use_device(dir.path(), "GPU-1", me, 100 << 20, 50);
    let second = meter.sample(&run);
    assert_eq!(second.memory_bytes, Some(400 << 20));
    assert_eq!(second.kill, vec![me as i32]);
    let (gpu, notes) = meter.finish();
    assert_eq!(gpu.source, "scripted");
    assert_eq!(gpu.memory_peak_bytes, Some(400 << 20));
    assert_eq!(gpu.utilization_peak_percent, Some(90.0));
    assert_eq!(gpu.devices_used, Some(2));
    let kinds: Vec<(&str, i32, &str)> = gpu
        .violations
        .iter()
        .map(|v| (v.kind.as_str(), v.pid, v.action.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("foreign-process", 1, "noted"),
            ("other-device", me as i32, "killed")
        ]
    );
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes
        .iter()
        .any(|n| n.contains("not of this run") && n.contains("GPU-0")));
    assert!(notes
        .iter()
        .any(|n| n.contains("was not given") && n.contains("GPU-1")));
}

#[test]
fn without_a_driver_the_figures_are_null_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let claim = Ledger::at(dir.path())
        .claim(&[device(0, "GPU-x")], 1, Duration::ZERO)
        .unwrap();
    let mut meter = GpuMeter::new(claim, Err("no libnvidia-ml".into()), ViolationPolicy::Note);
    assert_eq!(meter.sample(&HashSet::new()), Default::default());
    let (gpu, notes) = meter.finish();
    assert_eq!(gpu.source, "none");
    assert_eq!(gpu.memory_peak_bytes, None);
    assert_eq!(gpu.utilization_average_percent, None);
    assert_eq!(gpu.devices_used, None);
    assert!(notes[0].contains("no libnvidia-ml"), "{notes:?}");
}

#[test]
fn a_dead_process_leaves_the_scripted_device_as_it_leaves_a_real_one() {
    let dir = tempfile::tempdir().unwrap();
    let driver = scripted(dir.path(), 1).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    use_device(dir.path(), "GPU-0", pid, 1 << 20, 5);
    let reading = driver.read(&driver.devices().unwrap()[0]).unwrap();
    assert!(reading.processes.is_empty(), "{reading:?}");
}

#[test]
fn a_bad_model_file_names_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.json");
    let load = |text: &str| {
        std::fs::write(&path, text).unwrap();
        Scripted::load(&path).err().unwrap()
    };
    let missing = load(r#"{"format": "lfm-gpu-model/1", "devices": [{"name": "x"}]}"#);
    assert!(
        missing.contains("model.json") && missing.contains("uuid"),
        "{missing}"
    );
    let format = load(r#"{"format": "lfm-gpu-model/9", "devices": []}"#);
    assert!(format.contains("format"), "{format}");
    let slash = load(r#"{"format": "lfm-gpu-model/1", "devices": [{"uuid": "a/b"}]}"#);
    assert!(slash.contains("devices[0].uuid"), "{slash}");
    let absent = Scripted::load(&dir.path().join("absent.json"))
        .err()
        .unwrap();
    assert!(absent.contains("absent.json"), "{absent}");
}

/// The one test of the real library: it runs where libnvidia-ml and a GPU exist.
#[test]
fn nvml_lists_and_reads_the_devices_of_this_machine() {
    let driver = match nvml::Nvml::load() {
        Ok(driver) => driver,
        Err(reason) => {
            eprintln!("SKIPPED: no NVML on this machine ({reason})");
            return;
        }
    };
    let devices = driver.devices().expect("NVML lists its devices");
    if devices.is_empty() {
        eprintln!("SKIPPED: NVML loaded but lists no device");
        return;
    }
    for device in &devices {
        assert!(device
            .uuid
            .as_deref()
            .is_some_and(|u| u.starts_with("GPU-") || u.starts_with("MIG-")));
        driver.read(device).expect("NVML reads a device it listed");
    }
}
