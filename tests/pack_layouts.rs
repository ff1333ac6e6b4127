//! Packs of environments whose distributions live outside the environment's prefix: a base
//! Python's site-packages under `--system-site-packages`, the user site, a `.pth` directory,
//! `PYTHONPATH`, and editable installs (setuptools' finder, a `.pth` path line, the old
//! `setup.py develop`). Each layout is made with pip in target/test-venvs/layouts/ (once),
//! analysed and packed, and the packed function then runs on an interpreter that sees the
//! pack and the stdlib only: `python3 -I -S` with the pack's directories on sys.path, and the
//! pack's own `run` (a bare venv).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{assert_succeeded, assert_succeeded_with};

/// The function packed in every layout: it imports `MODULE` (replaced per layout), the
/// fixture package (tests/fixtures/layouts/make_wheel.py), which reads a data file and its own
/// version from its dist-info.
const JOB: &str = r#"
import MODULE


def compute(x):
    return MODULE.scaled(x), MODULE.described(), MODULE.__file__
"#;

/// What `compute(7)` returns before the module's file, for the fixture package `module`.
fn fixture_result(module: &str) -> String {
    format!("(21, '{module} 1.0', ")
}

/// Where layouts are made, once: target/test-venvs/layouts/NAME.
fn layouts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-venvs/layouts")
}

/// `layouts_dir()/name`, made by `make` unless a previous run completed it.
fn layout(name: &str, make: impl FnOnce(&Path) -> bool) -> Option<PathBuf> {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let dir = layouts_dir().join(name);
    let marker = dir.join(".lfm-complete");
    if marker.exists() {
        return Some(dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    if !make(&dir) {
        return None;
    }
    std::fs::write(&marker, "").unwrap();
    Some(dir)
}

fn run(command: &mut Command) -> Output {
    let output = command.output().expect("start command");
    assert_succeeded_with(&output, format_args!("{command:?}"));
    output
}

fn venv(at: &Path, system_site_packages: bool) {
    let mut command = Command::new("python3");
    command.args(["-m", "venv"]).arg(at);
    if system_site_packages {
        command.arg("--system-site-packages");
    }
    run(&mut command);
}

/// The fixture wheel of a package named `module` (tests/fixtures/layouts/make_wheel.py).
fn wheel(module: &str, dir: &Path) -> PathBuf {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/layouts/make_wheel.py");
    let output = run(Command::new("python3").arg(script).arg(module).arg(dir));
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

/// `pip install` (offline: the fixture wheel has no requirements) with `args`.
/// `module`'s wheel installed by pip into `dir/extra`, a directory outside any environment.
fn installed_into_extra(module: &str, dir: &Path) -> PathBuf {
    let wheel = wheel(module, dir);
    let extra = dir.join("extra");
    pip_install(
        Path::new("python3"),
        &["--target", extra.to_str().unwrap()],
        &wheel,
        &[],
    );
    extra
}

fn pip_install(python: &Path, args: &[&str], wheel: &Path, env: &[(&str, &Path)]) {
    let mut command = Command::new(python);
    command
        .args(["-m", "pip", "install", "--quiet", "--no-index", "--no-deps"])
        .args(args)
        .arg(wheel);
    for (key, value) in env {
        command.env(key, value);
    }
    run(&mut command);
}

fn site_packages(venv: &Path) -> PathBuf {
    venv.join("lib/python3.11/site-packages")
}

/// A layout ready to analyse: the venv, the module the job imports, the environment
/// variables the interpreter runs with.
struct Layout {
    venv: PathBuf,
    module: &'static str,
    /// The job's source and what printing `compute(7)` starts with.
    job_source: String,
    expected: String,
    env: Vec<(&'static str, PathBuf)>,
    /// The job, the pack and lfm's caches.
    work: tempfile::TempDir,
}

impl Layout {
    fn new(venv: PathBuf, module: &'static str, env: Vec<(&'static str, PathBuf)>) -> Layout {
        let work = tempfile::tempdir().unwrap();
        Layout {
            venv,
            module,
            job_source: JOB.replace("MODULE", module),
            expected: fixture_result(module),
            env,
            work,
        }
    }

    /// `lfm ARGS` with the layout's environment variables (and nothing of the test's own
    /// PYTHONPATH or user base), its caches in the layout's work directory.
    fn lfm(&self, args: &[&str]) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lfm"));
        command
            .args(args)
            .env("LFM_CACHE_DIR", self.work.path().join("lfm-cache"))
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONUSERBASE");
        for (key, value) in &self.env {
            command.env(key, value);
        }
        command.output().expect("run lfm")
    }

    fn job(&self) -> String {
        let job = self.work.path().join("job.py");
        std::fs::write(&job, &self.job_source).unwrap();
        format!("{}:compute", job.display())
    }
}

/// Analyse, pack and run the job of `layout`, checking each step (see the module's doc): its
/// distribution is found, packed with `expected_origin`, and the function runs from the pack.
fn pack_and_run(layout: &Layout, expected_origin: &str) {
    let (spec, root, manifest) = analyse_and_pack(layout);
    let dists = spec["targets"][0]["distributions"].to_string();
    let normal = |name: &str| name.to_lowercase().replace('-', "_");
    assert!(
        normal(&dists).contains(&format!("\"{}\"", layout.module)),
        "lfm analyze did not find {}: {dists}",
        layout.module
    );
    let packed_dist = manifest["distributions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"].as_str().map(normal) == Some(layout.module.into()))
        .unwrap_or_else(|| panic!("{} is not in the pack: {manifest}", layout.module));
    assert_eq!(packed_dist["origin"], expected_origin, "{manifest}");
    assert_runs_from_the_pack(layout, &root, &manifest);
}

/// `lfm analyze` (its Spec), then `lfm pack` without a warning that something was not packed,
/// unpacked: the Spec, the pack's root and its manifest.
fn analyse_and_pack(layout: &Layout) -> (serde_json::Value, PathBuf, serde_json::Value) {
    let dir = &layout.work;
    let target = layout.job();
    let venv = layout.venv.to_str().unwrap();
    let analysed = layout.lfm(&["analyze", "--format", "json", "--env", venv, &target]);
    assert_succeeded(&analysed);
    let spec: serde_json::Value = serde_json::from_slice(&analysed.stdout).unwrap();
    let pack = dir.path().join("job.tar.zst");
    let packed = layout.lfm(&["pack", "--env", venv, "-o", pack.to_str().unwrap(), &target]);
    assert_succeeded(&packed);
    let stderr = String::from_utf8_lossy(&packed.stderr);
    assert!(!stderr.contains("not packed"), "{stderr}");
    let cache = dir.path().join("cache");
    let unpack = [
        "unpack",
        "--cache",
        cache.to_str().unwrap(),
        pack.to_str().unwrap(),
    ];
    let unpacked = layout.lfm(&unpack);
    assert_succeeded(&unpacked);
    let root = PathBuf::from(String::from_utf8(unpacked.stdout).unwrap().trim());
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("lfm-manifest.json")).unwrap())
            .unwrap();
    (spec, root, manifest)
}

/// The packed function gives the expected result, its module loaded from the pack, both with
/// `python3 -I -S` and the pack's directories and through the pack's `run`.
fn assert_runs_from_the_pack(layout: &Layout, root: &Path, manifest: &serde_json::Value) {
    for output in [run_isolated(root, manifest), run_through_pack(root)] {
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.starts_with(layout.expected.as_str()), "{stdout}");
        assert!(
            stdout.contains(&format!("'{}/", root.display())),
            "{} did not come from the pack: {stdout}",
            layout.module
        );
    }
}

const CALL: &str = "import job; print(job.compute(7))";

/// `python3 -I -S` with the pack's directories (manifest `run.pythonpath`) first on sys.path:
/// no site-packages, no .pth file, no environment variable reaches it.
fn run_isolated(root: &Path, manifest: &serde_json::Value) -> Output {
    let dirs: Vec<String> = manifest["run"]["pythonpath"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| format!("{:?}", root.join(d.as_str().unwrap()).display().to_string()))
        .collect();
    let code = format!("import sys; sys.path[:0] = [{}]; {CALL}", dirs.join(", "));
    run(Command::new("python3")
        .args(["-I", "-S", "-c", &code])
        .current_dir(std::env::temp_dir()))
}

/// The pack's own `run`: a bare venv of the machine's python3 with the pack's site dirs.
fn run_through_pack(root: &Path) -> Output {
    run(Command::new(root.join("run"))
        .args(["python3", "-c", CALL])
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONUSERBASE")
        .current_dir(std::env::temp_dir()))
}

#[test]
fn a_distribution_from_a_pth_directory_is_packed() {
    let dir = layout("pth-dir", |dir| {
        let extra = installed_into_extra("layout_pth", dir);
        venv(&dir.join("venv"), false);
        let line = format!("{}\n", extra.display());
        std::fs::write(site_packages(&dir.join("venv")).join("extra.pth"), line).unwrap();
        true
    })
    .unwrap();
    let layout = Layout::new(dir.join("venv"), "layout_pth", Vec::new());
    pack_and_run(&layout, "outside-prefix");
}

#[test]
fn a_distribution_on_pythonpath_is_packed() {
    let dir = layout("pythonpath", |dir| {
        installed_into_extra("layout_pythonpath", dir);
        venv(&dir.join("venv"), false);
        true
    })
    .unwrap();
    // Asked once without PYTHONPATH first: lfm keeps the interpreter's answer, and must not
    // reuse it when PYTHONPATH changes sys.path.
    let mut layout = Layout::new(dir.join("venv"), "layout_pythonpath", Vec::new());
    let warmed = layout.lfm(&[
        "analyze",
        "--env",
        dir.join("venv").to_str().unwrap(),
        &layout.job(),
    ]);
    assert_succeeded(&warmed);
    layout.env = vec![("PYTHONPATH", dir.join("extra"))];
    pack_and_run(&layout, "outside-prefix");
}

#[test]
fn a_distribution_in_the_user_site_is_packed() {
    // The user site is on sys.path of a venv made with --system-site-packages (and of a base
    // Python); PYTHONUSERBASE moves it, as `pip install --user` users on clusters do.
    let dir = layout("user-site", |dir| {
        let wheel = wheel("layout_user", dir);
        let base = dir.join("userbase");
        pip_install(
            Path::new("python3"),
            &["--user"],
            &wheel,
            &[("PYTHONUSERBASE", &base)],
        );
        venv(&dir.join("venv"), true);
        true
    })
    .unwrap();
    let layout = Layout::new(
        dir.join("venv"),
        "layout_user",
        vec![("PYTHONUSERBASE", dir.join("userbase"))],
    );
    pack_and_run(&layout, "outside-prefix");
}

#[test]
fn a_file_that_cannot_be_placed_fails_the_pack_naming_it() {
    // A RECORD that lists a file outside the environment and outside every sys.path directory
    // (here beside the .pth directory): the pack refuses rather than leaving it out.
    let dir = tempfile::tempdir().unwrap();
    let extra = installed_into_extra("layout_stray", dir.path());
    let stray = dir.path().join("elsewhere/stray.txt");
    std::fs::create_dir_all(stray.parent().unwrap()).unwrap();
    std::fs::write(&stray, "x").unwrap();
    let record = extra.join("layout_stray-1.0.dist-info/RECORD");
    let mut text = std::fs::read_to_string(&record).unwrap();
    text.push_str("../elsewhere/stray.txt,,\n");
    std::fs::write(&record, text).unwrap();
    let venv_dir = dir.path().join("venv");
    venv(&venv_dir, false);
    std::fs::write(
        site_packages(&venv_dir).join("extra.pth"),
        format!("{}\n", extra.display()),
    )
    .unwrap();
    let layout = Layout::new(venv_dir, "layout_stray", Vec::new());
    let target = layout.job();
    let pack = dir.path().join("job.tar.zst");
    let packed = layout.lfm(&[
        "pack",
        "--env",
        layout.venv.to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
        &target,
    ]);
    let stderr = String::from_utf8_lossy(&packed.stderr);
    assert!(!packed.status.success(), "the pack was written: {stderr}");
    assert!(
        stderr.contains(&stray.canonicalize().unwrap().display().to_string())
            && stderr.contains("cannot be packed"),
        "{stderr}"
    );
    assert!(!pack.exists());
}

#[test]
fn a_base_pythons_distribution_under_a_system_site_packages_venv_is_packed() {
    // The "other Python" is the machine's python3 (as a cluster's module Python under a
    // user's venv): its own site-packages holds six, a one-file distribution.
    let six_version = Command::new("python3")
        .args([
            "-I",
            "-c",
            "from importlib.metadata import version; print(version('six'))",
        ])
        .output()
        .unwrap();
    if !six_version.status.success() {
        eprintln!("SKIPPED: the machine's python3 has no six in its site-packages");
        return;
    }
    let version = String::from_utf8(six_version.stdout)
        .unwrap()
        .trim()
        .to_string();
    let dir = layout("system-site", |dir| {
        venv(&dir.join("venv"), true);
        true
    })
    .unwrap();
    let mut layout = Layout::new(dir.join("venv"), "six", Vec::new());
    layout.job_source = "import six\n\n\ndef compute(x):\n    from importlib.metadata import version\n    return 3 * x, 'six ' + version('six'), six.__file__\n".into();
    layout.expected = format!("(21, 'six {version}', ");
    pack_and_run(&layout, "outside-prefix");
}

/// A project of the fixture package made by `backend` (make_wheel.py) in `dir`.
fn fixture_project(module: &str, dir: &Path, backend: &str) -> PathBuf {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/layouts/make_wheel.py");
    let output =
        run(Command::new("python3")
            .arg(script)
            .args([module, dir.to_str().unwrap(), backend]));
    dir.join(String::from_utf8(output.stdout).unwrap().trim())
}

/// `pip install -e project` into `venv` (its build backend comes from the package registry);
/// false, saying why, when the registry is unreachable.
fn pip_install_editable(venv: &Path, project: &Path) -> bool {
    let output = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-e"])
        .arg(project)
        .output()
        .unwrap();
    if output.status.success() {
        return true;
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let offline = [
        "Could not find a version",
        "NewConnectionError",
        "Temporary failure in name resolution",
        "Network is unreachable",
    ];
    if offline.iter().any(|needle| stderr.contains(needle)) {
        eprintln!("SKIPPED: the package registry is unreachable: {stderr}");
        return false;
    }
    panic!("pip install -e failed: {stderr}");
}

/// An editable install of the fixture package by `backend`, packed and run: the pack carries
/// the project's files, not the `.pth` or finder that point at the project.
fn editable_layout(name: &str, module: &'static str, backend: &str) {
    let Some(dir) = layout(name, |dir| {
        let project = fixture_project(module, dir, backend);
        venv(&dir.join("venv"), false);
        pip_install_editable(&dir.join("venv"), &project)
    }) else {
        return;
    };
    let layout = Layout::new(dir.join("venv"), module, Vec::new());
    pack_and_run(&layout, "editable");
}

#[test]
fn a_setuptools_editable_install_through_its_finder_is_packed() {
    editable_layout("editable-finder", "layout_finder", "setuptools-flat");
}

#[test]
fn a_hatchling_editable_install_through_a_pth_path_line_is_packed() {
    editable_layout("editable-pth", "layout_hatch", "hatchling-src");
}

#[test]
fn a_setup_py_develop_install_is_packed() {
    // The old form: an .egg-link and an easy-install.pth line, the egg-info in the project.
    let dir = layout("develop", |dir| {
        let project = fixture_project("layout_develop", dir, "setup-py");
        venv(&dir.join("venv"), false);
        run(Command::new(dir.join("venv/bin/python"))
            .args(["setup.py", "--quiet", "develop"])
            .current_dir(&project));
        true
    })
    .unwrap();
    let layout = Layout::new(dir.join("venv"), "layout_develop", Vec::new());
    pack_and_run(&layout, "editable");
}

#[test]
fn plain_modules_on_pythonpath_that_no_distribution_lists_are_packed() {
    // A PYTHONPATH directory of a lab's shared code: a package with a data file, no dist-info.
    let dir = layout("pythonpath-plain", |dir| {
        let package = dir.join("shared/labcode");
        std::fs::create_dir_all(&package).unwrap();
        let init = "from pathlib import Path\n\nSCALE = int((Path(__file__).parent / 'scale.txt').read_text())\n";
        std::fs::write(package.join("__init__.py"), init).unwrap();
        std::fs::write(package.join("scale.txt"), "3\n").unwrap();
        venv(&dir.join("venv"), false);
        true
    })
    .unwrap();
    let mut layout = Layout::new(
        dir.join("venv"),
        "labcode",
        vec![("PYTHONPATH", dir.join("shared"))],
    );
    layout.job_source = "import labcode\n\n\ndef compute(x):\n    return labcode.SCALE * x, 'labcode 1.0', labcode.__file__\n".into();
    let (spec, root, manifest) = analyse_and_pack(&layout);
    let modules = spec["targets"][0]["modules"].to_string();
    assert!(modules.contains("\"labcode\""), "{modules}");
    let loose = manifest["loose_files"].to_string();
    assert!(
        loose.contains("site-packages/labcode/__init__.py") && loose.contains("labcode/scale.txt"),
        "{manifest}"
    );
    assert_runs_from_the_pack(&layout, &root, &manifest);
}
