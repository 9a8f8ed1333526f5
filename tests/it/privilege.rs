//! Privileged deployments (issue "Trust III"): a copy of gpufree with file
//! capabilities, a setuid copy (as a sudo rule with arguments would run
//! it), each run by an unprivileged caller. The caller steers nothing: no
//! path, library, socket or root of theirs is used, no test hook runs,
//! and what they name is refused or ignored, said in one line.
//!
//! The copies are made by the test in a temporary directory of its own;
//! they run as nobody through `setpriv`.

use crate::harness::*;
use gpufree::demo::holder::HoldSpec;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A copy of the gpufree binary, made privileged, in a directory of the
/// test's (root's, 0755). Other tests of a privileged copy use it too
/// (bundle.rs).
pub(crate) struct Privileged {
    _dir: tempfile::TempDir,
    exe: PathBuf,
}

impl Privileged {
    /// `how`: `setuid`, or the capabilities for `setcap` (`cap_kill+ep`).
    /// None (skipped off CI) without root or setcap.
    pub(crate) fn new(how: &str) -> Option<Privileged> {
        if !rustix::process::geteuid().is_root() {
            skip_off_ci("root", &"to make a privileged copy of gpufree");
            return None;
        }
        // A privileged copy takes no library of the test's: on a host with
        // NVIDIA's own, it would load it and open the machine's GPUs,
        // which tests never do.
        let installed = Command::new("ldconfig")
            .arg("-p")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libnvidia-ml.so.1"));
        if installed {
            eprintln!("skipped: NVIDIA's libnvidia-ml.so.1 is installed here");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = dir.path().join("gpufree");
        std::fs::copy(bin(), &exe).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        if how == "setuid" {
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o4755)).unwrap();
        } else {
            let made = Command::new("setcap")
                .arg(how)
                .arg(&exe)
                .status()
                .is_ok_and(|s| s.success());
            if !made {
                skip_off_ci("setcap (libcap2-bin)", &format!("setcap {how} failed"));
                return None;
            }
        }
        Some(Privileged { _dir: dir, exe })
    }

    /// Runs the copy as nobody with only `env` (and PATH): the /proc walk,
    /// so that no run here touches the machine's BPF cache.
    pub(crate) fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        run_cmd(
            Command::new("setpriv")
                .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
                .arg(&self.exe)
                .args(args)
                .env_clear()
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                .env("GPUFREE_SCAN", "procfs")
                .envs(env.iter().copied()),
        )
    }
}

/// A directory (and its files) of nobody's, as the caller's own.
fn nobodys(path: &Path) {
    std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
}

/// A root-only directory with a root-only file in it: what a privileged
/// gpufree must never write, append to or show to its caller.
fn root_only(d: &TestDir) -> (PathBuf, PathBuf) {
    let dir = d.tmp.path().join("root-only");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = dir.join("secret");
    std::fs::write(&file, "root's secret\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    (dir, file)
}

/// A copy with `cap_bpf,cap_perfmon,cap_sys_ptrace,cap_kill+ep`, run by
/// nobody with `GPUFREE_NVML_LIB` naming nobody's own library: the library
/// is never loaded (it would run with those capabilities); `--nvml-lib`
/// is refused (exit 2). The library here is the simulator: loaded, it
/// would show its GPU.
#[test]
fn a_setcap_copy_never_loads_the_callers_nvml_library() {
    let Some(copy) = Privileged::new("cap_bpf,cap_perfmon,cap_sys_ptrace,cap_kill+ep") else {
        return;
    };
    let d = TestDir::new(1);
    std::fs::set_permissions(d.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mine = d.tmp.path().join("nobodys-lib");
    std::fs::create_dir(&mine).unwrap();
    let lib = mine.join("libnvidia-ml.so.1");
    std::fs::copy(std::fs::canonicalize(sim_lib()).unwrap(), &lib).unwrap();
    nobodys(&mine);
    nobodys(&lib);
    let state = d.one_gpu(&[], 0);
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o644)).unwrap();
    let sim = [
        ("GPUFREE_NVML_LIB", lib.to_str().unwrap()),
        ("GPUFREE_SIM_STATE", state.to_str().unwrap()),
    ];
    let r = copy.run(&["status", "--json"], &sim);
    assert!(
        r.stderr
            .contains("GPUFREE_NVML_LIB ignored: gpufree runs with privileges its caller lacks"),
        "{}",
        r.stderr
    );
    // The simulated GPU's UUID (a real NVML on this host may show its own).
    assert!(
        !r.stdout.contains("GPU-aa00bb00") && !r.stderr.contains("GPU-aa00bb00"),
        "the caller's library was loaded: {}{}",
        r.stdout,
        r.stderr
    );
    let r = copy.run(&["status", "--nvml-lib", lib.to_str().unwrap()], &[]);
    r.assert_exit(2);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.starts_with("gpufree: --nvml-lib: refused"),
        "{}",
        r.stderr
    );
}

/// A setuid copy (or a sudo rule that passes arguments) run by nobody:
/// `sim exec` does not run the caller's command as root; a device
/// directory of the caller's whose `nvidia0` links to /dev/null does not
/// make root's holder of /dev/null a target; the check state, the metrics
/// file, the audit log and `doctor --unit` are refused, never written or
/// read; the test hooks and the holder mode never run.
#[test]
fn a_setuid_copy_takes_no_paths_from_its_caller() {
    let Some(copy) = Privileged::new("setuid") else {
        return;
    };
    let d = TestDir::new(1);
    std::fs::set_permissions(d.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (secret_dir, secret) = root_only(&d);
    let state = d.one_gpu(&[], 0);
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o644)).unwrap();

    // sim exec: refused, the command never runs.
    let r = copy.run(
        &[
            "sim",
            "exec",
            "--state",
            state.to_str().unwrap(),
            "--",
            "id",
            "-u",
        ],
        &[],
    );
    r.assert_exit(2);
    assert!(r.stdout.is_empty(), "the command ran: {}", r.stdout);
    assert!(
        r.stderr.starts_with("gpufree: sim: refused"),
        "{}",
        r.stderr
    );

    // The caller's device directory: nvidia0 is a link to /dev/null, which
    // a root process of the test holds.
    let dev = d.tmp.path().join("nobodys-dev");
    std::fs::create_dir(&dev).unwrap();
    std::os::unix::fs::symlink("/dev/null", dev.join("nvidia0")).unwrap();
    nobodys(&dev);
    let victim = hold(
        &["victim"],
        HoldSpec {
            fd: vec![PathBuf::from("/dev/null")],
            ..HoldSpec::default()
        },
    );
    // A dry run: the copy looks at this machine's own /dev and NVML
    // (it takes no path), where a real kill could reach processes the test
    // did not start. The plan must not name root's holder of /dev/null.
    let r = copy.run(
        &["kill", "--holders-only", "--gpu", "0", "--dry-run"],
        &[("GPUFREE_DEV_DIR", dev.to_str().unwrap())],
    );
    assert!(
        !r.stdout.contains(&victim.pid().to_string()),
        "root's holder of /dev/null was planned: {}",
        r.stdout
    );
    assert!(r.stderr.contains("GPUFREE_DEV_DIR ignored"), "{}", r.stderr);
    let r = copy.run(
        &[
            "kill",
            "--gpu",
            "0",
            "--dry-run",
            "--dev-dir",
            dev.to_str().unwrap(),
        ],
        &[],
    );
    r.assert_exit(2);
    assert!(alive(victim.pid()));

    // Files: none written, appended to or read.
    let check_state = secret_dir.join("check.json");
    let metrics = secret_dir.join("gpufree.prom");
    let refused: [(&[&str], &str); 7] = [
        (
            &["check", "--state", check_state.to_str().unwrap()],
            "--state",
        ),
        (
            &["metrics", "--output", metrics.to_str().unwrap()],
            "--output",
        ),
        (
            &[
                "kill",
                "--gpu",
                "0",
                "--dry-run",
                "--audit-log",
                secret.to_str().unwrap(),
            ],
            "--audit-log",
        ),
        (
            &["doctor", "--unit", secret.to_str().unwrap()],
            "doctor --unit",
        ),
        // A setuid serve would bind any port for its caller.
        (&["serve", "--listen", "127.0.0.1:81"], "serve"),
        // A setuid record would append to a file of its caller's choosing.
        (&["record", "--out", secret.to_str().unwrap()], "record"),
        // Nor connect anywhere for it.
        (&["fleet", "--prometheus", "http://127.0.0.1:9"], "fleet"),
    ];
    for (args, flag) in refused {
        let r = copy.run(args, &[]);
        r.assert_exit_with(2, format_args!("{args:?}: {}", r.stderr));
        assert!(
            r.stderr.starts_with(&format!("gpufree: {flag}: refused")),
            "{args:?}: {}",
            r.stderr
        );
        assert!(!r.stdout.contains("secret"), "{args:?}: {}", r.stdout);
    }
    // `--gpu 99` names no GPU: the check ends before it would keep its
    // state (in this machine's /run, the variable being ignored).
    let r = copy.run(
        &["check", "--gpu", "99"],
        &[("GPUFREE_CHECK_STATE", check_state.to_str().unwrap())],
    );
    assert!(
        r.stderr.contains("GPUFREE_CHECK_STATE ignored"),
        "{}",
        r.stderr
    );
    assert!(!check_state.exists() && !metrics.exists());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root's secret\n");

    // Test hooks and the holder mode: ignored, said; the command runs.
    let r = copy.run(
        &["status", "--json"],
        &[
            ("GPUFREE_TEST_PAUSE", "signal"),
            (gpufree::demo::holder::HOLDER_ENV, "{}"),
        ],
    );
    assert!(
        r.stderr.contains("GPUFREE_TEST_PAUSE ignored"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains(&format!("{} ignored", gpufree::demo::holder::HOLDER_ENV)),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("gpufree holder:"),
        "became a holder: {}",
        r.stderr
    );
}

/// Root told a path (by a script, a sudo rule with arguments) writes only
/// its own regular file, reached without links: a directory reached
/// through a symlink is refused, and so is another user's file there
/// (which that user could have pointed anywhere, or could edit after);
/// nothing is written. Nor does it load another user's library.
#[test]
fn root_given_a_path_writes_only_its_own_file_reached_without_links() {
    if !rustix::process::geteuid().is_root() {
        skip_off_ci("root", &"to give a file to another user");
        return;
    }
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let lib = sim_lib();
    let dir = d.tmp.path().join("out");
    std::fs::create_dir(&dir).unwrap();
    let link = d.tmp.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let theirs = dir.join("theirs.prom");
    std::fs::write(&theirs, "nobody's\n").unwrap();
    nobodys(&theirs);
    let metrics = |output: &Path| {
        Gpufree::new(["metrics"])
            .on(&d, &state)
            .args(["--output", output.to_str().unwrap()])
            .run()
    };
    let r = metrics(&link.join("gpufree.prom"));
    r.assert_exit(2);
    assert!(r.stderr.contains("a symlink is on the way"), "{}", r.stderr);
    assert!(!dir.join("gpufree.prom").exists());
    let r = metrics(&theirs);
    r.assert_exit(2);
    assert!(r.stderr.contains("another user's file"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "nobody's\n");
    // check's state: not written (said), the check still answers.
    let r = Gpufree::new(["check"])
        .on(&d, &state)
        .args(["--state", theirs.to_str().unwrap()])
        .run();
    r.assert_exit(0);
    assert!(r.stderr.contains("another user's file"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "nobody's\n");
    // A library of another user's: root never loads it.
    let theirs_lib = dir.join("libnvidia-ml.so.1");
    std::fs::copy(std::fs::canonicalize(lib).unwrap(), &theirs_lib).unwrap();
    nobodys(&theirs_lib);
    let r = Gpufree::new(["status"])
        .nvml_lib(&theirs_lib)
        .sim_state(&state)
        .run();
    r.assert_exit(2);
    assert!(r.stderr.starts_with("gpufree: --nvml-lib "), "{}", r.stderr);
    assert!(
        r.stderr.contains("root runs no code someone else chose"),
        "{}",
        r.stderr
    );
    // Its own file, reached without links: written.
    let r = metrics(&dir.join("gpufree.prom"));
    r.assert_exit(0);
    assert!(std::fs::read_to_string(dir.join("gpufree.prom"))
        .unwrap()
        .contains("gpufree_nvml_up 1"));
}
