//! `gpufree kill`: the plan (a pure function of a snapshot, the selectors
//! and the safety context), then its execution: identity-checked signals,
//! SIGCONT to stopped targets, a grace period polled through pidfds, SIGKILL
//! for survivors, a rescan for processes that appeared or inherited the
//! nodes meanwhile, and the wait until NVML shows the memory released.

use super::identity::{wait_exited, KillError, Target};
use crate::diagnose::{memory_on_gpus, Groups, IDLE_SLACK_BYTES};
use crate::model::{Process, Snapshot};
use crate::snapshot::Collector;
use crate::units::mib;
use regex::Regex;
use rustix::process::Signal;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// `--user NAME|UID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserSel {
    /// A numeric UID.
    Uid(u32),
    /// A user name.
    Name(String),
}

/// Which holders to target; every given selector must hold.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    /// `--gpu`: holders of these GPUs (None: not given).
    pub gpus: Option<Vec<u32>>,
    /// `--pid`.
    pub pids: Vec<u32>,
    /// `--match`: comm, whole cmdline or exe.
    pub matcher: Option<Regex>,
    /// `--user`.
    pub user: Option<UserSel>,
    /// `--unit`: systemd unit, container id, pod UID, job id.
    pub unit: Option<String>,
}

/// What must never be signalled, and what may be.
#[derive(Debug, Clone, Default)]
pub struct Safety {
    /// gpufree's own PID.
    pub me: u32,
    /// gpufree's ancestors (its shell, its service, init).
    pub ancestors: Vec<u32>,
    /// The effective UID gpufree runs as.
    pub euid: u32,
    /// `--force-protected`.
    pub force_protected: bool,
    /// `--include-shared`: holders of only shared nodes join the plan even
    /// when they belong to no targeted group.
    pub include_shared: bool,
}

impl Safety {
    /// The safety context of the running process.
    pub fn current() -> Safety {
        let me = std::process::id();
        let mut ancestors = Vec::new();
        let mut pid = me;
        for _ in 0..256 {
            let Some(ppid) = std::fs::read(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|b| crate::proc::parse::parse_stat(&b).ok())
                .map(|s| s.ppid)
            else {
                break;
            };
            if ppid == 0 {
                break;
            }
            ancestors.push(ppid);
            pid = ppid;
        }
        Safety {
            me,
            ancestors,
            euid: rustix::process::geteuid().as_raw(),
            ..Safety::default()
        }
    }
}

/// One process the plan will signal.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PlanEntry {
    /// PID.
    pub pid: u32,
    /// Start time seen by the scan: the identity.
    pub start_time_ticks: u64,
    /// Why it is a target.
    pub reason: String,
}

/// A process left out, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Skipped {
    /// PID.
    pub pid: u32,
    /// Why it is not signalled.
    pub reason: String,
    /// Left out for safety (exit 5 when nothing else was done).
    pub refused: bool,
}

/// The plan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Plan {
    /// What will be signalled.
    pub targets: Vec<PlanEntry>,
    /// What matched but will not be.
    pub skipped: Vec<Skipped>,
}

fn matches(p: &Process, sel: &Selectors) -> bool {
    if let Some(gpus) = &sel.gpus {
        if !gpus.iter().any(|&g| p.touches_gpu(g)) {
            return false;
        }
    }
    if !sel.pids.is_empty() && !sel.pids.contains(&p.pid) {
        return false;
    }
    if let Some(re) = &sel.matcher {
        let hit = re.is_match(&p.comm)
            || re.is_match(&p.cmdline_joined())
            || p.exe.as_deref().is_some_and(|e| re.is_match(e));
        if !hit {
            return false;
        }
    }
    if let Some(u) = &sel.user {
        let hit = match u {
            UserSel::Uid(uid) => p.uid == *uid,
            UserSel::Name(n) => p.user == *n,
        };
        if !hit {
            return false;
        }
    }
    if let Some(unit) = &sel.unit {
        let o = &p.owner;
        let hit = !unit.is_empty()
            && (o.id == *unit
                || o.name == *unit
                || o.id == format!("{unit}.service")
                || (unit.len() >= 12 && o.id.starts_with(unit.as_str())));
        if !hit {
            return false;
        }
    }
    true
}

fn shared_only(p: &Process) -> bool {
    p.gpu_memory.is_empty() && p.devices.iter().all(|d| d.gpu.is_none())
}

fn reason(p: &Process) -> String {
    if p.memory_bytes() > 0 {
        format!("holds {}", memory_on_gpus(p))
    } else {
        let nodes: Vec<&str> = p
            .devices
            .iter()
            .map(|d| d.path.rsplit('/').next().unwrap_or(&d.path))
            .collect();
        format!("holds {}", nodes.join(", "))
    }
}

/// Why a matching holder must not be signalled, if it must not.
fn refusal(p: &Process, safety: &Safety) -> Option<(String, bool)> {
    if p.pid == 1 {
        return Some(("PID 1 (init) is never signalled".into(), true));
    }
    if p.pid == safety.me {
        return Some(("gpufree itself".into(), true));
    }
    if safety.ancestors.contains(&p.pid) {
        return Some(("an ancestor of gpufree (its shell or service)".into(), true));
    }
    if p.exe.is_none() && p.cmdline.is_empty() && p.state != "Z" && (p.ppid == 2 || p.pid == 2) {
        return Some(("a kernel thread".into(), true));
    }
    if p.protected && !safety.force_protected {
        return Some((format!("protected ({}): a driver daemon or display server; --force-protected to include it", p.comm), true));
    }
    if safety.euid != 0 && p.uid != safety.euid {
        return Some((
            format!(
                "owned by {} (uid {}), gpufree runs as uid {}: run as root",
                p.user, p.uid, safety.euid
            ),
            true,
        ));
    }
    if p.state == "Z" && p.threads <= 1 {
        return Some((
            format!(
                "a zombie: it has exited already; parent {} must reap it",
                p.ppid
            ),
            false,
        ));
    }
    None
}

/// Builds the plan: the holders the selectors name, plus the holders of
/// only shared nodes started with them, minus what safety forbids.
pub fn plan(snap: &Snapshot, sel: &Selectors, safety: &Safety) -> Plan {
    let mut plan = Plan::default();
    let matched: Vec<&Process> = snap.processes.iter().filter(|p| matches(p, sel)).collect();
    let grouper = Groups::new(snap);
    let groups: BTreeSet<String> = matched
        .iter()
        .filter(|p| p.memory_bytes() > 0)
        .map(|p| grouper.key(p))
        .collect();
    let mut chosen: BTreeMap<u32, (&Process, String)> =
        matched.iter().map(|p| (p.pid, (*p, reason(p)))).collect();
    if sel.gpus.is_some() {
        let extra: Vec<&Process> = snap
            .processes
            .iter()
            .filter(|p| shared_only(p) && !chosen.contains_key(&p.pid))
            .collect();
        for p in extra {
            let same_group = groups.contains(&grouper.key(p));
            if same_group || safety.include_shared {
                let why = if same_group {
                    "started with the memory holders"
                } else {
                    "--include-shared"
                };
                chosen.insert(p.pid, (p, format!("{}; {why}", reason(p))));
            }
        }
    }
    for (pid, (p, why)) in chosen {
        match refusal(p, safety) {
            Some((reason, refused)) => plan.skipped.push(Skipped {
                pid,
                reason,
                refused,
            }),
            None => plan.targets.push(PlanEntry {
                pid,
                start_time_ticks: p.start_time_ticks,
                reason: why,
            }),
        }
    }
    for &pid in &sel.pids {
        if !snap.processes.iter().any(|p| p.pid == pid) {
            plan.skipped.push(Skipped {
                pid,
                reason: "holds no GPU memory and no GPU device node: never a target".into(),
                refused: true,
            });
        }
    }
    plan
}

/// How to execute a plan.
#[derive(Debug, Clone)]
pub struct Options {
    /// First signal (default TERM).
    pub signal: Signal,
    /// How long to wait after the first signal before KILL.
    pub grace: Duration,
    /// How long to wait for the memory.
    pub timeout: Duration,
    /// Do not wait for the memory.
    pub no_wait: bool,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// Test seam: pretend the scan saw this PID with another start time, as
    /// if it had been replaced by a new process with the same PID.
    pub stale_identity: Option<u32>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            signal: Signal::TERM,
            grace: Duration::from_secs(10),
            timeout: Duration::from_secs(60),
            no_wait: false,
            progress: false,
            stale_identity: None,
        }
    }
}

/// What happened (SPEC.md's `kill` object, with additions).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Every PID signalled.
    pub targets: Vec<u32>,
    /// Targets still running at the end.
    pub survivors: Vec<u32>,
    /// NVML shows the memory back (or, without NVML, the holders are gone).
    pub released: bool,
    /// From the first signal to the release.
    pub seconds_to_release: f64,
    /// Targets that needed SIGKILL.
    pub killed_hard: Vec<u32>,
    /// Targets whose PID now names another process: not signalled.
    pub identity_changed: Vec<u32>,
    /// Survivors in uninterruptible sleep: waiting for the kernel.
    pub waiting_for_kernel: Vec<u32>,
    /// Left out, with why.
    pub skipped: Vec<Skipped>,
    /// Processes found by the rescan (forked or inherited meanwhile).
    pub found_by_rescan: Vec<u32>,
    /// What still holds the GPUs when not released.
    pub still_holding: Vec<String>,
}

/// One round: pin, signal, grace, KILL. Returns the pinned targets.
fn round(
    collector: &Collector,
    entries: &[PlanEntry],
    opts: &Options,
    report: &mut Report,
) -> Vec<Target> {
    let proc_root = &collector.config().proc_root;
    let mut pinned = Vec::new();
    for e in entries {
        let start = if opts.stale_identity == Some(e.pid) {
            e.start_time_ticks + 1
        } else {
            e.start_time_ticks
        };
        match Target::pin(proc_root, e.pid, start) {
            Ok(t) => pinned.push(t),
            Err(KillError::IdentityChanged { .. }) => report.identity_changed.push(e.pid),
            Err(KillError::Gone) => {}
            Err(err) => report.skipped.push(Skipped {
                pid: e.pid,
                reason: err.to_string(),
                refused: true,
            }),
        }
    }
    for t in &pinned {
        let stopped = matches!(t.state(), 'T' | 't');
        match t.signal(opts.signal) {
            Ok(()) => report.targets.push(t.pid),
            Err(KillError::Gone) => report.targets.push(t.pid),
            Err(err) => report.skipped.push(Skipped {
                pid: t.pid,
                reason: err.to_string(),
                refused: true,
            }),
        }
        if stopped && opts.signal != Signal::KILL {
            let _ = t.signal(Signal::CONT); // a stopped process handles TERM only once continued
        }
    }
    let refs: Vec<&Target> = pinned.iter().collect();
    let running = wait_exited(&refs, opts.grace);
    if !running.is_empty() {
        for &i in &running {
            if refs[i].signal(Signal::KILL).is_ok() {
                report.killed_hard.push(refs[i].pid);
            }
        }
        let _ = wait_exited(
            &running.iter().map(|&i| refs[i]).collect::<Vec<_>>(),
            Duration::from_secs(5),
        );
    }
    pinned
}

/// Executes `plan` (made from `initial` with `sel` and `safety`).
pub fn execute(
    collector: &Collector,
    initial: &Snapshot,
    plan: Plan,
    sel: &Selectors,
    safety: &Safety,
    opts: &Options,
) -> Report {
    let mut report = Report {
        skipped: plan.skipped.clone(),
        ..Report::default()
    };
    let started = Instant::now();
    let mut all: Vec<Target> = round(collector, &plan.targets, opts, &mut report);
    let mut handled: BTreeSet<(u32, u64)> = plan
        .targets
        .iter()
        .map(|e| (e.pid, e.start_time_ticks))
        .collect();
    // Rescan: children forked during the grace period, or processes that
    // inherited the nodes, are handled in the same run.
    for _ in 0..3 {
        let Ok(snap) = collector.snapshot() else {
            break;
        };
        let again = self::plan(&snap, sel, safety);
        let fresh: Vec<PlanEntry> = again
            .targets
            .into_iter()
            .filter(|e| !handled.contains(&(e.pid, e.start_time_ticks)))
            .collect();
        if fresh.is_empty() {
            break;
        }
        handled.extend(fresh.iter().map(|e| (e.pid, e.start_time_ticks)));
        report.found_by_rescan.extend(fresh.iter().map(|e| e.pid));
        all.extend(round(collector, &fresh, opts, &mut report));
    }
    report.survivors = all.iter().filter(|t| !t.exited()).map(|t| t.pid).collect();
    report.waiting_for_kernel = all
        .iter()
        .filter(|t| !t.exited() && t.state() == 'D')
        .map(|t| t.pid)
        .collect();
    report.targets.sort_unstable();
    report.targets.dedup();

    // The memory: wait until NVML shows it back.
    let target_pids: BTreeSet<u32> = report.targets.iter().copied().collect();
    let mut expected: BTreeMap<u32, u64> = BTreeMap::new();
    for g in &initial.gpus {
        let theirs: u64 = g
            .nvml_processes
            .iter()
            .filter(|p| target_pids.contains(&p.pid))
            .filter_map(|p| p.used_bytes)
            .sum();
        let touched = theirs > 0
            || initial
                .processes
                .iter()
                .any(|p| target_pids.contains(&p.pid) && p.touches_gpu(g.index));
        if touched {
            expected.insert(g.index, g.memory.used_bytes.saturating_sub(theirs));
        }
    }
    let released = |report: &mut Report| -> bool {
        if !collector.has_nvml() {
            return all.iter().all(|t| t.exited());
        }
        let now = collector.nvml();
        let mut ok = true;
        report.still_holding.clear();
        for g in now.gpus.iter().filter(|g| expected.contains_key(&g.index)) {
            let listed: Vec<u32> = g
                .nvml_processes
                .iter()
                .filter(|p| target_pids.contains(&p.pid))
                .map(|p| p.pid)
                .collect();
            let limit = expected[&g.index] + IDLE_SLACK_BYTES;
            if !listed.is_empty() || g.memory.used_bytes > limit {
                ok = false;
                report.still_holding.push(format!(
                    "GPU {}: {} used (expected at most {}){}",
                    g.index,
                    mib(g.memory.used_bytes),
                    mib(limit),
                    if listed.is_empty() {
                        String::new()
                    } else {
                        format!(", NVML still lists {listed:?}")
                    }
                ));
            }
        }
        ok
    };
    if opts.no_wait {
        report.released = released(&mut report);
    } else {
        let bar = opts.progress.then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.set_message("waiting for the GPU memory to come back");
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        let deadline = Instant::now() + opts.timeout;
        loop {
            if released(&mut report) {
                report.released = true;
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            if let Some(b) = &bar {
                b.set_message(format!(
                    "waiting for the GPU memory: {}",
                    report.still_holding.join("; ")
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
    }
    report.seconds_to_release = if report.released {
        started.elapsed().as_secs_f64()
    } else {
        0.0
    };
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceUse, GpuMemory, Owner, OwnerKind, Via};

    fn p(pid: u32, ppid: u32, gpu: Option<u32>, memory: u64) -> Process {
        Process {
            pid,
            ppid,
            comm: "python3".into(),
            cmdline: vec!["python3".into(), "serve.py".into()],
            exe: Some("/usr/bin/python3.12".into()),
            state: "S".into(),
            threads: 1,
            start_time_ticks: 1000 + u64::from(pid),
            gpu_memory: gpu
                .filter(|_| memory > 0)
                .map(|g| {
                    vec![GpuMemory {
                        gpu: g,
                        used_bytes: Some(memory),
                    }]
                })
                .unwrap_or_default(),
            devices: vec![
                DeviceUse {
                    path: "/dev/nvidia-uvm".into(),
                    gpu: None,
                    via: vec![Via::Fd],
                },
                DeviceUse {
                    path: format!("/dev/nvidia{}", gpu.unwrap_or(0)),
                    gpu: Some(gpu.unwrap_or(0)),
                    via: vec![Via::Fd],
                },
            ]
            .into_iter()
            .filter(|d| gpu.is_some() || d.gpu.is_none())
            .collect(),
            ..Process::default()
        }
    }

    fn snap(ps: Vec<Process>) -> Snapshot {
        Snapshot {
            processes: ps,
            ..Snapshot::default()
        }
    }

    fn safety() -> Safety {
        Safety {
            me: 50,
            ancestors: vec![40, 1],
            euid: 0,
            ..Safety::default()
        }
    }

    fn pids(plan: &Plan) -> Vec<u32> {
        plan.targets.iter().map(|e| e.pid).collect()
    }

    #[test]
    fn gpu_selection_takes_its_holders_and_the_shared_node_holders_of_their_launcher() {
        // 100 launcher (uvm only), 101/102 workers on GPU 0 and 1, 103 tracker
        // (uvm only), and 200: an unrelated uvm holder.
        let s = snap(vec![
            p(100, 10, None, 0),
            p(101, 100, Some(0), 5),
            p(102, 100, Some(1), 5),
            p(103, 100, None, 0),
            p(200, 10, None, 0),
        ]);
        let sel = Selectors {
            gpus: Some(vec![0]),
            ..Selectors::default()
        };
        assert_eq!(pids(&plan(&s, &sel, &safety())), vec![100, 101, 103]);
        let sel = Selectors {
            gpus: Some(vec![0, 1]),
            ..Selectors::default()
        };
        assert_eq!(pids(&plan(&s, &sel, &safety())), vec![100, 101, 102, 103]);
        let inc = Safety {
            include_shared: true,
            ..safety()
        };
        assert_eq!(pids(&plan(&s, &sel, &inc)), vec![100, 101, 102, 103, 200]);
    }

    #[test]
    fn selectors_narrow_and_non_holders_are_never_targets() {
        let mut a = p(101, 10, Some(0), 5);
        a.owner = Owner {
            kind: OwnerKind::SystemdUnit,
            id: "vllm.service".into(),
            name: "vllm.service".into(),
        };
        a.uid = 1000;
        a.user = "alice".into();
        let mut b = p(102, 10, Some(0), 5);
        b.comm = "VLLM::Worker_TP".into();
        b.cmdline = vec!["VLLM::Worker_TP1".into()];
        let s = snap(vec![a, b]);
        let unit = Selectors {
            unit: Some("vllm".into()),
            ..Selectors::default()
        };
        assert_eq!(pids(&plan(&s, &unit, &safety())), vec![101]);
        let user = Selectors {
            user: Some(UserSel::Name("alice".into())),
            ..Selectors::default()
        };
        assert_eq!(pids(&plan(&s, &user, &safety())), vec![101]);
        let uid = Selectors {
            user: Some(UserSel::Uid(0)),
            ..Selectors::default()
        };
        assert_eq!(pids(&plan(&s, &uid, &safety())), vec![102]);
        let m = Selectors {
            matcher: Some(Regex::new("Worker_TP1").unwrap()),
            ..Selectors::default()
        };
        assert_eq!(pids(&plan(&s, &m, &safety())), vec![102]);
        let exe = Selectors {
            matcher: Some(Regex::new("python3\\.12$").unwrap()),
            ..Selectors::default()
        };
        assert_eq!(
            pids(&plan(&s, &exe, &safety())),
            vec![101, 102],
            "the exe counts: renamed workers still match"
        );
        let stranger = Selectors {
            pids: vec![101, 777],
            ..Selectors::default()
        };
        let pl = plan(&s, &stranger, &safety());
        assert_eq!(pids(&pl), vec![101]);
        assert!(pl
            .skipped
            .iter()
            .any(|k| k.pid == 777 && k.refused && k.reason.contains("never a target")));
    }

    #[test]
    fn safety_refuses_init_self_ancestors_protected_others_and_zombies() {
        let mut prot = p(60, 1, Some(0), 0);
        prot.protected = true;
        prot.comm = "nvidia-persiste".into();
        let mut other = p(61, 10, Some(0), 5);
        other.uid = 1001;
        other.user = "bob".into();
        let mut z = p(62, 33, Some(0), 0);
        z.state = "Z".into();
        let s = snap(vec![
            p(1, 0, Some(0), 5),
            p(50, 40, Some(0), 5),
            p(40, 1, Some(0), 5),
            prot,
            other,
            z,
        ]);
        let all = Selectors {
            gpus: Some(vec![0]),
            ..Selectors::default()
        };
        let pl = plan(&s, &all, &safety());
        assert_eq!(
            pids(&pl),
            vec![61],
            "root may signal other users' processes"
        );
        let reasons: BTreeMap<u32, &str> = pl
            .skipped
            .iter()
            .map(|k| (k.pid, k.reason.as_str()))
            .collect();
        assert!(reasons[&1].contains("init"));
        assert!(reasons[&50].contains("itself"));
        assert!(reasons[&40].contains("ancestor"));
        assert!(reasons[&60].contains("protected"));
        assert!(reasons[&62].contains("parent 33 must reap"));
        let forced = Safety {
            force_protected: true,
            ..safety()
        };
        assert_eq!(pids(&plan(&s, &all, &forced)), vec![60, 61]);
        let nobody = Safety {
            euid: 65534,
            ..safety()
        };
        let pl = plan(&s, &all, &nobody);
        assert!(pids(&pl).is_empty());
        assert!(pl
            .skipped
            .iter()
            .any(|k| k.pid == 61 && k.reason.contains("run as root")));
    }
}
