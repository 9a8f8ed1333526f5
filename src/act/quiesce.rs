//! Quiescence before the signal: the targets must neither exec nor fork
//! while they are checked and signalled.
//!
//! Where every process of a cgroup is a target (and the cgroup has no child
//! cgroups, and nobody else froze it), the cgroup is frozen (v2
//! `cgroup.freeze`, else the v1 freezer's `freezer.state`): atomic for the
//! whole group and invisible to the targets' parents. Every other target is
//! stopped with SIGSTOP (which its parent may see as a stop). Thawing and
//! continuing are the caller's last step: [`Quiesced::release`]. Until then
//! what is held is also recorded process-wide, and [`release_all`] (run by
//! gpufree's SIGINT/SIGTERM/SIGHUP handler) lets it go: an interrupted
//! gpufree never leaves a target stopped or a cgroup frozen.

use super::identity::Target;
use crate::proc::scan::read_at;
use rustix::process::Signal;
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What is held right now, process-wide: frozen cgroups and pidfds of the
/// processes gpufree stopped.
static HELD: Mutex<Vec<Held>> = Mutex::new(Vec::new());

enum Held {
    Frozen(Freezer),
    Stopped(OwnedFd),
}

fn held() -> std::sync::MutexGuard<'static, Vec<Held>> {
    HELD.lock().unwrap_or_else(|p| p.into_inner())
}

/// Thaws every cgroup and continues every process gpufree holds now (for
/// a signal handler: gpufree is about to exit).
pub fn release_all() {
    for h in held().drain(..) {
        match h {
            Held::Frozen(f) => f.thaw(),
            Held::Stopped(fd) => {
                let _ = rustix::process::pidfd_send_signal(&fd, Signal::CONT);
            }
        }
    }
}

/// Installs, once, the handler that releases what is held and exits 130 on
/// SIGINT, SIGTERM or SIGHUP. (Where another handler was installed first,
/// as the demo's, that one stays.)
pub fn release_on_interrupt() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
            release_all();
            std::process::exit(130);
        });
    });
}

/// Set by the interrupt handler before it lets the targets go: from then
/// on nothing is signalled (the handler ends the process).
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the kill was interrupted (Ctrl-C, SIGTERM, SIGHUP).
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// A cgroup's freezer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Freezer {
    /// cgroup v2: the cgroup's directory (`cgroup.freeze`, `cgroup.events`).
    V2(PathBuf),
    /// cgroup v1 freezer: the cgroup's directory (`freezer.state`).
    V1(PathBuf),
}

impl Freezer {
    fn dir(&self) -> &Path {
        match self {
            Freezer::V2(d) | Freezer::V1(d) => d,
        }
    }

    /// Whether it has child cgroups (which a freeze would freeze too).
    fn has_children(&self) -> bool {
        std::fs::read_dir(self.dir())
            .map(|entries| {
                entries
                    .flatten()
                    .any(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            })
            .unwrap_or(true)
    }

    /// Freezes it and waits until `until` at most for the freeze to settle.
    fn freeze(&self, until: Instant) -> bool {
        let (file, value) = match self {
            Freezer::V2(d) => (d.join("cgroup.freeze"), "1"),
            Freezer::V1(d) => (d.join("freezer.state"), "FROZEN"),
        };
        if std::fs::write(file, value).is_err() {
            return false;
        }
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
        let text = std::fs::read_to_string(self.dir().join("cgroup.procs")).ok()?;
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
    /// The cgroups frozen, in words.
    pub fn frozen(&self) -> Vec<String> {
        self.frozen.iter().map(Freezer::describe).collect()
    }

    /// Thaws the frozen cgroups and continues what gpufree stopped and did
    /// not signal since (the caller continues what it signalled).
    pub fn release(self) {
        release_all();
    }
}

/// Whether a state letter is stopped, or past stopping.
fn still(state: char) -> bool {
    matches!(state, 'T' | 't' | 'Z' | 'X' | '?')
}

/// Freezes every cgroup whose processes are all targets; stops the rest,
/// all first, then waits once for the stops to land, until `until` at most.
pub fn quiesce(targets: &[Target], until: Instant) -> Quiesced {
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
    let settle = until.min(Instant::now() + Duration::from_millis(500));
    for (f, members) in groups {
        let only_targets = f
            .procs()
            .is_some_and(|procs| !procs.is_empty() && procs.is_subset(&pids));
        // Frozen by someone else (a suspended job): theirs to thaw.
        if only_targets && !f.has_children() && !f.frozen() && f.freeze(settle) {
            for i in members {
                held[i] = true;
            }
            q.frozen.push(f.clone());
            self::held().push(Held::Frozen(f));
        }
    }
    q.stopped = targets
        .iter()
        .zip(&held)
        .map(|(t, &frozen)| {
            if frozen || still(t.state()) || t.signal(Signal::STOP).is_err() {
                return false;
            }
            if let Some(fd) = t.pidfd().and_then(|fd| fd.try_clone().ok()) {
                self::held().push(Held::Stopped(fd));
            }
            true
        })
        .collect();
    let settle = until.min(Instant::now() + Duration::from_millis(100));
    while Instant::now() < settle
        && targets
            .iter()
            .zip(&q.stopped)
            .any(|(t, &stopped)| stopped && !still(t.state()))
    {
        std::thread::sleep(Duration::from_millis(1));
    }
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
