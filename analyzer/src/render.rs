//! Machine formats derived from a Spec: requirements.txt, conda environment.yml, poncho JSON.
//!
//! With several targets each gives the union of their distributions; the JSON Spec keeps them
//! apart.

use crate::spec::DistributionNeed;

/// `name==version`, one a line, in the order given (a union is sorted by normalised name).
pub fn requirements(dists: &[&DistributionNeed]) -> String {
    dists
        .iter()
        .map(|d| format!("{}=={}\n", d.name, d.version))
        .collect()
}

/// conda environment.yml: conda packages where the env is a conda env, pip for the rest.
pub fn conda_environment(python_version: &str, dists: &[&DistributionNeed], name: &str) -> String {
    let (conda, pip) = split_conda_pip(dists);
    let mut out = format!(
        "name: {name}\nchannels:\n  - conda-forge\ndependencies:\n  - python={}\n",
        python_minor(python_version)
    );
    for entry in &conda {
        out.push_str(&format!("  - {entry}\n"));
    }
    out.push_str("  - pip\n");
    if !pip.is_empty() {
        out.push_str("  - pip:\n");
        for entry in &pip {
            out.push_str(&format!("    - {entry}\n"));
        }
    }
    out
}

/// The cctools poncho spec: `{"conda": {"channels": [...], "dependencies": [..., {"pip": [...]}]}}`.
pub fn poncho(python_version: &str, dists: &[&DistributionNeed]) -> serde_json::Value {
    let (conda, pip) = split_conda_pip(dists);
    let mut dependencies: Vec<serde_json::Value> =
        vec![format!("python={}", python_minor(python_version)).into()];
    dependencies.extend(conda.into_iter().map(serde_json::Value::from));
    dependencies.push("pip".into());
    dependencies.push(serde_json::json!({ "pip": pip }));
    serde_json::json!({ "conda": { "channels": ["conda-forge"], "dependencies": dependencies } })
}

fn python_minor(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}

fn split_conda_pip(dists: &[&DistributionNeed]) -> (Vec<String>, Vec<String>) {
    let mut conda = Vec::new();
    let mut pip = Vec::new();
    for dist in dists {
        let DistributionNeed {
            name,
            version,
            conda_name,
            ..
        } = dist;
        match conda_name {
            Some(conda_name) if conda_name != "python" => {
                conda.push(format!("{conda_name}={version}"))
            }
            Some(_) => {}
            None => pip.push(format!("{name}=={version}")),
        }
    }
    (conda, pip)
}
