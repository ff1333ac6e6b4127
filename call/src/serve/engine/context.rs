//! Contexts: state a function's calls share, made once per zygote by an initialiser the
//! request names (`"context": "module:qualname"`, docs/serve.md "Contexts").
//!
//! The first call of a context runs the initialiser itself, in its own child (its Report
//! carries the load); as it is forked the zygote is told to run it too, so every call forked
//! after inherits its state copy-on-write. Spares forked before lack it and are sent away.
//!
//! No zygote may hold a GPU driver's state (a forked CUDA context is unusable). The zygote
//! checks after each context and each learned module (python/lfm_runner/contexts.py): one
//! that initialised a device is remembered, never loaded or learned by a zygote again (calls
//! do it themselves, and their Reports say why), and the spoilt zygote is replaced as soon as
//! no call runs under it; no call is forked from it meanwhile.

use std::collections::{BTreeMap, HashMap};

use lfm_monitor::report::{ContextUse, Report};

use super::zygote::context_message;
use super::zygotes::Zygotes;
use super::{CallSpec, Server};

/// The zygote's answer to a context (`{"op": "context"}`).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Answer {
    pub name: String,
    pub ok: bool,
    #[serde(default)]
    pub seconds: f64,
    /// The initialiser raised: its description (type, message, traceback).
    #[serde(default)]
    pub error: Option<serde_json::Value>,
    /// It initialised a GPU driver in the zygote: what showed it.
    #[serde(default)]
    pub device: Option<String>,
}

/// A learned module that initialised a GPU driver in the zygote.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct DeviceSeen {
    pub module: String,
    pub seen: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Sent: calls forked from here on find it loaded (unless it fails).
    Sent,
    Loaded,
    /// The initialiser raised in the zygote: calls run it themselves (and fail with it).
    Failed,
}

#[derive(Default)]
pub struct Contexts {
    /// What the current zygote was asked to load, and how that went.
    in_zygote: HashMap<String, State>,
    /// Contexts that initialised a GPU driver in a zygote, with what showed it: calls load
    /// them, zygotes never again.
    device_contexts: BTreeMap<String, String>,
    /// Modules that did the same when a zygote learned them.
    device_modules: BTreeMap<String, String>,
    /// The current zygote initialised a device: it is replaced once no call runs under it.
    spoilt: bool,
}

/// A context's name as the runner resolves it: `module:qualname`.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid = name.split_once(':').is_some_and(|(module, qualname)| {
        !module.is_empty() && !qualname.is_empty() && !qualname.contains(':')
    });
    if valid {
        Ok(())
    } else {
        Err(format!(
            "\"context\": an initialiser named 'module:qualname', not {name:?}"
        ))
    }
}

impl Contexts {
    /// A call of `name` was just forked: the zygote loads the context now unless it has (or
    /// must never). True when it was sent (the spares forked before lack it).
    pub fn load_after_fork(&mut self, zygotes: &Zygotes, name: &str) -> bool {
        if self.in_zygote.contains_key(name) || self.device_contexts.contains_key(name) {
            return false;
        }
        if let Err(error) = zygotes.broadcast(&context_message(name)) {
            eprintln!("lfm serve: warning: {error:#}");
            return false;
        }
        self.in_zygote.insert(name.to_string(), State::Sent);
        true
    }

    /// The zygote's answer, logged.
    pub fn answered(&mut self, answer: Answer) {
        let name = answer.name.clone();
        if let Some(seen) = answer.device {
            eprintln!(
                "lfm serve: context {name} initialised a GPU driver in the zygote ({seen}): the \
                 zygote is replaced without it, and each call of it loads it itself"
            );
            self.device_contexts.insert(name.clone(), seen);
            self.in_zygote.remove(&name);
            self.spoilt = true;
            return;
        }
        let state = if answer.ok {
            eprintln!(
                "lfm serve: the zygote loaded context {name} in {:.0} ms: calls forked from now on share it",
                answer.seconds * 1e3
            );
            State::Loaded
        } else {
            let traceback = answer.error.as_ref().and_then(|e| e["traceback"].as_str());
            eprintln!(
                "lfm serve: context {name} failed in the zygote (calls run it themselves):\n{}",
                traceback.unwrap_or("no traceback")
            );
            State::Failed
        };
        self.in_zygote.insert(name, state);
    }

    /// A learned module initialised a device: the zygote is replaced, and never learns it.
    pub fn learned_device(&mut self, seen: &DeviceSeen) {
        eprintln!(
            "lfm serve: importing {} initialised a GPU driver in the zygote ({}): the zygote is \
             replaced and will not import it again; calls import it themselves",
            seen.module, seen.seen
        );
        self.device_modules
            .insert(seen.module.clone(), seen.seen.clone());
        self.spoilt = true;
    }

    /// The zygote was replaced: it holds no context.
    pub fn forget(&mut self) {
        self.in_zygote.clear();
        self.spoilt = false;
    }

    /// The next zygote's config: the modules it must never learn.
    fn configure(&self, config: &mut serde_json::Value) {
        let modules: Vec<&String> = self.device_modules.keys().collect();
        config["device_modules"] = serde_json::json!(modules);
    }

    /// The Report's `function.context` (from the runner's outcome: where the call found its
    /// context), and a note for each module the call imported that no zygote may hold.
    pub fn annotate(
        &self,
        report: &mut Report,
        spec: &CallSpec,
        outcome: Option<&serde_json::Value>,
    ) {
        self.note_device_modules(report);
        let Some(name) = &spec.context else { return };
        let said = outcome.map(|o| &o["context"]);
        let loaded = said
            .and_then(|c| c["loaded"].as_str())
            .unwrap_or("unknown")
            .to_string();
        let why = self.device_contexts.get(name).map(|seen| {
            format!("it initialised a GPU driver in the zygote ({seen}): no zygote holds it")
        });
        if let Some(function) = report.function.as_mut() {
            function.context = Some(ContextUse {
                name: name.clone(),
                loaded,
                seconds: said.and_then(|c| c["seconds"].as_f64()),
                why,
            });
        }
    }

    fn note_device_modules(&self, report: &mut Report) {
        let Some(imports) = &report.imports else {
            return;
        };
        let mut notes = Vec::new();
        for (module, seen) in &self.device_modules {
            if imports
                .modules
                .iter()
                .any(|m| &m.name == module && !m.loaded)
            {
                notes.push(format!(
                    "the call imported {module} itself: it initialised a GPU driver when the \
                     zygote imported it ({seen}), so no zygote holds it"
                ));
            }
        }
        report.notes.extend(notes);
    }
}

impl Server {
    /// A zygote that initialised a device forks no more calls: once none runs under it, it
    /// is stopped (the next call starts a fresh one, told what it must never learn). True
    /// while calls must wait for that.
    pub(super) fn replace_spoilt_zygote(&mut self) -> bool {
        if !self.contexts.spoilt {
            return false;
        }
        if !self.running.is_empty() {
            return true;
        }
        self.drop_spares();
        self.zygotes.stop_all();
        self.contexts.configure(&mut self.options.zygote.config);
        self.contexts.forget();
        false
    }

    /// After forking a call of a context, the zygote loads it for the next calls.
    pub(super) fn load_context_after_fork(&mut self, name: Option<&str>) {
        let Some(name) = name else {
            return;
        };
        if self.contexts.load_after_fork(&self.zygotes, name) {
            for spare in std::mem::take(&mut self.spares) {
                self.drop_spare(spare);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_is_named_module_colon_qualname() {
        assert!(check_name("helper:load_model").is_ok());
        assert!(check_name("pkg.helper:Models.load").is_ok());
        for bad in ["load_model", ":load", "helper:", "a:b:c"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_device_context_spoils_the_zygote_and_is_never_sent_again() {
        let mut contexts = Contexts::default();
        contexts.answered(Answer {
            name: "gpu:load".into(),
            ok: false,
            seconds: 0.0,
            error: None,
            device: Some("/dev/nvidia0 is open".into()),
        });
        assert!(contexts.spoilt);
        assert!(contexts.device_contexts.contains_key("gpu:load"));
        contexts.forget();
        assert!(!contexts.spoilt);
        assert!(
            contexts.device_contexts.contains_key("gpu:load"),
            "remembered"
        );
    }

    #[test]
    fn the_next_zygote_is_told_the_device_modules() {
        let mut contexts = Contexts::default();
        contexts.learned_device(&DeviceSeen {
            module: "fakecuda".into(),
            seen: "torch.cuda.is_initialized() is true".into(),
        });
        let mut config = serde_json::json!({});
        contexts.configure(&mut config);
        assert_eq!(config["device_modules"], serde_json::json!(["fakecuda"]));
    }
}
