//! Packs made of parts (issue 31): shared distributions stored once per node, environments
//! composed from links, corrupt parts refused, concurrent compositions agreeing, and eviction
//! that spares what a composition in use links to.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::assert_succeeded;

/// Two functions of the real test venv: one uses numpy, the other numpy and yaml.
struct Store {
    _dir: tempfile::TempDir,
    path: PathBuf,
    numpy_only: PathBuf,
    numpy_yaml: PathBuf,
    /// fb's parts written into a store of their own (no part remembered from fa's).
    numpy_yaml_alone: PathBuf,
    venv: PathBuf,
}

fn store() -> Option<&'static Store> {
    static STORE: OnceLock<Option<Store>> = OnceLock::new();
    STORE.get_or_init(make_store).as_ref()
}

fn make_store() -> Option<Store> {
    let venv = common::real_venv()?;
    let dir = tempfile::tempdir().unwrap();
    let code = dir.path().join("code");
    std::fs::create_dir(&code).unwrap();
    std::fs::write(
        code.join("fa.py"),
        "def mean(n):\n    import numpy as np\n    return float(np.arange(n).mean())\n",
    )
    .unwrap();
    std::fs::write(
        code.join("fb.py"),
        "def dump(n):\n    import numpy as np\n    import yaml\n    return yaml.safe_dump({'sum': int(np.arange(n).sum())})\n",
    )
    .unwrap();
    let path = dir.path().join("store");
    let pack = |target: &str, path: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_lfm"))
            .args(["pack", target, "--closure", "slice", "--quiet", "--env"])
            .arg(&venv)
            .arg("--parts")
            .arg(path)
            .current_dir(&code)
            .env("LFM_CACHE_DIR", dir.path().join("analyze-home"))
            .output()
            .unwrap();
        assert_succeeded(&out);
        code.join(String::from_utf8(out.stdout).unwrap().trim())
    };
    let numpy_only = pack("fa.py:mean", &path);
    let numpy_yaml = pack("fb.py:dump", &path);
    let numpy_yaml_alone = pack("fb.py:dump", &dir.path().join("alone"));
    Some(Store {
        _dir: dir,
        path,
        numpy_only,
        numpy_yaml,
        numpy_yaml_alone,
        venv,
    })
}

fn manifest(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn part_hash(manifest: &serde_json::Value, name: &str) -> String {
    manifest["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|part| part["name"] == name)
        .unwrap_or_else(|| panic!("no part {name} in {manifest}"))["sha256"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `lfm unpack` of a parts manifest into `cache`, with the venv's python3 first on PATH (it
/// compiles the parts).
fn unpack(store: &Store, cache: &Path, manifest: &Path) -> Output {
    let path = venv_first(store);
    Command::new(env!("CARGO_BIN_EXE_lfm"))
        .arg("unpack")
        .arg(manifest)
        .arg("--cache")
        .arg(cache)
        .env("PATH", path)
        .output()
        .unwrap()
}

fn composed(store: &Store, cache: &Path, manifest: &Path) -> PathBuf {
    let out = unpack(store, cache, manifest);
    assert_succeeded(&out);
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// PATH with the venv's bin first: its python3 compiles the parts.
fn venv_first(store: &Store) -> String {
    format!(
        "{}:{}",
        store.venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Run python code through the composition's `run`, its app/ on the path.
fn python(store: &Store, root: &Path, code: &str) -> Output {
    let path = format!("{}:/usr/bin:/bin", store.venv.join("bin").display());
    Command::new(root.join("run"))
        .args(["python3", "-c", code])
        .env("PATH", path)
        .env("PYTHONPATH", root.join("app"))
        .output()
        .unwrap()
}

#[test]
fn two_functions_sharing_numpy_store_it_once_and_each_imports_only_its_own_closure() {
    let Some(store) = store() else { return };
    let (a, b) = (manifest(&store.numpy_only), manifest(&store.numpy_yaml));
    assert_eq!(a["format"], "lfm-parts/1");
    let numpy = part_hash(&a, "numpy");
    assert_eq!(
        numpy,
        part_hash(&b, "numpy"),
        "the same numpy, the same part"
    );
    let alone = manifest(&store.numpy_yaml_alone);
    assert_eq!(alone, b, "the same bytes when no part was remembered");
    let blobs = std::fs::read_dir(&store.path)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tar.zst"))
        .count();
    assert_eq!(blobs, 4, "numpy, PyYAML and one part per function");

    let cache = tempfile::tempdir().unwrap();
    let root_a = composed(store, cache.path(), &store.numpy_only);
    let root_b = composed(store, cache.path(), &store.numpy_yaml);
    assert_ne!(root_a, root_b);
    let numpy_init = |root: &Path| {
        std::fs::metadata(root.join("env/lib/python3.11/site-packages/numpy/__init__.py")).unwrap()
    };
    assert_eq!(
        numpy_init(&root_a).ino(),
        numpy_init(&root_b).ino(),
        "one numpy on disk"
    );
    let numpy_dirs = walk_names(cache.path(), "numpy-2.1.3.dist-info");
    assert_eq!(numpy_dirs, 1, "numpy unpacked once: {numpy_dirs}");

    let ran = python(store, &root_a, "import fa; print(fa.mean(5))");
    assert_succeeded(&ran);
    assert_eq!(String::from_utf8_lossy(&ran.stdout).trim(), "2.0");
    let ran = python(store, &root_b, "import fb; print(fb.dump(5), end='')");
    assert_succeeded(&ran);
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "sum: 10\n");
    let ran = python(store, &root_a, "import yaml");
    assert!(
        !ran.status.success(),
        "yaml is not in numpy's function's closure"
    );

    // Parts are sealed and compiled: nothing is written into them by imports.
    let numpy_dir = root_a.join("env/lib/python3.11/site-packages/numpy");
    let mode = std::fs::metadata(&numpy_dir).unwrap().mode();
    assert_eq!(mode & 0o222, 0, "a part is read-only");
    assert!(
        numpy_dir.join("__pycache__").is_dir(),
        "compiled when unpacked"
    );
}

/// Real directories named `name` anywhere under `dir` (links not followed).
fn walk_names(dir: &Path, name: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| usize::from(entry.file_name() == name) + walk_names(&entry.path(), name))
        .sum()
}

#[test]
fn a_corrupt_part_is_refused_removed_and_taken_again_once_good() {
    let Some(store) = store() else { return };
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&store.path).unwrap().flatten() {
        if entry.file_type().unwrap().is_dir() {
            continue;
        }
        std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
    }
    let manifest_path = copy.path().join(store.numpy_yaml.file_name().unwrap());
    let yaml = part_hash(&manifest(&manifest_path), "PyYAML");
    let blob = copy.path().join(format!("{yaml}.tar.zst"));
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&blob, &bytes).unwrap();

    let cache = tempfile::tempdir().unwrap();
    let out = unpack(store, cache.path(), &manifest_path);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("PyYAML") && stderr.contains("corrupt"),
        "{stderr}"
    );
    assert!(
        !blob.exists(),
        "a corrupt part is removed, so the next fetch takes it again"
    );
    assert!(
        !cache.path().join(&yaml).exists(),
        "nothing of it entered the cache"
    );

    std::fs::copy(store.path.join(format!("{yaml}.tar.zst")), &blob).unwrap();
    let root = composed(store, cache.path(), &manifest_path);
    let ran = python(store, &root, "import fb; print(fb.dump(3), end='')");
    assert_succeeded(&ran);
}

#[test]
fn concurrent_compositions_agree_on_one_root_and_unpack_each_part_once() {
    let Some(store) = store() else { return };
    let cache = tempfile::tempdir().unwrap();
    let path = venv_first(store);
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_lfm"))
                .arg("unpack")
                .arg(&store.numpy_yaml)
                .arg("--cache")
                .arg(cache.path())
                .env("PATH", &path)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let roots: Vec<String> = children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        })
        .collect();
    assert!(roots.iter().all(|root| root == &roots[0]), "{roots:?}");
    let log = std::fs::read_to_string(cache.path().join("lfm-unpack.log")).unwrap();
    let parts = manifest(&store.numpy_yaml)["parts"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        log.lines().count(),
        parts + 1,
        "each part once, one composition:\n{log}"
    );
    let ran = python(
        store,
        Path::new(&roots[0]),
        "import fb; print(fb.dump(2), end='')",
    );
    assert_succeeded(&ran);
}

#[test]
fn eviction_spares_the_parts_of_a_composition_in_use_and_takes_the_others() {
    let Some(store) = store() else { return };
    let cache = tempfile::tempdir().unwrap();
    let root_a = composed(store, cache.path(), &store.numpy_only);
    let root_b = composed(store, cache.path(), &store.numpy_yaml);
    let yaml = part_hash(&manifest(&store.numpy_yaml), "PyYAML");
    let numpy = part_hash(&manifest(&store.numpy_only), "numpy");
    // A process runs from function A's composition without a lease (as after `lfm unpack`).
    let mut runs_from_a = Command::new("sleep")
        .arg("60")
        .current_dir(&root_a)
        .spawn()
        .unwrap();
    let pruned = Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(["cache", "--prune", "0", "--cache"])
        .arg(cache.path())
        .output()
        .unwrap();
    runs_from_a.kill().unwrap();
    runs_from_a.wait().unwrap();
    assert_succeeded(&pruned);
    assert!(root_a.join("run").exists(), "the composition in use stays");
    assert!(
        cache.path().join(&numpy).exists(),
        "numpy, which it links to, stays"
    );
    assert!(!root_b.exists(), "B's composition was not in use");
    assert!(!cache.path().join(&yaml).exists(), "nor was yaml's part");
    // B composes again from its parts (yaml's unpacked anew from the store).
    let root_b = composed(store, cache.path(), &store.numpy_yaml);
    let ran = python(store, &root_b, "import fb; print(fb.dump(4), end='')");
    assert_succeeded(&ran);
}

#[test]
fn a_call_from_parts_runs_and_its_report_does_not_count_their_unpacking() {
    let Some(store) = store() else { return };
    let home = tempfile::tempdir().unwrap();
    let report = home.path().join("report.json");
    let path = venv_first(store);
    let out = Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(["call", "--args", "[5]", "--report"])
        .arg(&report)
        .arg("--pack")
        .arg(&store.numpy_yaml)
        .arg("fb:dump")
        .env("LFM_CACHE_DIR", home.path())
        .env("PATH", path)
        .output()
        .unwrap();
    assert_succeeded(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "\"sum: 10\\n\""
    );
    // The parts were unpacked and compiled (seconds of CPU) before the call started.
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let cpu = report["cpu_time"]["total"].as_f64().unwrap();
    let wall = report["wall_time"].as_f64().unwrap();
    let cores = std::thread::available_parallelism().unwrap().get() as f64;
    assert!(
        cpu <= wall * cores + 0.05,
        "cpu {cpu} s in {wall} s of wall on {cores} cores"
    );
}

/// A distribution installed by hand into `site`: its files and a dist-info listing them.
fn install_by_hand(site: &Path, name: &str, files: &[(&str, &str)]) {
    let info = site.join(format!("{name}-1.0.dist-info"));
    std::fs::create_dir_all(&info).unwrap();
    let mut record = String::new();
    for (path, text) in files {
        let file = site.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
        record.push_str(&format!("{path},,\n"));
    }
    std::fs::write(
        info.join("METADATA"),
        format!("Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"),
    )
    .unwrap();
    record.push_str(&format!(
        "{name}-1.0.dist-info/METADATA,,\n{name}-1.0.dist-info/RECORD,,\n"
    ));
    std::fs::write(info.join("RECORD"), record).unwrap();
}

#[test]
fn a_namespace_package_split_across_parts_and_a_pth_file_work_as_in_a_site_packages() {
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let site = venv.join("lib/python3.11/site-packages");
    install_by_hand(&site, "ns-a", &[("nsdemo/a.py", "WHO = 'a'\n")]);
    install_by_hand(
        &site,
        "ns-b",
        &[
            ("nsdemo/b.py", "WHO = 'b'\n"),
            ("ns_b.pth", "import nsb_hook\n"),
            ("nsb_hook.py", "import sys\nsys.nsb_hooked = True\n"),
        ],
    );
    let code = dir.path().join("code");
    std::fs::create_dir(&code).unwrap();
    std::fs::write(
        code.join("ns.py"),
        "def both():\n    import sys\n    import nsdemo.a, nsdemo.b\n    return nsdemo.a.WHO + nsdemo.b.WHO + str(getattr(sys, 'nsb_hooked', False))\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args([
            "pack",
            "ns.py:both",
            "--closure",
            "slice",
            "--quiet",
            "--env",
        ])
        .arg(&venv)
        .arg("--parts")
        .arg(dir.path().join("store"))
        .current_dir(&code)
        .env("LFM_CACHE_DIR", dir.path().join("analyze-home"))
        .output()
        .unwrap();
    assert_succeeded(&out);
    let manifest_path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    let listed = manifest(&manifest_path);
    part_hash(&listed, "ns-a");
    part_hash(&listed, "ns-b");
    let unpacked = Command::new(env!("CARGO_BIN_EXE_lfm"))
        .arg("unpack")
        .arg(&manifest_path)
        .arg("--cache")
        .arg(dir.path().join("cache"))
        .output()
        .unwrap();
    assert_succeeded(&unpacked);
    let root = PathBuf::from(String::from_utf8(unpacked.stdout).unwrap().trim());
    let nsdemo = root.join("env/lib/python3.11/site-packages/nsdemo");
    assert!(
        std::fs::symlink_metadata(&nsdemo).unwrap().is_dir(),
        "a directory two parts share is made in the composition"
    );
    let ran = Command::new(root.join("run"))
        .args(["python3", "-c", "import ns; print(ns.both())"])
        .env("PYTHONPATH", root.join("app"))
        .output()
        .unwrap();
    assert_succeeded(&ran);
    assert_eq!(String::from_utf8_lossy(&ran.stdout).trim(), "abTrue");
    assert_eq!(
        String::from_utf8_lossy(&ran.stderr),
        "",
        "python starts without a complaint"
    );
}
