//! `lfm plot`: the SVG files parse, and hold the series, limits and marks they should.

mod common;

use common::{assert_succeeded, lfm_in, workload};

/// The SVG's root element name, its `<text>` contents, and the point counts of its polylines
/// drawn in `stroke`.
fn parse(svg: &std::path::Path, stroke: &str) -> (String, Vec<String>, Vec<usize>) {
    let text = std::fs::read_to_string(svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the SVG is well-formed XML");
    let root = doc.root_element().tag_name().name().to_string();
    let texts = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or_default().trim().to_string())
        .collect();
    let lines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke") == Some(stroke))
        .map(|n| {
            n.attribute("points")
                .unwrap_or_default()
                .split_whitespace()
                .count()
        })
        .collect();
    (root, texts, lines)
}

const SERIES_BLUE: &str = "#1F77B4";

#[test]
fn a_run_killed_by_its_memory_limit_is_drawn_with_its_limit_and_the_kill() {
    let dir = tempfile::tempdir().unwrap();
    let (report, series, svg) = (
        dir.path().join("r.json"),
        dir.path().join("ts.jsonl"),
        dir.path().join("run.svg"),
    );
    let w = workload();
    let output = lfm_in(
        "/",
        &[
            "run",
            "--quiet",
            "--memory",
            "100M",
            "--report",
            report.to_str().unwrap(),
            "--series",
            series.to_str().unwrap(),
            "--",
            w.to_str().unwrap(),
            "touch",
            "300",
            "2000",
        ],
    );
    assert_eq!(output.status.code(), Some(125));
    let samples = std::fs::read_to_string(&series).unwrap().lines().count();
    // Either order: each file is told by its content.
    let plot = lfm_in(
        "/",
        &[
            "plot",
            series.to_str().unwrap(),
            report.to_str().unwrap(),
            "-o",
            svg.to_str().unwrap(),
        ],
    );
    assert_succeeded(&plot);
    let (root, texts, lines) = parse(&svg, SERIES_BLUE);
    assert_eq!(root, "svg");
    for expected in [
        "memory over time",
        "cores over time",
        "limit 100.0 MiB",
        "killed: memory limit",
    ] {
        assert!(
            texts.iter().any(|t| t == expected),
            "{expected:?} not in {texts:?}"
        );
    }
    assert!(
        !texts.iter().any(|t| t == "disk over time"),
        "no sandbox, no disk panel"
    );
    // memory and cores, one point per sample; the legend's two short lines have two points,
    // so they count too when the kill came after two samples (a loaded machine).
    let legend = if samples == 2 { 2 } else { 0 };
    assert_eq!(
        lines.iter().filter(|&&n| n == samples).count(),
        2 + legend,
        "{lines:?} vs {samples}"
    );
    assert_eq!(
        lines.iter().filter(|&&n| n == 2).count(),
        2 + legend,
        "{lines:?}"
    );

    let alone = dir.path().join("alone.svg");
    let plot = lfm_in(
        "/",
        &[
            "plot",
            series.to_str().unwrap(),
            "-o",
            alone.to_str().unwrap(),
        ],
    );
    assert!(plot.status.success());
    let (_, texts, _) = parse(&alone, SERIES_BLUE);
    assert!(
        !texts.iter().any(|t| t.starts_with("killed")),
        "a series alone knows no limits"
    );
}

#[test]
fn the_readme_plot_is_what_the_command_makes_of_the_committed_sample_run() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("run.svg");
    let plot = lfm_in(
        root,
        &[
            "plot",
            "docs/img/run.json",
            "docs/img/run.jsonl",
            "-o",
            svg.to_str().unwrap(),
        ],
    );
    assert_succeeded(&plot);
    let committed = std::fs::read_to_string(format!("{root}/docs/img/run.svg")).unwrap();
    assert_eq!(
        std::fs::read_to_string(&svg).unwrap(),
        committed,
        "make it again (README)"
    );
    let (_, texts, _) = parse(&svg, SERIES_BLUE);
    assert!(texts.iter().any(|t| t == "disk over time"), "{texts:?}");
}

#[test]
fn a_bad_series_line_is_named_and_nothing_is_drawn() {
    let dir = tempfile::tempdir().unwrap();
    let series = dir.path().join("ts.jsonl");
    std::fs::write(&series, "{\"t\": 0.1, \"cpu_time\": 0, \"cores\": 0, \"memory_bytes\": 1, \"processes\": 1, \"bytes_read\": 0, \"bytes_written\": 0}\n{\"t\": oops}\n").unwrap();
    let svg = dir.path().join("x.svg");
    let plot = lfm_in(
        "/",
        &[
            "plot",
            series.to_str().unwrap(),
            "-o",
            svg.to_str().unwrap(),
        ],
    );
    assert_eq!(plot.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&plot.stderr);
    assert!(
        stderr.contains(&format!("{}:2:", series.display())),
        "{stderr}"
    );
    assert!(!svg.exists());
}

#[test]
fn a_category_history_is_drawn_as_peaks_retries_and_the_next_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let history = history.to_str().unwrap();
    let trace = dir.path().join("t.csv");
    let mut csv = String::from("category,cores,memory,disk,wall_time\n");
    for i in 0..30 {
        csv.push_str(&format!("align,1,{},0,10\n", 100 + (i * 37) % 200));
    }
    std::fs::write(&trace, csv).unwrap();
    let imported = lfm_in(
        "/",
        &[
            "history",
            "--history",
            history,
            "--import",
            trace.to_str().unwrap(),
        ],
    );
    assert_succeeded(&imported);
    let w = workload();
    let killed = lfm_in(
        "/",
        &[
            "run",
            "--quiet",
            "--category",
            "align",
            "--history",
            history,
            "--memory",
            "50M",
            "--",
            w.to_str().unwrap(),
            "touch",
            "300",
            "2000",
        ],
    );
    assert_eq!(killed.status.code(), Some(125));
    let svg = dir.path().join("align.svg");
    // `--history` alone: the default history, here $LFM_HISTORY.
    let plot = std::process::Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(["plot", "--history", "--category", "align", "-o"])
        .arg(&svg)
        .env("LFM_HISTORY", history)
        .output()
        .unwrap();
    assert_succeeded(&plot);
    let (root, texts, _) = parse(&svg, SERIES_BLUE);
    assert_eq!(root, "svg");
    for expected in [
        "align: memory peaks of 31 runs",
        "peaks of 30 normally ended runs",
        "1 runs that ran out (retried)",
    ] {
        assert!(
            texts.iter().any(|t| t == expected),
            "{expected:?} not in {texts:?}"
        );
    }
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("next allocation ") && t.ends_with("(best-so-far)")),
        "{texts:?}"
    );
    let none = lfm_in(
        "/",
        &[
            "plot",
            "--history",
            history,
            "--category",
            "nope",
            "-o",
            "/tmp/x.svg",
        ],
    );
    assert_eq!(none.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no run of category nope"));
}

#[test]
fn a_nodes_served_calls_are_drawn_as_memory_allocated_and_used_over_time() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let history = history.to_str().unwrap();
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/serve");
    let requests: String = (0..3)
        .map(|i| {
            format!(
                "{{\"id\": {i}, \"function\": \"faults.py:alloc_hold\", \"args\": [20, 0.2], \
                 \"import_module\": true, \"limits\": {{\"memory\": \"200M\"}}}}\n"
            )
        })
        .collect();
    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args([
            "serve",
            "--backend",
            "rlimit",
            "--slots",
            "2",
            "--history",
            history,
        ])
        .current_dir(fixtures)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    serve
        .stdin
        .take()
        .unwrap()
        .write_all(requests.as_bytes())
        .unwrap();
    assert!(serve.wait().unwrap().success());

    let svg = dir.path().join("node.svg");
    let plot = lfm_in(
        "/",
        &[
            "plot",
            "--history",
            history,
            "--node",
            "-o",
            svg.to_str().unwrap(),
        ],
    );
    assert_succeeded(&plot);
    let (root, texts, allocated) = parse(&svg, "#008C3C");
    assert_eq!(root, "svg");
    assert!(
        texts
            .iter()
            .any(|t| t == "memory of the node's 3 served calls"),
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t.starts_with("allocated")));
    // Each line steps up and down once per call at least (the legend's lines have 2 points).
    let lines = |counts: Vec<usize>| counts.into_iter().filter(|&n| n > 2).collect::<Vec<_>>();
    let allocated = lines(allocated);
    assert_eq!(allocated.len(), 1);
    assert!(allocated[0] > 2 * 3 * 2, "{allocated:?}");
    let (_, _, used) = parse(&svg, SERIES_BLUE);
    assert_eq!(lines(used).len(), 1);

    // A history without served calls says so, and draws nothing.
    let empty = dir.path().join("empty.sqlite");
    let run = lfm_in(
        "/",
        &[
            "run",
            "--quiet",
            "--history",
            empty.to_str().unwrap(),
            "--category",
            "x",
            "--",
            "true",
        ],
    );
    assert!(run.status.success());
    let none = dir.path().join("none.svg");
    let plot = lfm_in(
        "/",
        &[
            "plot",
            "--history",
            empty.to_str().unwrap(),
            "--node",
            "-o",
            none.to_str().unwrap(),
        ],
    );
    assert_eq!(plot.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&plot.stderr).contains("no call of lfm serve"));
    assert!(!none.exists());
}
