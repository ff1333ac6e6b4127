//! docs/pack.md carries a real manifest; rebuilding that pack must give the same one.

mod common;

use common::{assert_succeeded, lfm, real_venv};

#[test]
fn manifest_example_matches_a_real_pack() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/pack.md")).unwrap();
    let start = doc.find("```json\n").unwrap() + "```json\n".len();
    let end = start + doc[start..].find("```").unwrap();
    let mut documented: serde_json::Value = serde_json::from_str(&doc[start..end]).unwrap();
    let parsed: lfm_packer::Manifest =
        serde_json::from_value(documented.clone()).expect("example is a manifest");
    assert_eq!(parsed.format, lfm_packer::manifest::MANIFEST_FORMAT);

    let Some(venv) = real_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("load_config.tar.zst");
    let output = lfm(&[
        "pack",
        "--quiet",
        "--env",
        venv.to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
        "--closure",
        "slice",
        "samples/workflow/workflow.py:load_config",
    ]);
    assert_succeeded(&output);
    let cache = dir.path().join("cache");
    let root = String::from_utf8(
        lfm(&[
            "unpack",
            "--cache",
            cache.to_str().unwrap(),
            pack.to_str().unwrap(),
        ])
        .stdout,
    )
    .unwrap();
    let mut real: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(std::path::Path::new(root.trim()).join("lfm-manifest.json"))
            .unwrap(),
    )
    .unwrap();
    // The spec hash covers the interpreter's paths, which differ between machines.
    for manifest in [&mut documented, &mut real] {
        manifest["spec_hash"] = serde_json::Value::Null;
    }
    assert_eq!(real, documented);
}

#[test]
fn parts_manifest_example_matches_real_parts() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/pack.md")).unwrap();
    let section = &doc[doc.find("## Parts").expect("a Parts section")..];
    let start = section.find("```json\n").unwrap() + "```json\n".len();
    let end = start + section[start..].find("```").unwrap();
    let mut documented: serde_json::Value = serde_json::from_str(&section[start..end]).unwrap();
    let parsed: lfm_packer::parts::PartsManifest =
        serde_json::from_value(documented.clone()).expect("example is a parts manifest");
    assert_eq!(parsed.format, lfm_packer::parts::PARTS_FORMAT);

    let Some(venv) = real_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("parts");
    let output = lfm(&[
        "pack",
        "--quiet",
        "--env",
        venv.to_str().unwrap(),
        "--parts",
        store.to_str().unwrap(),
        "--closure",
        "slice",
        "samples/workflow/workflow.py:load_config",
    ]);
    assert_succeeded(&output);
    let path = String::from_utf8(output.stdout).unwrap();
    let mut real: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path.trim()).unwrap()).unwrap();
    // The function part holds the pack manifest, whose spec hash covers machine paths.
    for manifest in [&mut documented, &mut real] {
        for part in manifest["parts"].as_array_mut().unwrap() {
            if part["kind"] == "function" {
                for field in ["sha256", "bytes", "unpacked_bytes"] {
                    part[field] = serde_json::Value::Null;
                }
            }
        }
    }
    assert_eq!(real, documented);
}
