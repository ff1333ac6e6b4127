//! The Spec: what the analyzer hands to the packer and to people (docs/spec.md).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

pub const SPEC_FORMAT: &str = "lfm-spec/3";

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

/// Which closure of a target was computed (module targets have only the import closure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClosureKind {
    /// What the function itself needs: what `lfm call` executes of its module.
    #[default]
    Slice,
    /// What importing the target's module needs (its top level and its parent packages), plus
    /// the function's slice: what a function pickled by reference needs on the worker.
    Import,
}

impl ClosureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ClosureKind::Slice => "slice",
            ClosureKind::Import => "import",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TargetSpec {
    /// `module` for a module, `module:qualname` for a function, method or class.
    pub target: String,
    pub kind: TargetKind,
    /// Absent in `lfm-spec/1` documents, whose function targets were slices.
    #[serde(default)]
    pub closure: ClosureKind,
    pub module: String,
    pub file: String,
    pub line: u32,
    pub modules: Vec<ModuleNeed>,
    pub distributions: Vec<DistributionNeed>,
    pub missing: Vec<MissingModule>,
    #[serde(default)]
    pub missing_distributions: Vec<MissingDistribution>,
    /// What only the engine's decorators and wrappers bring (absent when nothing does, and in
    /// documents older than `lfm-spec/3`, whose lists above held it too).
    #[serde(default, skip_serializing_if = "EngineNeeds::is_empty")]
    pub engine: EngineNeeds,
    pub warnings: Vec<Warning>,
}

/// What a target needs only because an engine (Parsl, Dask, lfm) decorates or wraps it: the
/// worker that runs it is that engine, so packs leave this out unless asked
/// ([`crate::engine`], docs/spec.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct EngineNeeds {
    /// Each decorator or wrapper that names an engine, and where.
    pub uses: Vec<EngineUse>,
    pub modules: Vec<ModuleNeed>,
    /// Those that no module of the target's own closure needs.
    pub distributions: Vec<DistributionNeed>,
    pub missing: Vec<MissingModule>,
    pub missing_distributions: Vec<MissingDistribution>,
}

impl EngineNeeds {
    pub fn is_empty(&self) -> bool {
        self.uses.is_empty()
            && self.modules.is_empty()
            && self.distributions.is_empty()
            && self.missing.is_empty()
            && self.missing_distributions.is_empty()
    }
}

/// `decorator parsl.python_app on fit` at `file:line`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct EngineUse {
    pub file: String,
    pub line: u32,
    #[serde(rename = "use")]
    pub what: String,
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
    /// (Static names: a whole tree has millions of these, and an allocation each showed.)
    pub contexts: Vec<Cow<'static, str>>,
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
    /// Installed code imports it without declaring it in Requires-Dist (an optional import
    /// that runs because it is installed): see `reason`.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub undeclared: bool,
    /// For direct ones: the modules that map to it. For the others: the Requires-Dist chain;
    /// for an undeclared one, the importing distribution and the import's `file:line` first.
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
        self.union_of(|target| target.distributions.iter())
    }

    /// Every engine distribution of every target that no target needs itself, once, sorted
    /// by normalised name.
    pub fn union_engine_distributions(&self) -> Vec<&DistributionNeed> {
        let own: std::collections::BTreeSet<String> = self
            .union_distributions()
            .iter()
            .map(|dist| crate::dists::normalize_name(&dist.name))
            .collect();
        let mut engine = self.union_of(|target| target.engine.distributions.iter());
        engine.retain(|dist| !own.contains(&crate::dists::normalize_name(&dist.name)));
        engine
    }

    fn union_of<'s, I: Iterator<Item = &'s DistributionNeed>>(
        &'s self,
        of: impl Fn(&'s TargetSpec) -> I,
    ) -> Vec<&'s DistributionNeed> {
        let mut all: std::collections::BTreeMap<String, &DistributionNeed> = Default::default();
        for target in &self.targets {
            for dist in of(target) {
                all.entry(crate::dists::normalize_name(&dist.name))
                    .or_insert(dist);
            }
        }
        all.into_values().collect()
    }
}

/// Union of the contexts of the import edges that reached a module, as bits in the order the
/// Spec lists their names (alphabetical). A whole tree has millions of module needs: a byte
/// each rather than a vector of names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Contexts(u8);

impl Contexts {
    pub const CONDITIONAL: Contexts = Contexts(1 << 0);
    pub const DYNAMIC: Contexts = Contexts(1 << 1);
    pub const IN_FUNCTION: Contexts = Contexts(1 << 2);
    pub const OPTIONAL: Contexts = Contexts(1 << 3);
    pub const TOP_LEVEL: Contexts = Contexts(1 << 4);
    const NAMES: [&'static str; 5] = [
        "conditional",
        "dynamic",
        "in-function",
        "optional",
        "top-level",
    ];

    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Self::NAMES
            .iter()
            .enumerate()
            .filter(move |(bit, _)| self.0 & (1 << bit) != 0)
            .map(|(_, name)| *name)
    }
}

impl std::ops::BitOr for Contexts {
    type Output = Contexts;
    fn bitor(self, other: Contexts) -> Contexts {
        Contexts(self.0 | other.0)
    }
}

impl std::ops::BitOrAssign for Contexts {
    fn bitor_assign(&mut self, other: Contexts) {
        self.0 |= other.0;
    }
}

/// One target's closure as computed, borrowing names and paths from the analysis: the JSON
/// output is written from it directly ([`TargetView::write_json`]); [`TargetView::to_spec`]
/// copies it into an owned [`TargetSpec`]. A whole site-packages has millions of module needs,
/// and copying each one's strings first was most of the allocations of printing it.
#[derive(Debug, Clone)]
pub struct TargetView<'a> {
    pub target: Cow<'a, str>,
    pub kind: TargetKind,
    pub closure: ClosureKind,
    pub module: &'a str,
    pub file: &'a str,
    pub line: u32,
    pub modules: Vec<ModuleView<'a>>,
    pub distributions: Vec<DistributionView<'a>>,
    pub missing: Vec<MissingView<'a>>,
    pub missing_distributions: Vec<MissingDistribution>,
    pub engine: EngineView<'a>,
    pub warnings: Vec<WarningView<'a>>,
    /// No name, path or version borrowed from the analysis needs a JSON escape (checked once
    /// when it was loaded, [`is_json_plain`]): they are then written without a per-string
    /// check. Warnings and missing distributions are always checked.
    pub escape_free: bool,
}

/// An [`EngineNeeds`], borrowed.
#[derive(Debug, Clone, Default)]
pub struct EngineView<'a> {
    pub uses: Vec<EngineUseView<'a>>,
    pub modules: Vec<ModuleView<'a>>,
    pub distributions: Vec<DistributionView<'a>>,
    pub missing: Vec<MissingView<'a>>,
    pub missing_distributions: Vec<MissingDistribution>,
}

/// An [`EngineUse`], borrowed where it can be.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EngineUseView<'a> {
    pub file: &'a str,
    pub line: u32,
    pub what: Cow<'a, str>,
}

impl EngineView<'_> {
    pub fn is_empty(&self) -> bool {
        self.uses.is_empty()
            && self.modules.is_empty()
            && self.distributions.is_empty()
            && self.missing.is_empty()
            && self.missing_distributions.is_empty()
    }

    fn to_needs(&self) -> EngineNeeds {
        EngineNeeds {
            uses: self
                .uses
                .iter()
                .map(|used| EngineUse {
                    file: used.file.to_string(),
                    line: used.line,
                    what: used.what.to_string(),
                })
                .collect(),
            modules: self.modules.iter().map(ModuleView::to_need).collect(),
            distributions: self
                .distributions
                .iter()
                .map(DistributionView::to_need)
                .collect(),
            missing: self.missing.iter().map(MissingView::to_missing).collect(),
            missing_distributions: self.missing_distributions.clone(),
        }
    }
}

/// A [`ModuleNeed`], borrowed.
#[derive(Debug, Clone)]
pub struct ModuleView<'a> {
    pub name: &'a str,
    pub kind: ModuleKind,
    pub file: Option<&'a str>,
    pub distribution: Option<&'a str>,
    pub optional: bool,
    pub contexts: Contexts,
    pub reason: ReasonView<'a>,
}

/// A [`Reason`], borrowed.
#[derive(Debug, Clone)]
pub struct ReasonView<'a> {
    pub file: &'a str,
    pub line: u32,
    pub chain: Vec<&'a str>,
}

/// A [`DistributionNeed`], borrowed.
#[derive(Debug, Clone)]
pub struct DistributionView<'a> {
    pub name: &'a str,
    pub version: &'a str,
    pub direct: bool,
    pub optional: bool,
    pub conda_name: Option<&'a str>,
    pub undeclared: bool,
    pub reason: Vec<Cow<'a, str>>,
}

/// A [`MissingModule`], borrowed.
#[derive(Debug, Clone)]
pub struct MissingView<'a> {
    pub name: &'a str,
    pub optional: bool,
    pub reason: ReasonView<'a>,
}

/// A [`Warning`], borrowed where it can be. Ordered as [`Warning`] is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WarningView<'a> {
    pub file: Cow<'a, str>,
    pub line: u32,
    pub message: Cow<'a, str>,
}

impl ReasonView<'_> {
    pub fn to_reason(&self) -> Reason {
        Reason {
            file: self.file.to_string(),
            line: self.line,
            chain: self.chain.iter().map(|step| step.to_string()).collect(),
        }
    }
}

impl ModuleView<'_> {
    fn to_need(&self) -> ModuleNeed {
        ModuleNeed {
            name: self.name.to_string(),
            kind: self.kind,
            file: self.file.map(str::to_string),
            distribution: self.distribution.map(str::to_string),
            optional: self.optional,
            contexts: self.contexts.names().map(Cow::Borrowed).collect(),
            reason: self.reason.to_reason(),
        }
    }
}

impl DistributionView<'_> {
    fn to_need(&self) -> DistributionNeed {
        DistributionNeed {
            name: self.name.to_string(),
            version: self.version.to_string(),
            direct: self.direct,
            optional: self.optional,
            conda_name: self.conda_name.map(str::to_string),
            undeclared: self.undeclared,
            reason: self.reason.iter().map(|step| step.to_string()).collect(),
        }
    }
}

impl MissingView<'_> {
    fn to_missing(&self) -> MissingModule {
        MissingModule {
            name: self.name.to_string(),
            optional: self.optional,
            reason: self.reason.to_reason(),
        }
    }
}

impl WarningView<'_> {
    pub fn to_warning(&self) -> Warning {
        Warning {
            file: self.file.to_string(),
            line: self.line,
            message: self.message.to_string(),
        }
    }
}

impl TargetView<'_> {
    /// A required (non-optional) module or distribution is not installed.
    pub fn has_missing_required(&self) -> bool {
        self.missing.iter().any(|m| !m.optional) || !self.missing_distributions.is_empty()
    }

    pub fn to_spec(&self) -> TargetSpec {
        TargetSpec {
            target: self.target.to_string(),
            kind: self.kind,
            closure: self.closure,
            module: self.module.to_string(),
            file: self.file.to_string(),
            line: self.line,
            modules: self.modules.iter().map(ModuleView::to_need).collect(),
            distributions: self
                .distributions
                .iter()
                .map(DistributionView::to_need)
                .collect(),
            missing: self.missing.iter().map(MissingView::to_missing).collect(),
            missing_distributions: self.missing_distributions.clone(),
            engine: self.engine.to_needs(),
            warnings: self.warnings.iter().map(WarningView::to_warning).collect(),
        }
    }

    /// Compact JSON of the target, byte for byte what `serde_json::to_vec(&self.to_spec())`
    /// gives (a test holds the two together), written without serde: a whole site-packages is
    /// ~500 MB of it, and serde's generic string escaping was the largest single cost of
    /// printing it. Kept because it wins by more than 5%: with serde_json writing the Spec
    /// (`to_spec` + `to_writer`) the whole-tree run takes 1.20x the wall time (1.22x the CPU;
    /// bench/alloc_json.sh, 2026-11-24).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        #[cfg(feature = "bench-serde-writer")]
        serde_json::to_writer(&mut *out, &self.to_spec()).expect("writing to memory");
        #[cfg(not(feature = "bench-serde-writer"))]
        self.write_json_by_hand(out);
    }

    fn write_json_by_hand(&self, out: &mut Vec<u8>) {
        let text = if self.escape_free {
            json_plain_str
        } else {
            json_str
        };
        out.extend_from_slice(b"{\"target\":");
        text(out, &self.target);
        out.extend_from_slice(b",\"kind\":");
        json_plain_str(
            out,
            match self.kind {
                TargetKind::Module => "module",
                TargetKind::Function => "function",
                TargetKind::Class => "class",
            },
        );
        out.extend_from_slice(b",\"closure\":");
        json_plain_str(out, self.closure.as_str());
        out.extend_from_slice(b",\"module\":");
        text(out, self.module);
        out.extend_from_slice(b",\"file\":");
        text(out, self.file);
        out.extend_from_slice(b",\"line\":");
        json_u32(out, self.line);
        json_needs(
            out,
            &self.modules,
            &self.distributions,
            (&self.missing, &self.missing_distributions),
            text,
        );
        if !self.engine.is_empty() {
            json_engine(out, &self.engine, text);
        }
        out.extend_from_slice(b",\"warnings\":");
        json_array(out, &self.warnings, |out, warning| {
            out.extend_from_slice(b"{\"file\":");
            json_str(out, &warning.file);
            out.extend_from_slice(b",\"line\":");
            json_u32(out, warning.line);
            out.extend_from_slice(b",\"message\":");
            json_str(out, &warning.message);
            out.push(b'}');
        });
        out.push(b'}');
    }
}

/// `,"modules":[...],"distributions":[...],"missing":[...],"missing_distributions":[...]`,
/// of a target or of its engine.
fn json_needs(
    out: &mut Vec<u8>,
    modules: &[ModuleView],
    distributions: &[DistributionView],
    (missing, missing_distributions): (&[MissingView], &[MissingDistribution]),
    text: fn(&mut Vec<u8>, &str),
) {
    out.extend_from_slice(b",\"modules\":");
    json_array(out, modules, |out, module| json_module(out, module, text));
    out.extend_from_slice(b",\"distributions\":");
    json_array(out, distributions, |out, dist| {
        json_distribution(out, dist, text)
    });
    out.extend_from_slice(b",\"missing\":");
    json_array(out, missing, |out, missing| {
        out.extend_from_slice(b"{\"name\":");
        text(out, missing.name);
        out.extend_from_slice(b",\"optional\":");
        json_bool(out, missing.optional);
        out.extend_from_slice(b",\"reason\":");
        json_reason(out, &missing.reason, text);
        out.push(b'}');
    });
    out.extend_from_slice(b",\"missing_distributions\":");
    json_array(out, missing_distributions, |out, missing| {
        out.extend_from_slice(b"{\"name\":");
        json_str(out, &missing.name);
        out.extend_from_slice(b",\"required_by\":");
        json_array(out, &missing.required_by, |out, step| json_str(out, step));
        out.push(b'}');
    });
}

/// `,"engine":{"uses":[...],"modules":[...],...}`.
fn json_engine(out: &mut Vec<u8>, engine: &EngineView, text: fn(&mut Vec<u8>, &str)) {
    out.extend_from_slice(b",\"engine\":{\"uses\":");
    json_array(out, &engine.uses, |out, used| {
        out.extend_from_slice(b"{\"file\":");
        text(out, used.file);
        out.extend_from_slice(b",\"line\":");
        json_u32(out, used.line);
        out.extend_from_slice(b",\"use\":");
        json_str(out, &used.what);
        out.push(b'}');
    });
    json_needs(
        out,
        &engine.modules,
        &engine.distributions,
        (&engine.missing, &engine.missing_distributions),
        text,
    );
    out.push(b'}');
}

fn json_module(out: &mut Vec<u8>, module: &ModuleView, text: fn(&mut Vec<u8>, &str)) {
    out.extend_from_slice(b"{\"name\":");
    text(out, module.name);
    out.extend_from_slice(b",\"kind\":");
    json_plain_str(
        out,
        match module.kind {
            ModuleKind::Local => "local",
            ModuleKind::Stdlib => "stdlib",
            ModuleKind::ThirdParty => "third-party",
        },
    );
    if let Some(file) = module.file {
        out.extend_from_slice(b",\"file\":");
        text(out, file);
    }
    if let Some(distribution) = module.distribution {
        out.extend_from_slice(b",\"distribution\":");
        text(out, distribution);
    }
    out.extend_from_slice(b",\"optional\":");
    json_bool(out, module.optional);
    out.extend_from_slice(b",\"contexts\":[");
    for (index, name) in module.contexts.names().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        json_plain_str(out, name);
    }
    out.extend_from_slice(b"],\"reason\":");
    json_reason(out, &module.reason, text);
    out.push(b'}');
}

fn json_distribution(out: &mut Vec<u8>, dist: &DistributionView, text: fn(&mut Vec<u8>, &str)) {
    out.extend_from_slice(b"{\"name\":");
    text(out, dist.name);
    out.extend_from_slice(b",\"version\":");
    text(out, dist.version);
    out.extend_from_slice(b",\"direct\":");
    json_bool(out, dist.direct);
    out.extend_from_slice(b",\"optional\":");
    json_bool(out, dist.optional);
    if let Some(conda_name) = dist.conda_name {
        out.extend_from_slice(b",\"conda_name\":");
        text(out, conda_name);
    }
    if dist.undeclared {
        out.extend_from_slice(b",\"undeclared\":true");
    }
    out.extend_from_slice(b",\"reason\":");
    json_array(out, &dist.reason, |out, step| text(out, step));
    out.push(b'}');
}

fn json_reason(out: &mut Vec<u8>, reason: &ReasonView, text: fn(&mut Vec<u8>, &str)) {
    out.extend_from_slice(b"{\"file\":");
    text(out, reason.file);
    out.extend_from_slice(b",\"line\":");
    json_u32(out, reason.line);
    out.extend_from_slice(b",\"chain\":");
    json_array(out, &reason.chain, |out, step| text(out, step));
    out.push(b'}');
}

fn json_array<T>(out: &mut Vec<u8>, items: &[T], mut write: impl FnMut(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write(out, item);
    }
    out.push(b']');
}

fn json_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

fn json_u32(out: &mut Vec<u8>, value: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Whether `bytes` holds a control character, `"` or `\\`. Nearly every string is clean; a
/// scan without early exit compiles to SIMD compares (fewer instructions than a word-at-a-time
/// check with early exit, measured with callgrind).
fn needs_escape(bytes: &[u8]) -> bool {
    bytes.iter().fold(false, |any, &b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

/// Whether `text` is written in JSON as it is, between quotes (no control character, `"` or `\\`).
pub fn is_json_plain(text: &str) -> bool {
    !needs_escape(text.as_bytes())
}

/// A JSON string known to need no escape ([`is_json_plain`]).
fn json_plain_str(out: &mut Vec<u8>, text: &str) {
    debug_assert!(is_json_plain(text), "not escape-free: {text:?}");
    out.reserve(text.len() + 2);
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

/// A JSON string with serde_json's escapes: `\"`, `\\`, the short forms of \b \t \n \f \r, and
/// `\u00XX` for other control characters; everything else (UTF-8 included) as is.
fn json_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    if !needs_escape(bytes) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut clean_from = 0;
    for (index, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0a => b"\\n",
            0x0c => b"\\f",
            0x0d => b"\\r",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[clean_from..index]);
        clean_from = index + 1;
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(byte >> 4) as usize]);
            out.push(HEX[(byte & 0xf) as usize]);
        } else {
            out.extend_from_slice(escape);
        }
    }
    out.extend_from_slice(&bytes[clean_from..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_at_a_time_escape_check_agrees_with_a_byte_by_byte_one() {
        for byte in 0..=255u8 {
            let special = byte < 0x20 || byte == b'"' || byte == b'\\';
            for length in [1, 7, 8, 9, 16, 17] {
                for at in 0..length {
                    let mut bytes = vec![b'a'; length];
                    bytes[at] = byte;
                    assert_eq!(
                        needs_escape(&bytes),
                        special,
                        "byte {byte:#x} at {at} of {length}"
                    );
                }
            }
        }
        assert!(!needs_escape(b""));
        assert!(!needs_escape("numpy/core/__init__.py é 漢 🐍".as_bytes()));
    }

    const AWKWARD: &str = "q\"b\\s/\u{1}\u{8}\t\n\u{c}\r\u{1f}\u{7f} é 漢 🐍";

    fn sample() -> TargetView<'static> {
        TargetView {
            target: Cow::Owned(format!("m:{AWKWARD}")),
            kind: TargetKind::Class,
            closure: ClosureKind::Slice,
            module: "m",
            file: AWKWARD,
            line: 4_294_967_295,
            modules: vec![
                ModuleView {
                    name: "a.b",
                    kind: ModuleKind::ThirdParty,
                    file: Some(AWKWARD),
                    distribution: Some("PyYAML"),
                    optional: true,
                    contexts: Contexts::TOP_LEVEL | Contexts::OPTIONAL,
                    reason: ReasonView {
                        file: "x.py",
                        line: 0,
                        chain: vec![AWKWARD, ""],
                    },
                },
                ModuleView {
                    name: "os",
                    kind: ModuleKind::Stdlib,
                    file: None,
                    distribution: None,
                    optional: false,
                    contexts: Contexts::default(),
                    reason: ReasonView {
                        file: "",
                        line: 10,
                        chain: vec![],
                    },
                },
                ModuleView {
                    name: "pkg.mod",
                    kind: ModuleKind::Local,
                    file: Some("pkg/mod.py"),
                    distribution: None,
                    optional: false,
                    contexts: Contexts::CONDITIONAL
                        | Contexts::DYNAMIC
                        | Contexts::IN_FUNCTION
                        | Contexts::OPTIONAL
                        | Contexts::TOP_LEVEL,
                    reason: ReasonView {
                        file: "main.py",
                        line: 3,
                        chain: vec!["f", "pkg.mod"],
                    },
                },
            ],
            distributions: vec![DistributionView {
                name: "PyYAML",
                version: "6.0.1",
                direct: false,
                optional: true,
                conda_name: Some("pyyaml"),
                undeclared: true,
                reason: vec![Cow::Borrowed("a"), Cow::Owned(AWKWARD.to_string())],
            }],
            missing: vec![MissingView {
                name: "gone",
                optional: false,
                reason: ReasonView {
                    file: "y.py",
                    line: 7,
                    chain: vec!["f"],
                },
            }],
            missing_distributions: vec![MissingDistribution {
                name: "absent".into(),
                required_by: vec!["requests".into()],
            }],
            engine: EngineView {
                uses: vec![EngineUseView {
                    file: "wf.py",
                    line: 4,
                    what: Cow::Owned(format!("decorator parsl.python_app on {AWKWARD}")),
                }],
                modules: vec![ModuleView {
                    name: "parsl",
                    kind: ModuleKind::ThirdParty,
                    file: Some("site-packages/parsl/__init__.py"),
                    distribution: Some("parsl"),
                    optional: false,
                    contexts: Contexts::TOP_LEVEL,
                    reason: ReasonView {
                        file: "wf.py",
                        line: 1,
                        chain: vec!["fit", "python_app"],
                    },
                }],
                distributions: vec![DistributionView {
                    name: "parsl",
                    version: "2026.10.26",
                    direct: true,
                    optional: false,
                    conda_name: None,
                    undeclared: false,
                    reason: vec![Cow::Borrowed("parsl")],
                }],
                missing: vec![],
                missing_distributions: vec![MissingDistribution {
                    name: "pyzmq".into(),
                    required_by: vec!["parsl".into()],
                }],
            },
            warnings: vec![WarningView {
                file: Cow::Borrowed("z.py"),
                line: 1,
                message: Cow::Borrowed(AWKWARD),
            }],
            escape_free: false,
        }
    }

    #[test]
    fn hand_written_json_is_what_serde_writes_of_the_owned_spec() {
        let mut target = sample();
        let mut ours = Vec::new();
        target.write_json(&mut ours);
        let spec = target.to_spec();
        assert_eq!(
            spec.modules[0].contexts,
            vec!["optional", "top-level"],
            "contexts are listed alphabetically"
        );
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(&spec).unwrap()
        );
        // And with every optional part absent or empty.
        target.kind = TargetKind::Function;
        target.modules.clear();
        target.distributions[0].conda_name = None;
        target.missing.clear();
        target.missing_distributions.clear();
        target.warnings.clear();
        target.engine = EngineView::default();
        let mut ours = Vec::new();
        target.write_json(&mut ours);
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(&target.to_spec()).unwrap()
        );
    }

    #[test]
    fn escape_free_text_is_written_as_the_checked_path_writes_it() {
        let mut target = sample();
        // Only the warning and the missing distribution may hold awkward text now (they are
        // always checked).
        target.target = Cow::Borrowed("m:f");
        target.file = "pkg/m.py";
        target.modules[0].file = Some("site-packages/a/b.py");
        target.modules[0].reason.chain = vec!["f", "g"];
        target.distributions[0].reason = vec![Cow::Borrowed("a"), Cow::Borrowed("é 漢 🐍")];
        target.missing_distributions[0].name = AWKWARD.to_string();
        let mut checked = Vec::new();
        target.write_json(&mut checked);
        target.escape_free = true;
        let mut plain = Vec::new();
        target.write_json(&mut plain);
        assert_eq!(
            String::from_utf8(plain).unwrap(),
            String::from_utf8(checked).unwrap()
        );
        assert!(is_json_plain("numpy/core/__init__.py é"));
        assert!(!is_json_plain("a\"b") && !is_json_plain("a\\b") && !is_json_plain("a\nb"));
    }

    #[test]
    fn every_control_character_is_escaped_as_serde_does() {
        for byte in 0u8..=0x7f {
            let text = format!("a{}b", byte as char);
            let mut ours = Vec::new();
            json_str(&mut ours, &text);
            assert_eq!(ours, serde_json::to_vec(&text).unwrap(), "byte {byte:#x}");
        }
    }
}
