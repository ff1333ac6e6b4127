//! Embeds the call runner's Python sources (python/lfm_runner, python/lfm_shared), whose stdlib
//! imports a self-contained pack must hold: `lfm call --pack` and `lfm serve --pack` run the runner with
//! the pack's own interpreter. Globbed, so a new runner module needs no list kept here.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python");
    let mut files = vec![python.join("lfm_runner_main.py")];
    for package in ["lfm_runner", "lfm_shared"] {
        let dir = python.join(package);
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|error| panic!("python/{package}: {error}"))
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|e| e == "py"))
            .collect();
        names.sort();
        files.extend(names);
    }
    let mut code = String::from("pub const RUNNER_SOURCES: &[&str] = &[\n");
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        writeln!(
            code,
            "    include_str!({:?}),",
            file.canonicalize().unwrap()
        )
        .unwrap();
    }
    code.push_str("];\n");
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("runner_sources.rs");
    std::fs::write(out, code).unwrap();
}
