//! `lfm simulate` on the bioblast trace and on bad input.

mod common;

use common::{assert_succeeded, lfm};

const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/traces/bioblast.csv"
);

#[test]
fn bioblast_memory_every_strategy_beats_the_whole_node() {
    if !std::path::Path::new(TRACE).exists() {
        eprintln!("SKIPPED: {TRACE} is not here (it ships in shared/data/traces)");
        return;
    }
    let output = lfm(&["simulate", "--trace", TRACE, "--format", "json"]);
    assert_succeeded(&output);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let outcomes = report["memory"].as_array().unwrap();
    let get = |name: &str| outcomes.iter().find(|o| o["strategy"] == name).unwrap();
    assert_eq!(get("oracle")["tasks"], 7754);
    assert_eq!(get("oracle")["waste_percent"], 0.0);
    let whole = get("fixed")["waste_percent"].as_f64().unwrap();
    for strategy in [
        "max-seen",
        "min-waste",
        "max-throughput",
        "greedy-bucketing",
        "greedy-bucketing-probabilistic",
        "exhaustive-bucketing",
        "exhaustive-bucketing-probabilistic",
        "quantized-bucketing",
    ] {
        let waste = get(strategy)["waste_percent"].as_f64().unwrap();
        assert!(waste < whole, "{strategy}: {waste} vs {whole}");
    }
    // The default's choice (docs/sizing.md): the lowest waste of every strategy on bioblast
    // memory (the oracle and the best ladder in hindsight are references, not strategies).
    let default = get("greedy-bucketing")["waste_percent"].as_f64().unwrap();
    let references = ["oracle", "best-ladder"];
    for o in outcomes
        .iter()
        .filter(|o| !references.contains(&o["strategy"].as_str().unwrap()))
    {
        assert!(default <= o["waste_percent"].as_f64().unwrap(), "{o}");
    }
    // No fixed ladder, even chosen in hindsight, reaches the oracle on this trace.
    let ladder = get("best-ladder")["waste_percent"].as_f64().unwrap();
    assert!(ladder > 0.0 && ladder <= default, "{ladder} vs {default}");
}

#[test]
fn bad_traces_and_strategies_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "category,memory\na,100\nb,lots\n").unwrap();
    let output = lfm(&["simulate", "--trace", trace.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("t.csv:3: column 2 (memory): \"lots\" is not a number"),
        "{stderr}"
    );

    std::fs::write(&trace, "category,memory\na,100\n").unwrap();
    let output = lfm(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--strategy",
        "best",
    ]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("[possible values: fixed, max-seen"),
        "{stderr}"
    );
    let output = lfm(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--resource",
        "gpus",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no \"gpus\" column"));
}

#[test]
fn plot_draws_use_and_every_strategy_per_resource() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    let mut csv = String::from("category,cores,memory\n");
    for i in 0..40 {
        let (category, memory) = if i % 4 == 0 {
            ("b", 900 + i)
        } else {
            ("a", 100 + i)
        };
        csv.push_str(&format!("{category},{},{memory}\n", 1 + i % 2));
    }
    std::fs::write(&trace, csv).unwrap();
    let svg = dir.path().join("out.svg");
    let output = lfm(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--resource",
        "memory,cores",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_succeeded(&output);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "{}", &text[..100.min(text.len())]);
    // Text elements hold their string on a line of its own.
    let lines = |wanted: &str| text.lines().filter(|l| l.trim() == wanted).count();
    for resource in ["memory", "cores"] {
        assert_eq!(lines(&format!("{resource}: allocation vs use per task")), 1);
    }
    let strategies = [
        "fixed",
        "max-seen",
        "min-waste",
        "max-throughput",
        "greedy-bucketing",
        "greedy-bucketing-probabilistic",
        "exhaustive-bucketing",
        "exhaustive-bucketing-probabilistic",
        "quantized-bucketing",
        "low-wastage-regression",
        "sizey",
        "best-so-far",
        "use",
    ];
    for label in strategies {
        assert_eq!(lines(label), 2, "{label}: one legend entry per resource");
    }
    // A series is a polyline through one point per task: the use and every strategy, per
    // resource (axis ticks and legend samples have two points).
    let series = text
        .split("<polyline")
        .skip(1)
        .filter(|p| {
            let points = p
                .split("points=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            points.split_whitespace().count() == 40
        })
        .count();
    assert_eq!(series, 2 * strategies.len());
}

/// A Nextflow-like trace: text columns, the category in two columns, lfm's columns under
/// other names, rows to leave out.
#[test]
fn a_trace_in_other_columns_is_read_through_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("nf.csv");
    let mut text = String::from("source,workflow,category,memory_mb,wall_seconds,input_bytes,ok\n");
    for i in 1..=40 {
        // Memory follows the input in w1 and is flat in w2; the last row is dropped by --where.
        text.push_str(&format!(
            "x,w1,P,{},{},{},1\n",
            100 + 2 * i,
            1 + i % 3,
            i * 1000
        ));
        text.push_str(&format!("x,w2,P,300,1,{},1\n", i * 1000));
    }
    text.push_str("x,w1,P,lots,1,5,0\n");
    std::fs::write(&trace, &text).unwrap();
    let path = trace.to_str().unwrap();
    let flags = [
        "--category-columns",
        "workflow,category",
        "--column",
        "memory=memory_mb,wall_time=wall_seconds",
        "--where",
        "ok=1",
        "--format",
        "json",
    ];
    let output = lfm(&[&["simulate", "--trace", path][..], &flags].concat());
    assert_succeeded(&output);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let outcomes = report["memory"].as_array().unwrap();
    let get = |name: &str| outcomes.iter().find(|o| o["strategy"] == name).unwrap();
    assert_eq!(get("oracle")["tasks"], 80);
    let waste = |name: &str| get(name)["waste_percent"].as_f64().unwrap();
    // Memory that follows the input is sized closer by the regressions than by max-seen.
    assert!(
        waste("low-wastage-regression") < waste("max-seen"),
        "{report}"
    );
    assert!(waste("sizey") < waste("max-seen"), "{report}");

    // Without --where the dropped row's text is read as a number: named by line and column.
    let output = lfm(&[&["simulate", "--trace", path][..], &flags[..4]].concat());
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("nf.csv:82: column 4 (memory): \"lots\" is not a number"),
        "{stderr}"
    );
    // A column that is not there, and a flag that is not NAME=VALUE.
    let output = lfm(&["simulate", "--trace", path, "--column", "memory=rss"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no \"rss\" column"));
    let output = lfm(&["simulate", "--trace", path, "--where", "ok"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--where \"ok\": expected NAME=VALUE"));
    // A negative input size.
    std::fs::write(&trace, "category,memory,input_bytes\na,100,-5\n").unwrap();
    let output = lfm(&["simulate", "--trace", path]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("nf.csv:2: column 3 (input_bytes): -5 is negative"),
        "{stderr}"
    );
}

#[test]
fn a_schedule_on_one_node_gives_each_sizing_its_makespan() {
    // Two categories: four calls of 300 MB that wait 2 s after 0.5 s of CPU, and two of 600 MB
    // that only compute for 1 s; a 1000 MB node with 2 cores.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("calls.csv");
    let mut rows = String::from("category,memory,cpu_time,wall_time\n");
    rows.push_str(&"wait,300,0.5,2.5\n".repeat(4));
    rows.push_str(&"compute,600,1,1\n".repeat(2));
    std::fs::write(&trace, rows).unwrap();
    let trace = trace.to_str().unwrap();
    let args = [
        "simulate",
        "--trace",
        trace,
        "--strategy",
        "max-seen",
        "--schedule-memory",
        "1000",
        "--schedule-cores",
        "2",
        "--format",
        "json",
    ];
    let output = lfm(&args);
    assert_succeeded(&output);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let timelines = report["schedule"].as_array().unwrap();
    let names: Vec<&str> = timelines
        .iter()
        .map(|t| t["sizing"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["fixed 1000 MB", "fixed 600 MB", "max-seen", "oracle"]
    );
    let makespan = |i: usize| timelines[i]["makespan"].as_f64().unwrap();
    // One at a time: 4 x 2.5 + 2 x 1.
    assert!((makespan(0) - 12.0).abs() < 1e-6, "{report}");
    // A fixed 600 MB leaves room for one call at a time too.
    assert!((makespan(1) - 12.0).abs() < 1e-6, "{report}");
    // The oracle: three waiting calls (900 MB) share the cores for their CPU (0.75 s), wait 2 s;
    // then the fourth beside a compute call (both at full speed), then the other compute call:
    // the fourth ends at 2.75 + 0.5 + 2.
    assert!((makespan(3) - 5.25).abs() < 1e-6, "{report}");
    // max-seen gives each category's first call the node, then its largest peak and a third
    // of a bucket (rounded up to a bucket): between the two.
    assert!(
        makespan(3) < makespan(2) && makespan(2) < makespan(0),
        "{report}"
    );
    assert_eq!(timelines[3]["retries"], 0);

    let bad = lfm(&["simulate", "--trace", trace, "--schedule-memory", "0"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("must be above 0"));
    let lonely = lfm(&["simulate", "--trace", trace, "--schedule-cores", "2"]);
    assert_eq!(
        lonely.status.code(),
        Some(2),
        "--schedule-cores needs --schedule-memory"
    );
}

/// `lfm history --format csv` is CSV that `lfm simulate --trace` (and `lfm history --import`)
/// read back whatever a category holds: commas, quotes, a newline.
#[test]
fn a_category_with_commas_quotes_and_a_newline_round_trips_through_history_csv() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (history, trace, copy) = (path("h.sqlite"), path("t.csv"), path("copy.sqlite"));
    let category = "fit, \"quoted\"\nsecond line";
    for category in [category, category, "plain"] {
        let run = common::lfm_in(
            "/",
            &[
                "run",
                "--quiet",
                "--category",
                category,
                "--history",
                &history,
                "--",
                "true",
            ],
        );
        assert_succeeded(&run);
    }
    let csv = lfm(&["history", "--history", &history, "--format", "csv"]);
    assert_succeeded(&csv);
    std::fs::write(&trace, &csv.stdout).unwrap();

    let simulated = lfm(&["simulate", "--trace", &trace, "--format", "json"]);
    assert_succeeded(&simulated);
    let report: serde_json::Value = serde_json::from_slice(&simulated.stdout).unwrap();
    let outcomes = report["memory"].as_array().unwrap();
    let oracle = outcomes.iter().find(|o| o["strategy"] == "oracle").unwrap();
    assert_eq!(oracle["tasks"], 3, "{report}");

    let imported = lfm(&["history", "--history", &copy, "--import", &trace]);
    assert_succeeded(&imported);
    let rows = common::history_json("history", &copy, category);
    assert_eq!(rows.as_array().unwrap().len(), 2, "{rows}");
    assert_eq!(rows[0]["category"], category);
}
