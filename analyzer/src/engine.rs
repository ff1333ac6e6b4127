//! The engines lfm runs functions under, and the decorators and wrappers that name them.
//!
//! `@python_app def fit(n): import numpy` needs numpy; parsl is what the worker that runs it
//! already is. An import whose name a module reads only as one of [`ENGINE_APIS`] (a
//! decorator, bare or called, or a wrapper call such as `dask.delayed(fit)`) is the engine's,
//! not the function's: the closure lists what only such uses bring apart, as `engine`
//! (docs/spec.md), and packs leave it out unless asked.

/// Top-level packages of the engines: only names imported from these are looked at.
pub const ENGINE_PACKAGES: &[&str] = &["parsl", "dask", "lfm"];

/// Decorators and wrappers of each engine, by the dotted name they are imported as.
pub const ENGINE_APIS: &[&str] = &[
    "parsl.python_app",
    "parsl.bash_app",
    "parsl.join_app",
    "parsl.app.app.python_app",
    "parsl.app.app.bash_app",
    "parsl.app.app.join_app",
    "dask.delayed",
    "dask.delayed.delayed",
    "lfm.task",
    "lfm.task.task",
];

/// Whether an import of `module` (dotted, absolute) may bind an engine API.
pub fn is_engine_package(module: &str) -> bool {
    let top = module.split('.').next().unwrap_or_default();
    ENGINE_PACKAGES.contains(&top)
}

/// The engine API `qualified` (`parsl.python_app`) names, if it is one.
pub fn engine_api(qualified: &str) -> Option<&'static str> {
    ENGINE_APIS.iter().copied().find(|api| *api == qualified)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_engines_decorators_and_wrappers_are_apis() {
        assert_eq!(engine_api("parsl.python_app"), Some("parsl.python_app"));
        assert_eq!(engine_api("dask.delayed"), Some("dask.delayed"));
        assert_eq!(engine_api("lfm.task"), Some("lfm.task"));
        assert_eq!(engine_api("parsl.load"), None);
        assert_eq!(engine_api("dask.array.from_array"), None);
        assert!(is_engine_package("parsl.app.app") && is_engine_package("dask"));
        assert!(!is_engine_package("parsley") && !is_engine_package("numpy"));
    }
}
