//! The Spec's lists of what a walk reached: each module with the distribution that provides
//! it, the distributions with their Requires-Dist closure and the undeclared ones installed
//! code imports, and the modules not found.
//!
//! The distribution lists of each pool thread's last targets are kept ([`RecentNeeds`]): the
//! functions of one module, computed one after the other, mostly reach the same installed
//! modules, and their distribution lists are then the same (seven targets in ten of a whole
//! site-packages). Working them out again took a third of the closures' time there.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;

use super::{Missed, Reached};
use crate::dists::Owner;
use crate::project::Project;
use crate::spec::{
    DistributionView, MissingDistribution, MissingView, ModuleKind, ModuleView, WarningView,
};

/// How many targets' distribution lists each thread keeps: more gained no hits on a whole
/// site-packages (70% with 8, 71% with 64).
const RECENT: usize = 8;

/// What the distribution lists depend on: per reached module that is installed code or that
/// one distribution provides, its name, whether a required edge reached it, whether it is
/// installed code, and the distribution providing it ([`u32::MAX`] for none or several).
type NeedsKey<'p> = Vec<(&'p str, bool, bool, u32)>;

/// One [`distribution_views`] answer: the lists, the warnings it added, and the
/// distributions it listed.
#[derive(Clone)]
struct DistributionNeeds<'p> {
    distributions: Vec<DistributionView<'p>>,
    missing: Vec<MissingDistribution>,
    warnings: Vec<WarningView<'p>>,
    listed: Vec<u32>,
}

/// The last [`RECENT`] targets' distribution lists, per thread of the pool (and one slot
/// for any other thread).
pub(super) struct RecentNeeds<'p> {
    per_thread: Vec<Mutex<VecDeque<(NeedsKey<'p>, DistributionNeeds<'p>)>>>,
}

impl<'p> RecentNeeds<'p> {
    pub(super) fn new() -> RecentNeeds<'p> {
        let slots = rayon::current_num_threads() + 1;
        RecentNeeds {
            per_thread: (0..slots).map(|_| Mutex::new(VecDeque::new())).collect(),
        }
    }

    /// The lists for `key`, kept or made by `make` (and kept). Threads outside the pool
    /// share one slot: when another holds it, the lists are made and not kept.
    fn get_or_make(
        &self,
        key: NeedsKey<'p>,
        make: impl FnOnce() -> DistributionNeeds<'p>,
    ) -> DistributionNeeds<'p> {
        let slot = rayon::current_thread_index().map_or(0, |index| index + 1);
        let Some(Ok(mut recent)) = self.per_thread.get(slot).map(Mutex::try_lock) else {
            return make();
        };
        if let Some(at) = recent.iter().position(|(kept, _)| *kept == key) {
            let entry = recent.remove(at).expect("position is in range");
            let needs = entry.1.clone();
            recent.push_front(entry);
            return needs;
        }
        let needs = make();
        if recent.len() == RECENT {
            recent.pop_back();
        }
        recent.push_front((key, needs.clone()));
        needs
    }
}

/// A target's own needs, or its engine's, as the Spec lists them.
pub(super) struct Needs<'p> {
    pub(super) modules: Vec<ModuleView<'p>>,
    pub(super) distributions: Vec<DistributionView<'p>>,
    pub(super) missing: Vec<MissingView<'p>>,
    pub(super) missing_distributions: Vec<MissingDistribution>,
}

/// The module, distribution and missing lists of what was reached (the target's own needs,
/// or the engine's): distributions already `listed` are left out, those listed here added.
/// With `recent`, the distribution lists of a target's own needs are taken from there when a
/// recent target's were made from the same modules.
pub(super) fn needs_views<'p>(
    project: &'p Project,
    recent: Option<&RecentNeeds<'p>>,
    reached_in_order: Vec<(&'p str, Reached<'p>)>,
    missing_in_order: Vec<(&'p str, Missed<'p>)>,
    listed: &mut BTreeSet<u32>,
    warnings: &mut Vec<WarningView<'p>>,
) -> Needs<'p> {
    let mut direct: Direct<'p> = BTreeMap::new();
    let installed: Vec<(&str, bool)> = (reached_in_order.iter())
        .filter(|(_, reached)| reached.kind == ModuleKind::ThirdParty)
        .map(|(name, reached)| (*name, reached.required))
        .collect();
    // Only a target's own needs come with nothing listed yet; the engine's leave those out.
    let key = recent.filter(|_| listed.is_empty()).map(|recent| {
        let key = (reached_in_order.iter())
            .filter_map(|(name, reached)| {
                let third_party = reached.kind == ModuleKind::ThirdParty;
                let provider = match reached.owner {
                    Some(&Owner::One(id)) => id,
                    _ if third_party => u32::MAX,
                    _ => return None,
                };
                Some((*name, reached.required, third_party, provider))
            })
            .collect();
        (recent, key)
    });
    let modules = module_views(project, reached_in_order, &mut direct, warnings);
    let (distributions, missing_distributions) = match key {
        Some((recent, key)) => {
            let needs = recent.get_or_make(key, || {
                let (mut newly, mut made) = (BTreeSet::new(), Vec::new());
                let (distributions, missing) =
                    distribution_views(project, direct, &installed, &mut newly, &mut made);
                DistributionNeeds {
                    distributions,
                    missing,
                    warnings: made,
                    listed: newly.into_iter().collect(),
                }
            });
            listed.extend(&needs.listed);
            warnings.extend(needs.warnings);
            (needs.distributions, needs.missing)
        }
        None => distribution_views(project, direct, &installed, listed, warnings),
    };
    Needs {
        modules,
        distributions,
        missing: missing_in_order
            .into_iter()
            .map(|(name, missed)| MissingView {
                name,
                optional: missed.optional,
                reason: missed.reason,
            })
            .collect(),
        missing_distributions,
    }
}

/// The distributions that own reached modules: (whether a required module needs it, the
/// modules it provides), by distribution id.
type Direct<'p> = BTreeMap<u32, (bool, Vec<Cow<'p, str>>)>;

/// The Spec's module list, noting in `direct` which distribution provides each, and warning
/// where none or several do.
fn module_views<'p>(
    project: &'p Project,
    reached_in_order: Vec<(&'p str, Reached<'p>)>,
    direct: &mut Direct<'p>,
    warnings: &mut Vec<WarningView<'p>>,
) -> Vec<ModuleView<'p>> {
    let mut modules = Vec::with_capacity(reached_in_order.len());
    for (name, reached) in reached_in_order {
        let mut distribution = None;
        match reached.owner {
            Some(&Owner::One(id)) => {
                let entry = direct.entry(id).or_insert((false, Vec::new()));
                entry.0 |= reached.required;
                entry.1.push(Cow::Borrowed(name));
                distribution = Some(project.dists.dists[id as usize].name.as_str());
            }
            Some(Owner::Ambiguous(ids)) if is_namespace_package(reached.file) => {
                // Each provider holds a portion of it, and Python puts them all on its
                // `__path__` (`cuda` of cuda-bindings and cuda-pathfinder): all are needed.
                for &id in ids {
                    let entry = direct.entry(id).or_insert((false, Vec::new()));
                    entry.0 |= reached.required;
                    entry.1.push(Cow::Borrowed(name));
                }
            }
            Some(Owner::Ambiguous(ids)) => {
                let names: Vec<&str> = ids
                    .iter()
                    .map(|&i| project.dists.dists[i as usize].name.as_str())
                    .collect();
                warnings.push(WarningView {
                    file: Cow::Borrowed(reached.reason.file),
                    line: reached.reason.line,
                    message: Cow::Owned(format!(
                        "module {name} is provided by several distributions ({}); none was chosen",
                        names.join(", ")
                    )),
                });
            }
            Some(Owner::Unknown) => warnings.push(WarningView {
                file: Cow::Borrowed(reached.reason.file),
                line: reached.reason.line,
                message: Cow::Owned(format!(
                    "module {name} ({}) is not listed by any installed distribution",
                    reached.file.unwrap_or_default()
                )),
            }),
            None => {}
        }
        modules.push(ModuleView {
            name,
            kind: reached.kind,
            file: reached.file,
            distribution,
            optional: !reached.required,
            contexts: reached.contexts,
            reason: reached.reason,
        });
    }
    modules
}

/// Whether an installed module's file is a directory with no `__init__`: a namespace package
/// (PEP 420), which several distributions may each provide a portion of.
fn is_namespace_package(file: Option<&str>) -> bool {
    file.map(std::path::Path::new)
        .is_some_and(|dir| dir.is_dir() && !dir.join("__init__.py").exists())
}

/// The distributions the modules need with their Requires-Dist closure (required ones first,
/// then optional), in name order, and the requirements no installed distribution meets.
fn distribution_views<'p>(
    project: &'p Project,
    mut direct: Direct<'p>,
    installed: &[(&str, bool)],
    listed: &mut BTreeSet<u32>,
    warnings: &mut Vec<WarningView<'p>>,
) -> (Vec<DistributionView<'p>>, Vec<MissingDistribution>) {
    let roots = |required: bool| -> Vec<u32> {
        direct
            .iter()
            .filter(|(_, (req, _))| *req == required)
            .map(|(&id, _)| id)
            .collect()
    };
    let (required_roots, optional_roots) = (roots(true), roots(false));
    let name_of = |id: u32| Cow::Borrowed(project.dists.dists[id as usize].name.as_str());
    let required = project
        .dists
        .requirement_closure(&required_roots, &project.interpreter);
    let optional = project
        .dists
        .requirement_closure(&optional_roots, &project.interpreter);
    let mut distributions = Vec::new();
    for (closure, is_optional) in [(&*required, false), (&*optional, true)] {
        for (&id, chain) in &closure.reached {
            if !listed.insert(id) {
                continue;
            }
            let dist = &project.dists.dists[id as usize];
            let (is_direct, reason) = match direct.remove(&id) {
                Some((_, modules)) => (true, modules),
                None => (false, chain.iter().map(|&step| name_of(step)).collect()),
            };
            distributions.push((
                id,
                DistributionView {
                    name: &dist.name,
                    version: &dist.version,
                    direct: is_direct,
                    optional: is_optional,
                    conda_name: dist.conda_name.as_deref(),
                    undeclared: false,
                    reason,
                },
            ));
        }
    }
    let undeclared =
        crate::installed_imports::undeclared(project, installed, [&required, &optional]);
    for imported in &undeclared {
        for (&id, chain) in &imported.closure.reached {
            if !listed.insert(id) {
                continue;
            }
            let dist = &project.dists.dists[id as usize];
            let start = chain.first().and_then(|root| imported.reasons.get(root));
            let start = start
                .into_iter()
                .flat_map(|(importer, spot)| [Cow::Borrowed(*importer), Cow::Owned(spot.clone())]);
            let reason = start.chain(chain.iter().map(|&step| name_of(step)));
            distributions.push((
                id,
                DistributionView {
                    name: &dist.name,
                    version: &dist.version,
                    direct: false,
                    optional: imported.optional,
                    conda_name: dist.conda_name.as_deref(),
                    undeclared: true,
                    reason: reason.collect(),
                },
            ));
        }
    }
    distributions.sort_by(|(a, _), (b, _)| {
        project
            .dists
            .normalized_name(*a)
            .cmp(project.dists.normalized_name(*b))
    });
    for problem in required.problems.iter().chain(&optional.problems) {
        warnings.push(WarningView {
            file: Cow::Borrowed(""),
            line: 0,
            message: Cow::Owned(problem.clone()),
        });
    }
    let missing = required
        .missing
        .iter()
        .map(|(name, chain)| MissingDistribution {
            name: name.clone(),
            required_by: chain.clone(),
        })
        .collect();
    (
        distributions.into_iter().map(|(_, need)| need).collect(),
        missing,
    )
}
