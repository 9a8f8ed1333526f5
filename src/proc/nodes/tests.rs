use super::*;
use std::os::unix::fs::symlink;

/// A kernel's table as on an NVIDIA host (from a real `/proc/devices`).
const DEVICES: &[u8] = b"Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
 10 misc
195 nvidia-frontend
226 drm
234 kfd
235 nvidia-caps
508 nvidia-uvm

Block devices:
  7 loop
195 not-a-char-device
259 blkext
";

fn table() -> Majors {
    Majors::from_table(parse_devices(DEVICES).unwrap())
}

#[test]
fn classifies_gpu_nodes_and_nothing_else() {
    assert_eq!(classify("nvidia0"), Some(NodeKind::NvidiaGpu(0)));
    assert_eq!(classify("nvidia15"), Some(NodeKind::NvidiaGpu(15)));
    assert_eq!(classify("nvidiactl"), Some(NodeKind::NvidiaShared));
    assert_eq!(classify("nvidia-uvm-tools"), Some(NodeKind::NvidiaShared));
    assert_eq!(
        classify("nvidia-caps/nvidia-cap1"),
        Some(NodeKind::NvidiaCap)
    );
    assert_eq!(classify("dri/card1"), Some(NodeKind::DriCard));
    assert_eq!(classify("dri/renderD128"), Some(NodeKind::DriRender));
    assert_eq!(classify("kfd"), Some(NodeKind::Kfd));
    for no in [
        "nvidia",
        "nvidiax",
        "nvidia-smi",
        "null",
        "dri/by-path",
        "dri/card",
        "sda1",
    ] {
        assert_eq!(classify(no), None, "{no}");
    }
}

#[test]
fn discovers_plain_files_in_a_test_device_directory() {
    let dir = tempfile::tempdir().unwrap();
    for n in ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"] {
        std::fs::write(dir.path().join(n), b"x").unwrap();
    }
    std::fs::create_dir(dir.path().join("dri")).unwrap();
    std::fs::write(dir.path().join("dri/renderD128"), b"x").unwrap();
    let set = NodeSet::discover(dir.path(), &table()).unwrap();
    let rels: Vec<&str> = set.nodes.iter().map(|n| n.rel.as_str()).collect();
    assert_eq!(
        rels,
        [
            "dri/renderD128",
            "nvidia-uvm",
            "nvidia0",
            "nvidia1",
            "nvidiactl"
        ]
    );
    let n0 = &set.nodes[2];
    assert_eq!(set.match_stat(n0.dev, n0.ino, None), Some(2));
    assert_eq!(set.match_stat(n0.dev, n0.ino + 100_000, None), None);
}

#[test]
fn missing_device_directory_is_an_error_naming_it() {
    let e = NodeSet::discover(Path::new("/nonexistent/gpufree-dev"), &table()).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/gpufree-dev"), "{e}");
}

#[test]
fn parses_the_character_devices_and_ignores_the_block_ones() {
    let t = parse_devices(DEVICES).unwrap();
    assert_eq!(t.len(), 9);
    assert_eq!(t[0], (1, "mem".to_string()));
    assert_eq!(t[1], (4, "/dev/vc/0".to_string()));
    assert_eq!(t[4], (195, "nvidia-frontend".to_string()));
    assert_eq!(t[8], (508, "nvidia-uvm".to_string()));
    assert!(!t.iter().any(|(m, n)| *m == 7 || n == "not-a-char-device"));
}

#[test]
fn a_name_is_everything_after_the_first_space_any_bytes_but_newline() {
    let t = parse_devices(b"Character devices:\n240 my driver  x\n241 caf\xe9\xff\n 12  lead\n")
        .unwrap();
    assert_eq!(
        t,
        [
            (240, "my driver  x".to_string()),
            (241, "caf\u{fffd}\u{fffd}".to_string()),
            (12, " lead".to_string()),
        ]
    );
}

#[test]
fn malformed_lines_are_skipped_and_a_cut_table_keeps_its_whole_lines() {
    let t = parse_devices(
        b"Character devices:\nabc foo\n12\n-1 x\n99999999999 big\n7 \n195 nvidia-frontend\n510 nvidia-u",
    )
    .unwrap();
    // The last line has no newline: its name may be cut ("nvidia-u").
    assert_eq!(t, [(195, "nvidia-frontend".to_string())]);
    // Cut before the heading, or no heading at all: no table.
    assert_eq!(
        parse_devices(b"Character dev"),
        Err(DevicesError::NoCharacterSection)
    );
    assert_eq!(parse_devices(b""), Err(DevicesError::NoCharacterSection));
    assert_eq!(
        parse_devices(b"Block devices:\n  7 loop\n"),
        Err(DevicesError::NoCharacterSection)
    );
    // Only the heading: a table with nothing registered.
    assert_eq!(parse_devices(b"Character devices:\n"), Ok(vec![]));
}

#[test]
fn each_node_name_has_its_driver() {
    let d = |rel: &str| classify(rel).unwrap().driver(rel);
    for (rel, want) in [
        ("nvidia0", Driver::NvidiaFrontend),
        ("nvidiactl", Driver::NvidiaFrontend),
        ("nvidia-modeset", Driver::NvidiaFrontend),
        ("nvidia-uvm", Driver::NvidiaUvm),
        ("nvidia-uvm-tools", Driver::NvidiaUvm),
        ("nvidia-caps/nvidia-cap1", Driver::NvidiaCaps),
        ("dri/card0", Driver::Drm),
        ("dri/renderD128", Driver::Drm),
        ("kfd", Driver::Kfd),
    ] {
        assert_eq!(d(rel), want, "{rel}");
    }
}

#[test]
fn a_character_device_is_its_drivers_only_with_the_registered_major() {
    let mk = rustix::fs::makedev;
    let t = table();
    assert_eq!(t.check(Driver::NvidiaFrontend, mk(195, 0)), Ok(()));
    assert_eq!(t.check(Driver::NvidiaUvm, mk(508, 1)), Ok(()));
    assert_eq!(t.check(Driver::NvidiaCaps, mk(235, 1)), Ok(()));
    assert_eq!(t.check(Driver::Drm, mk(226, 128)), Ok(()));
    assert_eq!(t.check(Driver::Kfd, mk(234, 0)), Ok(()));
    assert_eq!(
        t.check(Driver::NvidiaFrontend, mk(1, 3))
            .unwrap_err()
            .to_string(),
        "a character device of major 1 (mem), not the nvidia-frontend driver's 195"
    );
    assert_eq!(
        t.check(Driver::NvidiaUvm, mk(195, 0))
            .unwrap_err()
            .to_string(),
        "a character device of major 195 (nvidia-frontend), not the nvidia-uvm driver's 508"
    );
    assert_eq!(
        t.check(Driver::Kfd, mk(77, 0)).unwrap_err().to_string(),
        "a character device of major 77, not the kfd driver's 234"
    );
    // A driver that registers as `nvidia`; a table without a driver.
    let alias = Majors::from_table(vec![(195, "nvidia".into())]);
    assert_eq!(alias.check(Driver::NvidiaFrontend, mk(195, 255)), Ok(()));
    assert_eq!(
        alias
            .check(Driver::Drm, mk(226, 0))
            .unwrap_err()
            .to_string(),
        "a character device of major 226, and the kernel registered no drm driver"
    );
}

#[test]
fn without_the_table_only_the_fixed_majors_are_known() {
    let mk = rustix::fs::makedev;
    let mut t = Majors::unknown(crate::model::MajorsUnread::Unread {
        path: "proc/devices".into(),
        error: "ENOENT".into(),
    });
    assert_eq!(t.check(Driver::NvidiaFrontend, mk(195, 0)), Ok(()));
    assert_eq!(t.check(Driver::Drm, mk(226, 1)), Ok(()));
    assert_eq!(
        t.check(Driver::NvidiaUvm, mk(508, 0)).unwrap_err().to_string(),
        "a character device of major 508, and the nvidia-uvm driver's major is not known: proc/devices could not be read: ENOENT"
    );
    assert_eq!(
        t.check(Driver::NvidiaFrontend, mk(1, 3))
            .unwrap_err()
            .to_string(),
        "a character device of major 1, not the nvidia-frontend driver's 195"
    );
    // A registration added (the tests' GPUFREE_TEST_GPU_MAJORS) counts.
    t.register(1, "nvidia-frontend");
    assert_eq!(t.check(Driver::NvidiaFrontend, mk(1, 3)), Ok(()));
}

/// The names and reasons of what `dir` refused.
fn refused(set: &NodeSet) -> Vec<(&str, String)> {
    set.refused
        .iter()
        .map(|r| (r.rel.as_str(), r.why.to_string()))
        .collect()
}

#[test]
fn a_link_to_anything_but_a_gpu_character_device_is_refused_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join("nvidia0"), b"x").unwrap();
    std::fs::write(p.join("elsewhere"), b"x").unwrap();
    symlink(p.join("elsewhere"), p.join("nvidia1")).unwrap();
    symlink("/dev/null", p.join("nvidia2")).unwrap();
    symlink(p, p.join("nvidia3")).unwrap();
    symlink(p.join("nowhere"), p.join("nvidiactl")).unwrap();
    std::fs::create_dir(p.join("kfd")).unwrap();
    let set = NodeSet::discover(p, &table()).unwrap();
    let rels: Vec<&str> = set.nodes.iter().map(|n| n.rel.as_str()).collect();
    assert_eq!(rels, ["nvidia0"], "only the plain file is a node");
    let elsewhere = p.join("elsewhere").display().to_string();
    let refused = refused(&set);
    assert_eq!(
        refused[0],
        ("kfd", "a directory, not a character device".to_string())
    );
    assert_eq!(
        refused[1],
        (
            "nvidia1",
            format!(
                "a link to {elsewhere}, a regular file (a link is followed only to the nvidia-frontend driver's character device)"
            )
        )
    );
    assert_eq!(
        refused[2],
        (
            "nvidia2",
            "a link to /dev/null, a character device of major 1 (mem), not the nvidia-frontend driver's 195"
                .to_string()
        )
    );
    assert!(refused[3].0 == "nvidia3" && refused[3].1.contains(", a directory (a link"));
    assert!(
        refused[4].0 == "nvidiactl" && refused[4].1.contains("which cannot be followed"),
        "{:?}",
        refused[4]
    );
    assert_eq!(refused.len(), 5);
    // Nothing refused is matched: /dev/null's identity and number match nothing.
    let null = std::fs::metadata("/dev/null").unwrap();
    assert_eq!(
        set.match_stat(null.dev(), null.ino(), Some(null.rdev())),
        None
    );
}

#[test]
fn a_link_to_the_drivers_character_device_is_that_device() {
    let dir = tempfile::tempdir().unwrap();
    symlink("/dev/null", dir.path().join("nvidia0")).unwrap();
    // /dev/null's major registered as the frontend's, as the tests do.
    let mut majors = table();
    majors.register(1, "nvidia-frontend");
    let set = NodeSet::discover(dir.path(), &majors).unwrap();
    assert!(set.refused.is_empty(), "{:?}", set.refused);
    let null = std::fs::metadata("/dev/null").unwrap();
    let n = &set.nodes[0];
    assert_eq!((n.rel.as_str(), n.rdev), ("nvidia0", Some(null.rdev())));
    assert_eq!(
        (n.dev, n.ino),
        (null.dev(), null.ino()),
        "the target's identity"
    );
    assert_eq!(set.match_stat(1, 2, Some(null.rdev())), Some(0));
}

#[test]
fn a_character_node_of_another_driver_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("nvidia0");
    let made = rustix::fs::mknodat(
        rustix::fs::CWD,
        &node,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 3),
    );
    if let Err(e) = made {
        eprintln!("skipped: mknod: {e}");
        return;
    }
    let set = NodeSet::discover(dir.path(), &table()).unwrap();
    assert!(set.nodes.is_empty());
    assert_eq!(
        refused(&set),
        [(
            "nvidia0",
            "a character device of major 1 (mem), not the nvidia-frontend driver's 195".to_string()
        )]
    );
    let mut majors = table();
    majors.register(1, "nvidia-frontend");
    let set = NodeSet::discover(dir.path(), &majors).unwrap();
    assert_eq!(set.nodes.len(), 1);
    assert_eq!(set.nodes[0].rdev, Some(rustix::fs::makedev(1, 3)));
}

#[test]
fn the_table_is_read_under_the_proc_root_and_a_fifo_there_is_no_table() {
    let root = tempfile::tempdir().unwrap();
    let open = |p: &Path| {
        rustix::fs::open(
            p,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap()
    };
    let fd = open(root.path());
    let missing = Majors::read(&fd, root.path());
    assert_eq!(
        missing.of(Driver::NvidiaFrontend),
        [195],
        "fixed majors only"
    );
    assert_eq!(missing.of(Driver::NvidiaUvm), Vec::<u32>::new());
    std::fs::write(root.path().join("devices"), DEVICES).unwrap();
    let read = Majors::read(&fd, root.path());
    assert_eq!(read.of(Driver::NvidiaUvm), [508]);
    std::fs::remove_file(root.path().join("devices")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.path().join("devices"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let fifo = Majors::read(&fd, root.path());
    assert_eq!(fifo.of(Driver::Drm), [226], "no table, not a hang");
    let _ = fifo
        .check(Driver::Kfd, rustix::fs::makedev(234, 0))
        .map(|()| {
            panic!("kfd's major is not known without a table");
        });
}
