//! Device nodes are GPU nodes only (issue "Trust III", item 2): an entry of
//! the device directory with a GPU node's name is a node when it is a
//! regular file itself (a test's directory), a character device of its
//! driver's major, or a link to such a device; a link to any other file
//! (/dev/null, a regular file) or another driver's device is refused,
//! named in `visibility.refused_nodes`, and its GPUs' verdicts are
//! unknown. Its holders are never holders, so `kill` never signals them.
//!
//! Each test checks what gpufree sees (status, a dry run) before it runs a
//! real kill: a build that took the refused node for a GPU node would see
//! every process holding /dev/null on the machine, and must fail before
//! it signals any of them.

use crate::harness::*;
use gpufree::demo::holder::{HoldSpec, Spawned};
use serde_json::Value;
use std::path::Path;

/// A holder of `file` by fd, renamed `gpufree-refused`.
fn holding(file: &Path) -> Spawned {
    hold(
        &["gpufree-refused"],
        HoldSpec {
            fd: vec![file.to_path_buf()],
            ..HoldSpec::default()
        },
    )
}

/// The entry of `visibility.refused_nodes` whose path ends with `/rel`.
fn refused<'a>(doc: &'a Value, rel: &str) -> &'a Value {
    doc["visibility"]["refused_nodes"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|r| r["path"].as_str().unwrap().ends_with(&format!("/{rel}")))
        })
        .unwrap_or_else(|| panic!("{rel} is not refused: {}", doc["visibility"]))
}

/// The verdict of GPU `index` in a status document.
fn verdict(doc: &Value, index: u64) -> &Value {
    &doc["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["index"] == index)
        .unwrap_or_else(|| panic!("no GPU {index}: {}", doc["gpus"]))["verdict"]
}

/// What gpufree sees on `d` (its `nvidia0` refused: `why` contains
/// `because` and names the NVIDIA frontend's driver, which this machine
/// may not have registered) and what the kill of GPU 0 does: the holder `h` of the file
/// behind it is no holder, GPU 0's verdict is unknown naming the node, a
/// dry run plans nothing, and `kill --holders-only --gpu 0 --yes` (without
/// NVML and on the simulator) signals nothing.
fn refused_and_never_killed(d: &TestDir, h: &Spawned, because: &str) {
    let doc = Gpufree::new(["status"]).json().dev(&d.dev).no_nvml().doc();
    assert!(
        process(&doc, h.pid()).is_none(),
        "not a holder: {}",
        doc["processes"]
    );
    let r = refused(&doc, "nvidia0");
    let why = r["why"].as_str().unwrap();
    assert!(
        why.contains(because) && why.contains("nvidia-frontend driver"),
        "{r}"
    );
    assert_eq!(r["gpus"], serde_json::json!([0]), "{r}");
    let v = verdict(&doc, 0);
    assert_eq!(v["state"], "unknown", "{v}");
    assert!(
        v["reasons"]
            .to_string()
            .contains("nvidia0 is not a GPU node"),
        "{v}"
    );

    let dry = Gpufree::new([
        "kill",
        "--json",
        "--dry-run",
        "--holders-only",
        "--gpu",
        "0",
    ])
    .dev(&d.dev)
    .no_nvml()
    .run();
    assert!(process(&dry.json(), h.pid()).is_none(), "{}", dry.stdout);

    // The measured attack: nothing is signalled, the verdict is unknown.
    let r = Gpufree::new(["kill", "--holders-only", "--gpu", "0", "--yes"])
        .dev(&d.dev)
        .no_nvml()
        .run();
    assert!(
        alive(h.pid()),
        "the holder of the refused node's file lives"
    );
    r.assert_exit_with(3, format_args!("unknown, not freed: {}", r.stderr));
    let state = d.one_gpu(&[], 0);
    let out = Gpufree::new(["kill"])
        .json()
        .on(d, &state)
        .args(["--holders-only", "--gpu", "0", "--yes", "--timeout", "5s"])
        .run();
    let doc = out.json_or_null();
    assert!(
        alive(h.pid()),
        "the holder of the refused node's file lives"
    );
    out.assert_exit_with(3, format_args!("unknown, not freed: {doc}"));
}

/// `dev/nvidia0` linked to /dev/null (what anyone can put in a directory
/// given as `--dev-dir`): before, every process holding /dev/null was
/// GPU 0's holder and `kill --holders-only --gpu 0` signalled it.
#[test]
fn a_device_node_linked_to_dev_null_makes_no_holder_and_no_kill() {
    let d = TestDir::new(0);
    std::os::unix::fs::symlink("/dev/null", d.node("nvidia0")).unwrap();
    let h = holding(Path::new("/dev/null"));
    refused_and_never_killed(
        &d,
        &h,
        "a link to /dev/null, a character device of major 1 (mem), ",
    );
}

/// A character node of /dev/null's device number named `nvidia0`: another
/// driver's device, refused the same way; registered as the frontend's
/// major (the tests' hook), it is that node.
#[test]
fn a_character_node_of_another_driver_makes_no_holder_and_no_kill() {
    let d = TestDir::new(0);
    let node = d.node("nvidia0");
    let made = rustix::fs::mknodat(
        rustix::fs::CWD,
        &node,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 3),
    );
    if let Err(e) = made {
        skip_off_ci("mknod (root)", &e);
        return;
    }
    let h = holding(Path::new("/dev/null"));
    refused_and_never_killed(&d, &h, "a character device of major 1 (mem), ");
    // As if the frontend's major were 1: the node is /dev/null's device,
    // and the holder is its holder (status only: nothing is killed here).
    let r = Gpufree::new(["status", "--json"])
        .dev(&d.dev)
        .no_nvml()
        .envs([("GPUFREE_TEST_GPU_MAJORS", "nvidia-frontend=1")])
        .run();
    r.assert_exit(0);
    let doc = r.json();
    assert!(doc["visibility"]["refused_nodes"].is_null(), "{doc}");
    let p = process(&doc, h.pid()).expect("matched by device number");
    assert_eq!(via(p, "nvidia0"), ["fd"]);
}

/// In a test's device directory, a plain file is a node and a link to a
/// plain file is not: its holder is no holder, and the GPU the link names
/// is unknown while the other's verdict rests on its holders.
#[test]
fn a_link_to_a_regular_file_is_refused_while_a_plain_file_is_a_node() {
    let d = TestDir::new(1);
    let elsewhere = d.tmp.path().join("elsewhere");
    std::fs::write(&elsewhere, vec![0u8; 4096]).unwrap();
    std::os::unix::fs::symlink(&elsewhere, d.node("nvidia1")).unwrap();
    let node = d.mapper("nvidia0");
    let linked = holding(&elsewhere);
    let doc = Gpufree::new(["status"]).json().dev(&d.dev).no_nvml().doc();
    assert_eq!(
        via(process(&doc, node.pid()).unwrap(), "nvidia0"),
        ["fd", "mmap"]
    );
    assert!(process(&doc, linked.pid()).is_none(), "{doc}");
    let r = refused(&doc, "nvidia1");
    let why = r["why"].as_str().unwrap();
    assert!(
        why.starts_with(&format!(
            "a link to {}, a regular file",
            elsewhere.display()
        )),
        "{why}"
    );
    assert_eq!(r["gpus"], serde_json::json!([1]), "{r}");
    assert!(verdict(&doc, 1)["reasons"]
        .to_string()
        .contains("nvidia1 is not a GPU node"));
    assert!(!verdict(&doc, 0)["reasons"]
        .to_string()
        .contains("not a GPU node"));
    let r = Gpufree::new(["kill", "--holders-only", "--gpu", "1", "--yes"])
        .dev(&d.dev)
        .no_nvml()
        .run();
    r.assert_exit(3);
    assert!(alive(linked.pid()) && alive(node.pid()));
}

/// A refused shared node (`nvidia-uvm` linked to /dev/null) may hide a
/// holder of any NVIDIA GPU: each one's verdict is unknown, and `wait`
/// says so (exit 3) even with `--holders-only`.
#[test]
fn a_refused_shared_node_leaves_every_nvidia_gpu_unknown() {
    let d = TestDir::new(2);
    std::fs::remove_file(d.node("nvidia-uvm")).unwrap();
    std::os::unix::fs::symlink("/dev/null", d.node("nvidia-uvm")).unwrap();
    let state = d.state(&sim_state(vec![sim_gpu(0, &[], 0), sim_gpu(1, &[], 0)]));
    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    let r = refused(&doc, "nvidia-uvm");
    assert!(
        r["why"]
            .as_str()
            .unwrap()
            .starts_with("a link to /dev/null, a character device of major 1 (mem), "),
        "{r}"
    );
    assert_eq!(r["gpus"], serde_json::json!([0, 1]), "{r}");
    for gpu in [0, 1] {
        assert_eq!(verdict(&doc, gpu)["state"], "unknown", "{doc}");
    }
    let out = Gpufree::new(["wait"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "1", "--timeout", "0", "--holders-only"])
        .run();
    out.assert_exit(3);
    // Without it, both are free.
    std::fs::remove_file(d.node("nvidia-uvm")).unwrap();
    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    assert!(doc["visibility"]["refused_nodes"].is_null(), "{doc}");
    assert_eq!(verdict(&doc, 1)["state"], "free", "{doc}");
}
