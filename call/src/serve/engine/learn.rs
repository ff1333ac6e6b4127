//! What calls import stays in the zygote: after a call, the modules it imported that the
//! zygote does not have yet go to it, to every zygote of the serve alike ([`Zygotes::learn`]);
//! each imports those of the standard
//! library and of installed distributions, so the next calls fork with them loaded. The
//! zygote's growth is bounded: past the budget, learning stops and the zygote is replaced by
//! a fresh one (with the configured preloads only) once no call runs under it.
//!
//! A running call's log is offered as it grows (every sample), so the zygote imports alongside
//! the call; while the zygote works on one batch the next is gathered, and sent when it answers:
//! one message per batch, not per sample (each answer wakes the serve loop).

use std::collections::{BTreeSet, HashSet};

use super::zygote::Learned;
use super::zygotes::Zygotes;
use lfm_monitor::report::ImportedModule;

pub struct Learner {
    /// The zygote's resident size past which it is replaced; none: nothing is learned.
    budget: Option<u64>,
    /// Module names sent to this zygote (each once).
    sent: HashSet<String>,
    /// Module names clients said calls will import, sent ahead of those calls (each once).
    /// Apart from `sent`: a name the zygote refused here (a file of another interpreter's,
    /// as a pack's serve sees its clients') may still come from a call's own log.
    hinted: HashSet<String>,
    /// The top-level names the zygote imported, named in Reports as preloaded.
    pub packages: BTreeSet<String>,
    /// Over the budget: the zygote is to be replaced once no call runs.
    pub must_shed: bool,
    /// Modules gathered while the zygote works on the batches sent.
    pending: Vec<(String, Option<String>)>,
    /// Answers not received yet (a batch sent to N zygotes is answered N times).
    in_flight: usize,
}

impl Learner {
    pub fn new(budget: Option<u64>) -> Learner {
        Learner {
            budget,
            sent: HashSet::new(),
            hinted: HashSet::new(),
            packages: BTreeSet::new(),
            must_shed: false,
            pending: Vec::new(),
            in_flight: 0,
        }
    }

    /// Whether calls' imports are still wanted (learning is on and under its budget).
    pub fn active(&self) -> bool {
        self.budget.is_some()
    }

    /// Gather what calls imported (a running call's new log lines, or a finished call's
    /// whole log) that the zygote was not sent before, and send it unless a batch is in flight.
    /// True when something went (the spares forked before lack it).
    pub fn offer(&mut self, zygotes: &Zygotes, modules: &[ImportedModule]) -> bool {
        if self.budget.is_none() {
            return false;
        }
        for module in modules {
            if module.found && !module.loaded && self.sent.insert(module.name.clone()) {
                self.pending
                    .push((module.name.clone(), module.file.clone()));
            }
        }
        self.flush(zygotes)
    }

    /// Send now, ahead of the call about to be forked, the modules a client said its call
    /// will import that the zygote was not sent before. True when something went.
    pub fn warm(&mut self, zygotes: &Zygotes, modules: &[(String, Option<String>)]) -> bool {
        if self.budget.is_none() {
            return false;
        }
        let new: Vec<(String, Option<String>)> = modules
            .iter()
            .filter(|(name, _)| !self.sent.contains(name) && !self.hinted.contains(name))
            .cloned()
            .collect();
        if new.is_empty() {
            return false;
        }
        match zygotes.learn(&new) {
            Ok(answers) => self.in_flight += answers,
            Err(error) => {
                eprintln!("lfm serve: warning: {error:#}");
                return false;
            }
        }
        self.hinted.extend(new.into_iter().map(|(name, _)| name));
        true
    }

    /// Send what was gathered once the zygote has answered every batch.
    pub fn flush(&mut self, zygotes: &Zygotes) -> bool {
        if self.in_flight > 0 || self.pending.is_empty() || self.budget.is_none() {
            return false;
        }
        match zygotes.learn(&std::mem::take(&mut self.pending)) {
            Ok(answers) => self.in_flight = answers,
            Err(error) => eprintln!("lfm serve: warning: {error:#}"),
        }
        true
    }

    /// Send what was gathered now, batches in flight or not: a call (or a spare) about to be
    /// forked must find it imported, and the zygote handles its messages in order. Between
    /// forks, gathering waits for answers (one message per batch); here it cannot. True when
    /// something went (the spares forked before lack it).
    pub fn send_before_fork(&mut self, zygotes: &Zygotes) -> bool {
        if self.pending.is_empty() || self.budget.is_none() {
            return false;
        }
        match zygotes.learn(&std::mem::take(&mut self.pending)) {
            Ok(answers) => self.in_flight += answers,
            Err(error) => eprintln!("lfm serve: warning: {error:#}"),
        }
        true
    }

    /// The zygote's answer: logged; past the budget, learning stops and the zygote is shed.
    pub fn learned(&mut self, learned: Learned) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if learned.imported > 0 {
            eprintln!(
                "lfm serve: the zygote imported {} module(s) calls used{} in {:.0} ms, now {} MiB \
                 ({} left to the calls: not installed or not loadable here)",
                learned.imported,
                of_packages(&learned.installed),
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

    /// A zygote was replaced: it has learned nothing (what is sent again, the others skip).
    pub fn forget(&mut self) {
        self.sent.clear();
        self.hinted.clear();
        self.pending.clear();
        self.in_flight = 0;
        self.packages.clear();
        self.must_shed = false;
    }
}

/// The public top-level names, at most ten, as " (of numpy, pandas)"; nothing where no public
/// package was among them.
fn of_packages(packages: &[String]) -> String {
    let public: Vec<&str> = packages
        .iter()
        .map(String::as_str)
        .filter(|name| !name.starts_with('_'))
        .collect();
    match public.len() {
        0 => String::new(),
        1..=10 => format!(" (of {})", public.join(", ")),
        more => format!(" (of {}, and {} more)", public[..10].join(", "), more - 10),
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

    #[test]
    fn the_log_names_ten_public_packages_at_most() {
        let names: Vec<String> = ["_csv", "numpy", "pandas"].map(String::from).to_vec();
        assert_eq!(of_packages(&names), " (of numpy, pandas)");
        let many: Vec<String> = (0..13).map(|n| format!("p{n:02}")).collect();
        assert!(
            of_packages(&many).ends_with("p09, and 3 more)"),
            "{}",
            of_packages(&many)
        );
        let private_only: Vec<String> = vec!["_csv".into()];
        assert_eq!(of_packages(&private_only), "", "no empty \"(of )\"");
    }
}
