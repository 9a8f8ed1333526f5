//! Quiescence before the signal: the targets must neither exec nor fork
//! while they are checked and signalled.
//!
//! Where every process of a cgroup is a target, the cgroup is frozen (v2
//! `cgroup.freeze`, else the v1 freezer's `freezer.state`): atomic for the
//! whole group and invisible to the targets' parents. Every other target is
//! stopped with SIGSTOP (which its parent may see as a stop). Thawing and
//! continuing are the caller's last step: [`Quiesced::release`].

use super::identity::Target;
use crate::proc::scan::read_at;
use rustix::process::Signal;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A cgroup's freezer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Freezer {
    /// cgroup v2: the cgroup's directory (`cgroup.freeze`, `cgroup.events`).
    V2(PathBuf),
    /// cgroup v1 freezer: the cgroup's directory (`freezer.state`).
    V1(PathBuf),
}

impl Freezer {
    fn freeze(&self) -> bool {
        let (file, value) = match self {
            Freezer::V2(d) => (d.join("cgroup.freeze"), "1"),
            Freezer::V1(d) => (d.join("freezer.state"), "FROZEN"),
        };
        if std::fs::write(file, value).is_err() {
            return false;
        }
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            if self.frozen() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.thaw(); // did not settle: fall back to SIGSTOP
        false
    }

    fn frozen(&self) -> bool {
        match self {
            Freezer::V2(d) => std::fs::read_to_string(d.join("cgroup.events"))
                .is_ok_and(|e| e.lines().any(|l| l.trim() == "frozen 1")),
            Freezer::V1(d) => {
                std::fs::read_to_string(d.join("freezer.state")).is_ok_and(|s| s.trim() == "FROZEN")
            }
        }
    }

    fn thaw(&self) {
        let _ = match self {
            Freezer::V2(d) => std::fs::write(d.join("cgroup.freeze"), "0"),
            Freezer::V1(d) => std::fs::write(d.join("freezer.state"), "THAWED"),
        };
    }

    fn procs(&self) -> Option<BTreeSet<u32>> {
        let dir = match self {
            Freezer::V2(d) | Freezer::V1(d) => d,
        };
        let text = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
        Some(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// Where it is, for the report.
    fn describe(&self) -> String {
        match self {
            Freezer::V2(d) => format!("cgroup v2 {}", d.display()),
            Freezer::V1(d) => format!("cgroup v1 freezer {}", d.display()),
        }
    }
}

/// Where the cgroup hierarchies are mounted: (v2 mount, v1 freezer mount),
/// each with the cgroup path its root shows.
#[derive(Debug, Default)]
struct Mounts {
    v2: Option<(PathBuf, String)>,
    freezer: Option<(PathBuf, String)>,
}

fn mounts() -> Mounts {
    let mut m = Mounts::default();
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return m;
    };
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let f: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(point), Some(fstype)) = (f.get(3), f.get(4), r.first()) else {
            continue;
        };
        let found = Some((PathBuf::from(point), root.to_string()));
        match *fstype {
            "cgroup2" if m.v2.is_none() => m.v2 = found,
            "cgroup"
                if m.freezer.is_none()
                    && r.get(2)
                        .is_some_and(|o| o.split(',').any(|c| c == "freezer")) =>
            {
                m.freezer = found
            }
            _ => {}
        }
    }
    m
}

/// The directory of cgroup `path` in a hierarchy mounted at `point` whose
/// root shows `root`; None for the root cgroup itself (never frozen).
fn dir_of(point: &Path, root: &str, path: &str) -> Option<PathBuf> {
    let rel = path.strip_prefix(root.trim_end_matches('/'))?;
    let rel = rel.trim_start_matches('/');
    (!rel.is_empty()).then(|| point.join(rel))
}

/// The freezer of a target's cgroup, from its /proc/PID/cgroup.
fn freezer_of(t: &Target, m: &Mounts) -> Option<Freezer> {
    let raw = read_at(t.dir(), "cgroup").ok()?;
    let text = String::from_utf8_lossy(&raw);
    let mut v1 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            if let Some((point, root)) = &m.v2 {
                if let Some(d) = dir_of(point, root, path) {
                    if d.join("cgroup.freeze").exists() {
                        return Some(Freezer::V2(d));
                    }
                }
            }
        } else if controllers.split(',').any(|c| c == "freezer") {
            if let Some((point, root)) = &m.freezer {
                v1 = dir_of(point, root, path).map(Freezer::V1);
            }
        }
    }
    v1
}

/// Targets held still, and how.
#[derive(Debug, Default)]
pub struct Quiesced {
    frozen: Vec<Freezer>,
    /// Per target: gpufree stopped it with SIGSTOP.
    stopped: Vec<bool>,
}

impl Quiesced {
    /// Whether gpufree stopped target `i` with SIGSTOP (so it must be
    /// continued if it is not signalled).
    pub fn stopped(&self, i: usize) -> bool {
        self.stopped.get(i).copied().unwrap_or(false)
    }

    /// The cgroups frozen, in words.
    pub fn frozen(&self) -> Vec<String> {
        self.frozen.iter().map(Freezer::describe).collect()
    }

    /// Thaws the frozen cgroups (what was stopped is continued by the
    /// caller, which knows what it signalled).
    pub fn release(self) {
        for f in &self.frozen {
            f.thaw();
        }
    }
}

/// Stops `t` (unless it was stopped already) and waits briefly for the stop
/// to take effect; returns whether gpufree stopped it.
fn stop(t: &Target) -> bool {
    if matches!(t.state(), 'T' | 't' | 'Z' | '?') {
        return false;
    }
    if t.signal(Signal::STOP).is_err() {
        return false;
    }
    let until = Instant::now() + Duration::from_millis(100);
    while Instant::now() < until && !matches!(t.state(), 'T' | 't' | 'Z' | '?') {
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Freezes every cgroup whose processes are all targets; stops the rest.
pub fn quiesce(targets: &[Target]) -> Quiesced {
    let m = mounts();
    let mut groups: BTreeMap<Freezer, Vec<usize>> = BTreeMap::new();
    for (i, t) in targets.iter().enumerate() {
        if let Some(f) = freezer_of(t, &m) {
            groups.entry(f).or_default().push(i);
        }
    }
    let pids: BTreeSet<u32> = targets.iter().map(|t| t.pid).collect();
    let mut held = vec![false; targets.len()];
    let mut q = Quiesced::default();
    for (f, members) in groups {
        let only_targets = f
            .procs()
            .is_some_and(|procs| !procs.is_empty() && procs.is_subset(&pids));
        if only_targets && f.freeze() {
            for i in members {
                held[i] = true;
            }
            q.frozen.push(f);
        }
    }
    q.stopped = targets
        .iter()
        .zip(&held)
        .map(|(t, &frozen)| !frozen && stop(t))
        .collect();
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_directories_under_their_mount() {
        let p = Path::new("/sys/fs/cgroup/unified");
        assert_eq!(
            dir_of(p, "/", "/system.slice/vllm.service"),
            Some(p.join("system.slice/vllm.service"))
        );
        assert_eq!(dir_of(p, "/", "/"), None, "the root cgroup is never frozen");
        // A container's mount shows its own cgroup as the root.
        assert_eq!(
            dir_of(p, "/kubepods/pod1", "/kubepods/pod1/c2"),
            Some(p.join("c2"))
        );
        assert_eq!(dir_of(p, "/kubepods/pod1", "/other"), None);
    }
}
