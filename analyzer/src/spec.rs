//! The Spec: what the analyzer hands to the packer and to people (docs/spec.md).

use serde::{Deserialize, Serialize};

pub const SPEC_FORMAT: &str = "lfm-spec/1";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spec {
    pub format: String,
    pub python: PythonInfo,
    pub targets: Vec<TargetSpec>,
    /// Problems not tied to one target (unreadable metadata of an installed distribution...).
    #[serde(default)]
    pub warnings: Vec<Warning>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PythonInfo {
    pub version: String,
    pub executable: String,
    pub prefix: String,
    pub platform: String,
    pub soabi: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    Module,
    Function,
    Class,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TargetSpec {
    /// `module` for a module, `module:qualname` for a function, method or class.
    pub target: String,
    pub kind: TargetKind,
    pub module: String,
    pub file: String,
    pub line: u32,
    pub modules: Vec<ModuleNeed>,
    pub distributions: Vec<DistributionNeed>,
    pub missing: Vec<MissingModule>,
    #[serde(default)]
    pub missing_distributions: Vec<MissingDistribution>,
    pub warnings: Vec<Warning>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum ModuleKind {
    Local,
    Stdlib,
    ThirdParty,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModuleNeed {
    pub name: String,
    pub kind: ModuleKind,
    /// File that provides it (local and third-party modules).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub distribution: Option<String>,
    /// Every import edge that reached it was optional (try/except ImportError).
    pub optional: bool,
    /// Union of the contexts of the edges that reached it: top-level, in-function, conditional,
    /// optional, dynamic.
    pub contexts: Vec<String>,
    pub reason: Reason,
}

/// Why something is needed: the import statement, and how the target got there.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Reason {
    pub file: String,
    pub line: u32,
    /// From the target to the statement: functions, globals and local modules followed.
    pub chain: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DistributionNeed {
    pub name: String,
    pub version: String,
    /// Imported by the closure itself (rather than only required by another distribution).
    pub direct: bool,
    pub optional: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub conda_name: Option<String>,
    /// For direct ones: the modules that map to it. For the others: the Requires-Dist chain.
    pub reason: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MissingModule {
    pub name: String,
    pub optional: bool,
    pub reason: Reason,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MissingDistribution {
    pub name: String,
    pub required_by: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Warning {
    pub file: String,
    pub line: u32,
    pub message: String,
}

impl TargetSpec {
    /// A required (non-optional) module or distribution is not installed.
    pub fn has_missing_required(&self) -> bool {
        self.missing.iter().any(|m| !m.optional) || !self.missing_distributions.is_empty()
    }
}

impl Spec {
    /// Every distribution of every target, once, sorted by normalised name.
    pub fn union_distributions(&self) -> Vec<&DistributionNeed> {
        let mut all: std::collections::BTreeMap<String, &DistributionNeed> = Default::default();
        for target in &self.targets {
            for dist in &target.distributions {
                all.entry(crate::dists::normalize_name(&dist.name))
                    .or_insert(dist);
            }
        }
        all.into_values().collect()
    }
}
