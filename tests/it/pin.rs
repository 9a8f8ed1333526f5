//! The walk `gpufree prepare` keeps loaded (pinned in a BPF file system,
//! `GPUFREE_BPF_PIN`) for the boot's one-shot commands: taken by one
//! command at a time, with that command's own targets, so that commands
//! in turn on different device directories each find exactly their own
//! holders; a pin another command holds, one in a directory others may
//! write, or one reached through a link is not taken (the command loads
//! its own and still finds every holder); long-running commands load
//! their own. Each test mounts a BPF file system of its own.

use crate::bpf::{holders, only, per_process_walk_runs, Crowd, Holders};
use crate::harness::*;
use crate::mapper::Mapper;
use gpufree::demo::holder::HoldSpec;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A BPF file system mounted for one test, unmounted when dropped.
struct BpfFs(PathBuf);

impl BpfFs {
    /// Mounted under `d`'s directory, for a per-process walk; None (said)
    /// where that walk cannot run here or the file system cannot be
    /// mounted.
    fn mount(d: &TestDir) -> Option<BpfFs> {
        if !per_process_walk_runs(d) {
            return None;
        }
        let at = d.tmp.path().join("bpffs");
        std::fs::create_dir(&at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "bpf", "bpf", at.to_str().unwrap()])
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            skip_off_ci("root, to mount a BPF file system", &"mount -t bpf failed");
            return None;
        }
        Some(BpfFs(at))
    }

    /// The pins' directory in it.
    fn pins(&self) -> PathBuf {
        self.0.join("gpufree")
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `gpufree prepare --json` keeping the walk in `pins`, with only the
/// capabilities its unit leaves it (contrib/systemd/gpufree-prepare.service).
fn prepare(pins: &Path) -> Value {
    Gpufree::new(["prepare", "--json"])
        .wrapped([
            "setpriv",
            "--bounding-set=-all,+bpf,+perfmon",
            "--inh-caps=-all",
            "--no-new-privs",
            "--",
        ])
        .env("GPUFREE_BPF_PIN", pins)
        .run()
        .assert_exit(0)
        .json()
}

/// A one-shot `status --json` with the in-kernel walk, on `dev`, the pins
/// in `pins`.
fn status(dev: &Path, pins: &Path) -> Value {
    Gpufree::new(["status", "--json", "--scan", "bpf"])
        .dev(dev)
        .no_nvml()
        .env("GPUFREE_BPF_PIN", pins)
        .doc()
}

/// How the walk was had, as `scan_cause` says.
fn how(doc: &Value) -> &Value {
    &doc["visibility"]["scan_cause"]["walked"]["how"]
}

/// A holder of `node` by fd and a holder of it by a mapping alone.
fn two_holders(node: &Path) -> [gpufree::demo::holder::Spawned; 2] {
    let fd = hold(
        &["python3", "fd"],
        HoldSpec {
            fd: vec![node.to_path_buf()],
            ..HoldSpec::default()
        },
    );
    let map = hold(
        &["python3", "map"],
        HoldSpec {
            maps_only: vec![node.to_path_buf()],
            ..HoldSpec::default()
        },
    );
    [fd, map]
}

/// What `two_holders` hold, as [`holders`] reads it.
fn want(h: &[gpufree::demo::holder::Spawned; 2], node: &str) -> Holders {
    let held = |how: &str| BTreeMap::from([(node.to_string(), vec![how.to_string()])]);
    Holders::from([(h[0].pid(), held("fd")), (h[1].pid(), held("mmap"))])
}

#[test]
fn one_shot_commands_take_the_pinned_walk_in_turn_each_with_its_own_targets() {
    let a = TestDir::new(1);
    let Some(fs) = BpfFs::mount(&a) else { return };
    let pins = fs.pins();
    // Another version's pins (here an empty set) go when prepare pins.
    let other = pins.join("0".repeat(64));
    std::fs::create_dir_all(&other).unwrap();
    let doc = prepare(&pins);
    assert!(!other.exists(), "another version's pins are removed");
    let dir = doc["pinned"].as_str().expect("pinned").to_string();
    assert!(dir.starts_with(pins.to_str().unwrap()), "{doc}");
    assert_eq!(
        doc["cause"]["kept"]["pin"],
        json!({ "pinned": dir }),
        "{doc}"
    );
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // Twice: the pins there are kept.
    assert_eq!(prepare(&pins)["pinned"], json!(dir));

    // Two device directories, two holders each; commands in turn.
    let b = TestDir::new(1);
    let (on_a, on_b) = (
        two_holders(&a.node("nvidia0")),
        two_holders(&b.node("nvidia0")),
    );
    let all: Vec<u32> = on_a.iter().chain(&on_b).map(|h| h.pid()).collect();
    for round in 0..2 {
        for (d, h) in [(&a, &on_a), (&b, &on_b)] {
            let doc = status(&d.dev, &pins);
            assert_eq!(
                how(&doc),
                &json!({ "per_process": "pinned" }),
                "round {round}"
            );
            assert!(
                doc["visibility"]["scan_reason"]
                    .as_str()
                    .unwrap()
                    .contains("by gpufree prepare, kept pinned"),
                "{}",
                doc["visibility"]
            );
            // Exactly this directory's holders: none of the last
            // command's targets, every process walked in every walk.
            assert_eq!(holders(&doc, &all), want(h, "nvidia0"), "round {round}");
        }
    }
    // A long-running command loads its own: while one waits, a one-shot
    // command still takes the pinned walk.
    let waiting = Gpufree::new(["wait", "--timeout", "4s", "--scan", "bpf"])
        .dev(&b.dev)
        .no_nvml()
        .env("GPUFREE_BPF_PIN", &pins)
        .spawn();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let doc = status(&a.dev, &pins);
    let _ = waiting.finish();
    assert_eq!(how(&doc), &json!({ "per_process": "pinned" }));
}

#[test]
fn a_pin_in_use_others_may_write_or_reached_through_a_link_is_not_taken() {
    let d = TestDir::new(1);
    let Some(fs) = BpfFs::mount(&d) else { return };
    let pins = fs.pins();
    let dir = PathBuf::from(prepare(&pins)["pinned"].as_str().unwrap());
    let h = two_holders(&d.node("nvidia0"));
    let pids: Vec<u32> = h.iter().map(|h| h.pid()).collect();
    // Loaded its own, found every holder, and said why it took no pin
    // (`why`: the refusal's name; None: nothing to say).
    let own = |doc: &Value, why: Option<&str>| {
        assert_ne!(how(doc), &json!({ "per_process": "pinned" }), "{doc}");
        assert_eq!(holders(doc, &pids), want(&h, "nvidia0"));
        let said = &doc["visibility"]["scan_cause"]["walked"]["pin_not_taken"];
        match why {
            Some(why) => assert!(said.get(why).is_some(), "{why}: {}", doc["visibility"]),
            None => assert!(said.is_null(), "{}", doc["visibility"]),
        }
    };

    // Held by another command (here a flock of the test's own).
    let lock = std::fs::File::open(&dir).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    own(&status(&d.dev, &pins), Some("in_use"));
    drop(lock);
    assert_eq!(
        how(&status(&d.dev, &pins)),
        &json!({ "per_process": "pinned" })
    );

    // A directory others may write.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    own(&status(&d.dev, &pins), Some("not_root_only"));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();

    // The pins' directory named through a link.
    let link = d.tmp.path().join("link");
    std::os::unix::fs::symlink(&pins, &link).unwrap();
    own(&status(&d.dev, &link), Some("link_or_not_dir"));

    // Off, and a directory where nothing is pinned: nothing to say.
    own(&status(&d.dev, Path::new("off")), None);
    own(&status(&d.dev, &d.tmp.path().join("none")), None);
}

#[test]
fn a_pin_under_a_directory_a_user_owns_is_neither_made_nor_taken() {
    // attack38 finding 4: a user who owns a directory on the way could
    // rename the pins away.
    let d = TestDir::new(1);
    let Some(fs) = BpfFs::mount(&d) else { return };
    let theirs = fs.0.join("u");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let pins = theirs.join("gpufree");
    let doc = prepare(&pins);
    assert!(doc["pinned"].is_null(), "{doc}");
    let why = &doc["cause"]["kept"]["pin"]["not_pinned"]["not_roots_on_the_way"];
    assert_eq!(why["path"], json!(theirs.to_str().unwrap()), "{doc}");
    assert!(!pins.exists(), "nothing made under the user's directory");
    let r = Gpufree::new(["prepare"])
        .env("GPUFREE_BPF_PIN", &pins)
        .run();
    let line = &r.assert_exit(0).stdout;
    assert!(line.contains("NOT pinned for one-shot commands"), "{line}");
    assert!(
        line.contains("on the way to the pins, is not root's"),
        "{line}"
    );

    // Pins made while the directory was root's are not taken once a user
    // owns it.
    std::os::unix::fs::chown(&theirs, Some(0), Some(0)).unwrap();
    assert!(prepare(&pins)["pinned"].is_string());
    let h = two_holders(&d.node("nvidia0"));
    let pids: Vec<u32> = h.iter().map(|h| h.pid()).collect();
    assert_eq!(
        how(&status(&d.dev, &pins)),
        &json!({ "per_process": "pinned" })
    );
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let doc = status(&d.dev, &pins);
    assert_ne!(how(&doc), &json!({ "per_process": "pinned" }), "{doc}");
    assert_eq!(holders(&doc, &pids), want(&h, "nvidia0"));
    let said = &doc["visibility"]["scan_cause"]["walked"]["pin_not_taken"];
    assert!(
        said.get("not_roots_on_the_way").is_some(),
        "{}",
        doc["visibility"]
    );
}

#[test]
fn a_pinned_walk_keeps_a_mapping_result_only_while_the_memory_map_is_unchanged() {
    // The pinned walk keeps each process's mapping result for the next
    // command under its map's write count and the targets' epoch
    // (holders.bpf.c: kept_maps): every change of the map or of the
    // targets between commands must be seen.
    let d = TestDir::new(1);
    let Some(fs) = BpfFs::mount(&d) else { return };
    let pins = fs.pins();
    prepare(&pins);
    let mut m = Mapper::start(&d.node("nvidia0"));
    let pid = m.child.id();
    let mapped = only(pid, &[("nvidia0", &["mmap"])]);
    // What the walk found of the process, and whether it took a kept
    // result for it (`scan_kept`).
    let seen = |step: &str| {
        let doc = status(&d.dev, &pins);
        assert_eq!(how(&doc), &json!({ "per_process": "pinned" }), "{step}");
        let kept = doc["visibility"]["scan_kept"].as_u64().unwrap();
        (holders(&doc, &[pid]), kept)
    };
    // Twice each: the second command may take the first's kept result.
    for round in 0..2 {
        assert_eq!(seen("before").0, Holders::new(), "round {round}");
        assert_eq!(seen("before, again").0, Holders::new(), "round {round}");
        m.tell("map");
        assert_eq!(seen("mapped"), (mapped.clone(), 0), "round {round}");
        let (again, kept) = seen("mapped, again");
        assert_eq!(again, mapped, "round {round}");
        if kept != 1 {
            skip_off_ci(
                "a kernel whose memory maps have a write count (6.14+, CONFIG_PER_VMA_LOCK), on x86-64",
                &format!("no kept result taken (scan_kept {kept})"),
            );
        }
        m.tell("unmap");
    }
    // A new program (exec) that maps it at once: its map is another.
    assert_eq!(seen("unmapped").0, Holders::new());
    m.tell("exec");
    assert_eq!(seen("exec'd, mapped"), (mapped.clone(), 0));
    seen("exec'd, mapped, again");
    // Other targets (a node more, then fewer: the node's index moves):
    // the first walk after each walks the map anew.
    std::fs::write(d.dev.join("nvidia1"), b"").unwrap();
    assert_eq!(seen("a node more"), (mapped.clone(), 0));
    seen("a node more, again");
    for gone in ["nvidia-uvm", "nvidiactl"] {
        std::fs::remove_file(d.dev.join(gone)).unwrap();
        assert_eq!(seen(gone), (mapped.clone(), 0), "{gone} gone");
        assert_eq!(seen(gone).0, mapped, "{gone} gone, again");
    }
}

/// A process that maps each of `nodes` (each fd closed at once), killed
/// on drop.
fn maps_all(nodes: &[PathBuf]) -> Crowd {
    Crowd::python(&format!(
        "import ctypes,os,time\nlibc=ctypes.CDLL(None)\nlibc.mmap.restype=ctypes.c_void_p\nlibc.mmap.argtypes=[ctypes.c_void_p,ctypes.c_size_t,ctypes.c_int,ctypes.c_int,ctypes.c_int,ctypes.c_long]\nfor n in {nodes:?}:\n    fd=os.open(n,os.O_RDONLY)\n    at=libc.mmap(None,4096,1,1,fd,0)\n    os.close(fd)\n    assert at not in (None,ctypes.c_void_p(-1).value),'mmap failed'\nprint('ready',flush=True)\ntime.sleep(120)"
    ))
}

#[test]
fn a_pinned_walk_keeps_no_result_of_more_targets_than_it_holds() {
    // A kept mapping result holds 6 targets (holders.bpf.c: KEPT_TARGETS):
    // a process that maps 6 is kept, one that maps 8 is walked anew by
    // every command, and each is found whole every time.
    let d = TestDir::new(8);
    let Some(fs) = BpfFs::mount(&d) else { return };
    let pins = fs.pins();
    prepare(&pins);
    let names = |n: usize| (0..n).map(|i| format!("nvidia{i}")).collect::<Vec<_>>();
    let (six, eight) = (names(6), names(8));
    let maps = |nodes: &[String]| maps_all(&nodes.iter().map(|n| d.node(n)).collect::<Vec<_>>());
    let (p6, p8) = (maps(&six), maps(&eight));
    let mapped = |pid: u32, nodes: &[String]| -> Holders {
        let ways = nodes
            .iter()
            .map(|n| (n.clone(), vec!["mmap".to_string()]))
            .collect();
        BTreeMap::from([(pid, ways)])
    };
    let mut want = mapped(p6.0.id(), &six);
    want.extend(mapped(p8.0.id(), &eight));
    for round in 0..3 {
        let doc = status(&d.dev, &pins);
        assert_eq!(
            how(&doc),
            &json!({ "per_process": "pinned" }),
            "round {round}"
        );
        assert_eq!(
            holders(&doc, &[p6.0.id(), p8.0.id()]),
            want,
            "round {round}"
        );
        let kept = doc["visibility"]["scan_kept"].as_u64().unwrap();
        match round {
            0 => assert_eq!(kept, 0, "nothing kept before the first walk"),
            _ if kept == 0 => skip_off_ci(
                "a kernel whose memory maps have a write count (6.14+, CONFIG_PER_VMA_LOCK), on x86-64",
                &format!("no kept result taken (scan_kept {kept})"),
            ),
            _ => assert_eq!(kept, 1, "round {round}: only the process of 6 targets kept"),
        }
    }
}
