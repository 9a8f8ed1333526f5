//! This boot's relocation of the in-kernel walk, kept between commands
//! (`GPUFREE_BPF_CACHE`): a command that loads it finds the holders a
//! fresh relocation finds; a damaged file, one the kernel will not load,
//! one of another user's and one in a directory others may write are not
//! used (the relocation is made again, and the reason says why); `off`
//! keeps none.

use crate::bpf::{holders, per_process_walk_runs};
use crate::cmd::hook;
use crate::harness::*;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const FROM_CACHE: &str = "relocated to this kernel from this boot's cache";
const FROM_BTF: &str = "relocated to this kernel from its BTF";
/// The cache file's header: format, object digest, boot id, attach id.
const HEADER: usize = 24 + 32 + 36 + 4;

fn reason(doc: &Value) -> String {
    doc["visibility"]["scan_reason"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Writes `body` and its SHA-256 to `file`, as gpufree seals one.
fn seal(file: &Path, body: &[u8]) {
    let mut out = body.to_vec();
    out.extend_from_slice(&Sha256::digest(body));
    std::fs::write(file, out).unwrap();
}

#[test]
fn the_boot_cache_is_used_only_where_sound_and_finds_the_same_holders() {
    let d = TestDir::new(1);
    if !per_process_walk_runs(&d) {
        return;
    }
    let holder = d.mapper("nvidia0");
    let pid = holder.pids[0].0;
    let truth = holders(
        &Gpufree::new(["status", "--json", "--scan", "procfs"])
            .dev(&d.dev)
            .no_nvml()
            .doc(),
        &[pid],
    );
    assert!(!truth.is_empty(), "the holder holds nvidia0");
    let cache = d.tmp.path().join("cache");
    let env = [("GPUFREE_BPF_CACHE", cache.to_str().unwrap())];
    let run = |want: &str| {
        let doc = Gpufree::new(["status", "--json", "--scan", "bpf"])
            .dev(&d.dev)
            .no_nvml()
            .envs(env.iter().copied())
            .doc();
        assert!(
            reason(&doc).contains(want),
            "want {want:?}: {}",
            reason(&doc)
        );
        assert_eq!(holders(&doc, &[pid]), truth, "{}", reason(&doc));
    };
    run(FROM_BTF);
    let file = cache.join("holders-bpf.cache");
    assert_eq!((mode(&cache), mode(&file)), (0o755, 0o644));
    run(FROM_CACHE);
    run(FROM_CACHE);

    // A bit flipped anywhere: not sound, made again and kept again.
    let sound = std::fs::read(&file).unwrap();
    let mut flipped = sound.clone();
    flipped[HEADER + 200] ^= 0x10;
    std::fs::write(&file, &flipped).unwrap();
    run("(boot cache: not used: damaged (its SHA-256 differs))");
    assert_eq!(std::fs::read(&file).unwrap(), sound, "kept again");

    // Sealed, but no object the kernel loads: one whose attach id names no
    // iterator (the verifier refuses it), one cut short (no ELF object).
    let body = &sound[..sound.len() - 32];
    let mut wrong_id = body.to_vec();
    wrong_id[HEADER - 4..HEADER].copy_from_slice(&1u32.to_le_bytes());
    seal(&file, &wrong_id);
    run("(boot cache: the one kept did not load: the kernel's verifier refused");
    run(FROM_CACHE);
    seal(&file, &body[..HEADER + 100]);
    run("(boot cache: the one kept did not load: the BPF object");
    run(FROM_CACHE);

    // Another user's file: not used, replaced by root's.
    std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
    run("is not root's, or others may write it");
    run(FROM_CACHE);

    // A directory others may write: neither read nor written.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    run("not used: ");
    std::fs::remove_file(&file).unwrap();
    run("not kept: ");
    assert!(!file.exists(), "written into a directory others may write");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).unwrap();

    // off: none kept.
    for _ in 0..2 {
        let doc = Gpufree::new(["status", "--json", "--scan", "bpf"])
            .dev(&d.dev)
            .no_nvml()
            .envs([("GPUFREE_BPF_CACHE", "off")])
            .doc();
        assert!(reason(&doc).contains(FROM_BTF), "{}", reason(&doc));
    }
    assert!(!file.exists());
}

/// auto, for a one-shot command: below both crossovers the /proc walk;
/// between them (12,000 open files, given by the tests' hook) the
/// in-kernel walk where this boot's relocation is kept and the /proc walk
/// where it is not; past both the in-kernel walk, relocated. Each says why.
#[test]
fn auto_loads_the_kept_relocation_from_a_lower_count_of_open_files() {
    let d = TestDir::new(1);
    if !per_process_walk_runs(&d) {
        return;
    }
    let cache = d.tmp.path().join("cache");
    let cache = cache.to_str().unwrap();
    Gpufree::new(["status", "--json", "--scan", "bpf"])
        .dev(&d.dev)
        .no_nvml()
        .envs([("GPUFREE_BPF_CACHE", cache)])
        .doc(); // keeps the relocation
    let auto = |files: &str, dir: &str| {
        let env = [
            (hook("GPUFREE_TEST_OPEN_FILES"), files),
            ("GPUFREE_BPF_CACHE", dir),
        ];
        let doc = Gpufree::new(["status", "--json", "--scan", "auto"])
            .dev(&d.dev)
            .no_nvml()
            .envs(env.iter().copied())
            .doc();
        (
            doc["visibility"]["scan"].as_str().unwrap().to_string(),
            reason(&doc),
        )
    };
    let (low, high) = (
        gpufree::proc::scan::CROSSOVER_FILES_CACHED,
        gpufree::proc::scan::CROSSOVER_FILES,
    );
    let cases = [
        ("300", cache, "procfs", format!("below {low}")),
        ("12000", cache, "bpf", format!("from {low}")),
        ("12000", cache, "bpf", FROM_CACHE.to_string()),
        ("12000", "off", "procfs", format!("below {high}")),
        ("50000", "off", "bpf", format!("from {high}")),
    ];
    for (files, dir, want, why) in cases {
        let (scan, reason) = auto(files, dir);
        assert_eq!(scan, want, "{files} open files, cache {dir}: {reason}");
        assert!(
            reason.contains(&why),
            "{files} open files, cache {dir}: {reason}"
        );
    }
}
