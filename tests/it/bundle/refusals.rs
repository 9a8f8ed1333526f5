//! What `gpufree bundle` refuses: an existing `--out`, a link, bad flags,
//! a terminal as stdout, a setuid copy's paths.

use crate::harness::*;

#[test]
fn bundle_refuses_an_existing_out_and_a_link_and_bad_flags() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let existing = d.tmp.path().join("there.tar.gz");
    std::fs::write(&existing, "mine").unwrap();
    let link = d.tmp.path().join("link.tar.gz");
    std::os::unix::fs::symlink(d.tmp.path().join("elsewhere"), &link).unwrap();
    for (out, word) in [(&existing, "already exists"), (&link, "is a symlink")] {
        let r = Gpufree::new(["bundle"])
            .arg("--out")
            .arg(out)
            .on(&d, &state)
            .run();
        r.assert_exit(2);
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.report());
        assert!(r.stderr.contains(word), "{}", r.report());
    }
    assert_eq!(std::fs::read(&existing).unwrap(), b"mine");
    assert!(!d.tmp.path().join("elsewhere").exists());
    let r = Gpufree::new(["bundle", "--no-such-flag"]).run();
    r.assert_exit(2);
    let r = Gpufree::new(["bundle"])
        .arg("--recording")
        .arg(d.tmp.path().join("none.jsonl"))
        .arg("--out")
        .arg(d.tmp.path().join("x.tar.gz"))
        .on(&d, &state)
        .run();
    r.assert_exit(2);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.report());
    assert!(!d.tmp.path().join("x.tar.gz").exists());
    // `--from` is no source of a bundle.
    Gpufree::new(["bundle"])
        .arg("--from")
        .arg(&existing)
        .run()
        .assert_exit(2);
}

/// `--out -` with stdout a terminal is a usage error (exit 2) refused
/// before anything is collected: the snapshot the test hook copies, which
/// the same bundle to a file writes, is never taken.
#[test]
fn bundle_to_stdout_on_a_terminal_is_refused_before_anything_is_collected() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let copy = d.tmp.path().join("copy.json");
    Gpufree::new(["bundle"])
        .arg("--out")
        .arg(d.tmp.path().join("b.tar.gz"))
        .on(&d, &state)
        .env("GPUFREE_TEST_SNAPSHOT_COPY", &copy)
        .run()
        .assert_exit(0);
    assert!(copy.exists(), "the hook copies a bundle's snapshot");
    std::fs::remove_file(&copy).unwrap();
    // It ends at once: the pause lets the pane be kept before it does.
    let cmd = format!(
        "sleep 1; env GPUFREE_TEST_SNAPSHOT_COPY={} GPUFREE_SIM_STATE={} {} bundle --out - --dev-dir {} --nvml-lib {}",
        copy.display(),
        state.display(),
        bin().display(),
        d.dev.display(),
        sim_lib().display()
    );
    let Some(t) = Tmux::start("bundle-tty", &cmd) else {
        return;
    };
    assert_eq!(t.wait_exit(), "2", "{}", t.screen());
    // Its whole output, the lines scrolled off the pane's top too.
    let all = t.cmd(&["capture-pane", "-p", "-S", "-"]).stdout;
    let all = String::from_utf8_lossy(&all);
    assert!(all.contains("stdout is a terminal"), "{all}");
    assert!(!copy.exists(), "nothing was collected");
}

/// A setuid copy of gpufree, run by nobody, writes no file for its
/// caller and reads none the caller names: a bundle only to stdin's
/// shell-opened stdout (`--out -`), without `--recording` or
/// `--audit-log`; refused in the configuration step (test hooks, such
/// as the snapshot's copy, never run in secure mode, so what was not
/// collected cannot be seen here).
#[test]
fn a_setuid_copy_bundles_only_to_stdout() {
    use std::os::unix::fs::PermissionsExt;
    let Some(p) = crate::privilege::Privileged::new("setuid") else {
        return;
    };
    // Where nobody could write, were it not refused.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = dir.path().join("b.tar.gz");
    let file = out.to_str().unwrap();
    for args in [
        &["bundle"][..],
        &["bundle", "--out", file][..],
        &["bundle", "--out", "-", "--recording", "/etc/shadow"][..],
        &["bundle", "--out", "-", "--audit-log", "/etc/shadow"][..],
    ] {
        let r = p.run(args, &[]);
        r.assert_exit(2);
        assert!(r.stdout.is_empty(), "{}", r.report());
        assert!(r.stderr.contains("refused"), "{}", r.report());
    }
    assert!(!out.exists());
}
