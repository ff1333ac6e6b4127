//! `lfm cache`: what lfm keeps on this node, and cleaning it (docs/pack.md, "The cache").

use std::path::{Path, PathBuf};

use lfm_analyzer::cache::SummaryCache;
use lfm_call::PACK_CACHE_MAX_VARIABLE;
use lfm_monitor::limits::parse_size;
use lfm_packer::cache::{self, CachedPack, Evicted};
use lfm_packer::UnpackOptions;

use crate::cli::CacheArgs;
use crate::monitoring::EXIT_USAGE;

/// The analyze caches under the cache directory: each bounded by its own rule (the summaries
/// and the results also by the analyze budget, least recently used entries leaving first).
const ANALYZE_CACHES: [(&str, &str); 7] = [
    (
        "analyze-summaries.bin",
        "entries unused for 32 runs leave; within the budget",
    ),
    (
        "analyze-summaries.journal",
        "summaries added since; folded in at a quarter of the file",
    ),
    (
        "analyze-results",
        "the 16 most recently used results; within the budget",
    ),
    (
        lfm_analyzer::interpreter_cache::DIR,
        "the 32 most recently asked interpreters",
    ),
    (
        lfm_analyzer::dists_cache::DIR,
        "the 8 most recently indexed environments",
    ),
    (
        lfm_analyzer::installed_imports::DIR,
        "the 256 most recently read distributions' imports",
    ),
    (
        lfm_call::KEPT_ANALYSES_DIR,
        "the 64 most recently analysed call targets",
    ),
];

pub fn cache(args: CacheArgs) -> i32 {
    let budgets = budget(args.prune.as_deref()).and_then(|packs| Ok((packs, analyze_budget()?)));
    let (budget, analyze_budget) = match budgets {
        Ok(budgets) => budgets,
        Err(message) => {
            eprintln!("error: {message}");
            return EXIT_USAGE;
        }
    };
    if let Some(dir) = &args.shipped {
        shipped(dir, &args, budget);
        return 0;
    }
    let packs_dir = args
        .cache
        .clone()
        .unwrap_or_else(UnpackOptions::default_cache);
    if args.clean {
        report_evicted("removed", &cache::remove_unused(&packs_dir));
        if let Some(dir) = SummaryCache::default_dir() {
            remove_analyze_caches(&dir);
        }
        remove_compiled_slices();
    } else if args.prune.is_some() {
        report_evicted("evicted", &cache::evict(&packs_dir, budget, None));
    }
    show(&packs_dir, budget, analyze_budget);
    0
}

/// The budget of the analyze summaries and of the stored results, each
/// (`$LFM_ANALYZE_CACHE_MAX`, else 1 GiB).
fn analyze_budget() -> Result<u64, String> {
    lfm_analyzer::cache::budget()
}

/// `--prune SIZE`, else `$LFM_PACK_CACHE_MAX`; `None`: the default budget.
fn budget(prune: Option<&str>) -> Result<Option<u64>, String> {
    if let Some(size) = prune.filter(|size| !size.is_empty()) {
        // A limit must be positive; an empty cache is a fine target.
        if size.trim() == "0" {
            return Ok(Some(0));
        }
        return parse_size("--prune", size)
            .map(Some)
            .map_err(|e| e.to_string());
    }
    match std::env::var_os(PACK_CACHE_MAX_VARIABLE) {
        Some(size) => parse_size(PACK_CACHE_MAX_VARIABLE, &size.to_string_lossy())
            .map(Some)
            .map_err(|e| e.to_string()),
        None => Ok(None),
    }
}

/// `--shipped DIR`: the Python client's shipped packs, by the pack cache's rule and budget.
fn shipped(dir: &Path, args: &CacheArgs, budget: Option<u64>) {
    if args.clean {
        report_evicted("removed", &cache::shipped::evict(dir, Some(0)));
    } else if args.prune.is_some() {
        report_evicted("evicted", &cache::shipped::evict(dir, budget));
    }
    show_packs("shipped", dir, &cache::shipped::list(dir), budget);
}

fn show(packs_dir: &Path, budget: Option<u64>, analyze_budget: u64) {
    show_packs("packs", packs_dir, &cache::list(packs_dir), budget);
    if let Some(dir) = SummaryCache::default_dir() {
        println!(
            "analyze   {}  budget {} each for the summaries and the results",
            dir.display(),
            human(analyze_budget)
        );
        for (name, bound) in ANALYZE_CACHES {
            let path = dir.join(name);
            let bytes = if path.is_dir() {
                cache::tree_bytes(&path)
            } else {
                path.metadata().map(|meta| meta.len()).unwrap_or(0)
            };
            println!("analyze   {}  {} ({bound})", path.display(), human(bytes));
        }
    }
    let slices = compiled_slices_dir();
    println!(
        "call      {}  {} (the {} most recently compiled slices)",
        slices.display(),
        human(cache::tree_bytes(&slices)),
        lfm_call::COMPILED_SLICES_KEPT
    );
}

fn show_packs(label: &str, dir: &Path, packs: &[CachedPack], budget: Option<u64>) {
    let held: u64 = packs.iter().map(|pack| pack.bytes).sum();
    let budget = budget.unwrap_or_else(|| cache::default_budget(dir, held));
    let in_use = packs.iter().filter(|pack| pack.in_use).count();
    println!(
        "{label:<9} {}  {} in {} packs ({in_use} in use), budget {}",
        dir.display(),
        human(held),
        packs.len(),
        human(budget)
    );
    for pack in packs.iter().rev() {
        println!("  {}", pack_line(pack));
    }
}

/// Where `lfm call` keeps compiled slices (under the runner's cache directory).
fn compiled_slices_dir() -> PathBuf {
    lfm_call::runner::default_cache().join(lfm_call::COMPILED_SLICES_DIR)
}

fn remove_compiled_slices() {
    let dir = compiled_slices_dir();
    if std::fs::remove_dir_all(&dir).is_ok() {
        println!("removed {}", dir.display());
    }
}

fn pack_line(pack: &CachedPack) -> String {
    let age = pack.last_used.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    format!(
        "{}  {:>9}  used {} ago{}",
        pack.root.file_name().unwrap_or_default().to_string_lossy(),
        human(pack.bytes),
        duration(age),
        if pack.in_use { "  in use" } else { "" }
    )
}

fn report_evicted(verb: &str, evicted: &Evicted) {
    println!(
        "{verb} {} packs ({}); {} kept because a process uses them",
        evicted.removed.len(),
        human(evicted.freed_bytes),
        evicted.kept_in_use.len()
    );
}

fn remove_analyze_caches(dir: &Path) {
    for (name, _) in ANALYZE_CACHES {
        let path: PathBuf = dir.join(name);
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if removed.is_ok() {
            println!("removed {}", path.display());
        }
    }
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}

fn duration(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7_200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}
