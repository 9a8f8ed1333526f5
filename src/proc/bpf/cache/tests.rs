//! The cache's file format and its trust rules.

use super::*;

fn sample() -> Relocated {
    Relocated {
        object: b"relocated instructions".to_vec(),
        attach_btf_id: 4242,
        by: Maker::Command,
    }
}

#[test]
fn who_made_it_is_read_back_and_a_file_of_the_format_before_is_not_used() {
    let boot = [b'a'; 36];
    let by_prepare = Relocated {
        by: Maker::Prepare,
        ..sample()
    };
    let bytes = encode(b"object", &boot, &by_prepare);
    assert_eq!(decode(&bytes, b"object", &boot), Ok(by_prepare));
    // v1: no maker byte, sealed all the same.
    let mut old = bytes.clone();
    old.truncate(old.len() - 32);
    old[..MAGIC.len()].copy_from_slice(b"gpufree holders-bpf v1\n\0");
    old.remove(HEADER + 4);
    old.extend_from_slice(&Sha256::digest(&old));
    assert_eq!(
        decode(&old, b"object", &boot),
        Err(CacheRefusal::OtherMaker)
    );
    // A maker this gpufree does not know, sealed: not used.
    let mut unknown = bytes;
    unknown.truncate(unknown.len() - 32);
    unknown[HEADER + 4] = 9;
    unknown.extend_from_slice(&Sha256::digest(&unknown));
    assert_eq!(
        decode(&unknown, b"object", &boot),
        Err(CacheRefusal::Damaged)
    );
}

#[test]
fn a_file_is_read_back_only_for_its_object_and_boot() {
    let boot = [b'a'; 36];
    let bytes = encode(b"object", &boot, &sample());
    assert_eq!(decode(&bytes, b"object", &boot), Ok(sample()));
    assert!(decode(&bytes, b"another object", &boot).is_err());
    assert!(decode(&bytes, b"object", &[b'b'; 36]).is_err());
    for cut in [0, 1, 32, bytes.len() - 1] {
        assert!(
            decode(&bytes[..cut], b"object", &boot).is_err(),
            "cut at {cut}"
        );
    }
    for at in [0, 30, 60, 100, bytes.len() - 40, bytes.len() - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 1;
        assert!(
            decode(&bad, b"object", &boot).is_err(),
            "a bit flipped at {at}"
        );
    }
}

#[test]
fn only_a_directory_and_file_of_roots_are_trusted() {
    use std::os::unix::fs::{chown, PermissionsExt};
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: only root keeps the cache");
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("cache");
    write(&dir, b"object", &sample()).unwrap();
    assert_eq!(read(&dir, b"object"), Ok(sample()), "written and read back");
    assert!(kept(&dir, b"object") && !kept(&dir, b"other"));
    assert!(read(&dir, b"other").unwrap_err().is_some());
    let file = dir.join(FILE);
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, PermissionsExt::from_mode(m));
    let refused = |why: &str| {
        assert!(read(&dir, b"object").unwrap_err().is_some(), "{why}");
        assert!(!kept(&dir, b"object"), "{why}");
    };
    mode(&file, 0o622).unwrap();
    refused("a file others may write");
    mode(&file, 0o644).unwrap();
    chown(&file, Some(65534), None).unwrap();
    refused("a file of another user's");
    chown(&file, Some(0), None).unwrap();
    mode(&dir, 0o777).unwrap();
    refused("a directory others may write");
    mode(&dir, 0o755).unwrap();
    chown(&dir, Some(65534), None).unwrap();
    refused("a directory of another user's");
    chown(&dir, Some(0), None).unwrap();
    let link = base.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    for through in ["", "/", "/."] {
        let link = PathBuf::from(format!("{}{through}", link.display()));
        let why = read(&link, b"object").unwrap_err();
        assert!(
            why.is_some(),
            "a directory through a link, as {}",
            link.display()
        );
    }
    let why = read(Path::new("cache"), b"object").unwrap_err().unwrap();
    assert!(matches!(why, CacheRefusal::NotAbsolute { .. }), "{why:?}");
    let why = read(&dir.join("../cache"), b"object").unwrap_err().unwrap();
    assert!(matches!(why, CacheRefusal::ThroughParent { .. }), "{why:?}");
    // A link on the way, not only at the end.
    let inner = base.path().join("link/inner");
    let why = read(&inner, b"object").unwrap_err().unwrap();
    assert!(matches!(why, CacheRefusal::LinkOrNotDir { .. }), "{why:?}");
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(base.path().join("elsewhere"), &file).unwrap();
    refused("a link in the file's place");
    std::fs::remove_file(&file).unwrap();
    assert_eq!(read(&dir, b"object"), Err(None), "none kept");
}
