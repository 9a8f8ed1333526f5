//! Tests of `dirs`: links, directories others may write, sticky
//! directories and other users' directories on the way are refused.

use super::*;
use std::os::unix::fs::{symlink, PermissionsExt};

fn me() -> u32 {
    rustix::process::getuid().as_raw()
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A temporary directory of this user's, 0700: in /tmp (sticky, anyone
/// may write) the only kind the paths below may pass through.
fn private_tmp() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o700);
    tmp
}

#[test]
fn a_link_on_the_way_is_refused_and_nothing_is_made_through_it() {
    let tmp = private_tmp();
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    symlink(&real, tmp.path().join("link")).unwrap();
    let e = open(&tmp.path().join("link/gpufree"), me(), 0o700, true)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("link: a link"), "{e}");
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
    // The last component a link: refused too.
    let e = open(&tmp.path().join("link"), me(), 0o700, true)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("a link"), "{e}");
    let t = open(&real.join("gpufree"), me(), 0o700, true).unwrap();
    assert_eq!(t.path, real.join("gpufree"));
    let st = rustix::fs::fstat(&t.fd).unwrap();
    assert_eq!(st.st_mode & 0o777 & !0o022, 0o700 & !0o022);
    assert!(
        open(&real.join("../real/x"), me(), 0o700, true).is_err(),
        ".."
    );
    assert!(open(Path::new("relative/x"), me(), 0o700, true).is_err());
}

#[test]
fn a_directory_others_may_write_is_refused_unless_sticky_above_a_private_one() {
    let tmp = private_tmp();
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o777);
    let e = open(&shared.join("gpufree"), me(), 0o700, true)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("others may write it"), "{e}");
    assert!(!shared.join("gpufree").exists());
    // A sticky directory like /tmp: into this user's own 0700 directory only.
    let sticky = tmp.path().join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    chmod(&sticky, 0o1777);
    let t = open(&sticky.join("mine/deeper"), me(), 0o755, true).unwrap();
    assert_eq!(t.path, sticky.join("mine/deeper"));
    let mine = std::fs::metadata(sticky.join("mine")).unwrap();
    assert_eq!(mine.permissions().mode() & 0o777, 0o700, "made private");
    let open_one = sticky.join("open");
    std::fs::create_dir(&open_one).unwrap();
    chmod(&open_one, 0o755);
    let e = open(&open_one.join("gpufree"), me(), 0o700, true)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("0700"), "{e}");
    assert!(
        open(&sticky, me(), 0o700, true).is_err(),
        "not private itself"
    );
}

/// Root given another user's directory (`sudo -E` passes the user's
/// `XDG_CACHE_HOME`): refused, even where root could write in it.
#[test]
fn root_refuses_a_directory_of_another_user_on_the_way() {
    if !rustix::process::getuid().is_root() {
        eprintln!("skipped: needs root to give a directory to another user");
        return;
    }
    let tmp = private_tmp();
    let theirs = tmp.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let e = open(&theirs.join("cache/gpufree"), 0, 0o700, true)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("neither root's nor this user's"), "{e}");
    assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
    let fallback = tmp.path().join("root");
    let t = first([theirs.join("x"), fallback.clone()], 0, 0o700, true).unwrap();
    assert_eq!(t.path, fallback);
    let why = first([theirs.join("x"), theirs.join("y")], 0, 0o700, true)
        .err()
        .unwrap();
    assert_eq!(why.len(), 2, "{why:?}");
}
