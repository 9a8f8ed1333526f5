//! `gpufree prepare`: this boot's relocation of the in-kernel walk made
//! and kept in the cache (`GPUFREE_BPF_CACHE`) by the cache's own rules,
//! then loaded from the file. The next command loads it without
//! relocating and says so; a second prepare keeps the file; a user who is
//! not root, a cache directory others may write and a kernel that refuses
//! the walk are refused; `off` has nothing to keep; a file of the format
//! before is made again.

use crate::bpf::per_process_walk_runs;
use crate::cmd::hook;
use crate::harness::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

const BY_PREPARE: &str =
    "relocated to this kernel from this boot's cache, kept there by gpufree prepare";

/// `gpufree prepare` (and `extra` arguments) with the cache in `cache`.
fn prepare(cache: &Path, extra: &[&str]) -> Output {
    Gpufree::new(["prepare"])
        .args(extra)
        .env("GPUFREE_BPF_CACHE", cache)
        .run()
}

/// A one-shot status with the in-kernel walk and the cache in `cache`.
fn status(d: &TestDir, cache: &Path) -> Value {
    Gpufree::new(["status", "--json", "--scan", "bpf"])
        .dev(&d.dev)
        .no_nvml()
        .env("GPUFREE_BPF_CACHE", cache)
        .doc()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn prepare_keeps_the_relocation_and_the_next_command_loads_it_without_relocating() {
    let d = TestDir::new(1);
    if !per_process_walk_runs(&d) {
        return;
    }
    let cache = d.tmp.path().join("cache");
    let file = cache.join("holders-bpf.cache");
    let r = prepare(&cache, &["--json"]);
    r.assert_exit(0);
    let doc = r.json();
    assert_eq!(doc["state"], "made", "{doc}");
    assert_eq!(doc["made_by"], "prepare", "{doc}");
    assert_eq!(doc["file"], file.to_str().unwrap(), "{doc}");
    assert_eq!(
        doc["cause"]["kept"]["found"],
        json!({ "made": [] }),
        "{doc}"
    );
    assert!(doc["check_ms"].as_f64().unwrap() > 0.0, "{doc}");
    assert_eq!((mode(&cache), mode(&file)), (0o755, 0o644));

    // The next command: from the file prepare made, not relocated.
    let doc = status(&d, &cache);
    let v = &doc["visibility"];
    assert_eq!(v["scan"], "bpf", "{v}");
    assert!(
        v["scan_reason"].as_str().unwrap().contains(BY_PREPARE),
        "{v}"
    );
    assert_eq!(
        v["scan_cause"]["walked"]["how"],
        json!({ "per_process": "prepared" }),
        "{v}"
    );

    // Twice: the file is kept as it is, and said so.
    let before = (std::fs::read(&file).unwrap(), file.metadata().unwrap());
    let r = prepare(&cache, &[]);
    r.assert_exit(0);
    assert!(
        r.stdout.contains("already kept") && r.stdout.contains("made by gpufree prepare"),
        "{}",
        r.report()
    );
    let after = (std::fs::read(&file).unwrap(), file.metadata().unwrap());
    assert_eq!(before.0, after.0, "the same bytes");
    assert_eq!(
        before.1.ino(),
        after.1.ino(),
        "the same file, not written again"
    );
    let doc = prepare(&cache, &["--json"]).assert_exit(0).json();
    assert_eq!(
        (&doc["state"], &doc["made_by"]),
        (&json!("kept"), &json!("prepare")),
        "{doc}"
    );

    // One a command made is kept too, and said to be a command's.
    std::fs::remove_file(&file).unwrap();
    let doc = status(&d, &cache);
    let how = &doc["visibility"]["scan_cause"]["walked"]["how"];
    assert_eq!(how, &json!({ "per_process": { "made": [] } }));
    let doc = prepare(&cache, &["--json"]).assert_exit(0).json();
    assert_eq!(
        (&doc["state"], &doc["made_by"]),
        (&json!("kept"), &json!("command")),
        "{doc}"
    );
}

/// A file of the format before (v1: no maker), sealed and of root's: not
/// used, made again.
#[test]
fn prepare_makes_a_file_of_the_format_before_again() {
    let d = TestDir::new(1);
    if !per_process_walk_runs(&d) {
        return;
    }
    let cache = d.tmp.path().join("cache");
    let file = cache.join("holders-bpf.cache");
    prepare(&cache, &[]).assert_exit(0);
    let mut old = std::fs::read(&file).unwrap();
    old.truncate(old.len() - 32);
    old[..24].copy_from_slice(b"gpufree holders-bpf v1\n\0");
    old.remove(24 + 32 + 36 + 4);
    old.extend_from_slice(&Sha256::digest(&old));
    std::fs::write(&file, &old).unwrap();
    let doc = prepare(&cache, &["--json"]).assert_exit(0).json();
    assert_eq!(doc["state"], "made", "{doc}");
    assert!(
        doc["reason"]
            .as_str()
            .unwrap()
            .contains("not used: made by another gpufree or in another boot"),
        "{doc}"
    );
    assert_ne!(std::fs::read(&file).unwrap(), old, "made again");
    let v = &status(&d, &cache)["visibility"];
    assert_eq!(v["scan_cause"]["walked"]["how"]["per_process"], "prepared");
}

#[test]
fn prepare_refuses_a_cache_directory_others_may_write() {
    let d = TestDir::new(1);
    if !per_process_walk_runs(&d) {
        return;
    }
    let cache = d.tmp.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = prepare(&cache, &["--json"]);
    r.assert_exit(3);
    assert!(r.stdout.is_empty(), "{}", r.report());
    assert!(
        r.stderr
            .contains("prepare: the relocation loads, but was not kept")
            && r.stderr.contains("is not root's, or others may write it"),
        "{}",
        r.report()
    );
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn prepare_says_so_where_the_kernel_refuses_the_walk() {
    let d = TestDir::new(1);
    if !per_process_walk_runs(&d) {
        return;
    }
    let cache = d.tmp.path().join("cache");
    let r = Gpufree::new(["prepare"])
        .env("GPUFREE_BPF_CACHE", &cache)
        .env(hook("GPUFREE_TEST_BPF_BREAK_VERIFIER"), "1")
        .run();
    r.assert_exit(3);
    assert!(
        r.stderr.contains(
            "prepare: the in-kernel walk does not load here: the kernel's verifier refused"
        ),
        "{}",
        r.report()
    );
    assert!(!cache.join("holders-bpf.cache").exists());
}

#[test]
fn prepare_as_a_user_who_is_not_root_is_refused() {
    if !rustix::process::geteuid().is_root() {
        // Then the test's own user is the one refused.
        let r = prepare(Path::new("/nonexistent"), &[]);
        r.assert_exit(5);
        assert!(r.stderr.contains("only root keeps"), "{}", r.report());
        return;
    }
    let d = TestDir::new(1);
    let cache = d.tmp.path().join("cache");
    for extra in [&[][..], &["--json"]] {
        let r = as_nobody(&d, &["prepare"])
            .args(extra)
            .env("GPUFREE_BPF_CACHE", &cache)
            .run();
        r.assert_exit(5);
        assert!(r.stdout.is_empty(), "{}", r.report());
        assert_eq!(
            r.stderr.trim(),
            "gpufree: prepare: only root keeps this boot's relocation of the in-kernel walk (run it as root)",
            "{}",
            r.report()
        );
    }
    assert!(!cache.exists(), "nothing made");
}

#[test]
fn prepare_with_the_cache_off_has_nothing_to_keep() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: only root's prepare gets as far as the cache");
        return;
    }
    for off in ["off", ""] {
        let r = Gpufree::new(["prepare", "--json"])
            .env("GPUFREE_BPF_CACHE", off)
            .run();
        r.assert_exit(1);
        let doc = r.json();
        assert_eq!(doc["state"], "nothing", "{doc}");
        assert_eq!(doc["cause"], json!({ "nothing": "off" }), "{doc}");
        assert_eq!(doc["file"], Value::Null, "{doc}");
        let r = Gpufree::new(["prepare"])
            .env("GPUFREE_BPF_CACHE", off)
            .run();
        r.assert_exit(1);
        assert!(r.stdout.contains("nothing to keep"), "{}", r.report());
    }
}
