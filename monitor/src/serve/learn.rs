//! What calls import stays in the zygote: after a call, the modules it imported that the
//! zygote does not have yet go to it ([`Zygote::learn`]); it imports those of the standard
//! library and of installed distributions, so the next calls fork with them loaded. The
//! zygote's growth is bounded: past the budget, learning stops and the zygote is replaced by
//! a fresh one (with the configured preloads only) once no call runs under it.

use std::collections::{BTreeSet, HashSet};

use super::zygote::{Learned, Zygote};
use crate::report::Imports;

pub struct Learner {
    /// The zygote's resident size past which it is replaced; none: nothing is learned.
    budget: Option<u64>,
    /// Module names sent to this zygote (each once).
    sent: HashSet<String>,
    /// The top-level names the zygote imported, named in Reports as preloaded.
    pub packages: BTreeSet<String>,
    /// Over the budget: the zygote is to be replaced once no call runs.
    pub must_shed: bool,
}

impl Learner {
    pub fn new(budget: Option<u64>) -> Learner {
        Learner {
            budget,
            sent: HashSet::new(),
            packages: BTreeSet::new(),
            must_shed: false,
        }
    }

    /// Send the zygote what this call imported that it was not sent before; true when
    /// something went (the spares forked before lack it).
    pub fn after_call(&mut self, zygote: &Zygote, imports: Option<&Imports>) -> bool {
        let (Some(_), Some(imports)) = (self.budget, imports) else {
            return false;
        };
        let new: Vec<(String, Option<String>)> = imports
            .modules
            .iter()
            .filter(|module| module.found && !module.loaded && !self.sent.contains(&module.name))
            .map(|module| (module.name.clone(), module.file.clone()))
            .collect();
        if new.is_empty() {
            return false;
        }
        self.sent.extend(new.iter().map(|(name, _)| name.clone()));
        if let Err(error) = zygote.learn(&new) {
            eprintln!("lfm serve: warning: {error:#}");
        }
        true
    }

    /// The zygote's answer: logged; past the budget, learning stops and the zygote is shed.
    pub fn learned(&mut self, learned: Learned) {
        if learned.imported > 0 {
            eprintln!(
                "lfm serve: the zygote imported {} module(s) calls used ({}) in {:.0} ms, now {} MiB \
                 ({} left to the calls: not installed or not loadable here)",
                learned.imported,
                learned.packages.join(", "),
                learned.seconds * 1e3,
                learned.rss >> 20,
                learned.skipped + learned.failed,
            );
        }
        self.packages.extend(learned.packages);
        if let Some(budget) = self.budget.filter(|&budget| learned.rss > budget) {
            eprintln!(
                "lfm serve: the zygote is {} MiB, over its budget of {} MiB (--learn-max): it is \
                 replaced by one with the configured preloads once no call runs, and learns no more",
                learned.rss >> 20,
                budget >> 20
            );
            self.budget = None;
            self.must_shed = true;
        }
    }

    /// The zygote was replaced: it has learned nothing.
    pub fn forget(&mut self) {
        self.sent.clear();
        self.packages.clear();
        self.must_shed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_the_budget_learning_stops_and_the_zygote_is_to_be_shed() {
        let mut learner = Learner::new(Some(100 << 20));
        learner.learned(Learned {
            imported: 3,
            packages: vec!["numpy".into()],
            rss: 90 << 20,
            ..Learned::default()
        });
        assert!(!learner.must_shed);
        assert_eq!(learner.packages, BTreeSet::from(["numpy".to_string()]));
        learner.learned(Learned {
            imported: 900,
            packages: vec!["torch".into()],
            rss: 200 << 20,
            ..Learned::default()
        });
        assert!(learner.must_shed);
        assert_eq!(learner.budget, None, "it learns no more");
        learner.forget();
        assert!(learner.packages.is_empty() && !learner.must_shed);
    }
}
