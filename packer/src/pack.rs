//! Building a pack: the selected distributions' files and the local modules, as a
//! deterministic tar.zst whose first entry is the manifest.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use lfm_analyzer::dists::{normalize_name, DistIndex, Distribution};
use lfm_analyzer::interpreter::Interpreter;
use lfm_analyzer::spec::{ModuleKind, Spec};

use crate::manifest::{
    EngineLeftOut, Manifest, PackDistribution, PackPython, PackTarget, RunInfo, Totals,
    MANIFEST_FORMAT, MANIFEST_NAME,
};
use crate::placement::Placement;

/// Every entry gets this mtime: packs of the same inputs must be byte-identical. (Not 0: some
/// tools treat a zero mtime as "unset".)
const FIXED_MTIME: u64 = 1;

/// Called after each entry with (files done, files total, bytes done, bytes total).
pub type Progress = Box<dyn Fn(u64, u64, u64, u64)>;

pub struct PackOptions {
    /// zstd level (1-22).
    pub level: i32,
    /// zstd worker threads; at least 1, so the output is the same for any count.
    pub threads: u32,
    /// Where to write; `None`: `lfm-<hash>.tar.zst` in `output_dir`.
    pub output: Option<PathBuf>,
    pub output_dir: PathBuf,
    /// Add the interpreter, libpython and the stdlib, so the pack runs without any Python.
    pub self_contained: bool,
    /// Let code run through the pack also see the node interpreter's own site-packages.
    pub inherit_site_packages: bool,
    /// Pack the distributions only the targets' engine brings
    /// ([`Spec::union_engine_distributions`]); without, they are the worker's, and `run` sees
    /// the node's site-packages to find them (a self-contained pack always holds them: its
    /// interpreter sees nothing else).
    pub with_engine: bool,
    /// Write parts (one content-addressed tar.zst per distribution, one for the function's own
    /// files, one for the interpreter) and a parts manifest into `output_dir` instead of one
    /// archive (docs/pack.md, "Parts").
    pub parts: bool,
    pub progress: Option<Progress>,
}

/// What goes in: a Spec (the closure of some targets) or the whole environment.
pub enum Selection<'a> {
    Spec(&'a Spec),
    All,
}

pub struct Packed {
    pub path: PathBuf,
    pub manifest: Manifest,
    pub compressed_bytes: u64,
    pub hash: String,
    /// Files RECORD lists but the environment no longer has, and other non-fatal problems.
    pub warnings: Vec<String>,
}

pub(crate) enum Source {
    File(PathBuf),
    Symlink(PathBuf),
    Bytes(Vec<u8>),
}

pub(crate) struct Entry {
    pub(crate) source: Source,
    pub(crate) executable: bool,
}

/// The archive paths of one selected distribution's files: what its part holds.
pub(crate) struct DistFiles {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) paths: Vec<String>,
}

/// Build a pack from the environment of `interpreter`.
pub fn pack(
    selection: Selection,
    interpreter: &Interpreter,
    options: &PackOptions,
) -> Result<Packed> {
    let prefix = interpreter
        .prefix
        .canonicalize()
        .unwrap_or_else(|_| interpreter.prefix.clone());
    let site_dirs = interpreter.site_dirs();
    let index = DistIndex::build(&site_dirs, Some(&prefix));
    let mut warnings: Vec<String> = index.problems.clone();
    let selected = Selected::of(selection, &index, &prefix, options)?;
    let placement = Placement::of(interpreter, &prefix, &site_dirs);
    // The engine left out is found where the worker has it: the node's site-packages.
    let inherit_site_packages =
        options.inherit_site_packages || !selected.engine_left_out.is_empty();
    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    let (distributions, dist_files) =
        add_distributions(&index, &selected, &placement, &mut entries, &mut warnings)?;
    let local_files = add_local_files(selected.local_sources, &mut entries)?;
    let loose_files = add_loose_files(&selected.loose_modules, &index, &placement, &mut entries)?;
    let interpreter_entry = if options.self_contained {
        Some(add_interpreter(
            interpreter,
            &selected.stdlib_seeds,
            &mut entries,
            &mut warnings,
        )?)
    } else {
        None
    };
    let pythonpath = pack_pythonpath(&site_dirs, &prefix, &placement);
    let script = run_script(
        &pythonpath,
        interpreter_entry.is_some(),
        inherit_site_packages,
    );
    entries.insert(
        "run".into(),
        Entry {
            source: Source::Bytes(script.into_bytes()),
            executable: true,
        },
    );
    let manifest = Manifest {
        format: MANIFEST_FORMAT.into(),
        spec_hash: selected.spec_hash,
        python: PackPython {
            version: interpreter.version.clone(),
            abi: interpreter.soabi.clone(),
            platform: interpreter.platform_tag.clone(),
        },
        distributions,
        local_files,
        loose_files,
        engine_left_out: selected.engine_left_out,
        run: run_info(
            &selected.targets,
            !inherit_site_packages,
            interpreter_entry,
            pythonpath,
        ),
        targets: selected.targets,
        totals: totals_of(&entries),
        pyc: "no .pyc or __pycache__ is packed (timestamps are normalised, so shipped timestamp pycs would be stale); `lfm unpack --compile` compiles once into the cache as unchecked-hash pycs".into(),
    };
    if options.parts {
        let (path, compressed_bytes, hash) =
            crate::parts::write_parts(&manifest, entries, dist_files, options)?;
        return Ok(Packed {
            path,
            manifest,
            compressed_bytes,
            hash,
            warnings,
        });
    }
    let (path, compressed_bytes, hash) =
        write_archive(&manifest, &entries, options, &manifest.totals)?;
    Ok(Packed {
        path,
        manifest,
        compressed_bytes,
        hash,
        warnings,
    })
}

/// `app`, then the environment's site directories, then the pack's own site directory when
/// none of those is it (what files from outside the prefix were placed in).
fn pack_pythonpath(site_dirs: &[PathBuf], prefix: &Path, placement: &Placement) -> Vec<String> {
    let mut pythonpath: Vec<String> = std::iter::once("app".to_string())
        .chain(site_dirs.iter().filter_map(|dir| {
            dir.strip_prefix(prefix)
                .ok()
                .map(|relative| format!("env/{}", relative.display()))
        }))
        .collect();
    if !pythonpath.contains(&placement.site) {
        pythonpath.push(placement.site.clone());
    }
    pythonpath
}

/// What a selection packs: distributions, local files, the stdlib modules a self-contained
/// pack needs, and the targets the manifest names.
struct Selected {
    /// Test directories (`pkg/sub/tests`) whose files are packed; none for `--all`, which
    /// packs every file (a closure pack packs those its modules lie in).
    tests_kept: Option<BTreeSet<String>>,
    stdlib_seeds: BTreeSet<String>,
    dist_ids: Vec<u32>,
    engine_left_out: Vec<EngineLeftOut>,
    spec_hash: Option<String>,
    targets: Vec<PackTarget>,
    local_sources: Vec<(String, PathBuf)>,
    /// Files of third-party modules of the closure that no distribution lists.
    loose_modules: Vec<PathBuf>,
}

impl Selected {
    fn of(
        selection: Selection,
        index: &DistIndex,
        prefix: &Path,
        options: &PackOptions,
    ) -> Result<Selected> {
        let spec = match selection {
            Selection::All => {
                return Ok(Selected {
                    tests_kept: None,
                    stdlib_seeds: BTreeSet::new(),
                    dist_ids: (0..index.dists.len() as u32).collect(),
                    engine_left_out: Vec::new(),
                    spec_hash: None,
                    targets: Vec::new(),
                    local_sources: Vec::new(),
                    loose_modules: Vec::new(),
                })
            }
            Selection::Spec(spec) => spec,
        };
        let stdlib_seeds = spec
            .targets
            .iter()
            .flat_map(|t| t.modules.iter())
            .filter(|m| m.kind == ModuleKind::Stdlib)
            .map(|m| m.name.clone())
            .collect();
        let mut dist_ids = Vec::new();
        let mut packed = spec.union_distributions();
        let engine = spec.union_engine_distributions();
        let mut engine_left_out = Vec::new();
        if options.with_engine || options.self_contained {
            packed.extend(engine);
        } else {
            // The engine itself first (what its decorators import), then what it requires.
            let mut engine = engine;
            engine.sort_by_key(|dist| !dist.direct);
            engine_left_out = engine
                .into_iter()
                .map(|dist| EngineLeftOut {
                    name: dist.name.clone(),
                    version: dist.version.clone(),
                })
                .collect();
        }
        for dist in packed {
            match index.by_name(&dist.name) {
                Some(id) => dist_ids.push(id),
                None => bail!(
                    "distribution {} {} from the spec is not installed in {}",
                    dist.name,
                    dist.version,
                    prefix.display()
                ),
            }
        }
        let local_sources = local_files(spec, |file| {
            index
                .installer_of(&lfm_analyzer::dists::normalize_path(
                    &std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf()),
                ))
                .is_some_and(|id| dist_ids.contains(&id))
        });
        let hash = blake3::hash(serde_json::to_string(spec)?.as_bytes())
            .to_hex()
            .to_string();
        Ok(Selected {
            tests_kept: Some(tests_directories_of(spec)),
            stdlib_seeds,
            dist_ids,
            engine_left_out,
            spec_hash: Some(hash),
            targets: pack_targets(spec),
            local_sources,
            loose_modules: loose_modules(spec),
        })
    }
}

/// The `tests` directories the Spec's installed modules lie in, as site-relative paths
/// (`scipy.stats.tests.test_x` -> `scipy/stats/tests`): their files stay in a closure pack.
fn tests_directories_of(spec: &Spec) -> BTreeSet<String> {
    spec.targets
        .iter()
        .flat_map(|t| t.modules.iter())
        .filter_map(|m| {
            let parts: Vec<&str> = m.name.split('.').collect();
            let at = parts.iter().position(|p| *p == "tests")?;
            Some(parts[..=at].join("/"))
        })
        .collect()
}

/// `kept` and the `tests` directories of `dist` that its own modules outside them import when
/// they are imported (module level, not `TYPE_CHECKING`): `astropy/__init__.py` runs `from
/// .tests.runner import TestRunner`, so `astropy/tests` is library code, though a closure lists
/// astropy as a leaf. Only the files that mention `tests` are parsed.
fn with_tests_imported_by_own_modules(
    dist: &Distribution,
    placement: &Placement,
    kept: &BTreeSet<String>,
) -> Result<BTreeSet<String>> {
    let mut with_imported = kept.clone();
    // Most distributions have no tests directory to leave out: nothing to read then.
    let mut archive_paths = dist.files.iter().map(|f| placement.archive_path(dist, f));
    if !archive_paths.any(|path| path.is_ok_and(|path| is_unneeded_test_file(&path, kept))) {
        return Ok(with_imported);
    }
    for file in (dist.files.iter()).filter(|f| f.extension().is_some_and(|e| e == "py")) {
        let archive_path = placement.archive_path(dist, file)?;
        let components = site_components(&archive_path);
        if components.is_empty() || is_unneeded_test_file(&archive_path, kept) {
            continue;
        }
        let Ok(source) = fs::read_to_string(file) else {
            continue; // unreadable here: packing it reports why
        };
        if source.contains("tests") {
            let package = &components[..components.len() - 1];
            with_imported.extend(tests_imported(&source, package));
        }
    }
    Ok(with_imported)
}

/// The `tests` directories (site-relative, `astropy/tests`) that the import-time imports of a
/// module of package `package` (its directory's components) name.
fn tests_imported(source: &str, package: &[&str]) -> Vec<String> {
    let summary = lfm_analyzer::extract::summarize(source);
    (summary.imports.iter())
        .filter(|edge| !edge.context.in_function && !edge.context.type_checking)
        .filter_map(|edge| {
            let up = (edge.level as usize).saturating_sub(1);
            let mut parts: Vec<&str> = match edge.level {
                0 => Vec::new(),
                _ => package[..package.len().checked_sub(up)?].to_vec(),
            };
            parts.extend(
                summary
                    .edge_module(edge)
                    .split('.')
                    .filter(|p| !p.is_empty()),
            );
            parts.extend(summary.edge_member(edge));
            let at = parts.iter().position(|p| *p == "tests")?;
            Some(parts[..=at].join("/"))
        })
        .collect()
}

/// The components of `archive_path` below its site-packages directory (none outside one).
fn site_components(archive_path: &str) -> Vec<&str> {
    archive_path
        .split('/')
        .skip_while(|c| *c != "site-packages" && *c != "dist-packages")
        .skip(1)
        .collect()
}

/// Is the file at `archive_path` in a `tests` directory of site-packages that no closure
/// module lies in? Test suites are a third of numpy, pandas, scipy and scikit-learn, and no
/// import of the library reaches them.
fn is_unneeded_test_file(archive_path: &str, tests_kept: &BTreeSet<String>) -> bool {
    let components = site_components(archive_path);
    let directories = components.len().saturating_sub(1);
    components[..directories]
        .iter()
        .position(|c| *c == "tests")
        .is_some_and(|at| !tests_kept.contains(&components[..=at].join("/")))
}

/// Every file the selected distributions' records list (no bytecode, and for a closure pack
/// none of their unneeded test directories), placed by `placement`. Distributions are taken in
/// sys.path order, so where two hold the same path the one Python imports is packed.
fn add_distributions(
    index: &DistIndex,
    selected: &Selected,
    placement: &Placement,
    entries: &mut BTreeMap<String, Entry>,
    warnings: &mut Vec<String>,
) -> Result<(Vec<PackDistribution>, Vec<DistFiles>)> {
    let mut distributions = Vec::new();
    let mut dist_files = Vec::new();
    let mut dist_ids = selected.dist_ids.clone();
    dist_ids.sort_unstable();
    dist_ids.dedup();
    for id in dist_ids {
        let dist = &index.dists[id as usize];
        check_editable_roots(dist)?;
        let mut paths = Vec::new();
        let mut tests_left_out = 0;
        let packed_files =
            (dist.files.iter()).filter(|f| !is_bytecode(f) && !dist.editable_launchers.contains(f));
        let tests_kept = match &selected.tests_kept {
            Some(kept) => Some(with_tests_imported_by_own_modules(dist, placement, kept)?),
            None => None,
        };
        for file in packed_files {
            let archive_path = placement.archive_path(dist, file)?;
            if let Some(kept) = &tests_kept {
                if is_unneeded_test_file(&archive_path, kept) {
                    tests_left_out += 1;
                    continue;
                }
            }
            if entries.contains_key(&archive_path) {
                warnings.push(format!(
                    "{}: {} is shadowed by another distribution's {archive_path}; not packed",
                    dist.name,
                    file.display()
                ));
                continue;
            }
            if let Some(entry) = dist_entry(&dist.name, file, &archive_path, warnings)? {
                paths.push(archive_path.clone());
                entries.insert(archive_path, entry);
            }
        }
        distributions.push(PackDistribution {
            name: dist.name.clone(),
            version: dist.version.clone(),
            files: paths.len() as u64,
            tests_left_out,
            origin: placement.origin(dist),
        });
        dist_files.push(DistFiles {
            name: dist.name.clone(),
            version: dist.version.clone(),
            paths,
        });
    }
    distributions.sort_by_key(|d| normalize_name(&d.name));
    Ok((distributions, dist_files))
}

/// An editable install whose project files are gone would be packed as metadata alone.
fn check_editable_roots(dist: &Distribution) -> Result<()> {
    match dist.editable.iter().find(|root| !root.path.exists()) {
        Some(root) => bail!(
            "{} {} is an editable install, but its project's {} ({}) is missing, so the pack \
             cannot carry it",
            dist.name,
            dist.version,
            root.name,
            root.path.display()
        ),
        None => Ok(()),
    }
}

/// One distribution file's entry at `archive_path`; none (with a warning) when its RECORD
/// lists it but it is missing. Scripts in `bin/` are made relocatable.
fn dist_entry(
    dist: &str,
    file: &Path,
    archive_path: &str,
    warnings: &mut Vec<String>,
) -> Result<Option<Entry>> {
    let Ok(meta) = fs::symlink_metadata(file) else {
        warnings.push(format!(
            "{dist}: {} is listed in its RECORD but missing",
            file.display()
        ));
        return Ok(None);
    };
    let entry = if meta.file_type().is_symlink() {
        Entry {
            source: Source::Symlink(fs::read_link(file)?),
            executable: false,
        }
    } else if archive_path.starts_with("env/bin/") {
        Entry {
            source: Source::Bytes(relocatable_script(&fs::read(file)?)),
            executable: true,
        }
    } else {
        Entry {
            source: Source::File(file.to_path_buf()),
            executable: meta.permissions().mode() & 0o111 != 0,
        }
    };
    Ok(Some(entry))
}

/// The files of third-party modules of the Spec that no distribution lists (found on sys.path
/// by the analyzer: a `PYTHONPATH` directory of plain modules).
fn loose_modules(spec: &Spec) -> Vec<PathBuf> {
    let files = (spec.targets.iter().flat_map(|t| t.modules.iter()))
        .filter(|m| m.kind == ModuleKind::ThirdParty && m.distribution.is_none())
        .filter_map(|m| m.file.as_deref())
        .map(|file| std::path::absolute(file).unwrap_or_else(|_| PathBuf::from(file)));
    let unique: BTreeSet<PathBuf> = files.collect();
    unique.into_iter().collect()
}

/// Each loose module's whole top-level package (its data files too) or module file, placed
/// as the site directory it was found in; their archive paths. Files a distribution installed
/// (a namespace package shared with one) are that distribution's to pack.
fn add_loose_files(
    modules: &[PathBuf],
    index: &DistIndex,
    placement: &Placement,
    entries: &mut BTreeMap<String, Entry>,
) -> Result<Vec<String>> {
    let tops: BTreeSet<PathBuf> = (modules.iter())
        .filter_map(|file| placement.top_level_entry(file))
        .collect();
    let mut archive_paths = Vec::new();
    for top in tops {
        let root = lfm_analyzer::dists::EditableRoot {
            name: String::new(),
            path: top,
        };
        for file in lfm_analyzer::dists::editable::root_files(&root) {
            if index.installer_of(&file).is_some() || is_bytecode(&file) {
                continue;
            }
            let Some(archive_path) = placement.place(&file) else {
                bail!(
                    "{} cannot be packed: no distribution lists it and it lies outside every \
                     directory on the interpreter's sys.path",
                    file.display()
                );
            };
            if entries.contains_key(&archive_path) {
                continue;
            }
            let executable = fs::metadata(&file).is_ok_and(|m| m.permissions().mode() & 0o111 != 0);
            archive_paths.push(archive_path.clone());
            entries.insert(
                archive_path,
                Entry {
                    source: Source::File(file),
                    executable,
                },
            );
        }
    }
    Ok(archive_paths)
}

/// The closure's local modules, under `app/`; their archive paths.
fn add_local_files(
    local_sources: Vec<(String, PathBuf)>,
    entries: &mut BTreeMap<String, Entry>,
) -> Result<Vec<String>> {
    let mut archive_paths = Vec::new();
    for (archive_path, source) in local_sources {
        if !source.is_file() {
            bail!(
                "local module file {} is missing (was the spec made in another directory?)",
                source.display()
            );
        }
        archive_paths.push(archive_path.clone());
        entries.insert(
            archive_path,
            Entry {
                source: Source::File(source),
                executable: false,
            },
        );
    }
    Ok(archive_paths)
}

pub(crate) fn totals_of(entries: &BTreeMap<String, Entry>) -> Totals {
    let mut totals = Totals::default();
    for entry in entries.values() {
        totals.files += 1;
        totals.bytes += match &entry.source {
            Source::File(path) => fs::metadata(path).map(|m| m.len()).unwrap_or(0),
            Source::Bytes(bytes) => bytes.len() as u64,
            Source::Symlink(_) => 0,
        };
    }
    totals
}

fn run_info(
    targets: &[PackTarget],
    isolated: bool,
    interpreter: Option<String>,
    pythonpath: Vec<String>,
) -> RunInfo {
    let example_modules: Vec<String> = targets
        .first()
        .map(|t| t.modules.clone())
        .unwrap_or_default();
    RunInfo {
        script: "run".into(),
        isolated,
        interpreter,
        pythonpath,
        example: if example_modules.is_empty() {
            "./run python3 script.py".into()
        } else {
            format!("./run python3 -c 'import {}'", example_modules.join(", "))
        },
    }
}

fn pack_targets(spec: &Spec) -> Vec<PackTarget> {
    spec.targets
        .iter()
        .map(|target| {
            let mut modules: BTreeSet<String> = BTreeSet::new();
            // A slice does not run its module's top level (the function is shipped by value);
            // an import closure (every module target's) is what importing the module needs.
            if target.closure == lfm_analyzer::spec::ClosureKind::Import {
                modules.insert(target.module.clone());
            }
            for module in &target.modules {
                let importable = match module.kind {
                    ModuleKind::Local => true,
                    ModuleKind::ThirdParty => module.distribution.is_some(),
                    ModuleKind::Stdlib => true,
                };
                if importable {
                    modules.insert(module.name.clone());
                }
            }
            PackTarget {
                target: target.target.clone(),
                closure: target.closure,
                modules: modules.into_iter().collect(),
                optional_missing: target
                    .missing
                    .iter()
                    .filter(|m| m.optional)
                    .map(|m| m.name.clone())
                    .collect(),
            }
        })
        .collect()
}

/// Local modules of the closure (and the targets' own modules): archive path -> source file.
/// A target that is an installed module (`lfm pack joblib`) travels with its distribution:
/// its file alone under `app/`, first on the path, would hide the rest of its package.
fn local_files(spec: &Spec, packed_file: impl Fn(&Path) -> bool) -> Vec<(String, PathBuf)> {
    let mut out: BTreeMap<String, PathBuf> = BTreeMap::new();
    for target in &spec.targets {
        let own = std::iter::once((target.module.as_str(), target.file.as_str()))
            .filter(|(_, file)| !packed_file(Path::new(file)));
        let locals = target
            .modules
            .iter()
            .filter(|m| m.kind == ModuleKind::Local)
            .filter_map(|m| m.file.as_deref().map(|file| (m.name.as_str(), file)));
        for (name, file) in own.chain(locals) {
            let is_package = Path::new(file)
                .file_name()
                .is_some_and(|f| f == "__init__.py");
            let relative = if is_package {
                format!("{}/__init__.py", name.replace('.', "/"))
            } else {
                format!("{}.py", name.replace('.', "/"))
            };
            out.insert(format!("app/{relative}"), PathBuf::from(file));
        }
    }
    out.into_iter().collect()
}

fn is_bytecode(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "pyc" || e == "pyo")
        || path.components().any(|c| c.as_os_str() == "__pycache__")
}

/// Entry-point scripts name the packing machine's interpreter on their first line; in a pack
/// they run with whatever `python3` the `run` script put first on PATH.
fn relocatable_script(bytes: &[u8]) -> Vec<u8> {
    if !bytes.starts_with(b"#!") {
        return bytes.to_vec();
    }
    let end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(bytes.len());
    let first = String::from_utf8_lossy(&bytes[..end]);
    if !first.contains("python") {
        return bytes.to_vec();
    }
    let mut out = b"#!/usr/bin/env python3".to_vec();
    out.extend_from_slice(&bytes[end..]);
    out
}

fn run_script(pythonpath: &[String], self_contained: bool, inherit_site_packages: bool) -> String {
    let joined: Vec<String> = pythonpath.iter().map(|p| format!("$here/{p}")).collect();
    // Only shell builtins before the exec: a self-contained pack must run with an empty PATH.
    // Its interpreter's prefix is the pack, so no site-packages but the pack's is seen.
    let (path, extra) = if self_contained {
        (
            "$here/python/bin:$here/env/bin:$PATH",
            "LD_LIBRARY_PATH=\"$here/python/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\"\nexport LD_LIBRARY_PATH\n",
        )
    } else if inherit_site_packages {
        ("$here/env/bin:$PATH", "")
    } else {
        ("$here/env/bin:$PATH", ISOLATING_VENV)
    };
    // The isolating venv's hook (ISOLATING_VENV) hands these to site.addsitedir, so their
    // .pth files run as in a site-packages (PYTHONPATH entries' are not read).
    let site_dirs: Vec<&String> = joined
        .iter()
        .filter(|dir| dir.as_str() != "$here/app")
        .collect();
    let extra = if extra == ISOLATING_VENV {
        format!(
            "LFM_PACK_SITE_DIRS=\"{}\"\nexport LFM_PACK_SITE_DIRS\n{extra}",
            site_dirs
                .iter()
                .map(|d| d.as_str())
                .collect::<Vec<_>>()
                .join(":")
        )
    } else {
        extra.to_string()
    };
    let no_user_site = if inherit_site_packages {
        ""
    } else {
        "PYTHONNOUSERSITE=1\nexport PYTHONNOUSERSITE\n"
    };
    format!(
        "#!/bin/sh\n\
         # Run a command with this pack on the Python path, from wherever it was unpacked:\n\
         #   ./run python3 -c 'import mymodule'      (no command: python3)\n\
         case \"$0\" in */*) dir=${{0%/*}} ;; *) dir=. ;; esac\n\
         here=$(cd -- \"$dir\" && pwd)\n\
         PYTHONPATH=\"{}${{PYTHONPATH:+:$PYTHONPATH}}\"\n\
         PATH=\"{path}\"\n\
         export PYTHONPATH PATH\n\
         {no_user_site}\
         {extra}\
         [ $# -eq 0 ] && set -- python3\n\
         exec \"$@\"\n",
        joined.join(":")
    )
}

/// Shell lines that put first on PATH a `python3` seeing the pack and the stdlib only: a venv
/// (without pip) of the node's `python3` with no site-packages of its own, made once per
/// interpreter path next to the pack (or, when the cache is read-only, under $TMPDIR) and
/// renamed into place whole, so concurrent first runs agree on one. Its site-packages holds
/// one .pth hook that adds the pack's site directories as site directories.
const ISOLATING_VENV: &str = r#"py=$(command -v python3) || { echo "run: no python3 on PATH" >&2; exit 127; }
key=$(printf %s "$py" | cksum) && key=${key%% *}
venv=
for base in "$here" "${TMPDIR:-/tmp}/lfm-venvs-$(id -u)/$(printf %s "$here" | cksum | cut -d' ' -f1)"; do
  if [ -f "$base/.venv-$key/pyvenv.cfg" ]; then venv="$base/.venv-$key"; break; fi
  mkdir -p "$base" 2>/dev/null || continue
  tmp="$base/.venv-$key.tmp.$$"
  if "$py" -m venv --without-pip "$tmp" >/dev/null 2>&1; then
    for site in "$tmp"/lib/python3*/site-packages; do
      echo 'import os, site; list(map(site.addsitedir, filter(None, os.environ.get("LFM_PACK_SITE_DIRS", "").split(os.pathsep))))' > "$site/_lfm_pack_sites.pth"
    done
    mv -T "$tmp" "$base/.venv-$key" 2>/dev/null || rm -rf "$tmp"
    venv="$base/.venv-$key"; break
  fi
  rm -rf "$tmp"
done
[ -n "$venv" ] || { echo "run: could not make an isolated environment for $py" >&2; exit 127; }
PATH="$venv/bin:$PATH"
"#;

/// The interpreter binary (as python/bin/python3), libpython when shared, and the stdlib.
fn add_interpreter(
    interpreter: &Interpreter,
    stdlib_seeds: &BTreeSet<String>,
    entries: &mut BTreeMap<String, Entry>,
    warnings: &mut Vec<String>,
) -> Result<String> {
    let binary = &interpreter.base_executable;
    if !binary.is_file() {
        bail!(
            "the interpreter binary {} was not found; cannot make a self-contained pack",
            binary.display()
        );
    }
    let version = interpreter.major_minor().to_string();
    entries.insert(
        format!("python/bin/python{version}"),
        Entry {
            source: Source::File(binary.clone()),
            executable: true,
        },
    );
    entries.insert(
        "python/bin/python3".into(),
        Entry {
            source: Source::Symlink(PathBuf::from(format!("python{version}"))),
            executable: true,
        },
    );
    add_libpython(interpreter, entries, warnings);
    let Some(stdlib) = interpreter.stdlib_dirs.first() else {
        bail!("the interpreter reported no stdlib directory")
    };
    // The stdlib the packed code and the interpreter's start-up import, followed through the
    // stdlib's own imports.
    let sources: Vec<PathBuf> = entries
        .values()
        .filter_map(|entry| match &entry.source {
            Source::File(path) if path.extension().is_some_and(|e| e == "py") => Some(path.clone()),
            _ => None,
        })
        .collect();
    let mut seeds = crate::stdlib::stdlib_imports_of(&sources, interpreter);
    seeds.extend(stdlib_seeds.iter().cloned());
    seeds.extend(crate::stdlib::runner_stdlib_imports(interpreter));
    let selection = crate::stdlib::select(interpreter, seeds)?;
    for relative in &selection.files {
        let source = stdlib.join(relative);
        let archive_path = format!("python/lib/python{version}/{}", relative.display());
        let executable = fs::metadata(&source)
            .map(|m| m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false);
        entries.insert(
            archive_path,
            Entry {
                source: Source::File(source),
                executable,
            },
        );
    }
    Ok(format!("python/bin/python{version}"))
}

/// libpython, when the interpreter links it dynamically (python/lib/).
fn add_libpython(
    interpreter: &Interpreter,
    entries: &mut BTreeMap<String, Entry>,
    warnings: &mut Vec<String>,
) {
    if interpreter.shared_library.is_empty() {
        return;
    }
    let library = PathBuf::from(&interpreter.shared_library);
    let name = library
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match library.canonicalize() {
        Ok(real) => {
            entries.insert(
                format!("python/lib/{name}"),
                Entry {
                    source: Source::File(real),
                    executable: false,
                },
            );
        }
        Err(error) => warnings.push(format!(
            "libpython {} not found ({error}); the pack needs it on the worker",
            library.display()
        )),
    }
}

/// Hashes what passes through, so the pack is named by its content without a second read.
struct HashingWriter<W: Write> {
    inner: W,
    hasher: blake3::Hasher,
    written: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn write_archive(
    manifest: &Manifest,
    entries: &BTreeMap<String, Entry>,
    options: &PackOptions,
    totals: &Totals,
) -> Result<(PathBuf, u64, String)> {
    let dir = match &options.output {
        Some(path) => path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(".")),
        None => options.output_dir.clone(),
    };
    let manifest_bytes = serde_json::to_vec_pretty(manifest)?;
    let written = write_tar_zst(
        &dir,
        Some((MANIFEST_NAME, &manifest_bytes)),
        entries,
        options,
        Some(totals),
    )?;
    let path = match &options.output {
        Some(path) => path.clone(),
        None => dir.join(format!("lfm-{}.tar.zst", &written.blake3[..16])),
    };
    written
        .tmp
        .persist(&path)
        .with_context(|| format!("moving the pack to {}", path.display()))?;
    Ok((path, written.bytes, written.blake3))
}

/// A tar.zst written to a temporary file of `dir`, for the caller to name (removed unless
/// persisted).
pub(crate) struct Written {
    pub(crate) tmp: lfm_fs::TempPath,
    pub(crate) bytes: u64,
    pub(crate) blake3: String,
}

/// `first` (if any), then `entries` in order, as a deterministic tar.zst in a temporary file
/// of `dir`. Progress is reported against `totals` when given.
pub(crate) fn write_tar_zst(
    dir: &Path,
    first: Option<(&str, &[u8])>,
    entries: &BTreeMap<String, Entry>,
    options: &PackOptions,
    totals: Option<&Totals>,
) -> Result<Written> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (file, tmp) = lfm_fs::temporary_in(dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?
        .into_parts();
    let hashing = HashingWriter {
        inner: io::BufWriter::new(file),
        hasher: blake3::Hasher::new(),
        written: 0,
    };
    let mut encoder = zstd::stream::Encoder::new(hashing, options.level)?;
    // nbWorkers >= 1 in every case: zstd's multithreaded format is identical for any worker
    // count, but differs from the single-threaded one.
    encoder.multithread(options.threads.max(1))?;
    encoder.include_checksum(true)?;
    let mut builder = tar::Builder::new(encoder);
    builder.follow_symlinks(false);
    if let Some((name, bytes)) = first {
        append_bytes(&mut builder, name, bytes, false)?;
    }
    let (mut files_done, mut bytes_done) = (0u64, 0u64);
    for (path, entry) in entries {
        bytes_done += append_entry(&mut builder, path, entry)?;
        files_done += 1;
        if let (Some(progress), Some(totals)) = (&options.progress, totals) {
            progress(files_done, totals.files, bytes_done, totals.bytes);
        }
    }
    let encoder = builder.into_inner()?;
    let mut hashing = encoder.finish()?;
    hashing.flush()?;
    let blake3 = hashing.hasher.finalize().to_hex().to_string();
    Ok(Written {
        tmp,
        bytes: hashing.written,
        blake3,
    })
}

/// One entry into the archive; the bytes it added.
fn append_entry<W: Write>(builder: &mut tar::Builder<W>, path: &str, entry: &Entry) -> Result<u64> {
    match &entry.source {
        Source::Bytes(bytes) => {
            append_bytes(builder, path, bytes, entry.executable)?;
            Ok(bytes.len() as u64)
        }
        Source::File(source) => {
            let file =
                fs::File::open(source).with_context(|| format!("reading {}", source.display()))?;
            let size = file.metadata()?.len();
            let mut header = header(tar::EntryType::Regular, size, entry.executable);
            builder
                .append_data(&mut header, path, file)
                .with_context(|| format!("packing {}", source.display()))?;
            Ok(size)
        }
        Source::Symlink(target) => {
            let mut header = header(tar::EntryType::Symlink, 0, false);
            builder.append_link(&mut header, path, target)?;
            Ok(0)
        }
    }
}

fn header(kind: tar::EntryType, size: u64, executable: bool) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(if executable || kind == tar::EntryType::Symlink {
        0o755
    } else {
        0o644
    });
    header.set_mtime(FIXED_MTIME);
    header.set_uid(0);
    header.set_gid(0);
    header
}

fn append_bytes<W: Write>(
    builder: &mut tar::Builder<W>,
    path: &str,
    bytes: &[u8],
    executable: bool,
) -> Result<()> {
    let mut header = header(tar::EntryType::Regular, bytes.len() as u64, executable);
    builder.append_data(&mut header, path, bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(dirs: &[&str]) -> BTreeSet<String> {
        dirs.iter().map(|d| d.to_string()).collect()
    }

    #[test]
    fn a_tests_directory_its_own_modules_import_at_import_time_is_library_code() {
        // astropy/__init__.py, and what else a package's modules may write.
        let init = "\
from .tests.runner import TestRunner
import pkg.tests.helpers
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from .tests import typed
def test():
    from .other.tests import run
";
        assert_eq!(
            tests_imported(init, &["astropy"]),
            ["astropy/tests", "pkg/tests"]
        );
        // From a submodule, `from .. import tests` is the package's own tests directory.
        let sub = "from .. import tests\nfrom . import testing\n";
        assert_eq!(tests_imported(sub, &["pkg", "sub"]), ["pkg/tests"]);
        // A relative import above the site directory names nothing.
        assert!(tests_imported("from ... import tests\n", &["pkg"]).is_empty());
    }

    #[test]
    fn test_directories_are_left_out_unless_a_closure_module_lies_in_them() {
        let site = "env/lib/python3.11/site-packages";
        let file = |rest: &str| format!("{site}/{rest}");
        let none = kept(&[]);
        assert!(is_unneeded_test_file(
            &file("scipy/stats/tests/test_x.py"),
            &none
        ));
        assert!(is_unneeded_test_file(
            &file("numpy/_core/tests/data/a.csv"),
            &none
        ));
        assert!(is_unneeded_test_file(&file("tests/__init__.py"), &none));
        // numpy.testing is a library module; a file named tests is not a directory.
        assert!(!is_unneeded_test_file(
            &file("numpy/testing/__init__.py"),
            &none
        ));
        assert!(!is_unneeded_test_file(&file("pkg/tests"), &none));
        assert!(!is_unneeded_test_file(
            &file("scipy/stats/_stats.py"),
            &none
        ));
        // Outside site-packages (scripts, data) nothing is left out.
        assert!(!is_unneeded_test_file("env/share/tests/x", &none));
        let stats = kept(&["scipy/stats/tests"]);
        assert!(!is_unneeded_test_file(
            &file("scipy/stats/tests/test_x.py"),
            &stats
        ));
        assert!(!is_unneeded_test_file(
            &file("scipy/stats/tests/data/d.npz"),
            &stats
        ));
        assert!(is_unneeded_test_file(
            &file("scipy/linalg/tests/test_y.py"),
            &stats
        ));
    }
}
