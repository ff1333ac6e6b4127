//! `lfm analyze` against a real venv with pip-installed distributions whose import names differ
//! from their distribution names, share namespace packages, or pull in dependencies.
//!
//! The venv is built once under target/test-venvs/real and reused; the test is skipped, with the
//! reason printed, only when the package registry cannot be reached.

mod common;

use std::path::Path;
use std::process::Command;

use common::{assert_succeeded, lfm, real_venv, sci_venv, target};

const WORKFLOW: &str = r#"
import yaml
from dateutil import parser as dateparser
import bs4
import attr
from google.protobuf import descriptor
from google.api import annotations_pb2
import requests


def use_yaml():
    return yaml.safe_load("a: 1")


def use_dateutil():
    return dateparser.parse("2020-01-01")


def use_bs4():
    return bs4.BeautifulSoup("", "html.parser")


def use_attr():
    return attr.s


def use_protobuf():
    return descriptor


def use_google_api():
    return annotations_pb2


def use_requests():
    return requests.get


def use_the_namespace():
    import google
    return google.__path__
"#;

fn dists(target: &serde_json::Value) -> Vec<(String, bool)> {
    target["distributions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap().to_lowercase(),
                d["direct"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn dist_names(target: &serde_json::Value) -> Vec<String> {
    dists(target).into_iter().map(|(name, _)| name).collect()
}

fn distribution_of(target: &serde_json::Value, module: &str) -> String {
    target["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == module)
        .unwrap_or_else(|| panic!("no module {module} in {}", target["modules"]))["distribution"]
        .as_str()
        .unwrap_or("<none>")
        .to_string()
}

fn analyze(python: &Path, args: &[&str]) -> serde_json::Value {
    let mut full = vec![
        "analyze",
        "--no-cache",
        "--format",
        "json",
        "--python",
        python.to_str().unwrap(),
    ];
    full.extend_from_slice(args);
    let output = lfm(&full);
    assert_succeeded(&output);
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn maps_modules_to_real_distributions_and_follows_requires_dist() {
    let Some(venv) = real_venv() else { return };
    let python = venv.join("bin/python");
    let project = tempfile::tempdir().unwrap();
    let file = project.path().join("workflow.py");
    std::fs::write(&file, WORKFLOW).unwrap();
    let spec = analyze(&python, &[file.to_str().unwrap()]);

    let yaml = target(&spec, "workflow:use_yaml");
    assert_eq!(distribution_of(yaml, "yaml"), "PyYAML");
    assert_eq!(dists(yaml), [("pyyaml".to_string(), true)]);

    let dateutil = target(&spec, "workflow:use_dateutil");
    assert_eq!(
        distribution_of(dateutil, "dateutil.parser"),
        "python-dateutil"
    );
    assert_eq!(
        dists(dateutil),
        [
            ("python-dateutil".to_string(), true),
            ("six".to_string(), false)
        ]
    );

    let bs4 = target(&spec, "workflow:use_bs4");
    assert_eq!(distribution_of(bs4, "bs4"), "beautifulsoup4");
    // bs4.dammit tries charset_normalizer, installed here for requests: Python imports it,
    // so it is listed (undeclared, optional).
    assert_eq!(
        dists(bs4),
        [
            ("beautifulsoup4".to_string(), true),
            ("charset-normalizer".to_string(), false),
            ("soupsieve".to_string(), false)
        ]
    );

    let attrs = target(&spec, "workflow:use_attr");
    assert_eq!(distribution_of(attrs, "attr"), "attrs");
    assert_eq!(dist_names(attrs), ["attrs"]);

    // google is a namespace shared by two distributions: resolved per submodule.
    let protobuf = target(&spec, "workflow:use_protobuf");
    assert_eq!(
        distribution_of(protobuf, "google.protobuf.descriptor"),
        "protobuf"
    );
    assert_eq!(dist_names(protobuf), ["protobuf"]);
    let google_api = target(&spec, "workflow:use_google_api");
    assert_eq!(
        distribution_of(google_api, "google.api.annotations_pb2"),
        "googleapis-common-protos"
    );
    assert_eq!(
        dists(google_api),
        [
            ("googleapis-common-protos".to_string(), true),
            ("protobuf".to_string(), false)
        ]
    );

    // `import google` alone imports the namespace, whose `__path__` holds every portion:
    // both distributions providing one are needed, and neither is a guess.
    let namespace = target(&spec, "workflow:use_the_namespace");
    assert_eq!(
        dist_names(namespace),
        ["googleapis-common-protos", "protobuf"]
    );
    let warnings = namespace["warnings"].as_array().unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");

    // requests' own requirements, markers evaluated; extras (socks, charset) not requested.
    let requests = target(&spec, "workflow:use_requests");
    assert_eq!(
        dist_names(requests),
        [
            "certifi",
            "charset-normalizer",
            "idna",
            "requests",
            "urllib3"
        ]
    );
    let urllib3 = requests["distributions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "urllib3")
        .unwrap();
    assert_eq!(
        urllib3["reason"],
        serde_json::json!(["requests", "urllib3"])
    );

    // The module needs all of them; requirements output is the sorted union.
    let output = lfm(&[
        "analyze",
        "--no-cache",
        "--format",
        "requirements",
        "--python",
        python.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    let requirements = String::from_utf8(output.stdout).unwrap();
    let names: Vec<&str> = requirements
        .lines()
        .map(|l| l.split("==").next().unwrap())
        .collect();
    for expected in [
        "attrs",
        "beautifulsoup4",
        "certifi",
        "googleapis-common-protos",
        "protobuf",
        "python-dateutil",
        "PyYAML",
        "requests",
        "six",
        "soupsieve",
        "urllib3",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} not in\n{requirements}"
        );
    }
    let mut sorted = names.clone();
    sorted.sort_by_key(|n| n.to_lowercase());
    assert_eq!(names, sorted);
    let yaml_line = requirements
        .lines()
        .find(|l| l.starts_with("PyYAML=="))
        .unwrap();
    let installed = Command::new(&python)
        .args(["-c", "import yaml; print(yaml.__version__)"])
        .output()
        .unwrap();
    assert_eq!(
        yaml_line,
        format!(
            "PyYAML=={}",
            String::from_utf8_lossy(&installed.stdout).trim()
        )
    );

    // poncho spec: python pinned, pip list inside.
    let output = lfm(&[
        "analyze",
        "--no-cache",
        "--format",
        "poncho",
        "--python",
        python.to_str().unwrap(),
        &format!("{}:use_yaml", file.display()),
    ]);
    let poncho: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let deps = poncho["conda"]["dependencies"].as_array().unwrap();
    assert_eq!(
        deps[0],
        "python=3.11".replace("3.11", &spec["python"]["version"].as_str().unwrap()[..4])
    );
    assert!(deps.last().unwrap()["pip"][0]
        .as_str()
        .unwrap()
        .starts_with("PyYAML=="));
}

#[test]
fn env_prefix_selects_the_same_environment() {
    let Some(venv) = real_venv() else { return };
    let project = tempfile::tempdir().unwrap();
    let file = project.path().join("job.py");
    std::fs::write(&file, "import yaml\n\ndef f():\n    return yaml\n").unwrap();
    let output = lfm(&[
        "analyze",
        "--no-cache",
        "--format",
        "requirements",
        "--env",
        venv.to_str().unwrap(),
        &format!("{}:f", file.display()),
    ]);
    assert_succeeded(&output);
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("PyYAML=="));
}

/// requests and what importing its package runs (`requests/__init__.py` imports urllib3,
/// charset_normalizer and, through its submodules, idna and certifi): its Requires-Dist closure.
const REQUESTS_AND_ITS_REQUIREMENTS: [&str; 5] = [
    "certifi",
    "charset-normalizer",
    "idna",
    "requests",
    "urllib3",
];

#[test]
fn a_target_inside_an_installed_distribution_carries_it_and_what_its_packages_import() {
    let Some(venv) = real_venv() else { return };
    let python = venv.join("bin/python");
    // What Python runs, so the expectation below is not taken on trust: importing
    // requests.certs (which imports only certifi) runs requests/__init__.py and its imports.
    let imported = Command::new(&python)
        .args([
            "-c",
            "import sys, requests.certs; print(*sorted(sys.modules))",
        ])
        .output()
        .unwrap();
    let imported = String::from_utf8_lossy(&imported.stdout).into_owned();
    for module in [
        "requests",
        "urllib3",
        "charset_normalizer",
        "idna",
        "certifi",
    ] {
        assert!(
            imported.split(' ').any(|m| m == module),
            "{module}: {imported}"
        );
    }
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path()
        .join("site-packages");
    let certs = site.join("requests/certs.py");
    let hooks = format!("{}:default_hooks", site.join("requests/hooks.py").display());
    // (target, closure, the target's name in the Spec).
    let cases = [
        ("requests.certs", "slice", "requests.certs"),
        ("requests.certs", "import", "requests.certs"),
        (certs.to_str().unwrap(), "import", "requests.certs"),
        // A function of a module that imports nothing: shipped by value it is still
        // requests' code, and by reference importing it runs requests/__init__.py.
        (
            "requests.hooks:default_hooks",
            "slice",
            "requests.hooks:default_hooks",
        ),
        (&hooks, "import", "requests.hooks:default_hooks"),
    ];
    let mut wrong = Vec::new();
    for (text, closure, name) in cases {
        let spec = analyze(&python, &["--closure", closure, text]);
        let found = target(&spec, name);
        if dist_names(found) != REQUESTS_AND_ITS_REQUIREMENTS {
            wrong.push(format!(
                "{text} --closure {closure}: {:?}",
                dist_names(found)
            ));
            continue;
        }
        // requests is needed for itself, not only as someone's requirement.
        if !dists(found).contains(&("requests".to_string(), true)) {
            wrong.push(format!(
                "{text} --closure {closure}: requests is not direct"
            ));
        }
        let parent = (closure == "import").then_some("requests");
        for module in parent.into_iter().chain([name.split(':').next().unwrap()]) {
            if distribution_of(found, module) != "requests" {
                wrong.push(format!("{text} --closure {closure}: {module} not listed"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn local_code_reading_an_installed_modules_names_carries_its_distribution() {
    let Some(venv) = real_venv() else { return };
    let project = tempfile::tempdir().unwrap();
    let file = project.path().join("job.py");
    std::fs::write(
        &file,
        "def top():\n    return where()\n\n\ndef inside():\n    from requests.certs import where\n    return where()\n\n\nfrom requests.certs import where\n",
    )
    .unwrap();
    let spec = analyze(&venv.join("bin/python"), &[file.to_str().unwrap()]);
    for function in ["job:top", "job:inside"] {
        let found = target(&spec, function);
        assert_eq!(
            dist_names(found),
            REQUESTS_AND_ITS_REQUIREMENTS,
            "{function}"
        );
        assert_eq!(distribution_of(found, "requests.certs"), "requests");
    }
}

/// Installed code imports what it finds installed without declaring it: scikit-learn's
/// `sklearn/utils/fixes.py` tries `import pandas`, joblib's pickling tries numpy. Python imports
/// them (asked here first), so the import closure lists them: not direct, optional (the import
/// is inside `try`), marked undeclared, the reason naming the importing distribution and the
/// import's place. A module whose imports lead to neither gets neither.
#[test]
fn distributions_installed_code_imports_without_declaring_them_are_listed() {
    let Some(venv) = sci_venv() else { return };
    let python = venv.join("bin/python");
    let cases = [
        (
            "sklearn",
            "pandas",
            "scikit-learn",
            "sklearn/utils/fixes.py:",
        ),
        ("joblib", "numpy", "joblib", "joblib/"),
        // setuptools' distutils-precedence.pth answers `import distutils` from setuptools
        // (here in numpy/distutils/ccompiler.py: an import of the target's own is direct).
        ("numpy.distutils", "setuptools", "numpy", "numpy/distutils/"),
    ];
    for (module, undeclared, importer, place) in cases {
        let probe = format!("import sys, {module}; print('{undeclared}' in sys.modules)");
        let imported = Command::new(&python).args(["-c", &probe]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&imported.stdout).trim(), "True");
        let spec = analyze(&python, &["--closure", "import", module]);
        let target = &spec["targets"][0];
        let listed = target["distributions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == undeclared)
            .unwrap_or_else(|| panic!("{module}: no {undeclared} in {}", target["distributions"]));
        assert_eq!(listed["direct"], false, "{listed}");
        assert_eq!(listed["optional"], true, "{listed}");
        assert_eq!(listed["undeclared"], true, "{listed}");
        let reason: Vec<&str> = (listed["reason"].as_array().unwrap().iter())
            .map(|step| step.as_str().unwrap())
            .collect();
        assert_eq!(reason[0], importer, "{listed}");
        assert!(reason[1].contains(place), "{listed}");
        assert_eq!(reason.last(), Some(&undeclared), "{listed}");
    }
    let threadpoolctl = analyze(&python, &["--closure", "import", "threadpoolctl"]);
    assert_eq!(dist_names(&threadpoolctl["targets"][0]), ["threadpoolctl"]);
}

/// The truth oracle of bench/closure_truth.sh on a sample: for modules spread over each
/// distribution of the venv, what a fresh `import module` brings into sys.modules, mapped to
/// distributions, must be in lfm's import closure of that module: no miss, optional or not
/// (installed code's undeclared imports and setuptools' distutils shim included).
#[test]
fn the_import_closure_of_installed_modules_covers_what_python_imports() {
    let Some(venv) = real_venv() else { return };
    let oracle = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/closure_truth.py");
    let distributions = [
        "requests",
        "attrs",
        "PyYAML",
        "python-dateutil",
        "beautifulsoup4",
        "numpy",
        "protobuf",
    ];
    let output = Command::new("python3")
        .arg(oracle)
        .arg("--python")
        .arg(venv.join("bin/python"))
        .args(["--lfm", env!("CARGO_BIN_EXE_lfm")])
        .args(["--sample", "4", "--jobs", "2", "--json"])
        .args(distributions)
        .output()
        .unwrap();
    assert_succeeded(&output);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut wrong = Vec::new();
    for dist in distributions {
        let row = &report[dist];
        if row["importable"].as_u64().unwrap_or(0) == 0 {
            wrong.push(format!("{dist}: no sampled module imports: {row}"));
        }
        if !row["unanalysed"].as_array().unwrap().is_empty() {
            wrong.push(format!("{dist}: lfm failed on {}", row["unanalysed"]));
        }
        for miss in row["misses"].as_array().unwrap() {
            wrong.push(format!("{dist}: {miss}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The function-level truth oracle of bench/closure_truth.sh on a sample: plain test functions
/// of real projects' own suites (sdists from PyPI, analysed as local code) called through
/// `lfm call`; every module a call that succeeds imports must be in its function's closure (a
/// miss is accepted only when the module's name is computed at run time: a dynamic import),
/// and no test may fail by its slice that passes with its whole module imported.
#[test]
fn function_closures_cover_what_real_test_suites_import_when_called() {
    let Some(venv) = common::calls_oracle_venv() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("python3")
        .arg(root.join("bench/closure_truth_calls.py"))
        .arg("--python")
        .arg(venv.join("bin/python"))
        .args(["--lfm", env!("CARGO_BIN_EXE_lfm")])
        .arg("--cache")
        .arg(root.join("target/closure-oracle/sdists"))
        .args(["--sample", "6", "--jobs", "2", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(3) {
        eprintln!("skipped: {}", stderr.trim());
        return;
    }
    assert_succeeded(&output);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let dynamic = |miss: &serde_json::Value| {
        let cause = miss["cause"].as_str().unwrap_or_default();
        cause.starts_with("dynamic")
    };
    let mut wrong = Vec::new();
    for (project, row) in report.as_object().unwrap() {
        if row["succeeded"].as_u64().unwrap_or(0) == 0 {
            wrong.push(format!("{project}: no sampled test succeeded: {row}"));
        }
        for miss in row["misses"].as_array().unwrap() {
            if !dynamic(miss) {
                wrong.push(format!("{project}: {miss}"));
            }
        }
        for failed in row["slice_failures"].as_array().unwrap() {
            if !dynamic(failed) {
                wrong.push(format!("{project}: fails by its slice only: {failed}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// setuptools' `distutils-precedence.pth` (which `python3 -m venv` installs on Python 3.11)
/// makes `import distutils` run `setuptools._distutils`, and Python 3.12 has no standard
/// library distutils at all: local code importing distutils needs setuptools, as installed
/// code's imports already did. Without the shim, the standard library's serves it.
#[test]
fn local_distutils_imports_are_served_by_setuptools_where_its_shim_is_installed() {
    let Some(venv) = real_venv() else { return };
    let python = venv.join("bin/python");
    let project = tempfile::tempdir().unwrap();
    let file = project.path().join("legacy.py");
    std::fs::write(
        &file,
        "from distutils.version import LooseVersion\n\n\ndef newer(a, b):\n    return LooseVersion(a) > LooseVersion(b)\n\n\ndef flag(text):\n    import distutils.util\n    return distutils.util.strtobool(text)\n",
    )
    .unwrap();
    // What Python itself runs for these imports in this venv.
    let asked = Command::new(&python)
        .args([
            "-c",
            "import distutils.version, distutils.util\nprint(distutils.version.__file__)",
        ])
        .output()
        .unwrap();
    let served = String::from_utf8_lossy(&asked.stdout);
    assert!(
        served.contains("setuptools/_distutils/version.py"),
        "this venv's Python does not run setuptools' distutils: {served}"
    );
    let spec = analyze(&python, &[file.to_str().unwrap()]);
    for (function, module) in [
        ("legacy:newer", "setuptools._distutils.version"),
        ("legacy:flag", "setuptools._distutils.util"),
    ] {
        let found = target(&spec, function);
        assert_eq!(distribution_of(found, module), "setuptools", "{function}");
        assert!(
            dists(found).contains(&("setuptools".to_string(), true)),
            "{function}: {:?}",
            dists(found)
        );
    }

    // A venv without setuptools: the standard library's distutils, no distribution.
    let bare = tempfile::tempdir().unwrap();
    let made = Command::new(&python)
        .args(["-m", "venv", "--without-pip"])
        .arg(bare.path())
        .status()
        .unwrap();
    assert!(made.success());
    let spec = analyze(&bare.path().join("bin/python"), &[file.to_str().unwrap()]);
    let found = target(&spec, "legacy:newer");
    let module = (found["modules"].as_array().unwrap().iter())
        .find(|m| m["name"] == "distutils.version")
        .unwrap_or_else(|| panic!("no distutils.version in {}", found["modules"]));
    assert_eq!(module["kind"], "stdlib");
    assert!(dist_names(found).is_empty(), "{:?}", dist_names(found));
}
