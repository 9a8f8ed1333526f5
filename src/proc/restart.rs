//! What the host's files say about restarting a holder: a systemd unit's
//! `Restart=` (its unit file and drop-ins, read the way systemd layers
//! them), and a Kubernetes pod's namespace (the service-account file in
//! the container's own root) and name (its `HOSTNAME`).
//!
//! Every string comes from a file or a process someone else controls: unit
//! names and pod names are checked against the characters their systems
//! allow before any path or command is built from them.

use crate::model::UnitRestart;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where systemd looks for system units, in its order of precedence.
const UNIT_DIRS: &[&str] = &[
    "/etc/systemd/system.control",
    "/run/systemd/system.control",
    "/run/systemd/transient",
    "/run/systemd/generator.early",
    "/etc/systemd/system",
    "/etc/systemd/system.attached",
    "/run/systemd/system",
    "/run/systemd/system.attached",
    "/run/systemd/generator",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
    "/run/systemd/generator.late",
];

/// The values `Restart=` takes.
const RESTART_VALUES: &[&str] = &[
    "no",
    "always",
    "on-success",
    "on-failure",
    "on-abnormal",
    "on-abort",
    "on-watchdog",
];

/// The most of one unit file or drop-in that is read.
const FILE_MAX: u64 = 256 * 1024;

/// The unit directories: `GPUFREE_UNIT_PATH` (colon-separated, for tests
/// and unusual layouts) or systemd's own list.
pub fn unit_dirs() -> Vec<PathBuf> {
    match std::env::var_os("GPUFREE_UNIT_PATH") {
        Some(p) => std::env::split_paths(&p).collect(),
        None => UNIT_DIRS.iter().map(PathBuf::from).collect(),
    }
}

/// Whether `name` is a unit name systemd accepts (so no path can be made
/// of it): letters, digits and `:-_.\@`, with a known suffix.
pub fn is_unit_name(name: &str) -> bool {
    name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b":-_.\\@".contains(&b))
        && [".service", ".scope", ".socket", ".mount", ".slice"]
            .iter()
            .any(|s| name.ends_with(s))
}

/// A regular file's text, at most [`FILE_MAX`] bytes; never blocks on a
/// FIFO or a device.
fn read_file(path: &Path) -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    f.take(FILE_MAX).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The last `Restart=` and `RestartSec=` of a unit file's `[Service]`
/// section, applied over `into` (an empty value resets to the default).
fn apply(text: &str, into: &mut (Option<String>, Option<String>)) {
    let mut service = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            service = line == "[Service]";
            continue;
        }
        let Some((key, value)) = line.split_once('=').filter(|_| service) else {
            continue;
        };
        let value = value.trim();
        let slot = match key.trim() {
            // systemd ignores a value it does not know: so does this.
            "Restart" if value.is_empty() || RESTART_VALUES.contains(&value) => &mut into.0,
            "RestartSec" => &mut into.1,
            _ => continue,
        };
        *slot = (!value.is_empty()).then(|| value.chars().take(64).collect());
    }
}

/// `Restart=` of system unit `unit`, from its unit file in `dirs` (the
/// first that has it; a template instance falls back to its template) and
/// its drop-ins (`UNIT.d/*.conf` in every directory, in file-name order, a
/// name in an earlier directory hiding the same name in a later one).
/// None when the name is not a unit name or no directory has the unit.
pub fn unit_restart(dirs: &[PathBuf], unit: &str) -> Option<UnitRestart> {
    if !is_unit_name(unit) {
        return None;
    }
    let template = unit.split_once('@').and_then(|(head, rest)| {
        let suffix = rest.rsplit_once('.')?.1;
        Some(format!("{head}@.{suffix}"))
    });
    let names: Vec<&str> = std::iter::once(unit).chain(template.as_deref()).collect();
    let (main, text) = names.iter().find_map(|n| {
        dirs.iter().find_map(|d| {
            let p = d.join(n);
            read_file(&p).map(|t| (p, t))
        })
    })?;
    let mut values = (None, None);
    apply(&text, &mut values);
    let mut dropins: std::collections::BTreeMap<std::ffi::OsString, PathBuf> = Default::default();
    for n in names.iter().rev() {
        for d in dirs.iter().rev() {
            let Ok(entries) = std::fs::read_dir(d.join(format!("{n}.d"))) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().ends_with(".conf") {
                    dropins.insert(e.file_name(), e.path());
                }
            }
        }
    }
    let mut sources = vec![main.display().to_string()];
    for path in dropins.values() {
        if let Some(t) = read_file(path) {
            apply(&t, &mut values);
            sources.push(path.display().to_string());
        }
    }
    Some(UnitRestart {
        restart: values.0.unwrap_or_else(|| "no".into()),
        restart_sec: values.1,
        source: sources.join(", "),
    })
}

/// Whether `s` is a DNS-1123 label (a Kubernetes namespace).
pub fn is_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is a DNS-1123 subdomain (a Kubernetes object name).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The namespace of the pod that `pid` runs in, from the service-account
/// file in its own root, resolved inside that root (its symlinks cannot
/// lead out of it) and read only if it is a small regular file.
pub fn pod_namespace(proc_fd: impl AsFd, pid: u32) -> Option<String> {
    let root: OwnedFd = rustix::fs::openat(
        proc_fd,
        format!("{pid}/root"),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let fd = rustix::fs::openat2(
        &root,
        "var/run/secrets/kubernetes.io/serviceaccount/namespace",
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV,
    )
    .ok()?;
    let f = std::fs::File::from(fd);
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    f.take(256).read_to_string(&mut text).ok()?;
    let ns = text.trim();
    is_dns_label(ns).then(|| ns.to_string())
}

#[cfg(test)]
mod tests {
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
        // No unit, or a name that could be a path: nothing.
        assert!(unit_restart(&dirs, "none.service").is_none());
        assert!(unit_restart(&dirs, "../etc/passwd").is_none());
        assert!(unit_restart(&dirs, "a/b.service").is_none());
    }

    #[test]
    fn kubernetes_names_are_checked() {
        assert!(is_dns_label("default") && is_dns_label("kube-system"));
        assert!(!is_dns_label("-x") && !is_dns_label("A") && !is_dns_label("a b"));
        assert!(is_dns_subdomain("vllm-7d9c5b6f4-x2x9k") && is_dns_subdomain("a.b"));
        assert!(!is_dns_subdomain("a;rm -rf") && !is_dns_subdomain("$(id)"));
    }
}
