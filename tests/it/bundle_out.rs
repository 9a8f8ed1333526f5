//! `bundle --out` (attack38 finding 5, style38 finding 18): a directory
//! another user owns, or one others may write without the sticky bit, is
//! refused with `record --out`'s rule and words, and a link at `--out` is
//! called a link.

use crate::harness::*;
use std::os::unix::fs::PermissionsExt;

#[test]
fn bundle_out_refuses_a_directory_of_another_user_or_one_others_may_write() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let open = d.tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut dirs = vec![open.clone()];
    if rustix::process::geteuid().is_root() {
        let theirs = d.tmp.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        dirs.push(theirs);
    }
    for dir in &dirs {
        let out = dir.join("b.tar.gz");
        let r = Gpufree::new(["bundle"])
            .arg("--out")
            .arg(&out)
            .on(&d, &state)
            .run();
        r.assert_exit(2);
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.report());
        assert!(
            r.stderr
                .contains("its directory is another user's, or others may write it"),
            "{}",
            r.report()
        );
        assert!(!out.exists(), "{}", out.display());
    }
    // Sticky, as /tmp: taken.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let r = Gpufree::new(["bundle", "-q"])
        .arg("--out")
        .arg(open.join("b.tar.gz"))
        .on(&d, &state)
        .run();
    r.assert_exit(0);
    assert!(open.join("b.tar.gz").is_file());
}

#[test]
fn bundle_out_calls_a_link_a_link_not_an_existing_file() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let link = d.tmp.path().join("link.tar.gz");
    std::os::unix::fs::symlink(d.tmp.path().join("elsewhere"), &link).unwrap();
    let r = Gpufree::new(["bundle"])
        .arg("--out")
        .arg(&link)
        .on(&d, &state)
        .run();
    r.assert_exit(2);
    assert!(r.stderr.contains("is a symlink"), "{}", r.report());
    assert!(!r.stderr.contains("already exists"), "{}", r.report());
    assert!(!d.tmp.path().join("elsewhere").exists());
}
