//! `lfm pack` / `unpack` / `verify` against a real venv, and the unpacker against hostile
//! archives built here.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{assert_succeeded, assert_succeeded_with, lfm, real_venv};

const JOB: &str = r#"
def uses_numpy(n):
    import numpy as np
    return float(np.arange(n).sum())


def uses_yaml(text):
    import yaml
    return yaml.safe_load(text)


def uses_requests():
    import requests
    return requests.__name__


def uses_a_numpy_test_module():
    import numpy.linalg.tests as tests
    return tests.__name__
"#;

struct Fixture {
    dir: tempfile::TempDir,
    venv: PathBuf,
}

impl Fixture {
    fn new() -> Option<Fixture> {
        let venv = real_venv()?;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("job.py"), JOB).unwrap();
        Some(Fixture { dir, venv })
    }

    fn job(&self, function: &str) -> String {
        format!("{}:{function}", self.dir.path().join("job.py").display())
    }

    fn pack(&self, inputs: &[&str], extra: &[&str], name: &str) -> PathBuf {
        let output = self.dir.path().join(name);
        let mut args = vec![
            "pack",
            "--quiet",
            "--env",
            self.venv.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(inputs);
        let result = lfm(&args);
        assert_succeeded_with(&result, format_args!("lfm {args:?}"));
        output
    }

    fn unpack(&self, pack: &Path) -> PathBuf {
        let cache = self.dir.path().join("cache");
        let result = lfm(&[
            "unpack",
            "--cache",
            cache.to_str().unwrap(),
            pack.to_str().unwrap(),
        ]);
        assert_succeeded(&result);
        PathBuf::from(String::from_utf8(result.stdout).unwrap().trim())
    }
}

fn manifest(root: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(root.join("lfm-manifest.json")).unwrap()).unwrap()
}

fn dist_names(manifest: &serde_json::Value) -> Vec<String> {
    manifest["distributions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_lowercase())
        .collect()
}

fn site(root: &Path) -> PathBuf {
    root.join("env/lib/python3.11/site-packages")
}

#[test]
fn a_function_pack_holds_its_closure_and_nothing_else() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let numpy_pack = fixture.pack(&[&fixture.job("uses_numpy")], &[], "numpy.tar.zst");
    let root = fixture.unpack(&numpy_pack);
    assert_eq!(dist_names(&manifest(&root)), ["numpy"]);
    assert!(site(&root).join("numpy/__init__.py").exists());
    assert!(!site(&root).join("yaml").exists());
    assert!(!site(&root).join("requests").exists());

    let yaml_pack = fixture.pack(&[&fixture.job("uses_yaml")], &[], "yaml.tar.zst");
    let root = fixture.unpack(&yaml_pack);
    assert_eq!(dist_names(&manifest(&root)), ["pyyaml"]);
    assert!(site(&root).join("yaml/__init__.py").exists());
    assert!(!site(&root).join("numpy").exists());

    // requests brings its Requires-Dist closure.
    let requests_pack = fixture.pack(&[&fixture.job("uses_requests")], &[], "requests.tar.zst");
    let requests_root = fixture.unpack(&requests_pack);
    // Entry points (charset-normalizer's `normalizer`) are relocatable.
    let script = std::fs::read_to_string(requests_root.join("env/bin/normalizer")).unwrap();
    assert!(script.starts_with("#!/usr/bin/env python3\n"), "{script}");
    let names = dist_names(&manifest(&requests_root));
    assert_eq!(
        names,
        [
            "certifi",
            "charset-normalizer",
            "idna",
            "requests",
            "urllib3"
        ]
    );
    // No bytecode is shipped.
    assert!(walk(&root)
        .iter()
        .all(|p| !p.contains("__pycache__") && !p.ends_with(".pyc")));
}

#[test]
fn a_closure_pack_leaves_out_the_test_directories_no_closure_module_lies_in() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let pack = fixture.pack(&[&fixture.job("uses_numpy")], &[], "numpy.tar.zst");
    let root = fixture.unpack(&pack);
    let numpy = &manifest(&root)["distributions"][0];
    assert!(numpy["tests_left_out"].as_u64().unwrap() > 100, "{numpy}");
    assert!(!site(&root).join("numpy/linalg/tests").exists());
    assert!(site(&root).join("numpy/testing/__init__.py").exists());
    let call = |pack: &Path, function: &str, args: &str| {
        lfm(&[
            "call",
            "--quiet",
            "--pack",
            pack.to_str().unwrap(),
            &fixture.job(function),
            "--args",
            args,
        ])
    };
    let ran = call(&pack, "uses_numpy", "[4]");
    assert_succeeded(&ran);
    assert_eq!(String::from_utf8_lossy(&ran.stdout).trim(), "6.0");
    // With --cache-dir the pack is unpacked there, as the rest of the call's cache is.
    let cache = tempfile::tempdir().unwrap();
    let pack_arg = pack.to_str().unwrap();
    let cache_arg = cache.path().to_str().unwrap();
    let job = fixture.job("uses_numpy");
    let ran = lfm(&[
        "call",
        "--quiet",
        "--pack",
        pack_arg,
        "--cache-dir",
        cache_arg,
        &job,
        "--args",
        "[4]",
    ]);
    assert_eq!(String::from_utf8_lossy(&ran.stdout).trim(), "6.0");
    let unpacked = std::fs::read_dir(cache.path().join("packs"))
        .unwrap()
        .count();
    assert!(unpacked > 0, "nothing unpacked under --cache-dir");

    // A function that imports a module of numpy's tests gets that directory, and only it.
    let pack = fixture.pack(
        &[&fixture.job("uses_a_numpy_test_module")],
        &[],
        "numpy-tests.tar.zst",
    );
    let root = fixture.unpack(&pack);
    assert!(site(&root)
        .join("numpy/linalg/tests/test_linalg.py")
        .exists());
    assert!(!site(&root).join("numpy/fft/tests").exists());
    let ran = call(&pack, "uses_a_numpy_test_module", "[]");
    assert_succeeded(&ran);
    assert!(String::from_utf8_lossy(&ran.stdout).contains("numpy.linalg.tests"));

    // --all packs the environment as it is.
    let pack = fixture.pack(&["--all"], &[], "all.tar.zst");
    let root = fixture.unpack(&pack);
    assert!(site(&root)
        .join("numpy/linalg/tests/test_linalg.py")
        .exists());
}

#[test]
fn packs_are_deterministic_whatever_the_thread_count() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let job = fixture.job("uses_requests");
    let first = std::fs::read(fixture.pack(&[&job], &["--threads", "1"], "a.tar.zst")).unwrap();
    let second = std::fs::read(fixture.pack(&[&job], &["--threads", "1"], "b.tar.zst")).unwrap();
    let threaded = std::fs::read(fixture.pack(&[&job], &["--threads", "2"], "c.tar.zst")).unwrap();
    assert!(first == second, "two packs of the same inputs differ");
    assert!(first == threaded, "1 and 2 threads give different packs");
    // Without -o, the pack is named by its content hash (made from the same working directory,
    // since the Spec records paths relative to it).
    let in_dir = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_lfm"))
            .args(args)
            .current_dir(fixture.dir.path())
            .output()
            .unwrap();
        assert!(output.status.success());
        String::from_utf8(output.stdout)
            .unwrap()
            .trim()
            .trim_start_matches("./")
            .to_string()
    };
    let venv = fixture.venv.to_str().unwrap();
    let named = in_dir(&["pack", "--quiet", "--env", venv, &job]);
    let explicit = in_dir(&[
        "pack",
        "--quiet",
        "--env",
        venv,
        "-o",
        "explicit.tar.zst",
        &job,
    ]);
    let named_bytes = std::fs::read(fixture.dir.path().join(&named)).unwrap();
    assert!(
        named.starts_with("lfm-") && named.ends_with(".tar.zst"),
        "{named}"
    );
    assert!(named_bytes == std::fs::read(fixture.dir.path().join(explicit)).unwrap());
    assert_eq!(
        named,
        format!("lfm-{}.tar.zst", blake3_prefix(&named_bytes))
    );
}

#[test]
fn verify_passes_and_names_what_is_missing() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let pack = fixture.pack(&[&fixture.job("uses_yaml")], &[], "yaml.tar.zst");
    let cache = fixture.dir.path().join("cache");
    let ok = lfm(&[
        "verify",
        "--cache",
        cache.to_str().unwrap(),
        pack.to_str().unwrap(),
    ]);
    assert_succeeded(&ok);
    // An import pack (the default): the job module itself and yaml.
    assert!(
        String::from_utf8_lossy(&ok.stdout).contains("2 modules imported, 0 failed"),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );

    // A spec whose distributions were edited out: the pack lacks yaml, and verify says so.
    let spec_output = lfm(&[
        "analyze",
        "--no-cache",
        "--closure",
        "import",
        "--format",
        "json",
        "--env",
        fixture.venv.to_str().unwrap(),
        &fixture.job("uses_yaml"),
    ]);
    let mut spec: serde_json::Value = serde_json::from_slice(&spec_output.stdout).unwrap();
    spec["targets"][0]["distributions"] = serde_json::json!([]);
    let spec_path = fixture.dir.path().join("broken-spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let broken = fixture.pack(&[spec_path.to_str().unwrap()], &[], "broken.tar.zst");
    let failed = lfm(&[
        "verify",
        "--cache",
        cache.to_str().unwrap(),
        broken.to_str().unwrap(),
    ]);
    assert_eq!(failed.status.code(), Some(6));
    let stdout = String::from_utf8_lossy(&failed.stdout);
    assert!(
        stdout.contains("FAILED   yaml: ModuleNotFoundError: No module named 'yaml'"),
        "{stdout}"
    );
}

#[test]
fn a_function_runs_from_the_unpacked_pack_alone() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let pack = fixture.pack(&[&fixture.job("uses_numpy")], &[], "numpy.tar.zst");
    let root = fixture.unpack(&pack);
    // -S: no site-packages of the machine's python; only the pack and the stdlib.
    let output = Command::new(root.join("run"))
        .args([
            "python3",
            "-S",
            "-c",
            "import job, numpy; print(job.uses_numpy(4), numpy.__file__)",
        ])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_succeeded(&output);
    assert!(stdout.starts_with("6.0 "), "{stdout}");
    assert!(
        stdout.contains(root.to_str().unwrap()),
        "numpy did not come from the pack: {stdout}"
    );
}

#[test]
fn an_installed_module_packed_as_the_target_travels_whole_with_its_distribution() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    // yaml/__init__.py imports its own submodules: alone under app/, first on the path, it
    // hid the distribution's package ("No module named 'yaml.error'").
    let pack = fixture.pack(&["yaml"], &[], "yaml.tar.zst");
    let root = fixture.unpack(&pack);
    assert!(
        !root.join("app/yaml").exists(),
        "yaml was packed as local code"
    );
    let output = Command::new(root.join("run"))
        .args([
            "python3",
            "-S",
            "-c",
            "import yaml; print(yaml.safe_load('a: 1'), yaml.__file__)",
        ])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_succeeded(&output);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("{'a': 1} "), "{stdout}");
    assert!(
        stdout.contains(&site(&root).display().to_string()),
        "yaml did not come from the pack's site-packages: {stdout}"
    );
}

#[test]
fn a_self_contained_pack_runs_without_any_python_on_path() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let pack = fixture.pack(
        &[&fixture.job("uses_numpy")],
        &["--self-contained"],
        "self-contained.tar.zst",
    );
    let root = fixture.unpack(&pack);
    assert_eq!(
        manifest(&root)["run"]["interpreter"],
        "python/bin/python3.11"
    );
    let output = Command::new(root.join("run"))
        .args([
            "python3",
            "-c",
            "import job, sys; print(job.uses_numpy(4), sys.executable)",
        ])
        .env_clear()
        .env("PATH", "/nonexistent")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_succeeded(&output);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("6.0 "), "{stdout}");
    assert!(
        stdout
            .trim_end()
            .ends_with(&format!("{}/python/bin/python3", root.display())),
        "not the pack's interpreter: {stdout}"
    );
    // sysconfig imports its platform's data module by a computed name (numpy and pandas ask
    // it at import time): it must be in the trimmed stdlib.
    let sysconfig = Command::new(root.join("run"))
        .args([
            "python3",
            "-c",
            "import sysconfig; print(sysconfig.get_config_var('SOABI'))",
        ])
        .env_clear()
        .env("PATH", "/nonexistent")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_succeeded(&sysconfig);
    assert!(String::from_utf8_lossy(&sysconfig.stdout).contains("cpython-"));
    let cache = fixture.dir.path().join("cache");
    let verified = lfm(&[
        "verify",
        "--python",
        "/nonexistent/python3",
        "--cache",
        cache.to_str().unwrap(),
        pack.to_str().unwrap(),
    ]);
    assert_succeeded_with(&verified, "verify must use the pack's own interpreter");
}

#[test]
fn eight_concurrent_unpacks_make_one_extraction() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let pack = fixture.pack(&[&fixture.job("uses_numpy")], &[], "numpy.tar.zst");
    let cache = fixture.dir.path().join("shared-cache");
    let children: Vec<_> = (0..8)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_lfm"))
                .args([
                    "unpack",
                    "--cache",
                    cache.to_str().unwrap(),
                    pack.to_str().unwrap(),
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let roots: Vec<String> = children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().unwrap();
            assert!(output.status.success());
            String::from_utf8(output.stdout).unwrap().trim().to_string()
        })
        .collect();
    assert!(roots.iter().all(|r| r == &roots[0]), "{roots:?}");
    let log = std::fs::read_to_string(cache.join("lfm-unpack.log")).unwrap();
    assert_eq!(log.lines().count(), 1, "extractions: {log}");
    let leftovers: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn conda_prefix_packages_are_packed_from_conda_meta() {
    // A prefix in conda's layout: conda-meta/<name>-<version>-<build>.json lists each package's
    // files (here a pure-Python package with no dist-info, as some conda packages are).
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("condaenv");
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&prefix)
        .status()
        .unwrap();
    assert!(status.success());
    let site = prefix.join("lib/python3.11/site-packages");
    std::fs::create_dir_all(site.join("condapkg")).unwrap();
    std::fs::write(site.join("condapkg/__init__.py"), "VALUE = 42\n").unwrap();
    std::fs::create_dir_all(prefix.join("conda-meta")).unwrap();
    let meta = serde_json::json!({
        "name": "condapkg", "version": "1.2.3", "build": "py_0", "build_number": 0,
        "channel": "https://conda.anaconda.org/conda-forge/noarch", "subdir": "noarch",
        "depends": ["python >=3.8"],
        "files": ["lib/python3.11/site-packages/condapkg/__init__.py"],
        "paths_data": {"paths": [{"_path": "lib/python3.11/site-packages/condapkg/__init__.py", "path_type": "hardlink", "size_in_bytes": 11}], "paths_version": 1},
        "link": {"source": "/opt/conda/pkgs/condapkg-1.2.3-py_0", "type": 1}
    });
    std::fs::write(
        prefix.join("conda-meta/condapkg-1.2.3-py_0.json"),
        meta.to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("job.py"),
        "def f():\n    import condapkg\n    return condapkg.VALUE\n",
    )
    .unwrap();
    let job = format!("{}:f", dir.path().join("job.py").display());
    let spec = lfm(&[
        "analyze",
        "--no-cache",
        "--format",
        "json",
        "--env",
        prefix.to_str().unwrap(),
        &job,
    ]);
    let spec: serde_json::Value = serde_json::from_slice(&spec.stdout).unwrap();
    let dist = &spec["targets"][0]["distributions"][0];
    assert_eq!(dist["name"], "condapkg");
    assert_eq!(dist["version"], "1.2.3");
    assert_eq!(dist["conda_name"], "condapkg");
    let conda_format = lfm(&[
        "analyze",
        "--no-cache",
        "--format",
        "conda",
        "--env",
        prefix.to_str().unwrap(),
        &job,
    ]);
    assert!(String::from_utf8_lossy(&conda_format.stdout).contains("  - condapkg=1.2.3\n"));

    let out = dir.path().join("conda.tar.zst");
    let packed = lfm(&[
        "pack",
        "--quiet",
        "--env",
        prefix.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        &job,
    ]);
    assert_succeeded(&packed);
    let cache = dir.path().join("cache");
    let root = PathBuf::from(
        String::from_utf8(
            lfm(&[
                "unpack",
                "--cache",
                cache.to_str().unwrap(),
                out.to_str().unwrap(),
            ])
            .stdout,
        )
        .unwrap()
        .trim(),
    );
    assert!(root
        .join("env/lib/python3.11/site-packages/condapkg/__init__.py")
        .exists());
    let verified = lfm(&[
        "verify",
        "--cache",
        cache.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_succeeded(&verified);
}

#[test]
fn cache_max_evicts_the_least_recently_used_pack() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let mut roots = Vec::new();
    for name in ["first", "second"] {
        let archive = dir.path().join(format!("{name}.tar"));
        write_raw_tar(
            &archive,
            &[Raw::file(&format!("{name}.txt"), &[b'x'; 4096])],
        );
        let output = lfm(&[
            "unpack",
            "--cache",
            cache.to_str().unwrap(),
            "--cache-max",
            "6k",
            archive.to_str().unwrap(),
        ]);
        assert_succeeded(&output);
        roots.push(PathBuf::from(
            String::from_utf8(output.stdout).unwrap().trim(),
        ));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Two 4 KiB packs do not fit in 6 KiB: the first (least recently used) goes, the new one stays.
    assert!(!roots[0].exists(), "the older pack was not evicted");
    assert!(roots[1].join("second.txt").exists());
}

/// Hostile archives, each refused with nothing written outside the cache and no root left.
#[test]
fn hostile_archives_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let cases: Vec<(&str, Vec<Raw>, &str)> = vec![
        (
            "traversal",
            vec![Raw::file("../outside/evil", b"x")],
            "'..'",
        ),
        (
            "absolute",
            vec![Raw::file(&format!("{}/abs", outside.display()), b"x")],
            "absolute path",
        ),
        (
            "symlink-escape",
            vec![Raw::symlink("link", "../../outside")],
            "leaves the root",
        ),
        (
            "symlink-absolute",
            vec![Raw::symlink("link", "/etc")],
            "absolute path",
        ),
        (
            "write-through-symlink",
            vec![Raw::symlink("d", "."), Raw::file("d/x", b"x")],
            "not a directory",
        ),
        (
            "hardlink-escape",
            vec![Raw::hardlink("h", "../../etc/passwd")],
            "leaves the root",
        ),
        (
            "hardlink-unknown",
            vec![Raw::hardlink("h", "never-extracted")],
            "not a file extracted earlier",
        ),
        (
            "device",
            vec![Raw::special("dev", tar::EntryType::Char)],
            "not allowed",
        ),
        (
            "fifo",
            vec![Raw::special("fifo", tar::EntryType::Fifo)],
            "not allowed",
        ),
        (
            "duplicate",
            vec![Raw::file("a", b"1"), Raw::file("a", b"2")],
            "duplicate path",
        ),
        (
            "bomb",
            vec![Raw::file("big", &vec![0u8; 2 << 20])],
            "tar bomb",
        ),
    ];
    for (name, entries, rule) in cases {
        let archive = dir.path().join(format!("{name}.tar"));
        write_raw_tar(&archive, &entries);
        let cache = dir.path().join(format!("cache-{name}"));
        let output = lfm(&[
            "unpack",
            "--max-bytes",
            "1M",
            "--cache",
            cache.to_str().unwrap(),
            archive.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(5), "{name}: {stderr}");
        assert!(
            stderr.contains("refused entry") && stderr.contains(rule),
            "{name}: {stderr}"
        );
        let outside_files = std::fs::read_dir(&outside).unwrap().count();
        assert_eq!(outside_files, 0, "{name}: something was written outside");
        let roots: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .collect();
        assert!(
            roots.is_empty(),
            "{name}: a tree was left in the cache: {:?}",
            roots.iter().map(|e| e.path()).collect::<Vec<_>>()
        );
    }
    // A tar.gz from another tool (conda-pack, TaskVine) unpacks too.
    let plain = dir.path().join("ok.tar.gz");
    let status = Command::new("tar")
        .args(["-czf"])
        .arg(&plain)
        .arg("-C")
        .arg(dir.path())
        .arg("outside")
        .status()
        .unwrap();
    assert!(status.success());
    let output = lfm(&[
        "unpack",
        "--cache",
        dir.path().join("cache-ok").to_str().unwrap(),
        plain.to_str().unwrap(),
    ]);
    assert_succeeded(&output);
}

struct Raw {
    path: String,
    kind: tar::EntryType,
    link: Option<String>,
    data: Vec<u8>,
}

impl Raw {
    fn file(path: &str, data: &[u8]) -> Raw {
        Raw {
            path: path.into(),
            kind: tar::EntryType::Regular,
            link: None,
            data: data.to_vec(),
        }
    }
    fn symlink(path: &str, target: &str) -> Raw {
        Raw {
            path: path.into(),
            kind: tar::EntryType::Symlink,
            link: Some(target.into()),
            data: Vec::new(),
        }
    }
    fn hardlink(path: &str, target: &str) -> Raw {
        Raw {
            path: path.into(),
            kind: tar::EntryType::Link,
            link: Some(target.into()),
            data: Vec::new(),
        }
    }
    fn special(path: &str, kind: tar::EntryType) -> Raw {
        Raw {
            path: path.into(),
            kind,
            link: None,
            data: Vec::new(),
        }
    }
}

/// Names are written into the header bytes directly: the tar crate's builder refuses `..` and
/// absolute paths, which is exactly what these archives need.
fn write_raw_tar(path: &Path, entries: &[Raw]) {
    let mut builder = tar::Builder::new(std::fs::File::create(path).unwrap());
    for entry in entries {
        let mut header = tar::Header::new_old();
        {
            let old = header.as_old_mut();
            old.name[..entry.path.len()].copy_from_slice(entry.path.as_bytes());
            if let Some(link) = &entry.link {
                old.linkname[..link.len()].copy_from_slice(link.as_bytes());
            }
        }
        header.set_entry_type(entry.kind);
        header.set_size(entry.data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append(&header, entry.data.as_slice()).unwrap();
    }
    builder.finish().unwrap();
}

/// First 16 hex digits of the pack's blake3: lfm unpack names its cache root by the same hash.
fn blake3_prefix(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.tar.zst");
    std::fs::write(&archive, bytes).unwrap();
    let cache = dir.path().join("cache");
    let root = lfm(&[
        "unpack",
        "--cache",
        cache.to_str().unwrap(),
        archive.to_str().unwrap(),
    ]);
    let root = String::from_utf8(root.stdout).unwrap();
    Path::new(root.trim())
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()[..16]
        .to_string()
}

fn walk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path.clone());
            }
            out.push(path.display().to_string());
        }
    }
    out
}

#[test]
fn a_function_pack_is_enough_to_call_its_function_by_slice() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let tasks = fixture.dir.path().join("tasks.py");
    std::fs::write(
        &tasks,
        "import bs4  # numpy_sum does not need it: not in its pack\n\n\ndef numpy_sum(n):\n    import numpy as np\n    return float(np.arange(n).sum())\n",
    )
    .unwrap();
    let target = format!("{}:numpy_sum", tasks.display());
    let pack = fixture.pack(&[&target], &["--closure", "slice"], "tasks.tar.zst");
    let root = fixture.unpack(&pack);
    let names = dist_names(&manifest(&root));
    assert!(names.iter().any(|n| n == "numpy"), "{names:?}");
    assert!(!names.iter().any(|n| n == "beautifulsoup4"), "{names:?}");

    let dir = fixture.dir.path().to_str().unwrap();
    let call = |extra: &[&str]| {
        let mut args = vec![
            "call",
            "--quiet",
            "--pack",
            pack.to_str().unwrap(),
            "tasks.py:numpy_sum",
            "--args",
            "[4]",
        ];
        args.extend_from_slice(extra);
        common::lfm_in(dir, &args)
    };
    // By slice: only the def runs, so the pack is enough.
    let output = call(&[]);
    assert_succeeded(&output);
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "6.0");
    // The whole module needs bs4, which the pack does not hold: a clear failure.
    let output = call(&["--import-module"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("No module named 'bs4'"), "{stderr}");
    assert!(stderr.contains("tasks.py\", line 1"), "{stderr}");
}

#[test]
fn an_import_pack_lets_the_worker_import_the_module_as_a_by_reference_pickle_does() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let wf = fixture.dir.path().join("wf");
    std::fs::create_dir(&wf).unwrap();
    std::fs::write(wf.join("__init__.py"), "from . import util\n").unwrap();
    std::fs::write(wf.join("util.py"), "SCALE = 3\n").unwrap();
    std::fs::write(
        wf.join("tasks.py"),
        "import requests\nfrom wf import util\n\n\ndef train(n):\n    return n * util.SCALE\n",
    )
    .unwrap();
    let target = format!("{}:train", wf.join("tasks.py").display());
    let pack = fixture.pack(&[&target], &[], "wf.tar.zst");
    let root = fixture.unpack(&pack);
    let packed = manifest(&root);
    assert_eq!(packed["targets"][0]["closure"], "import");
    let files: Vec<&str> = packed["local_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for needed in ["app/wf/__init__.py", "app/wf/util.py", "app/wf/tasks.py"] {
        assert!(files.contains(&needed), "{needed} not packed: {files:?}");
    }
    assert!(dist_names(&packed).iter().any(|n| n == "requests"));
    // What Parsl's and Dask's workers do with a by-reference pickle: import the module.
    let output = Command::new(root.join("run"))
        .args([
            "python3",
            "-S",
            "-c",
            "import wf.tasks; print(wf.tasks.train(2), wf.__file__)",
        ])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_succeeded(&output);
    assert!(stdout.starts_with("6 "), "{stdout}");
    // wf is a regular package on the worker (its __init__ ran), not a namespace package.
    assert!(stdout.trim_end().ends_with("__init__.py"), "{stdout}");
    // verify imports the target's own module.
    let verify = lfm(&[
        "verify",
        "--cache",
        fixture.dir.path().join("cache").to_str().unwrap(),
        pack.to_str().unwrap(),
    ]);
    let said = String::from_utf8_lossy(&verify.stdout);
    assert_succeeded(&verify);
    assert!(said.contains(" 0 failed"), "{said}");
    let slice = fixture.pack(&[&target], &["--closure", "slice"], "wf-slice.tar.zst");
    let slice_root = fixture.unpack(&slice);
    assert!(!dist_names(&manifest(&slice_root))
        .iter()
        .any(|n| n == "requests"));
}

#[test]
fn code_run_through_a_pack_sees_the_pack_and_the_stdlib_only() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    // The machine's python3 has PyYAML (the tests' own venv tool needs it); the numpy pack has not.
    let host_has_yaml = Command::new("python3")
        .args(["-c", "import yaml"])
        .status()
        .is_ok_and(|s| s.success());
    let job = fixture.job("uses_numpy");
    let import_yaml = |root: &Path| {
        Command::new(root.join("run"))
            .args(["python3", "-c", "import numpy, yaml; print(yaml.__file__)"])
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap()
    };
    let isolated = fixture.unpack(&fixture.pack(&[&job], &[], "isolated.tar.zst"));
    assert_eq!(manifest(&isolated)["run"]["isolated"], true);
    let output = import_yaml(&isolated);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "yaml came from outside the pack");
    assert!(stderr.contains("No module named 'yaml'"), "{stderr}");
    // Entry points and `python3 -m` run the same isolated interpreter.
    let numpy = Command::new(isolated.join("run"))
        .args(["python3", "-c", "import sys, numpy; print(sys.prefix)"])
        .output()
        .unwrap();
    assert_succeeded(&numpy);
    assert!(String::from_utf8_lossy(&numpy.stdout).contains(".venv-"));

    let inherited =
        fixture.unpack(&fixture.pack(&[&job], &["--inherit-site-packages"], "inherited.tar.zst"));
    assert_eq!(manifest(&inherited)["run"]["isolated"], false);
    if host_has_yaml {
        let output = import_yaml(&inherited);
        assert_succeeded(&output);
    } else {
        println!("skipped the --inherit-site-packages half: the machine's python3 has no yaml");
    }
}

#[test]
fn an_uncompiled_pack_compiles_each_imported_module_once_into_its_cache() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let root = fixture.unpack(&fixture.pack(&[&fixture.job("uses_numpy")], &[], "pyc.tar.zst"));
    let pycs = || {
        walk(&root.join("env"))
            .into_iter()
            .filter(|f| f.ends_with(".pyc"))
            .count()
    };
    assert_eq!(pycs(), 0, "packs carry no bytecode");
    let import = || {
        let output = Command::new(root.join("run"))
            .args(["python3", "-c", "import numpy"])
            .env_remove("PYTHONDONTWRITEBYTECODE")
            .output()
            .unwrap();
        assert_succeeded(&output);
    };
    import();
    let written = pycs();
    assert!(
        written > 0,
        "the first import wrote no .pyc into the pack's cache"
    );
    import();
    assert_eq!(
        pycs(),
        written,
        "the archive's fixed mtimes keep the first run's pycs valid"
    );
}

#[test]
fn self_contained_packs_of_pandas_and_scikit_learn_functions_run_with_no_python_on_path() {
    let Some(venv) = common::sci_venv() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let wf = dir.path().join("wf");
    std::fs::create_dir(&wf).unwrap();
    std::fs::write(wf.join("__init__.py"), "").unwrap();
    std::fs::write(
        wf.join("tasks.py"),
        "import pandas as pd\nfrom sklearn.linear_model import LinearRegression\n\n\n\
         def frame_sum(n):\n    return int(pd.DataFrame({'a': range(n)})['a'].sum())\n\n\n\
         def fit(n):\n    model = LinearRegression().fit([[i] for i in range(n)], [2 * i for i in range(n)])\n    \
         return round(float(model.coef_[0]), 3)\n",
    )
    .unwrap();
    let tasks = wf.join("tasks.py");
    let pack = dir.path().join("sci.tar.zst");
    let targets = [
        format!("{}:frame_sum", tasks.display()),
        format!("{}:fit", tasks.display()),
    ];
    let packed = lfm(&[
        "pack",
        "--quiet",
        "--self-contained",
        "--env",
        venv.to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
        &targets[0],
        &targets[1],
    ]);
    assert_succeeded(&packed);
    let cache = dir.path().join("cache");
    let unpacked = lfm(&[
        "unpack",
        "--cache",
        cache.to_str().unwrap(),
        pack.to_str().unwrap(),
    ]);
    let root = PathBuf::from(String::from_utf8(unpacked.stdout).unwrap().trim());
    let output = Command::new(root.join("run"))
        .args([
            "python3",
            "-c",
            "import wf.tasks as t; print(t.frame_sum(5), t.fit(5))",
        ])
        .env_clear()
        .env("PATH", "/nonexistent")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_succeeded(&output);
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "10 2.0");
}

/// A call from a pack is checked against the closure of the pack's own environment: the
/// distributions it carries are the closure's, never "imported but not in the closure".
#[test]
fn a_call_from_a_pack_finds_the_packs_own_distributions_in_its_closure() {
    let Some(fixture) = Fixture::new() else {
        return;
    };
    let pack = fixture.pack(&[&fixture.job("uses_numpy")], &[], "numpy-closure.tar.zst");
    let report = fixture.dir.path().join("report.json");
    let ran = lfm(&[
        "call",
        "--quiet",
        "--pack",
        pack.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
        &fixture.job("uses_numpy"),
        "--args",
        "[4]",
    ]);
    assert_succeeded(&ran);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let imports = &report["imports"];
    let missed = imports["not_in_closure"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(missed.is_empty(), "{missed:?}");
    let numpy = imports["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "numpy")
        .unwrap_or_else(|| panic!("numpy was imported: {imports}"));
    let distribution = numpy["distribution"].as_str().unwrap_or_default();
    assert!(distribution.starts_with("numpy=="), "{numpy}");
}
