//! Which targets' stored output still holds after some source files changed.
//!
//! A stored result ([`crate::results`]) whose environment, located files and listed directories
//! are unchanged, but some of whose source files changed, is still right for every target whose
//! walk could not read a changed module. What a walk reads while it is in module `x` is
//! over-approximated by [`reads_of`]: `x`'s local import targets and parent package, and every
//! loaded local module whose name is, or is below, `x`'s own name or a name `x`'s imports bind
//! (the names the walk looks up by name: `bound`, `bound.path...`, `holder.member`). The
//! modules a target's walk may read are then the ones reachable from its module; per-run
//! tables shared between walks (memos, edge lookups) are computed from walks that start in
//! such a module, so they stay inside the same reachable set.
//!
//! This holds only when both runs loaded the same modules in the same order (the name lookups
//! would otherwise find other modules, and module numbers would differ): the caller checks
//! that first.

use crate::project::{EdgeTarget, Project};

/// For each loaded module, whether it reaches (by [`reads_of`], itself included) a module
/// marked in `changed`: its targets must be computed again.
pub fn affected(project: &Project, changed: &[bool]) -> Vec<bool> {
    let names = sorted_names(project);
    let count = project.modules.len();
    // Reverse edges: who may read each module.
    let mut readers: Vec<Vec<u32>> = vec![Vec::new(); count];
    for module in 0..count as u32 {
        for read in reads_of(project, &names, module) {
            readers[read as usize].push(module);
        }
    }
    let mut affected = changed.to_vec();
    affected.resize(count, true);
    let mut queue: Vec<u32> = (0..count as u32)
        .filter(|&m| affected[m as usize])
        .collect();
    while let Some(module) = queue.pop() {
        for &reader in &readers[module as usize] {
            if !affected[reader as usize] {
                affected[reader as usize] = true;
                queue.push(reader);
            }
        }
    }
    affected
}

/// Whether some local module imports each module (or has it as its parent package): those
/// modules' whole-module closures are memoised and shared, which a reused result must not
/// depend on differently from the run that stored it.
pub fn imported_flags(project: &Project) -> Vec<bool> {
    let mut imported = vec![false; project.modules.len()];
    for loaded in &project.modules {
        for target in loaded.targets.iter().flat_map(|targets| targets.iter()) {
            if let EdgeTarget::Local(id) = target {
                imported[*id as usize] = true;
            }
        }
        if let Some(parent) = loaded.parent {
            imported[parent as usize] = true;
        }
    }
    imported
}

/// Every module findable by name, sorted by name, for prefix ranges.
fn sorted_names(project: &Project) -> Vec<(&str, u32)> {
    let mut names: Vec<(&str, u32)> = project.named_modules().collect();
    names.sort_unstable();
    names
}

/// The modules a walk may read while in module `module` (see the module documentation).
fn reads_of(project: &Project, names: &[(&str, u32)], module: u32) -> Vec<u32> {
    let loaded = &project.modules[module as usize];
    let mut reads: Vec<u32> = loaded
        .targets
        .iter()
        .flat_map(|targets| targets.iter())
        .filter_map(|target| match target {
            EdgeTarget::Local(id) => Some(*id),
            _ => None,
        })
        .collect();
    reads.extend(loaded.parent);
    let looked_up = std::iter::once(loaded.name.as_str())
        .chain(loaded.bound.iter().flatten().map(|bound| &**bound));
    for name in looked_up {
        reads.extend(named_at_or_below(names, name));
    }
    reads.sort_unstable();
    reads.dedup();
    reads
}

/// The modules named `name` or `name.<anything>`: in the sorted list, the names from `name`
/// up to `name/` ('/' follows '.'), filtered to exact or dotted extensions.
fn named_at_or_below<'a>(
    names: &'a [(&'a str, u32)],
    name: &'a str,
) -> impl Iterator<Item = u32> + 'a {
    let start = names.partition_point(|(other, _)| *other < name);
    names[start..]
        .iter()
        .take_while(move |(other, _)| other.starts_with(name))
        .filter(move |(other, _)| other.len() == name.len() || other.as_bytes()[name.len()] == b'.')
        .map(|(_, id)| *id)
}
