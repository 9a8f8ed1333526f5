//! Tests of `restart`.

use super::*;

#[test]
fn restart_is_layered_like_systemd() {
    let tmp = tempfile::tempdir().unwrap();
    let (etc, lib) = (tmp.path().join("etc"), tmp.path().join("lib"));
    for d in [&etc, &lib] {
        std::fs::create_dir(d).unwrap();
    }
    let dirs = vec![etc.clone(), lib.clone()];
    std::fs::write(
        lib.join("vllm.service"),
        "[Unit]\nRestart=always\n[Service]\nExecStart=/bin/x\nRestart=on-failure\n",
    )
    .unwrap();
    let r = unit_restart(&dirs, "vllm.service").unwrap();
    assert_eq!(r.restart, "on-failure", "[Unit] lines do not count");
    // A drop-in overrides; the same name in /etc hides /lib's.
    for d in [&etc, &lib] {
        std::fs::create_dir(d.join("vllm.service.d")).unwrap();
    }
    std::fs::write(
        lib.join("vllm.service.d/50-x.conf"),
        "[Service]\nRestart=no\n",
    )
    .unwrap();
    std::fs::write(
        etc.join("vllm.service.d/50-x.conf"),
        "[Service]\nRestart=always\nRestartSec=5\n",
    )
    .unwrap();
    let r = unit_restart(&dirs, "vllm.service").unwrap();
    assert_eq!(
        (r.restart.as_str(), r.restart_sec.as_deref()),
        ("always", Some("5"))
    );
    // An empty assignment resets.
    std::fs::write(
        lib.join("vllm.service.d/60-y.conf"),
        "[Service]\nRestart=\n",
    )
    .unwrap();
    assert_eq!(unit_restart(&dirs, "vllm.service").unwrap().restart, "no");
    // A value systemd does not know is ignored, as systemd does.
    std::fs::write(
        lib.join("vllm.service.d/70-z.conf"),
        "[Service]\nRestart=sometimes\n",
    )
    .unwrap();
    assert_eq!(unit_restart(&dirs, "vllm.service").unwrap().restart, "no");
    // Template instances fall back to the template.
    std::fs::write(lib.join("w@.service"), "[Service]\nRestart=always\n").unwrap();
    assert_eq!(
        unit_restart(&dirs, "w@3.service").unwrap().restart,
        "always"
    );
    // A drop-in that cannot be read (here a FIFO) is named, not skipped.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        lib.join("vllm.service.d/80-fifo.conf"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    // Bytes that are no UTF-8 do not hide the file.
    std::fs::write(
        etc.join("vllm.service.d/90-latin1.conf"),
        b"[Unit]\nDescription=Caf\xe9\n[Service]\nRestart=on-abort\n",
    )
    .unwrap();
    let r = unit_restart(&dirs, "vllm.service").unwrap();
    assert_eq!(r.restart, "on-abort");
    assert_eq!(r.unreadable.len(), 1, "{r:?}");
    assert!(r.unreadable[0]
        .to_string()
        .ends_with("80-fifo.conf: not a regular file"));
    // No unit, or a name that could be a path: nothing.
    assert!(unit_restart(&dirs, "none.service").is_none());
    assert!(unit_restart(&dirs, "../etc/passwd").is_none());
    assert!(unit_restart(&dirs, "a/b.service").is_none());
}

#[test]
fn pods_are_named_by_the_kubelets_log_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let uid = "1234abcd-5678-90ab-cdef-1234567890ab";
    for d in [
        format!("ml_vllm-7d9c5b6f4-x2x9k_{uid}"),
        "ml_other_ffffffff-5678-90ab-cdef-1234567890ab".to_string(),
        "Bad_NS_0000".to_string(),
    ] {
        std::fs::create_dir(tmp.path().join(d)).unwrap();
    }
    let names = pod_names(tmp.path(), &[uid].into_iter().collect());
    assert_eq!(names.len(), 1);
    assert_eq!(
        (names[uid].namespace.as_str(), names[uid].name.as_str()),
        ("ml", "vllm-7d9c5b6f4-x2x9k")
    );
    assert!(pod_names(&tmp.path().join("none"), &[uid].into_iter().collect()).is_empty());
}

#[test]
fn kubernetes_names_are_checked() {
    assert!(is_dns_label("default") && is_dns_label("kube-system"));
    assert!(!is_dns_label("-x") && !is_dns_label("A") && !is_dns_label("a b"));
    assert!(is_dns_subdomain("vllm-7d9c5b6f4-x2x9k") && is_dns_subdomain("a.b"));
    assert!(!is_dns_subdomain("a;rm -rf") && !is_dns_subdomain("$(id)"));
}
