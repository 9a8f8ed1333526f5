//! Protection is the daemon's own code run by its own kind of account
//! (Trust III, item 5): a root-owned copy of the binary named like a
//! display server or driver daemon, run with a preload or mapping code from
//! elsewhere, is any holder (busy, not free, a kill target); a person's
//! display server is protected only in that person's own kills.

use crate::cmd::Gpufree;
use crate::harness::{alive, as_nobody, bin, process, u32s, TestDir};
use gpufree::demo::holder::{self, ChildSpec, HoldSpec, Spawned};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const NOBODY: u32 = 65534;

/// Whether the test can run: it gives processes to another user.
fn root() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        crate::harness::skip_off_ci("root", &"to run a daemon's copy as nobody");
    }
    root
}

/// A copy of the gpufree binary named `name`, root's and writable by no
/// one else, in a directory of the same kind (as a package installs a
/// daemon); the test directory opened for nobody to reach it and the
/// device nodes.
fn daemon_copy(d: &TestDir, name: &str) -> PathBuf {
    let open = |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
    open(d.tmp.path()).unwrap();
    let dir = d.tmp.path().join("sbin");
    if !dir.exists() {
        std::fs::create_dir(&dir).unwrap();
        open(&dir).unwrap();
    }
    let exe = dir.join(name);
    std::fs::copy(bin(), &exe).unwrap();
    open(&exe).unwrap();
    exe
}

/// Starts `exe` as a holder of GPU 0's node (argv\[0\] its file name), as
/// `uid` (nobody, or root for None), doing what `spec` adds.
fn start(d: &TestDir, exe: &Path, uid: Option<u32>, spec: HoldSpec) -> Spawned {
    let mut cmd = Command::new(exe);
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let name = exe.file_name().unwrap().to_str().unwrap().to_string();
    holder::spawn_from(
        cmd,
        &ChildSpec {
            argv: vec![name],
            spec: HoldSpec {
                fd: vec![d.node("nvidia0")],
                ..spec
            },
        },
    )
    .unwrap()
}

/// This machine's libm, from the loader's cache: a harmless library to
/// preload that lives in a system directory.
fn libm() -> String {
    let out = Command::new("ldconfig").arg("-p").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("libm.so.6 "))
        .find_map(|l| l.split_once("=> ").map(|(_, p)| p.trim().to_string()))
        .expect("ldconfig -p lists libm.so.6")
}

/// An environment with `LD_PRELOAD` set to libm.
fn preload() -> HoldSpec {
    HoldSpec {
        env: [("LD_PRELOAD".to_string(), libm())].into(),
        ..HoldSpec::default()
    }
}

/// A disqualified copy: not protected (and why, in JSON and in `why`), its
/// memory under the idle slack makes the GPU busy, `wait` does not call it
/// free, and root's `kill --gpu` signals it.
fn is_any_holder(d: &TestDir, h: &Spawned, reason: &str, words: &str) {
    let state = d.one_gpu(&[(h.pid(), 100, "while-alive")], 0);
    let doc = Gpufree::new(["status"]).json().on(d, &state).doc();
    let p = process(&doc, h.pid()).unwrap();
    assert_eq!(p["protected"], false, "{p}");
    assert_eq!(p["not_protected"]["reason"], reason, "{p}");
    assert!(p.get("protection").is_none(), "{p}");
    assert_eq!(
        doc["gpus"][0]["verdict"]["state"], "busy",
        "{}",
        doc["gpus"][0]["verdict"]
    );
    let why = Gpufree::new(["why", "--wide"]).on(d, &state).run();
    assert!(
        why.stdout.contains(&format!("[not protected: {words}")),
        "{}",
        why.stdout
    );
    let wait = Gpufree::new(["wait", "--timeout", "0"]).on(d, &state).run();
    wait.assert_exit(1);
    let r = Gpufree::new(["kill"])
        .json()
        .on(d, &state)
        .args(["--gpu", "0", "--yes"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    assert_eq!(
        u32s(&doc["kill"]["targets"]),
        vec![h.pid()],
        "{}",
        doc["kill"]
    );
    assert!(!alive(h.pid()));
}

#[test]
fn a_display_server_run_by_a_user_with_ld_preload_makes_the_gpu_busy_not_free() {
    if !root() {
        return;
    }
    let d = TestDir::new(1);
    let exe = daemon_copy(&d, "Xorg");
    let h = start(&d, &exe, Some(NOBODY), preload());
    let doc = Gpufree::new(["status"])
        .json()
        .dev(&d.dev)
        .sim(d.one_gpu(&[], 0))
        .doc();
    let p = process(&doc, h.pid()).unwrap();
    assert_eq!(p["not_protected"]["variable"], "LD_PRELOAD", "{p}");
    assert_eq!(p["not_protected"]["value"], libm().as_str(), "{p}");
    is_any_holder(&d, &h, "preload", "LD_PRELOAD=");
}

#[test]
fn a_display_server_run_by_a_user_mapping_code_from_elsewhere_is_not_protected() {
    if !root() {
        return;
    }
    let d = TestDir::new(1);
    let exe = daemon_copy(&d, "Xorg");
    // Any file outside the system's library directories, mapped
    // executable as dlopen would: nobody's code in a root-owned binary.
    let lib = d.tmp.path().join("libnobody.so");
    std::fs::write(&lib, vec![0u8; 4096]).unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
    let h = start(
        &d,
        &exe,
        Some(NOBODY),
        HoldSpec {
            exec_map: vec![lib.clone()],
            ..HoldSpec::default()
        },
    );
    let doc = Gpufree::new(["status"])
        .json()
        .dev(&d.dev)
        .sim(d.one_gpu(&[], 0))
        .doc();
    let p = process(&doc, h.pid()).unwrap();
    assert_eq!(p["not_protected"]["path"], lib.to_str().unwrap(), "{p}");
    is_any_holder(&d, &h, "foreign-code", "it runs code mapped from");
}

#[test]
fn a_system_daemon_with_ld_preload_is_not_protected() {
    if !root() {
        return;
    }
    let d = TestDir::new(1);
    let exe = daemon_copy(&d, "nvidia-persistenced");
    let h = start(&d, &exe, None, preload());
    is_any_holder(&d, &h, "preload", "LD_PRELOAD=");
}

#[test]
fn a_users_display_server_is_protected_only_in_that_users_kill() {
    if !root() {
        return;
    }
    let d = TestDir::new(1);
    let exe = daemon_copy(&d, "Xorg");
    let h = start(&d, &exe, Some(NOBODY), HoldSpec::default());
    // Beyond the idle slack: the GPU is busy, so nobody's kill has
    // something to free and refuses.
    let state = d.one_gpu(&[(h.pid(), 600, "while-alive")], 0);
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o644)).unwrap();
    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    let p = process(&doc, h.pid()).unwrap();
    assert_eq!(p["protected"], true, "{p}");
    assert_eq!(p["protection"], "user", "{p}");
    assert!(p.get("not_protected").is_none(), "{p}");
    let why = Gpufree::new(["why", "--wide"]).on(&d, &state).run();
    assert!(
        why.stdout
            .contains("nobody's own, protected only in nobody's kills"),
        "{}",
        why.stdout
    );
    let r = as_nobody(&d, &["kill", "--gpu", "0", "--yes"])
        .json()
        .dev(&d.dev)
        .env("GPUFREE_SIM_STATE", &state)
        .run();
    r.assert_exit(5);
    let doc = r.json();
    assert_eq!(doc["kill"]["targets"], serde_json::json!([]));
    assert!(
        doc["kill"]["skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("protected (Xorg)"),
        "{}",
        doc["kill"]
    );
    assert!(alive(h.pid()));
    let out = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0", "--yes"])
        .run();
    let doc = out.json_or_null();
    out.assert_exit(0);
    assert_eq!(
        u32s(&doc["kill"]["targets"]),
        vec![h.pid()],
        "{}",
        doc["kill"]
    );
    assert!(
        doc["plan"]["targets"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("nobody's own display server: protected only in nobody's kills"),
        "{}",
        doc["plan"]
    );
    assert!(!alive(h.pid()));
}

/// A person's display server is protected only in that person's own
/// kills: for whether the GPU is free it is a holder like any other, even
/// under the idle slack (code injected into it, by ptrace say, would
/// otherwise make the GPU "free" for `wait` and `check`).
#[test]
fn a_users_display_server_under_the_slack_still_makes_the_gpu_busy() {
    if !root() {
        return;
    }
    let d = TestDir::new(1);
    let exe = daemon_copy(&d, "Xorg");
    let h = start(&d, &exe, Some(NOBODY), HoldSpec::default());
    let state = d.one_gpu(&[(h.pid(), 100, "while-alive")], 0);
    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    assert_eq!(process(&doc, h.pid()).unwrap()["protection"], "user");
    assert_eq!(doc["gpus"][0]["verdict"]["state"], "busy", "{doc}");
    let wait = Gpufree::new(["wait", "--timeout", "0"])
        .on(&d, &state)
        .run();
    wait.assert_exit(1);
    let check = Gpufree::new(["check", "--format", "json"])
        .arg("--state")
        .arg(d.tmp.path().join("check.json"))
        .on(&d, &state)
        .run();
    let doc: serde_json::Value = serde_json::from_str(&check.stdout).unwrap();
    assert!(
        doc["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["condition"] == "leftover"),
        "{doc}"
    );
}

/// A system account's process that only names itself like a daemon
/// (renamed, and its executable unreadable even for root: a leader that
/// exited while its threads hold the node) is not protected for a gpufree
/// that reads every executable (root): the name alone proves nothing.
#[test]
fn a_renamed_system_account_process_whose_exe_root_cannot_read_is_not_protected() {
    let python = Path::new("/usr/bin/python3");
    if !root() || !python.exists() {
        return;
    }
    let d = TestDir::new(1);
    std::fs::set_permissions(d.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&d.dev, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(d.node("nvidia0"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let script = format!(
        "import ctypes,os,threading,time\nlibc=ctypes.CDLL(None)\nlibc.prctl(15,b'nvidia-persistenced',0,0,0)\nf=os.open({:?},os.O_RDONLY)\nthreading.Thread(target=time.sleep,args=(120,),daemon=True).start()\nprint('ready',flush=True)\nlibc.syscall({{'x86_64':60,'aarch64':93}}[os.uname().machine],0)",
        d.node("nvidia0").to_str().unwrap()
    );
    let mut fake = crate::harness::spawn_ready(
        Command::new("setpriv")
            .args(["--reuid=998", "--regid=998", "--clear-groups", "--"])
            .arg(python)
            .args(["-c", &script]),
    );
    crate::harness::wait_state(fake.id(), 'Z');
    let state = d.one_gpu(&[(fake.id(), 100, "while-alive")], 0);
    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    let _ = fake.kill();
    let _ = fake.wait();
    let p = process(&doc, fake.id()).unwrap_or_else(|| panic!("not listed: {doc}"));
    assert_eq!(p["comm"], "nvidia-persiste", "{p}");
    assert_eq!(p["protected"], false, "{p}");
    assert_eq!(p["not_protected"]["reason"], "unverified", "{p}");
    assert_eq!(doc["gpus"][0]["verdict"]["state"], "busy", "{doc}");
}
