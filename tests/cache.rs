//! The pack cache stays within its budget and never evicts a pack in use (issue 34).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::assert_succeeded;

/// A tar holding one file of `kib` KiB whose bytes depend on `name` (so each hashes apart).
fn archive(dir: &Path, name: &str, kib: usize) -> PathBuf {
    let path = dir.join(format!("{name}.tar"));
    let mut builder = tar::Builder::new(std::fs::File::create(&path).unwrap());
    let data: Vec<u8> = name.bytes().cycle().take(kib * 1024).collect();
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder
        .append_data(&mut header, format!("{name}.bin"), &data[..])
        .unwrap();
    builder.finish().unwrap();
    path
}

fn lfm(cache: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(args)
        .args(["--cache".as_ref(), cache.as_os_str()])
        .env("LFM_CACHE_DIR", cache.join("analyze-home"))
        .env("LFM_PACK_CACHE_MAX", "250K")
        .output()
        .unwrap()
}

fn unpack(cache: &Path, archive: &Path) -> PathBuf {
    let out = lfm(cache, &["unpack", archive.to_str().unwrap()]);
    assert_succeeded(&out);
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

#[test]
fn a_new_pack_evicts_the_least_recently_used_ones_over_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("packs");
    let [a, b, c] = ["a", "b", "c"].map(|name| archive(dir.path(), name, 100));
    let root_a = unpack(&cache, &a);
    let root_b = unpack(&cache, &b);
    assert!(root_a.exists() && root_b.exists(), "200 KiB fit in 250 KiB");
    // a is used again, so b is now the least recently used.
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(unpack(&cache, &a), root_a);
    let root_c = unpack(&cache, &c);
    assert!(root_a.exists(), "a was used after b");
    assert!(!root_b.exists(), "b was the least recently used");
    assert!(root_c.exists(), "the pack just unpacked stays");
}

#[test]
fn a_pack_in_use_is_never_evicted() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("packs");
    let options = lfm_packer::UnpackOptions {
        cache_max: Some(u64::MAX),
        ..lfm_packer::UnpackOptions::new(cache.clone())
    };
    let [a, b, c] = ["a", "b", "c"].map(|name| archive(dir.path(), name, 100));
    // One user runs from a pack without a lease (as after `lfm unpack`), one holds a lease
    // (as `lfm call --pack` and `lfm serve --pack` do).
    let root_a = lfm_packer::unpack(&a, &options).unwrap();
    let mut runs_from_a = Command::new("sleep")
        .arg("60")
        .current_dir(&root_a)
        .spawn()
        .unwrap();
    let lease_b = lfm_packer::unpack_leased(&b, &options).unwrap();
    let root_c = lfm_packer::unpack(&c, &options).unwrap();

    let listed = lfm(&cache, &["cache"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("3 packs (2 in use)"), "{listed}");

    let pruned = lfm(&cache, &["cache", "--prune", "0"]);
    let pruned = String::from_utf8_lossy(&pruned.stdout);
    runs_from_a.kill().unwrap();
    runs_from_a.wait().unwrap();
    assert!(root_a.exists(), "a process runs from a: {pruned}");
    assert!(lease_b.root().exists(), "b is leased: {pruned}");
    assert!(!root_c.exists(), "c is not in use: {pruned}");
    assert!(pruned.contains("evicted 1 packs"), "{pruned}");
    assert!(
        pruned.contains("2 kept because a process uses them"),
        "{pruned}"
    );

    let root_b = lease_b.root().to_path_buf();
    drop(lease_b);
    let cleaned = lfm(&cache, &["cache", "--clean"]);
    let cleaned_out = String::from_utf8_lossy(&cleaned.stdout).to_string()
        + &String::from_utf8_lossy(&cleaned.stderr);
    assert_succeeded(&cleaned);
    assert!(
        !root_a.exists() && !root_b.exists(),
        "no longer in use: both removed: {cleaned_out}"
    );
}
