//! `lfm analyze` on small fixture projects, one per closure rule, asserting exact closures.
//!
//! The fixtures import stdlib modules (always installed) and deliberately absent names, so the
//! closures are exact without any third-party install; tests/analyze_venv.rs covers real
//! distributions.

mod common;

use common::{analyze_json, assert_succeeded, lfm, names, target};

#[test]
fn imports_inside_a_function_at_any_depth() {
    let spec = analyze_json(&["tests/fixtures/in_function/mod.py:outer"]);
    // nested def, lambda, comprehension and a local class's method; not the other function's.
    assert_eq!(
        names(target(&spec, "mod:outer")),
        ["csv", "decimal", "fractions", "json", "uuid"]
    );
}

#[test]
fn a_local_module_closure_shared_between_functions_keeps_the_shortest_reasons() {
    // a -> b -> c -> json. f imports a and c: json's reason is c's import, reached directly,
    // not the longer way through a and b; g, through a only, takes the long way.
    let spec = analyze_json(&["tests/fixtures/shared_module_closures/main.py"]);
    let reason = |target_name: &str, module_name: &str| {
        let module = target(&spec, target_name)["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == module_name)
            .unwrap_or_else(|| panic!("{target_name} does not need {module_name}"))
            .clone();
        let chain: Vec<String> = module["reason"]["chain"]
            .as_array()
            .unwrap()
            .iter()
            .map(|step| step.as_str().unwrap().to_string())
            .collect();
        (
            module["reason"]["file"].as_str().unwrap().to_string(),
            chain,
        )
    };
    let fixture = "tests/fixtures/shared_module_closures";
    assert_eq!(names(target(&spec, "main:f")), ["a", "b", "c", "json"]);
    assert_eq!(
        reason("main:f", "json"),
        (format!("{fixture}/c.py"), vec!["f".into(), "c".into()])
    );
    assert_eq!(
        reason("main:f", "c"),
        (format!("{fixture}/main.py"), vec!["f".into()])
    );
    assert_eq!(names(target(&spec, "main:g")), ["a", "b", "c", "json"]);
    assert_eq!(
        reason("main:g", "json"),
        (
            format!("{fixture}/c.py"),
            vec!["g".into(), "a".into(), "b".into(), "c".into()]
        )
    );
}

#[test]
fn module_globals_are_followed_to_their_bindings() {
    let spec = analyze_json(&["tests/fixtures/globals/mod.py"]);
    // DERIVED -> SCALE -> decimal; helper() -> json; Model -> Base -> string, Model.fit -> bisect;
    // decorator -> heapq; default -> os (os.path is an attribute of os). UNUSED (fractions) and csv are not read.
    assert_eq!(
        names(target(&spec, "mod:uses_everything")),
        ["bisect", "decimal", "heapq", "json", "os", "string"]
    );
    // A local variable shadows the module-level import of the same name.
    assert!(names(target(&spec, "mod:shadowed")).is_empty());
    // The module itself needs every import it makes.
    let module = names(target(&spec, "mod"));
    for needed in ["csv", "fractions", "statistics", "decimal"] {
        assert!(
            module.contains(&needed.to_string()),
            "{needed} missing from {module:?}"
        );
    }
}

#[test]
fn calls_into_local_modules_bring_their_import_and_what_is_called_there() {
    let spec = analyze_json(&["tests/fixtures/local_calls/main.py:run"]);
    let run = target(&spec, "main:run");
    // helpers.fetch -> deeper.value -> uuid; helpers.not_called's `import csv` is not needed.
    assert_eq!(
        names(run),
        ["json", "lib", "lib.deeper", "lib.helpers", "uuid"]
    );
    let uuid = module(run, "uuid");
    assert_eq!(
        uuid["reason"]["file"],
        "tests/fixtures/local_calls/lib/deeper.py"
    );
    assert_eq!(uuid["reason"]["line"], 1);
    assert_eq!(
        uuid["reason"]["chain"],
        serde_json::json!(["run", "fetch", "lib.helpers", "lib.deeper"])
    );
    assert_eq!(module(run, "lib.helpers")["kind"], "local");
}

#[test]
fn a_method_includes_what_its_class_statement_needs() {
    let spec = analyze_json(&["tests/fixtures/class_method/mod.py:Model.fit"]);
    // bases (abc), class body (csv), sibling decorator (functools), its own import (decimal);
    // not json, which only the sibling method's body imports.
    assert_eq!(
        names(target(&spec, "mod:Model.fit")),
        ["abc", "csv", "decimal", "functools"]
    );
}

#[test]
fn edges_are_classified_and_type_checking_is_excluded() {
    let spec = analyze_json(&["tests/fixtures/contexts/mod.py"]);
    let module_target = target(&spec, "mod");
    let all = names(module_target);
    assert!(
        !all.contains(&"tomllib".to_string()),
        "TYPE_CHECKING import via alias leaked: {all:?}"
    );
    assert_eq!(
        contexts(module_target, "fcntl"),
        ["conditional", "top-level"]
    );
    assert_eq!(
        contexts(module_target, "colorsys"),
        ["optional", "top-level"]
    );
    assert_eq!(module(module_target, "colorsys")["optional"], true);
    // Importing the module runs no function body: in-function imports belong to functions.
    assert!(!all.contains(&"codecs".to_string()), "{all:?}");
    let dynamic = target(&spec, "mod:dynamic");
    assert_eq!(contexts(dynamic, "codecs"), ["dynamic", "in-function"]);
    assert_eq!(contexts(dynamic, "gettext"), ["dynamic", "in-function"]);

    let missing: Vec<(String, bool)> = module_target["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["optional"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(missing, [("not_installed_optional_xyz".to_string(), true)]);
    let required = target(&spec, "mod:required_missing");
    assert_eq!(required["missing"][0]["name"], "not_installed_required_xyz");
    assert_eq!(required["missing"][0]["optional"], false);
    assert_eq!(required["missing"][0]["reason"]["line"].as_u64(), Some(30));

    let warning = dynamic["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| {
            w["message"]
                .as_str()
                .unwrap()
                .contains("computed module name")
        })
        .expect("non-constant dynamic import warned");
    assert_eq!(warning["file"], "tests/fixtures/contexts/mod.py");
    assert_eq!(warning["line"], 26);
}

#[test]
fn relative_imports_and_dotted_targets_on_source_roots() {
    let spec = analyze_json(&["--root", "tests/fixtures/relative/src", "pkg.stages:train"]);
    let train = target(&spec, "pkg.stages:train");
    assert_eq!(
        names(train),
        [
            "csv",
            "json",
            "pkg",
            "pkg.config",
            "pkg.sub",
            "pkg.sub.tools"
        ]
    );
}

#[test]
fn circular_local_imports_terminate() {
    let spec = analyze_json(&["tests/fixtures/circular/a.py:f"]);
    assert_eq!(names(target(&spec, "a:f")), ["a", "b", "csv", "json"]);
}

#[test]
fn messy_files_keep_their_imports_and_warn_with_locations() {
    let spec = analyze_json(&["tests/fixtures/messy"]);
    assert_eq!(names(target(&spec, "py2")), ["json", "os"]);
    assert_eq!(names(target(&spec, "py2:f")), ["csv"]);
    assert_eq!(names(target(&spec, "broken")), ["uuid"]);
    assert_eq!(names(target(&spec, "broken:bad")), ["fractions"]);
    assert_eq!(names(target(&spec, "modern:show")), ["decimal", "heapq"]);
    assert_eq!(names(target(&spec, "bom")), ["bisect"]);
    assert_eq!(names(target(&spec, "latin1")), ["statistics"]);
    let broken = target(&spec, "broken");
    assert!(broken["warnings"].as_array().unwrap().iter().any(|w| {
        w["file"] == "tests/fixtures/messy/broken.py"
            && w["line"] == 3
            && w["message"].as_str().unwrap().starts_with("syntax error")
    }));
    assert!(
        spec["warnings"].as_array().unwrap().is_empty(),
        "latin-1 cookie should decode cleanly: {}",
        spec["warnings"]
    );
}

#[test]
fn hostile_trees_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("loop")).unwrap();
    std::os::unix::fs::symlink(root, root.join("loop/back")).unwrap();
    std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling.py")).unwrap();
    std::fs::write(root.join("binary.py"), [0xff, 0xfe, 0x00, 0x01, b'\n']).unwrap();
    // A huge generated file: one import, then 200k lines of data.
    let mut huge = String::from("import json\n");
    for i in 0..200_000 {
        huge.push_str(&format!("V{i} = {i}\n"));
    }
    std::fs::write(root.join("huge.py"), huge).unwrap();
    std::fs::write(
        root.join("deep.py"),
        format!(
            "import csv\nx = {}1{}\n",
            "(".repeat(5000),
            ")".repeat(5000)
        ),
    )
    .unwrap();
    let spec = analyze_json(&[root.to_str().unwrap()]);
    assert_eq!(names(target(&spec, "huge")), ["json"]);
}

#[test]
fn paths_and_names_that_need_json_escapes_come_out_escaped() {
    // Paths plain, one imported name not: `importlib.import_module('we"ird\\x')`.
    let plain = tempfile::tempdir().unwrap();
    let job =
        "import os\nimport importlib\n\ndef run():\n    importlib.import_module('we\"ird\\\\x')\n";
    std::fs::write(plain.path().join("job.py"), job).unwrap();
    let spec = analyze_json(&[plain.path().to_str().unwrap()]);
    let missing = &target(&spec, "job:run")["missing"];
    assert_eq!(missing[0]["name"], "we\"ird\\x", "{missing}");
    // A directory whose name needs escapes (quote, backslash, tab), names all plain.
    let awkward = tempfile::tempdir().unwrap();
    let dir = awkward.path().join("a\"b\\c\td");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("job.py"),
        "import os\n\ndef run():\n    return os.sep\n",
    )
    .unwrap();
    let spec = analyze_json(&[dir.to_str().unwrap()]);
    let run = target(&spec, "job:run");
    assert_eq!(run["file"], dir.join("job.py").to_str().unwrap());
    assert_eq!(run["modules"][0]["name"], "os");
    assert_eq!(
        run["modules"][0]["reason"]["file"],
        dir.join("job.py").to_str().unwrap()
    );
}

#[test]
fn exit_codes() {
    let not_found = lfm(&["analyze", "--no-cache", "tests/fixtures/nope.py"]);
    assert_eq!(not_found.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&not_found.stderr).contains("target not found"));

    let no_function = lfm(&[
        "analyze",
        "--no-cache",
        "tests/fixtures/globals/mod.py:nothing",
    ]);
    assert_eq!(no_function.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&no_function.stderr).contains("uses_everything"));

    let target = "tests/fixtures/contexts/mod.py:required_missing";
    assert_eq!(
        lfm(&["analyze", "--no-cache", target]).status.code(),
        Some(0)
    );
    assert_eq!(
        lfm(&["analyze", "--no-cache", "--strict", target])
            .status
            .code(),
        Some(4)
    );
    // Only an optional import is absent here: --strict still passes.
    let optional_only = "tests/fixtures/contexts/mod.py:dynamic";
    assert_eq!(
        lfm(&["analyze", "--no-cache", "--strict", optional_only])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn cache_gives_the_same_answer_and_sees_changes() {
    let cache = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let file = project.path().join("job.py");
    std::fs::write(&file, "import csv\n\ndef f():\n    return csv\n").unwrap();
    let job = format!("{}:f", file.display());
    let run = || {
        let output = lfm(&[
            "analyze",
            "--format",
            "json",
            "--cache-dir",
            cache.path().to_str().unwrap(),
            &job,
        ]);
        assert!(output.status.success());
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let cold = run();
    assert!(cache.path().join("analyze-summaries.bin").exists());
    assert_eq!(run(), cold);
    std::fs::write(&file, "import json\n\ndef f():\n    return json\n").unwrap();
    assert_eq!(names(target(&run(), "job:f")), ["json"]);
}

/// The summaries a run read from the cache (from `LFM_TIMINGS`), and its output.
fn entries_read(args: &[&std::ffi::OsStr]) -> (u64, Vec<u8>) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(args)
        .env("LFM_TIMINGS", "1")
        .output()
        .unwrap();
    assert_succeeded(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let read = stderr
        .split("summary cache: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no summary cache line in:\n{stderr}"));
    (read, output.stdout)
}

#[test]
fn a_run_reads_no_cached_summary_of_files_it_does_not_analyse() {
    // Issue 57: every run once read and decoded the whole summary cache (52 MB after one
    // analysis of a site-packages), whatever it analysed.
    let cache = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let (big, small) = (project.path().join("big"), project.path().join("small"));
    std::fs::create_dir_all(&big).unwrap();
    std::fs::create_dir_all(&small).unwrap();
    for n in 0..300 {
        let text = format!(
            "import mod{}\n\ndef f{n}():\n    return {n}\n",
            (n + 1) % 300
        );
        std::fs::write(big.join(format!("mod{n}.py")), text).unwrap();
    }
    std::fs::write(
        small.join("job.py"),
        "import helper\n\ndef f():\n    return helper.x\n",
    )
    .unwrap();
    std::fs::write(small.join("helper.py"), "x = 1\n").unwrap();
    let with_cache = |targets: &[&std::path::Path], format: &str| {
        let mut args: Vec<&std::ffi::OsStr> = ["analyze", "--format", format, "--cache-dir"]
            .into_iter()
            .map(std::ffi::OsStr::new)
            .collect();
        args.push(cache.path().as_os_str());
        args.extend(targets.iter().map(|target| target.as_os_str()));
        entries_read(&args)
    };
    let (read, _) = with_cache(&[&big, &small], "json");
    assert_eq!(read, 0, "a cold cache");
    let job = small.join("job.py");
    // The table format stores no result: the summaries are all the cache gives it.
    let (read, cached) = with_cache(&[&job], "table");
    assert_eq!(read, 2, "job.py and helper.py, not the 300 others");
    let plain = lfm(&[
        "analyze",
        "--no-cache",
        "--format",
        "table",
        job.to_str().unwrap(),
    ]);
    assert_eq!(cached, plain.stdout);
}

#[test]
fn stored_results_are_replayed_only_while_nothing_they_depend_on_changed() {
    let cache = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let file = project.path().join("job.py");
    std::fs::write(
        &file,
        "import csv\n\ndef f():\n    return helper.x\n\nimport helper\n",
    )
    .unwrap();
    std::fs::write(project.path().join("helper.py"), "import json\nx = 1\n").unwrap();
    let tree = project.path().to_str().unwrap().to_string();
    // Returns (the Spec, whether the stored result was reused).
    let run = || {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_lfm"))
            .args(["analyze", "--format", "json", "--cache-dir"])
            .arg(cache.path())
            .arg(&tree)
            .env("LFM_TIMINGS", "1")
            .output()
            .unwrap();
        assert_succeeded(&output);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let spec: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        (
            spec,
            stderr.contains("stored result of this request was reused"),
        )
    };
    let (fresh, reused) = run();
    assert!(!reused);
    assert_eq!(names(target(&fresh, "job:f")), ["helper", "json"]);
    let (again, reused) = run();
    assert!(reused, "an unchanged request is replayed");
    assert_eq!(again, fresh);

    // A file the closure reached changes.
    std::fs::write(project.path().join("helper.py"), "import pathlib\nx = 1\n").unwrap();
    let (edited, reused) = run();
    assert!(!reused);
    assert_eq!(names(target(&edited, "job:f")), ["helper", "pathlib"]);
    assert!(run().1);

    // A new file where imports were looked for: a local module now shadows the stdlib `csv`.
    std::fs::write(project.path().join("csv.py"), "import zipfile\n").unwrap();
    let (shadowed, reused) = run();
    assert!(!reused);
    assert_eq!(module(target(&shadowed, "job"), "csv")["kind"], "local");

    // --no-cache neither reads nor needs it.
    let plain = analyze_json(&[&tree]);
    assert_eq!(plain, shadowed);
}

/// Runs `lfm analyze --format json` on `tree` with `cache` (or `--no-cache`), returning the
/// raw output and how many targets' stored output was reused (from `LFM_TIMINGS`).
fn analyze_bytes(tree: &std::path::Path, cache: Option<&std::path::Path>) -> (Vec<u8>, usize) {
    analyze_bytes_with(None, tree, cache)
}

/// Like [`analyze_bytes`], in the environment of `python` where given.
fn analyze_bytes_with(
    python: Option<&std::path::Path>,
    tree: &std::path::Path,
    cache: Option<&std::path::Path>,
) -> (Vec<u8>, usize) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lfm"));
    command.args(["analyze", "--format", "json"]);
    if let Some(python) = python {
        command.arg("--python").arg(python);
    }
    match cache {
        Some(cache) => command.arg("--cache-dir").arg(cache),
        None => command.arg("--no-cache"),
    };
    let output = command.arg(tree).env("LFM_TIMINGS", "1").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_succeeded(&output);
    let reused = stderr
        .split("the stored output of ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or(0);
    (output.stdout, reused)
}

#[test]
fn stored_target_outputs_are_reused_only_where_no_changed_file_is_read() {
    let cache = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let tree = project.path();
    let write = |name: &str, text: &str| std::fs::write(tree.join(name), text).unwrap();
    std::fs::create_dir(tree.join("pkg")).unwrap();
    write("job.py", "import helper\n\ndef f():\n    return helper.x\n");
    write("helper.py", "import json\nx = 1\n");
    write(
        "other.py",
        "import zipfile\n\ndef h():\n    return zipfile\n",
    );
    // `pkg.sub` is found by name from `pkg` (loaded because loader.py imports it).
    write("pkg/__init__.py", "");
    write("pkg/sub.py", "def value():\n    return 1\n");
    write("loader.py", "import pkg.sub\n");
    write(
        "user.py",
        "import pkg\n\ndef u():\n    return pkg.sub.value()\n",
    );
    let cached = || analyze_bytes(tree, Some(cache.path()));
    let fresh = || analyze_bytes(tree, None).0;
    let spec = |bytes: &[u8]| serde_json::from_slice::<serde_json::Value>(bytes).unwrap();
    assert_eq!(cached().0, fresh());

    // The edited file gains an import that a closure reading it includes.
    write("helper.py", "import pathlib\nx = 1\n");
    let (edited, reused) = cached();
    assert_eq!(edited, fresh());
    assert!(reused > 0, "other.py's targets do not read helper.py");
    assert_eq!(
        names(target(&spec(&edited), "job:f")),
        ["helper", "pathlib"]
    );

    // A module reached only by name lookups changes.
    write(
        "pkg/sub.py",
        "import decimal\n\ndef value():\n    return decimal\n",
    );
    let (edited, reused) = cached();
    assert_eq!(edited, fresh());
    assert!(reused > 0);
    assert!(names(target(&spec(&edited), "user:u")).contains(&"decimal".to_string()));

    // A new local module the edited file imports: nothing is reused, the answer is right.
    write("other.py", "import extra\n\ndef h():\n    return extra\n");
    write("extra.py", "import fractions\n");
    let (edited, _) = cached();
    assert_eq!(edited, fresh());
    assert!(names(target(&spec(&edited), "other:h")).contains(&"fractions".to_string()));
}

#[test]
fn loaded_modules_are_restored_only_while_the_changed_files_write_the_same_imports() {
    let cache = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let tree = project.path();
    let write = |name: &str, text: &[u8]| std::fs::write(tree.join(name), text).unwrap();
    std::fs::create_dir(tree.join("pkg")).unwrap();
    write("pkg/__init__.py", b"from . import util\n");
    // Loading warns of the relative import (above `pkg`) and of the undecodable byte.
    write("pkg/util.py", b"import json\nfrom .. import toohigh\n");
    write("pkg/bad.py", b"import csv\nx = '\xff'\n");
    write(
        "job.py",
        b"import pkg.util\n\ndef f():\n    from pkg import bad\n    return bad.x\n",
    );
    let cached = || {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_lfm"))
            .args(["analyze", "--format", "json", "--cache-dir"])
            .arg(cache.path())
            .arg(tree)
            .env("LFM_TIMINGS", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_succeeded(&output);
        let stdout = String::from_utf8(output.stdout).unwrap();
        (stdout, stderr.contains("its loaded modules restored"))
    };
    let fresh = || String::from_utf8(analyze_bytes(tree, None).0).unwrap();
    let warning_lines = |text: &str| -> Vec<(String, u64)> {
        let spec: serde_json::Value = serde_json::from_str(text).unwrap();
        (spec["warnings"].as_array().unwrap().iter())
            .map(|w| {
                (
                    w["file"].as_str().unwrap().to_string(),
                    w["line"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(cached(), (fresh(), false));

    // The same imports on other lines: restored, and the relative import's warning moves.
    write(
        "pkg/util.py",
        b"# moved down\nimport json\nfrom .. import toohigh\n\ndef g():\n    return json\n",
    );
    let (edited, restored) = cached();
    assert!(restored);
    assert_eq!(edited, fresh());
    assert!(warning_lines(&edited)
        .iter()
        .any(|(file, line)| file.ends_with("util.py") && *line == 3));

    // The undecodable byte goes: restored, and its warning with it.
    write("pkg/bad.py", b"import csv\nx = 'x'\n");
    let (edited, restored) = cached();
    assert!(restored);
    assert_eq!(edited, fresh());
    assert!(!warning_lines(&edited)
        .iter()
        .any(|(file, _)| file.ends_with("bad.py")));

    // Another import: every import is resolved again.
    write("pkg/bad.py", b"import csv\nimport decimal\nx = 'x'\n");
    let (edited, restored) = cached();
    assert!(!restored);
    assert_eq!(edited, fresh());
    assert!(
        names(target(&serde_json::from_str(&edited).unwrap(), "job:f"))
            .contains(&"decimal".to_string())
    );
    // And the result stored then is restored from in turn, and the one stored after that
    // (its table kept as it was read).
    write(
        "job.py",
        b"import pkg.util\n\ndef f():\n    from pkg import bad\n    return bad\n",
    );
    assert_eq!(cached(), (fresh(), true));
    write(
        "job.py",
        b"import pkg.util\n\ndef f():\n    from pkg import bad\n    return 1\n",
    );
    assert_eq!(cached(), (fresh(), true));
}

/// A venv without pip whose site-packages holds made-up distributions `alpha` (whose
/// `alpha.core` this test edits), `beta` and `gamma` (which imports alpha), all set back in
/// time as an installed environment is; its python and site-packages.
fn made_up_venv(root: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let venv = root.join("venv");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let python = venv.join("bin/python");
    let asked = std::process::Command::new(&python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let site = std::path::PathBuf::from(String::from_utf8(asked.stdout).unwrap().trim());
    let dist = |name: &str, files: &[(&str, &str)]| {
        let info = site.join(format!("{name}-1.0.dist-info"));
        std::fs::create_dir_all(&info).unwrap();
        let metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n");
        std::fs::write(info.join("METADATA"), metadata).unwrap();
        let record: String = files
            .iter()
            .map(|(file, _)| format!("{file},,\n"))
            .collect();
        std::fs::write(info.join("RECORD"), record).unwrap();
        for (file, text) in files {
            std::fs::create_dir_all(site.join(file).parent().unwrap()).unwrap();
            std::fs::write(site.join(file), text).unwrap();
        }
    };
    dist(
        "alpha",
        &[
            ("alpha/__init__.py", "from alpha import core\n"),
            ("alpha/core.py", "x = 1\n"),
        ],
    );
    dist("beta", &[("beta.py", "import os\n")]);
    let job = "import alpha\n\ndef f():\n    return alpha\n";
    dist(
        "gamma",
        &[
            ("gamma/__init__.py", "import alpha\n"),
            ("gamma/job.py", job),
        ],
    );
    let settled = std::process::Command::new("find")
        .arg(&venv)
        .args(["-exec", "touch", "-h", "-d", "@1000000", "{}", "+"])
        .status()
        .unwrap();
    assert!(settled.success());
    (python, site)
}

fn distributions(spec: &serde_json::Value, name: &str) -> Vec<(String, bool)> {
    let mut found: Vec<(String, bool)> = (target(spec, name)["distributions"].as_array())
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap().to_string(),
                d["undeclared"] == true,
            )
        })
        .collect();
    found.sort();
    found
}

#[test]
fn installed_code_edited_in_place_is_not_answered_from_a_stored_result() {
    let root = tempfile::tempdir().unwrap();
    let (python, site) = made_up_venv(root.path());
    let project = root.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(
        project.join("job.py"),
        "import alpha\n\ndef f():\n    return alpha\n",
    )
    .unwrap();
    let (cache, python) = (root.path().join("cache"), Some(python.as_path()));
    // As text, so that a failure shows which distributions differ.
    let run = |tree: &std::path::Path, cache: Option<&std::path::Path>| {
        let (bytes, reused) = analyze_bytes_with(python, tree, cache);
        (String::from_utf8(bytes).unwrap(), reused)
    };
    let spec = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
    let alpha_only = [("alpha".to_string(), false)];
    for tree in [&project, &site] {
        assert_eq!(run(tree, Some(&cache)).0, run(tree, None).0);
    }
    let stored = run(&project, Some(&cache)).0;
    assert_eq!(distributions(&spec(&stored), "job:f"), alpha_only);
    // No reinstall, so no RECORD changes: only the installed file's own stamp tells.
    std::fs::write(
        site.join("alpha/core.py"),
        "try:\n    import beta\nexcept ImportError:\n    pass\n",
    )
    .unwrap();
    let with_beta = [("alpha".to_string(), false), ("beta".to_string(), true)];
    // A local project: the stored result is not replayed.
    let edited = run(&project, Some(&cache)).0;
    assert_eq!(edited, run(&project, None).0);
    assert_eq!(distributions(&spec(&edited), "job:f"), with_beta);
    // The site-packages tree itself: no target reading alpha keeps its stored output.
    let (edited, _) = run(&site, Some(&cache));
    assert_eq!(edited, run(&site, None).0);
    assert!(distributions(&spec(&edited), "gamma.job:f").contains(&with_beta[1]));
    // An edit no installed import reaches still reuses the other targets.
    std::fs::write(
        site.join("gamma/job.py"),
        "import alpha\n\ndef f():\n    return 2\n",
    )
    .unwrap();
    let (edited, reused) = run(&site, Some(&cache));
    assert_eq!(edited, run(&site, None).0);
    assert!(reused > 0);
}

#[test]
fn a_result_partly_reused_still_stamps_the_installed_code_its_reused_targets_followed() {
    let root = tempfile::tempdir().unwrap();
    let (python, site) = made_up_venv(root.path());
    let project = root.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let write = |name: &str, text: &str| std::fs::write(project.join(name), text).unwrap();
    write("job.py", "import alpha\n\ndef f():\n    return alpha\n");
    let mut many = String::new();
    for n in 0..17 {
        many.push_str(&format!("def g{n}():\n    return {n}\n\n"));
    }
    write("many.py", &many);
    write("other.py", "def h():\n    return 1\n");
    let (cache, python) = (root.path().join("cache"), Some(python.as_path()));
    let run = |cache: Option<&std::path::Path>| {
        let (bytes, reused) = analyze_bytes_with(python, &project, cache);
        (String::from_utf8(bytes).unwrap(), reused)
    };
    run(Some(&cache));
    // Only other.py's two targets are computed, and they list nothing installed.
    write("other.py", "def h():\n    return 22\n");
    let (edited, reused) = run(Some(&cache));
    assert_eq!(edited, run(None).0);
    assert!(reused > 0);
    // alpha's imports were followed for job.py's stored targets: editing alpha still tells.
    std::fs::write(
        site.join("alpha/core.py"),
        "try:\n    import beta\nexcept ImportError:\n    pass\n",
    )
    .unwrap();
    let (after, _) = run(Some(&cache));
    assert_eq!(after, run(None).0);
    let spec = serde_json::from_str::<serde_json::Value>(&after).unwrap();
    assert!(distributions(&spec, "job:f").contains(&("beta".to_string(), true)));
}

#[test]
fn installed_imports_are_followed_only_from_what_a_few_targets_list() {
    let root = tempfile::tempdir().unwrap();
    let (python, site) = made_up_venv(root.path());
    let core = "try:\n    import beta\nexcept ImportError:\n    pass\n";
    std::fs::write(site.join("alpha/core.py"), core).unwrap();
    let touched = std::process::Command::new("touch")
        .args(["-d", "@1000000"])
        .arg(site.join("alpha/core.py"))
        .status()
        .unwrap();
    assert!(touched.success());
    // 17 functions besides `uses` and `plain`: more targets than are analysed one by one first.
    let mut text = String::from(
        "import alpha\n\ndef uses():\n    return alpha\n\ndef plain():\n    return 1\n",
    );
    for n in 0..17 {
        text.push_str(&format!("\ndef other_{n}():\n    return {n}\n"));
    }
    let project = root.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("two.py"), text).unwrap();
    let run = |target: &str, cache: &std::path::Path| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_lfm"))
            .args(["analyze", "--format", "json", "--python"])
            .arg(&python)
            .arg("--cache-dir")
            .arg(cache)
            .arg(project.join(target))
            .output()
            .unwrap();
        assert!(output.status.success());
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let kept = |cache: &std::path::Path| {
        std::fs::read_dir(cache.join("analyze-installed-imports"))
            .map(|entries| entries.count())
            .unwrap_or(0)
    };
    // `plain` lists nothing installed: alpha's imports are not read, though its file imports it.
    let cache = root.path().join("cache-plain");
    let plain = run("two.py:plain", &cache);
    assert!(distributions(&plain, "two:plain").is_empty());
    assert_eq!(kept(&cache), 0);
    // `uses` alone, and among the whole file's targets (every installed module met followed):
    // the same answer, beta imported by alpha when installed.
    let alone = run("two.py:uses", &root.path().join("cache-uses"));
    let whole = run("two.py", &root.path().join("cache-whole"));
    assert_eq!(target(&alone, "two:uses"), target(&whole, "two:uses"));
    assert_eq!(
        distributions(&alone, "two:uses"),
        [("alpha".to_string(), false), ("beta".to_string(), true)]
    );
}

fn module<'a>(target: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    target["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no module {name}"))
}

fn contexts(target: &serde_json::Value, name: &str) -> Vec<String> {
    module(target, name)["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}
