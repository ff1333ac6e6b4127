//! The two closures (slice and import) and what reaching a local module costs, as Python
//! runs the code: parent packages run before a module, and only the functions read from a
//! local module bring their in-function imports.

mod common;

use common::{analyze_json, assert_succeeded_with, target};

const FIXTURE: &str = "tests/fixtures/closures";

/// Names of every module a target needs, installed or not (the test does not depend on what
/// the machine's python3 has installed).
fn needed(target: &serde_json::Value) -> Vec<String> {
    let mut out: Vec<String> = ["modules", "missing"]
        .iter()
        .flat_map(|list| target[*list].as_array().unwrap().iter())
        .map(|m| {
            let name = m["name"].as_str().unwrap();
            // A missing `import a.b` is named as written; its top-level name is what is missing.
            match m["kind"].as_str() {
                None => name.split('.').next().unwrap().to_string(),
                Some(_) => name.to_string(),
            }
        })
        .collect();
    out.sort();
    out
}

fn analyze_in_fixture(args: &[&str]) -> serde_json::Value {
    let mut full = vec!["--root", FIXTURE];
    full.extend_from_slice(args);
    analyze_json(&full)
}

#[test]
fn an_import_closure_holds_the_parent_packages_and_what_they_import() {
    let file = format!("{FIXTURE}/proj/sub/tasks.py:f");
    let slice = analyze_in_fixture(&[&file]);
    let slice = target(&slice, "proj.sub.tasks:f");
    assert_eq!(slice["closure"], "slice");
    assert_eq!(needed(slice), ["json"]);

    let import = analyze_in_fixture(&["--closure", "import", &file]);
    let import = target(&import, "proj.sub.tasks:f");
    assert_eq!(import["closure"], "import");
    assert_eq!(
        needed(import),
        ["json", "proj", "proj.sub", "requests", "yaml"]
    );

    // A module target has only its import closure, whatever --closure says.
    let module = analyze_in_fixture(&[&format!("{FIXTURE}/proj/sub/tasks.py")]);
    let module = target(&module, "proj.sub.tasks");
    assert_eq!(module["closure"], "import");
    assert_eq!(
        needed(module),
        ["json", "proj", "proj.sub", "requests", "yaml"]
    );
}

#[test]
fn a_local_module_costs_its_import_and_the_functions_read_from_it() {
    let spec = analyze_in_fixture(&[&format!("{FIXTURE}/pkg/tasks.py")]);
    let import_of_helpers = ["pkg", "pkg.helpers", "re"];
    // `from m import f`, `m.f`, `a.b.f` and `import a.b as m; m.f` all read slug only:
    // helpers.plot's matplotlib and Chart.draw's yaml are not needed.
    for function in ["by_name", "by_attribute", "by_dotted_path", "by_alias"] {
        let closure = target(&spec, &format!("pkg.tasks:{function}"));
        assert_eq!(needed(closure), import_of_helpers, "{function}");
    }
    // A class read from a module brings all of its methods.
    let class = target(&spec, "pkg.tasks:by_class");
    assert_eq!(needed(class), ["pkg", "pkg.helpers", "re", "yaml"]);
    // A module used as a value (getattr) may give anything: all of it, and the reason says so.
    let dynamic = target(&spec, "pkg.tasks:dynamic");
    assert_eq!(
        needed(dynamic),
        ["matplotlib", "pkg", "pkg.helpers", "re", "yaml"]
    );
    let matplotlib = dynamic["modules"]
        .as_array()
        .unwrap()
        .iter()
        .chain(dynamic["missing"].as_array().unwrap())
        .find(|m| m["name"].as_str().unwrap().starts_with("matplotlib"))
        .unwrap();
    let chain = matplotlib["reason"]["chain"].to_string();
    assert!(chain.contains("used as a value"), "{chain}");
    // The module itself: what importing it runs, no function body.
    assert_eq!(needed(target(&spec, "pkg.tasks")), import_of_helpers);
}

#[test]
fn a_function_reached_through_a_package_brings_the_package_imports() {
    let spec = analyze_in_fixture(&[&format!("{FIXTURE}/main.py:g")]);
    assert_eq!(
        needed(target(&spec, "main:g")),
        [
            "json",
            "proj",
            "proj.sub",
            "proj.sub.tasks",
            "requests",
            "yaml"
        ]
    );
}

/// The chain of the reason that brought `module` (installed or missing) into a closure.
fn chain_of(target: &serde_json::Value, module: &str) -> Vec<String> {
    let found = ["modules", "missing"]
        .iter()
        .flat_map(|list| target[*list].as_array().unwrap())
        .find(|m| m["name"] == module)
        .unwrap_or_else(|| panic!("no {module} in {target}"));
    found["reason"]["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| step.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_name_an_import_inside_a_function_binds_is_followed_like_a_global() {
    let spec = analyze_in_fixture(&[&format!("{FIXTURE}/workflow/apps.py")]);
    let import_of_helpers = vec!["workflow", "workflow.helpers"];
    let with_plot = vec!["matplotlib", "workflow", "workflow.helpers"];
    // (function, what it needs, the reason chain of matplotlib.pyplot when it is needed).
    let cases = [
        // Each way of importing helpers inside the function reaches plot, and its matplotlib.
        ("by_name", &with_plot, vec!["by_name", "plot"]),
        (
            "by_module",
            &with_plot,
            vec!["by_module", "helpers", "plot"],
        ),
        ("by_alias", &with_plot, vec!["by_alias", "h", "plot"]),
        (
            "by_dotted_path",
            &with_plot,
            vec!["by_dotted_path", "workflow", "plot"],
        ),
        (
            "by_relative_import",
            &with_plot,
            vec!["by_relative_import", "helpers", "plot"],
        ),
        (
            "by_relative_member",
            &with_plot,
            vec!["by_relative_member", "draw", "plot"],
        ),
        // Read from a nested def, under if/try/with, inside a comprehension.
        (
            "in_nested_scopes",
            &with_plot,
            vec!["in_nested_scopes", "helpers", "plot"],
        ),
        // A class read through an in-function import brings its methods' imports.
        (
            "class_read",
            &vec!["tabulate", "workflow", "workflow.helpers"],
            vec![],
        ),
        // Only what is read: slug needs nothing of plot's, and a nested def's parameter of
        // the same name shadows the import.
        ("only_slug", &import_of_helpers, vec![]),
        ("shadowed", &import_of_helpers, vec![]),
    ];
    // Every form checked before any assertion fails: the message lists all that are wrong.
    let mut wrong = Vec::new();
    for (function, expected, chain) in cases {
        let closure = target(&spec, &format!("workflow.apps:{function}"));
        if needed(closure) != *expected {
            wrong.push(format!(
                "{function} needs {:?}, not {expected:?}",
                needed(closure)
            ));
        } else if !chain.is_empty() && chain_of(closure, "matplotlib.pyplot") != chain {
            let found = chain_of(closure, "matplotlib.pyplot");
            wrong.push(format!(
                "{function}: matplotlib via {found:?}, not {chain:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Importing the module runs none of it: only its package's (empty) `__init__`.
    assert_eq!(needed(target(&spec, "workflow.apps")), ["workflow"]);
}

/// A module-level value built by a comprehension or a lambda needs what they read of the
/// module (a global, an import), but not the names they bind themselves; the slice `lfm call`
/// runs holds those bindings, so the call works.
#[test]
fn what_a_module_level_comprehension_or_lambda_reads_is_needed_by_the_name_it_binds() {
    let file = format!("{FIXTURE}/inline/tables.py");
    let spec = analyze_in_fixture(&[&file]);
    for (function, module) in [
        ("uses_table", "json"),
        ("uses_nested", "csv"),
        ("uses_lambda", "sqlite3"),
    ] {
        let closure = target(&spec, &format!("tables:{function}"));
        assert_eq!(needed(closure), [module], "{function}");
        let called = common::lfm(&["call", "--quiet", &format!("{file}:{function}")]);
        assert_succeeded_with(&called, function);
    }
    let called = common::lfm(&["call", "--quiet", &format!("{file}:uses_table")]);
    assert_eq!(String::from_utf8_lossy(&called.stdout).trim(), "[0, 1, 2]");
    // The comprehension's own `k` is not the module's.
    let slice = common::lfm(&["call", "--show-slice", &format!("{file}:uses_table")]);
    let slice = String::from_utf8_lossy(&slice.stdout);
    assert!(
        slice.contains("SKIP = ") && !slice.contains("k = "),
        "{slice}"
    );
}

/// A builtin name that a star import of local code rebinds (funcy's `from funcy.colls import
/// *` brings its own `all`) is followed to that code, and the slice holds the star import; a
/// builtin no star import rebinds takes nothing.
#[test]
fn a_builtin_a_local_star_import_rebinds_is_followed_to_it() {
    let file = format!("{FIXTURE}/star/uses.py");
    let spec = analyze_in_fixture(&[&file]);
    assert_eq!(needed(target(&spec, "uses:shadowed")), ["json", "shadows"]);
    assert_eq!(needed(target(&spec, "uses:builtin")), Vec::<String>::new());
    let called = common::lfm(&["call", "--quiet", &format!("{file}:shadowed")]);
    assert_eq!(
        String::from_utf8_lossy(&called.stdout).trim(),
        r#""[\"shadows.all\", 2]""#,
        "{}",
        String::from_utf8_lossy(&called.stderr)
    );
    let slice = common::lfm(&["call", "--show-slice", &format!("{file}:builtin")]);
    let slice = String::from_utf8_lossy(&slice.stdout);
    assert!(!slice.contains("import"), "{slice}");
}

#[test]
fn a_class_read_brings_its_methods_needs_and_a_method_only_its_own() {
    let spec = analyze_in_fixture(&[&format!("{FIXTURE}/classes/models.py")]);
    let needs = |name: &str| needed(target(&spec, &format!("models:{name}")));
    // A method needs its own body and its class statement, not its sibling methods.
    assert_eq!(needs("Model.fit"), ["json"]);
    assert_eq!(needs("Model.plot"), ["csv"]);
    // Reading the class takes every method: each walk that reaches it, whichever way.
    for reader in ["make", "make_two"] {
        assert_eq!(needs(reader), ["csv", "json"], "{reader}");
    }
    assert_eq!(needs("path"), ["os"]);
    // The chain through the class names the class once, then what in it imports the module.
    let chain =
        |name: &str, module: &str| chain_of(target(&spec, &format!("models:{name}")), module);
    assert_eq!(chain("make", "json"), ["make", "Model"]);
    assert_eq!(chain("make_two", "csv"), ["make_two", "Model"]);
}
