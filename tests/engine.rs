//! Engine-aware closures: what only Parsl's, Dask's or lfm's decorators and wrappers bring is
//! the worker's (listed as `engine`, left out of packs unless --with-engine); what the
//! function's body needs stays its own. Against a venv with real parsl, dask and numpy.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_succeeded, assert_succeeded_with, engine_venv, lfm, target};

/// The issue's example, as a Parsl user writes it.
const PARSL_APP: &str = r#"from parsl import python_app


@python_app
def fit(n):
    import numpy as np
    return float(np.arange(n).mean())
"#;

/// Every way of naming Parsl's decorators, and a body that uses the decorator itself.
const PARSL_FORMS: &str = r#"import parsl
from parsl import python_app as app
from parsl.app.app import bash_app


@app
def aliased(n):
    import numpy
    return numpy.zeros(n)


@parsl.python_app
def dotted(n):
    return n


@app(executors=["htex"])
def called(n):
    return n


@bash_app
def shell(n):
    return f"echo {n}"


def makes_apps(function):
    return app(function)
"#;

const DASK_DECORATED: &str = r#"from dask import delayed


@delayed
def fit(n):
    import numpy as np
    return float(np.arange(n).mean())


@delayed(pure=True)
def total(xs):
    import dask.array as da
    return da.from_array(xs).sum()
"#;

const DASK_WRAPPED: &str = r#"import dask


def fit(n):
    import numpy as np
    return float(np.arange(n).mean())


lazy = [dask.delayed(fit)(i) for i in range(4)]
"#;

const LFM_TASK: &str = r#"import lfm


@lfm.task(memory="1G")
def fit(n):
    import numpy as np
    return float(np.arange(n).mean())
"#;

/// Parsl 2026.10.26's Requires-Dist closure in the venv, parsl included.
const PARSL_CLOSURE: &[&str] = &[
    "certifi",
    "charset-normalizer",
    "dill",
    "filelock",
    "idna",
    "parsl",
    "psutil",
    "pyzmq",
    "requests",
    "setproctitle",
    "sortedcontainers",
    "tblib",
    "typeguard",
    "typing_extensions",
    "urllib3",
];

/// What Parsl brings a function that does not itself need numpy: its Requires-Dist closure and
/// numpy, which parsl's dill looks up at import (`PathFinder().find_spec('numpy')`) to pickle
/// arrays its own way where numpy is installed, as it is in this venv.
fn parsl_engine(own: &[&str]) -> Vec<&'static str> {
    let mut engine: Vec<&str> = PARSL_CLOSURE.to_vec();
    engine.push("numpy");
    engine.retain(|name| !own.contains(name));
    engine.sort_unstable();
    engine
}

/// Dask 2026.8.0's.
// psutil and tblib are no Requires-Dist of dask: dask's system.py and multiprocessing.py try
// them, and distributed installs them in the venv (undeclared, optional).
const DASK_CLOSURE: &[&str] = &[
    "click",
    "cloudpickle",
    "dask",
    "fsspec",
    "importlib_metadata",
    "lazy-importer",
    "locket",
    "packaging",
    "partd",
    "psutil",
    "pyyaml",
    "tblib",
    "toolz",
    "zipp",
];

struct Project {
    dir: tempfile::TempDir,
    venv: PathBuf,
}

impl Project {
    fn new(files: &[(&str, &str)]) -> Option<Project> {
        let venv = engine_venv()?;
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        Some(Project { dir, venv })
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn analyze(&self, closure: &str, target: &str) -> serde_json::Value {
        let python = self.venv.join("bin/python");
        let args = [
            "analyze",
            "--no-cache",
            "--format",
            "json",
            "--closure",
            closure,
            "--python",
            python.to_str().unwrap(),
            &self.path(target),
        ];
        let output = lfm(&args);
        assert_succeeded_with(&output, format_args!("lfm {args:?}"));
        serde_json::from_slice(&output.stdout).unwrap()
    }

    fn pack(&self, target: &str, extra: &[&str], name: &str) -> PathBuf {
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
        let target = self.path(target);
        args.push(&target);
        let result = lfm(&args);
        assert_succeeded_with(&result, format_args!("lfm {args:?}"));
        output
    }

    fn unpack(&self, pack: &Path) -> PathBuf {
        let cache = self.dir.path().join("cache");
        let args = ["unpack", "--cache", cache.to_str().unwrap()];
        let result = lfm(&[&args[..], &[pack.to_str().unwrap()]].concat());
        assert!(result.status.success());
        PathBuf::from(String::from_utf8(result.stdout).unwrap().trim())
    }
}

fn names(list: &serde_json::Value) -> Vec<String> {
    let mut names: Vec<String> = list
        .as_array()
        .map(|items| items.iter())
        .into_iter()
        .flatten()
        .map(|item| item["name"].as_str().unwrap().to_lowercase())
        .collect();
    names.sort();
    names
}

fn uses(target: &serde_json::Value) -> Vec<&str> {
    target["engine"]["uses"]
        .as_array()
        .map(|uses| uses.iter().map(|u| u["use"].as_str().unwrap()).collect())
        .unwrap_or_default()
}

fn manifest(root: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(root.join("lfm-manifest.json")).unwrap()).unwrap()
}

#[test]
fn a_parsl_app_needs_numpy_and_leaves_parsl_to_the_engine() {
    let Some(project) = Project::new(&[("wf.py", PARSL_APP)]) else {
        return;
    };
    for closure in ["slice", "import"] {
        let spec = project.analyze(closure, "wf.py:fit");
        assert_eq!(spec["format"], "lfm-spec/3");
        let fit = target(&spec, "wf:fit");
        assert_eq!(names(&fit["distributions"]), ["numpy"], "{closure}");
        assert_eq!(names(&fit["modules"]), ["numpy"], "{closure}");
        assert_eq!(names(&fit["engine"]["distributions"]), PARSL_CLOSURE);
        assert_eq!(uses(fit), ["decorator parsl.python_app on fit"]);
        let parsl = &fit["engine"]["modules"][0];
        assert_eq!(parsl["name"], "parsl");
        assert_eq!(parsl["reason"]["line"], 1);
    }
}

#[test]
fn every_form_of_a_parsl_decorator_is_the_engine_but_a_body_using_it_keeps_it() {
    let Some(project) = Project::new(&[("forms.py", PARSL_FORMS)]) else {
        return;
    };
    let spec = project.analyze("slice", "forms.py");
    let expected = [
        ("aliased", "decorator parsl.python_app on aliased"),
        ("dotted", "decorator parsl.python_app on dotted"),
        ("called", "decorator parsl.python_app on called"),
        ("shell", "decorator parsl.app.app.bash_app on shell"),
    ];
    for (function, used) in expected {
        let app = target(&spec, &format!("forms:{function}"));
        let own = if function == "aliased" {
            vec!["numpy"]
        } else {
            vec![]
        };
        assert_eq!(names(&app["distributions"]), own, "{function}");
        assert_eq!(names(&app["engine"]["distributions"]), parsl_engine(&own));
        assert_eq!(uses(app), [used]);
    }
    // Its body calls the decorator itself: parsl is what the function needs.
    let makes_apps = target(&spec, "forms:makes_apps");
    assert_eq!(names(&makes_apps["distributions"]), parsl_engine(&[]));
    assert!(makes_apps.get("engine").is_none(), "{makes_apps}");
    // Importing the module runs every decorator, and the module reads `parsl` and `app`
    // nowhere but as an engine API (the call in makes_apps does not run at import).
    let module = target(&spec, "forms");
    assert!(names(&module["distributions"]).is_empty());
    assert_eq!(names(&module["engine"]["distributions"]), parsl_engine(&[]));
    let mut module_uses = uses(module);
    module_uses.sort();
    let mut expected: Vec<&str> = expected.iter().map(|(_, used)| *used).collect();
    expected.push("wrapper parsl.python_app");
    expected.sort();
    assert_eq!(module_uses, expected);
}

#[test]
fn dask_delayed_is_the_engine_unless_the_body_uses_dask_itself() {
    let Some(project) = Project::new(&[("dd.py", DASK_DECORATED), ("dw.py", DASK_WRAPPED)]) else {
        return;
    };
    let spec = project.analyze("slice", "dd.py");
    let fit = target(&spec, "dd:fit");
    assert_eq!(names(&fit["distributions"]), ["numpy"]);
    assert_eq!(names(&fit["engine"]["distributions"]), DASK_CLOSURE);
    assert_eq!(uses(fit), ["decorator dask.delayed on fit"]);
    // `@delayed(pure=True)` is the engine's, but `import dask.array` is the body's own.
    // dask.array imports numpy (inside `try`, raising its own ImportError without it): numpy
    // is no Requires-Dist of dask, so it comes in as undeclared.
    let total = target(&spec, "dd:total");
    let mut with_numpy = DASK_CLOSURE.to_vec();
    with_numpy.push("numpy");
    with_numpy.sort();
    assert_eq!(names(&total["distributions"]), with_numpy);
    assert!(names(&total["engine"]["distributions"]).is_empty());
    assert_eq!(uses(total), ["decorator dask.delayed on total"]);

    // `dask.delayed(fit)` at the top level: importing the module wraps it, nothing more.
    let spec = project.analyze("import", "dw.py:fit");
    let fit = target(&spec, "dw:fit");
    assert_eq!(names(&fit["distributions"]), ["numpy"]);
    assert_eq!(names(&fit["engine"]["distributions"]), DASK_CLOSURE);
    assert_eq!(uses(fit), ["wrapper dask.delayed"]);
    let sliced = project.analyze("slice", "dw.py:fit");
    assert!(target(&sliced, "dw:fit").get("engine").is_none());
}

#[test]
fn an_lfm_task_missing_here_is_the_engines_not_the_functions() {
    let Some(project) = Project::new(&[("task.py", LFM_TASK)]) else {
        return;
    };
    let spec = project.analyze("slice", "task.py:fit");
    let fit = target(&spec, "task:fit");
    assert_eq!(names(&fit["distributions"]), ["numpy"]);
    assert!(names(&fit["missing"]).is_empty(), "{fit}");
    assert_eq!(names(&fit["engine"]["missing"]), ["lfm"]);
    assert_eq!(uses(fit), ["decorator lfm.task on fit"]);
    // So --strict, which fails on a required module not installed, passes.
    let python = project.venv.join("bin/python");
    let output = lfm(&[
        "analyze",
        "--no-cache",
        "--strict",
        "--python",
        python.to_str().unwrap(),
        &project.path("task.py:fit"),
    ]);
    assert_succeeded(&output);
}

#[test]
fn a_pack_leaves_the_engine_to_the_worker_unless_asked() {
    let Some(project) = Project::new(&[("wf.py", PARSL_APP)]) else {
        return;
    };
    let lean = project.pack("wf.py:fit", &["--closure", "slice"], "lean.tar.zst");
    let full = project.pack(
        "wf.py:fit",
        &["--closure", "slice", "--with-engine"],
        "full.tar.zst",
    );
    let (lean_root, full_root) = (project.unpack(&lean), project.unpack(&full));
    let (lean_manifest, full_manifest) = (manifest(&lean_root), manifest(&full_root));
    assert_eq!(names(&lean_manifest["distributions"]), ["numpy"]);
    let left_out = &lean_manifest["engine_left_out"];
    assert_eq!(left_out[0]["name"], "parsl", "the engine itself first");
    assert_eq!(names(left_out), PARSL_CLOSURE);
    assert_eq!(lean_manifest["run"]["isolated"], false);
    let site = "env/lib/python3.11/site-packages";
    assert!(!lean_root.join(site).join("parsl").exists());
    assert!(!lean_root.join(site).join("zmq").exists());

    let mut everything: Vec<&str> = PARSL_CLOSURE.to_vec();
    everything.push("numpy");
    everything.sort();
    assert_eq!(names(&full_manifest["distributions"]), everything);
    assert!(full_manifest.get("engine_left_out").is_none());
    assert_eq!(full_manifest["run"]["isolated"], true);
    assert!(full_root.join(site).join("parsl/app/app.py").is_file());
    let bytes = |path: &Path| std::fs::metadata(path).unwrap().len();
    assert!(bytes(&lean) < bytes(&full));
    assert!(lean_manifest["totals"]["files"].as_u64() < full_manifest["totals"]["files"].as_u64());
}

#[test]
fn a_pack_without_its_engine_runs_the_app_on_a_worker_that_has_it() {
    let Some(project) = Project::new(&[("wf.py", PARSL_APP), ("dw.py", DASK_WRAPPED)]) else {
        return;
    };
    // The worker: its python3 has the engines; the pack brings numpy and the app's module.
    let worker_path = format!(
        "{}:{}",
        project.venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (target, probe) in [
        (
            "wf.py:fit",
            "import wf, numpy; print(type(wf.fit).__name__, numpy.__file__)",
        ),
        (
            "dw.py:fit",
            "import dw, numpy; print(len(dw.lazy), numpy.__file__)",
        ),
    ] {
        let pack = project.pack(target, &[], "import.tar.zst");
        let root = project.unpack(&pack);
        let output = Command::new(root.join("run"))
            .args(["python3", "-c", probe])
            .env("PATH", &worker_path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_succeeded_with(&output, target);
        assert!(
            stdout.contains(&root.display().to_string()),
            "numpy comes from the pack: {stdout}"
        );
        let verify = lfm(&[
            "verify",
            "--cache",
            project.dir.path().join("cache").to_str().unwrap(),
            "--python",
            project.venv.join("bin/python").to_str().unwrap(),
            pack.to_str().unwrap(),
        ]);
        assert_succeeded(&verify);
    }
}
