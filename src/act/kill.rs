//! `gpufree kill`: the plan (a pure function of a snapshot, the selectors
//! and the safety context), then its execution by identity, to quiescence:
//!
//! 1. each target is pinned through the directory fd the scan opened for
//!    it (never by number) and held still — its cgroup frozen where every
//!    process of it is a target, else SIGSTOP — so it can neither exec nor
//!    fork while it is checked;
//! 2. it is checked to still hold a GPU node (or NVML memory): one that
//!    exec'd or let go is continued and reported as changed, not signalled;
//! 3. the signal, SIGCONT, the grace period polled through pidfds, SIGKILL
//!    for survivors;
//! 4. a rescan: holders that matched meanwhile, that were forked by the
//!    targets (their child, or an orphan of their process group, session
//!    and cgroup started after the first signal) or that their unit,
//!    container, pod or job started again join the next round; a bounded
//!    number of rounds, SIGKILL at once from the third;
//! 5. the end verdict from NVML and a fresh scan: the memory back, no
//!    target or descendant left holding, no zombie still listed. Anything
//!    else is "not released" or "unknown", never "released".
//!
//! `--timeout` bounds all of it.

use super::identity::{wait_exited, KillError, Target};
use super::quiesce::quiesce;
use crate::diagnose::verdict::{self, Policy};
use crate::diagnose::{memory_on_gpus, Groups, IDLE_SLACK_BYTES};
use crate::model::{Owner, OwnerKind, Process, Snapshot, VerdictState};
use crate::proc::scan::Holding;
use crate::snapshot::{select, Collector};
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
    /// `--tree`: holders that are this process or descend from it (a
    /// launcher and its workers, through parents that hold nothing).
    pub tree: Option<u32>,
}

impl Selectors {
    /// Whether only GPUs were selected: the command is "free these GPUs",
    /// and its end verdict is theirs.
    pub fn gpus_only(&self) -> bool {
        self.gpus.is_some()
            && self.pids.is_empty()
            && self.matcher.is_none()
            && self.user.is_none()
            && self.unit.is_none()
            && self.tree.is_none()
    }
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

/// Whether `owner` is the one `--unit unit` names: its unit with or without
/// `.service`, its readable name, or, for a container or pod, its id in
/// full or by a prefix of at least 12 hex digits. A user's unit is named
/// only by its readable name (`vllm.service (user 1000)`).
fn unit_names(owner: &Owner, unit: &str) -> bool {
    if unit.is_empty() || owner.kind == OwnerKind::None {
        return false;
    }
    if owner.name == unit {
        return true;
    }
    // A user's unit (`vllm.service (user 1000)`) is named only in full: the
    // system unit of the same name is another owner.
    let user_unit = owner.kind == OwnerKind::SystemdUnit && owner.name != owner.id;
    if user_unit {
        return false;
    }
    if owner.id == unit {
        return true;
    }
    match owner.kind {
        OwnerKind::SystemdUnit => owner.id == format!("{unit}.service"),
        OwnerKind::Container | OwnerKind::K8sPod => {
            let hex = unit.chars().filter(char::is_ascii_hexdigit).count();
            hex >= 12
                && unit.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
                && owner.id.starts_with(unit)
        }
        _ => false,
    }
}

/// Checks that `--unit unit` names at most one owner among the holders of
/// `snap`; an ambiguous prefix is an error listing the candidates.
pub fn check_unit(snap: &Snapshot, unit: &str) -> Result<(), String> {
    let owners: BTreeSet<(&str, &str, &str)> = snap
        .processes
        .iter()
        .filter(|p| unit_names(&p.owner, unit))
        .map(|p| {
            (
                p.owner.kind.as_str(),
                p.owner.id.as_str(),
                p.owner.name.as_str(),
            )
        })
        .collect();
    if owners.len() > 1 {
        let list: Vec<String> = owners
            .iter()
            .map(|(k, id, name)| {
                if id == name {
                    format!("{k} {id}")
                } else {
                    format!("{k} {id} ({name})")
                }
            })
            .collect();
        return Err(format!(
            "--unit {unit}: ambiguous, it names {}: {}",
            owners.len(),
            list.join(", ")
        ));
    }
    Ok(())
}

fn matches(snap: &Snapshot, p: &Process, sel: &Selectors) -> bool {
    if let Some(root) = sel.tree {
        if !snap.descends_from(p.pid, root) {
            return false;
        }
    }
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
        if !unit_names(&p.owner, unit) {
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
    if !p.is_live() {
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
    let matched: Vec<&Process> = snap
        .processes
        .iter()
        .filter(|p| matches(snap, p, sel))
        .collect();
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
            // A PID that NVML lists but whose process here holds no node
            // names an innocent (the memory is kept by a process that had
            // the PID before): refused for safety. One that nothing lists
            // has nothing to free: left out, not refused.
            let listed = snap
                .gpus
                .iter()
                .any(|g| g.nvml_processes.iter().any(|n| n.pid == pid));
            plan.skipped.push(Skipped {
                pid,
                reason: if listed {
                    "listed by NVML, but the process with this PID holds no GPU device node: not the memory's owner, never a target".into()
                } else {
                    "holds no GPU memory and no GPU device node: never a target".into()
                },
                refused: listed,
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
    /// The whole execution, from the first signal to the verdict on the
    /// memory, ends within this (SPEC.md: a hard cap).
    pub timeout: Duration,
    /// Do not wait for the memory.
    pub no_wait: bool,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// `--holders-only`: without NVML, "released" may rest on the holders
    /// alone.
    pub holders_only: bool,
    /// After the memory is back, watch this long for a holder that a
    /// supervisor starts again (longer while a process the targets' parent
    /// started meanwhile may still open a GPU); zero: do not watch.
    pub settle: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            signal: Signal::TERM,
            grace: Duration::from_secs(10),
            timeout: Duration::from_secs(60),
            no_wait: false,
            progress: false,
            holders_only: false,
            settle: Duration::from_secs(1),
        }
    }
}

/// A target that was not signalled because it had changed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Changed {
    /// PID.
    pub pid: u32,
    /// What changed.
    pub why: String,
}

/// What happened (SPEC.md's `kill` object, with additions).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Every PID signalled.
    pub targets: Vec<u32>,
    /// Targets still running at the end.
    pub survivors: Vec<u32>,
    /// The memory is proven back: the verdict is free.
    pub released: bool,
    /// free (released), busy (not released) or unknown (it could not be
    /// proven either way).
    pub verdict: VerdictState,
    /// Why not released, or why that is unknown.
    pub reasons: Vec<String>,
    /// From the first signal to the release.
    pub seconds_to_release: f64,
    /// From the moment every signalled target had exited to the release
    /// (the driver's teardown), or to the end when not released; None when
    /// a target never exited.
    pub seconds_after_exit: Option<f64>,
    /// How long the release was watched for a supervisor's restart.
    pub seconds_watched_for_restarts: f64,
    /// Why that watch stopped early (a snapshot failed): no restart was
    /// seen, but none can be ruled out.
    pub restart_watch_error: Option<String>,
    /// Targets that needed SIGKILL.
    pub killed_hard: Vec<u32>,
    /// Targets whose PID now names another process: not signalled.
    pub identity_changed: Vec<u32>,
    /// Targets that no longer held a GPU (exec'd or let go) when checked
    /// right before the signal: not signalled.
    pub changed: Vec<Changed>,
    /// Targets that could not be checked again right before the signal (a
    /// read failed or timed out): not signalled, and the release unknown.
    pub unchecked: Vec<Changed>,
    /// Survivors in uninterruptible sleep: waiting for the kernel.
    pub waiting_for_kernel: Vec<u32>,
    /// Left out, with why.
    pub skipped: Vec<Skipped>,
    /// Processes found by a rescan (matched, forked or restarted
    /// meanwhile) and handled in the same run.
    pub found_by_rescan: Vec<u32>,
    /// What still holds the GPUs when not released.
    pub still_holding: Vec<String>,
    /// Rounds of signals (1 unless the rescans found more).
    pub rounds: u32,
    /// Cgroups frozen while their processes (all targets) were checked and
    /// signalled; other targets were stopped with SIGSTOP.
    pub frozen_cgroups: Vec<String>,
}

/// At most this many rounds of signals; from the third on, SIGKILL at once
/// (what keeps forking on SIGTERM gets no more chances).
const MAX_ROUNDS: u32 = 5;

/// The clock ticks since boot now, comparable with start times.
fn ticks_now() -> u64 {
    let tps = rustix::param::clock_ticks_per_second();
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |up| (up * tps as f64) as u64)
}

/// The deadlines of one execution: signals and waits end by `act`, the
/// verdict by `end` (the user's cap).
struct Deadlines {
    act: Instant,
    end: Instant,
}

impl Deadlines {
    fn new(timeout: Duration) -> Deadlines {
        let now = Instant::now();
        let reserve = (timeout / 5).min(Duration::from_millis(400));
        Deadlines {
            act: now + timeout.saturating_sub(reserve),
            end: now + timeout,
        }
    }
    fn left(&self) -> Duration {
        self.act.saturating_duration_since(Instant::now())
    }
}

/// One round: pin, stop, check, signal, continue, grace, KILL. Returns the
/// targets signalled.
fn round(
    c: &Collector,
    snap: &Snapshot,
    entries: &[PlanEntry],
    sig: Signal,
    opts: &Options,
    deadlines: &Deadlines,
    report: &mut Report,
) -> Vec<Target> {
    let mut pinned = Vec::new();
    for e in entries {
        match Target::pin(&snap.pins, e.pid, e.start_time_ticks) {
            Ok(t) => pinned.push(t),
            Err(KillError::Gone) => {
                if reused(c, e) {
                    report.identity_changed.push(e.pid);
                }
            }
            Err(KillError::IdentityChanged { .. }) => report.identity_changed.push(e.pid),
            Err(err) => report.skipped.push(Skipped {
                pid: e.pid,
                reason: err.to_string(),
                refused: true,
            }),
        }
    }
    // Quiescence: frozen or stopped, a target can neither exec nor fork
    // while it is checked and signalled.
    let held = quiesce(&pinned, deadlines.act);
    report.frozen_cgroups.extend(held.frozen());
    crate::pause::while_held();
    // Check every target (through its pinned fd, each read under the
    // deadline), then signal every one still holding, then release them
    // together: none acts on its signal before all have it.
    let dirs: Vec<(u32, std::os::fd::OwnedFd)> = pinned
        .iter()
        .filter_map(|t| t.dir().try_clone().ok().map(|d| (t.pid, d)))
        .collect();
    let holding: BTreeMap<u32, Holding> =
        c.holding(dirs, Some(deadlines.act)).into_iter().collect();
    let mut checked = Vec::new();
    for t in pinned {
        let verdict = match holding.get(&t.pid) {
            Some(Holding::Yes) => Ok(()),
            Some(Holding::Gone) => Err(None),
            // NVML's word alone never suffices: a process gpufree can read
            // that holds no GPU node holds no GPU memory (a listing of its
            // PID is another process's, one that had the PID before).
            Some(Holding::No) => Err(Some(Changed {
                pid: t.pid,
                why: "no longer holds a GPU device node (it exec'd another program or let go)"
                    .into(),
            })),
            Some(Holding::Unknown(why)) => Err(Some(Changed {
                pid: t.pid,
                why: format!("could not be checked again ({why})"),
            })),
            None => Err(Some(Changed {
                pid: t.pid,
                why: "could not be checked again".into(),
            })),
        };
        match verdict {
            Ok(()) => checked.push(t),
            Err(None) => {}
            Err(Some(changed)) => {
                if matches!(holding.get(&t.pid), Some(Holding::No)) {
                    report.changed.push(changed);
                } else {
                    report.unchecked.push(changed);
                }
            }
        }
    }
    let mut signalled = Vec::new();
    for t in checked {
        match t.signal(sig) {
            Ok(()) | Err(KillError::Gone) => {
                report.targets.push(t.pid);
                signalled.push(t);
            }
            Err(err) => {
                report.skipped.push(Skipped {
                    pid: t.pid,
                    reason: err.to_string(),
                    refused: true,
                });
            }
        }
    }
    if sig != Signal::KILL {
        // A stopped process acts on its signal only once continued (and one
        // stopped before gpufree came would never act on it).
        for t in &signalled {
            let _ = t.signal(Signal::CONT);
        }
    }
    // Thaw what was frozen, continue what was stopped and not signalled.
    held.release();
    let refs: Vec<&Target> = signalled.iter().collect();
    let running = if sig == Signal::KILL {
        (0..refs.len()).collect()
    } else {
        wait_exited(&refs, opts.grace.min(deadlines.left()))
    };
    if !running.is_empty() {
        for &i in &running {
            if refs[i].signal(Signal::KILL).is_ok() {
                report.killed_hard.push(refs[i].pid);
            }
        }
        // SIGKILL takes a moment to land; the verdict's reserve pays for it.
        let _ = wait_exited(
            &running.iter().map(|&i| refs[i]).collect::<Vec<_>>(),
            Duration::from_secs(5).min(deadlines.end.saturating_duration_since(Instant::now())),
        );
    }
    signalled
}

/// Whether the PID of a target that is gone now names another process.
fn reused(c: &Collector, e: &PlanEntry) -> bool {
    std::fs::read(c.config().proc_root.join(e.pid.to_string()).join("stat"))
        .ok()
        .and_then(|b| crate::proc::parse::parse_stat(&b).ok())
        .is_some_and(|s| s.start_time != e.start_time_ticks)
}

/// The holders of `snap` that join the next round: they match the
/// selectors, or they were forked by a signalled target (its child, or an
/// orphan of its process group, session and cgroup) or started by its
/// unit, container, pod or job, after the first signal.
fn joiners(
    snap: &Snapshot,
    sel: &Selectors,
    safety: &Safety,
    handled: &BTreeSet<(u32, u64)>,
    signalled: &[Process],
    first_tick: u64,
) -> Vec<PlanEntry> {
    let mut out: BTreeMap<u32, PlanEntry> = BTreeMap::new();
    for e in plan(snap, sel, safety).targets {
        if !handled.contains(&(e.pid, e.start_time_ticks)) {
            out.insert(e.pid, e);
        }
    }
    for p in &snap.processes {
        if handled.contains(&(p.pid, p.start_time_ticks))
            || out.contains_key(&p.pid)
            || p.start_time_ticks < first_tick
            || refusal(p, safety).is_some()
        {
            continue;
        }
        let why = signalled.iter().find_map(|t| {
            if p.ppid == t.pid && p.start_time_ticks >= t.start_time_ticks {
                Some(format!("forked by target {}", t.pid))
            } else if p.orphaned
                && p.uid == t.uid
                && p.pgid == t.pgid
                && p.sid == t.sid
                && p.cgroup == t.cgroup
            {
                Some(format!(
                    "forked in target {}'s process group and left as an orphan",
                    t.pid
                ))
            } else if (sel.gpus.is_some() || sel.unit.is_some())
                && matches!(
                    t.owner.kind,
                    OwnerKind::SystemdUnit
                        | OwnerKind::Container
                        | OwnerKind::K8sPod
                        | OwnerKind::SlurmJob
                )
                && p.owner == t.owner
            {
                Some(format!("started again by {}", t.owner.name))
            } else {
                None
            }
        });
        if let Some(why) = why {
            out.insert(
                p.pid,
                PlanEntry {
                    pid: p.pid,
                    start_time_ticks: p.start_time_ticks,
                    reason: format!("{}; {why}", reason(p)),
                },
            );
        }
    }
    out.into_values().collect()
}

/// Executes `plan` (made from `initial` with `sel` and `safety`); returns
/// the report and the snapshot its verdict was made from.
pub fn execute(
    c: &Collector,
    initial: &Snapshot,
    plan: Plan,
    sel: &Selectors,
    safety: &Safety,
    opts: &Options,
) -> (Report, Option<Snapshot>) {
    crate::pause::before_signals();
    super::quiesce::release_on_interrupt();
    let deadlines = Deadlines::new(opts.timeout);
    let started = Instant::now();
    let first_tick = ticks_now();
    let mut report = Report {
        skipped: plan.skipped.clone(),
        ..Report::default()
    };
    let mut handled: BTreeSet<(u32, u64)> = plan
        .targets
        .iter()
        .map(|e| (e.pid, e.start_time_ticks))
        .collect();
    let mut all: Vec<Target> = Vec::new();
    // The processes signalled, as the snapshots saw them.
    let mut signalled: Vec<Process> = Vec::new();
    let mut snap = initial.clone();
    let mut entries = plan.targets.clone();
    while !entries.is_empty() && report.rounds < MAX_ROUNDS {
        report.rounds += 1;
        let sig = if report.rounds >= 3 {
            Signal::KILL
        } else {
            opts.signal
        };
        let done = round(c, &snap, &entries, sig, opts, &deadlines, &mut report);
        signalled.extend(
            done.iter()
                .filter_map(|t| snap.processes.iter().find(|p| p.pid == t.pid))
                .cloned(),
        );
        all.extend(done);
        if Instant::now() >= deadlines.act {
            break;
        }
        let Ok(next) = c.snapshot_until(Some(deadlines.act)) else {
            break;
        };
        snap = next;
        entries = joiners(&snap, sel, safety, &handled, &signalled, first_tick);
        handled.extend(entries.iter().map(|e| (e.pid, e.start_time_ticks)));
        report.found_by_rescan.extend(entries.iter().map(|e| e.pid));
    }
    report.targets.sort_unstable();
    report.targets.dedup();
    report.found_by_rescan.sort_unstable();
    report.found_by_rescan.dedup();

    if opts.no_wait {
        report.survivors = all.iter().filter(|t| !t.exited()).map(|t| t.pid).collect();
        report.verdict = VerdictState::Unknown;
        report.reasons = vec!["not waited for (--no-wait)".into()];
        return (report, None);
    }
    let release = Release::new(initial, &signalled, &report, sel, handled);
    let bar = opts.progress.then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_message("waiting for the GPU memory to come back");
        b.enable_steady_tick(Duration::from_millis(120));
        b
    });
    // NVML alone until the targets' memory is back (or the deadline), then
    // one fresh snapshot decides.
    let mut exited_at = None;
    let mut note_exits = || {
        if exited_at.is_none() && all.iter().all(Target::exited) {
            exited_at = Some(Instant::now());
        }
    };
    if c.has_nvml() && !release.expected.is_empty() {
        loop {
            note_exits();
            let now = c.nvml_until(Some(deadlines.act));
            let held = release.memory_held(&now.gpus, now.status.available);
            if held.is_empty() || Instant::now() >= deadlines.act {
                break;
            }
            if let Some(b) = &bar {
                b.set_message(format!(
                    "waiting for the GPU memory: {}",
                    crate::safe::fit(&held.join("; "), 160)
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    note_exits();
    let end = c.snapshot_until(Some(deadlines.end));
    let judge =
        |end: &Snapshot| release.judge(end, &report, &signalled, first_tick, opts.holders_only);
    let mut verdict = match &end {
        Ok(end) => judge(end),
        Err(e) => verdict::finish(
            Vec::new(),
            vec![format!("no final snapshot: {e}")],
            Vec::new(),
        ),
    };
    let released_at = Instant::now();
    let mut end = end;
    // A supervisor known beforehand is given its restart delay and the
    // time a restarted program takes to open the GPU.
    let settle = opts.settle.max(known_restart_watch(initial, &signalled));
    if verdict.state == VerdictState::Free && !opts.settle.is_zero() && !signalled.is_empty() {
        // The watch ends halfway through the reserve before the user's cap:
        // the rest is for the verdict and the report.
        let watch_end = deadlines.end - (deadlines.end - deadlines.act) / 2;
        if let Ok(first) = end.as_ref() {
            let suspect = |snap: &Snapshot| restart_suspected(snap, &signalled, first_tick);
            let watched = self::settle(c, first, settle, watch_end, &judge, &suspect);
            match watched {
                Ok(Some((snap, busy))) => {
                    verdict = busy;
                    end = Ok(snap);
                }
                Ok(None) => {}
                Err(e) => report.restart_watch_error = Some(e),
            }
        }
        report.seconds_watched_for_restarts = released_at.elapsed().as_secs_f64();
    }
    report.seconds_after_exit = exited_at.map(|t| {
        let until = if verdict.state == VerdictState::Free {
            released_at
        } else {
            Instant::now()
        };
        until.saturating_duration_since(t).as_secs_f64()
    });
    if let Ok(end) = &end {
        report.still_holding = release.memory_held(&end.gpus, end.nvml.available);
    }
    report.survivors = all.iter().filter(|t| !t.exited()).map(|t| t.pid).collect();
    report.waiting_for_kernel = all
        .iter()
        .filter(|t| !t.exited() && t.state() == 'D')
        .map(|t| t.pid)
        .collect();
    report.verdict = verdict.state;
    report.reasons = verdict.reasons;
    report.released = verdict.state == VerdictState::Free;
    report.seconds_to_release = if report.released {
        released_at.saturating_duration_since(started).as_secs_f64()
    } else {
        0.0
    };
    (report, end.ok())
}

/// How a process that was no target keeps a release from counting.
enum Stranger<'a> {
    /// A child the target had before the kill.
    Child { parent: u32 },
    /// Started during the kill by the target's parent: a supervisor.
    ByParent { target: u32, parent: u32 },
    /// Started during the kill in the target's system unit, whose policy
    /// restarts (or could not be read).
    ByUnit { target: u32, unit: &'a str },
    /// Started during the kill beside the target: its fork, or a process
    /// of its unit, pod, container, or user and cgroup.
    Beside { target: u32 },
}

/// How much longer to watch, at most, once a process that the targets'
/// parent started during the kill is seen: time for it to open a GPU (a
/// CUDA initialisation takes seconds).
const SUSPECT_WATCH: Duration = Duration::from_secs(5);

/// Watches a release for `base` (and up to [`SUSPECT_WATCH`] after the
/// first suspect is seen, never past `until`) for a holder a supervisor
/// starts again. Returns the first snapshot that `judge` finds not free,
/// with that verdict; None when the release held; Err when a snapshot
/// failed, so the watch could not finish.
fn settle(
    c: &Collector,
    first: &Snapshot,
    base: Duration,
    until: Instant,
    judge: &dyn Fn(&Snapshot) -> crate::model::Verdict,
    suspect: &dyn Fn(&Snapshot) -> bool,
) -> Result<Option<(Snapshot, crate::model::Verdict)>, String> {
    let mut stop = (Instant::now() + base).min(until);
    let mut suspected = suspect(first);
    let mut extended = false;
    loop {
        if suspected && !extended {
            extended = true;
            stop = stop.max((Instant::now() + SUSPECT_WATCH).min(until));
        }
        let now = Instant::now();
        if now >= stop {
            return Ok(None);
        }
        std::thread::sleep((stop - now).min(Duration::from_millis(100)));
        let snap = c
            .snapshot_until(Some(until))
            .map_err(|e| format!("a snapshot failed: {e}"))?;
        let v = judge(&snap);
        if v.state == VerdictState::Busy {
            return Ok(Some((snap, v)));
        }
        suspected = suspect(&snap);
    }
}

/// How long to watch a release when a target's system unit restarts it
/// (its `RestartSec=`, then [`SUSPECT_WATCH`] for the program to open the
/// GPU) or the kubelet does (a pod's container); zero otherwise.
fn known_restart_watch(initial: &Snapshot, signalled: &[Process]) -> Duration {
    signalled
        .iter()
        .filter_map(|t| {
            if t.owner.kind == OwnerKind::K8sPod {
                return Some(SUSPECT_WATCH);
            }
            let r = initial.units.get(t.owner.system_unit()?)?;
            (r.restart != "no").then(|| {
                let delay = r
                    .restart_sec
                    .as_deref()
                    .map_or(Duration::from_millis(100), restart_sec);
                delay.min(Duration::from_secs(30)) + SUSPECT_WATCH
            })
        })
        .max()
        .unwrap_or_default()
}

/// A systemd time span (`5`, `100ms`, `1min 30s`); 100 ms (systemd's
/// default) when it cannot be read.
fn restart_sec(text: &str) -> Duration {
    let mut total = Duration::ZERO;
    for word in text.split_whitespace() {
        let split = word
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(word.len());
        let (number, unit) = word.split_at(split);
        let Ok(n) = number.parse::<f64>() else {
            return Duration::from_millis(100);
        };
        let seconds = match unit {
            "" | "s" | "sec" | "second" | "seconds" => n,
            "ms" | "msec" => n / 1000.0,
            "m" | "min" | "minute" | "minutes" => n * 60.0,
            "h" | "hr" | "hour" | "hours" => n * 3600.0,
            _ => return Duration::from_millis(100),
        };
        total += Duration::try_from_secs_f64(seconds).unwrap_or(Duration::from_secs(3600));
    }
    total
}

/// Whether `snap` has a process holding nothing yet that a living parent
/// of a signalled target started during the kill, running the target's
/// program: maybe a supervisor's restart that has not opened a GPU yet.
fn restart_suspected(snap: &Snapshot, signalled: &[Process], first_tick: u64) -> bool {
    snap.parents.values().any(|k| {
        k.start_time_ticks >= first_tick
            && k.ppid > 1
            && signalled
                .iter()
                .any(|t| t.ppid == k.ppid && crate::proc::names_exe(&k.comm, t.exe.as_deref()))
            && snap.comm_of(k.ppid).is_some() // its parent lives
    })
}

/// What "released" means for one execution.
struct Release {
    /// Per GPU the targets touched: used bytes expected once their memory
    /// is back.
    expected: BTreeMap<u32, u64>,
    /// PIDs whose NVML listing must go: targets and zombies that matched.
    watched: BTreeSet<u32>,
    /// Every identity the run meant to free (planned or joined).
    meant: BTreeSet<(u32, u64)>,
    /// Children the targets had before the kill (not targets themselves).
    children: BTreeMap<(u32, u64), u32>,
    /// The GPUs the command is about, when only GPUs were selected.
    gpus: Option<Vec<u32>>,
}

impl Release {
    fn new(
        initial: &Snapshot,
        signalled: &[Process],
        report: &Report,
        sel: &Selectors,
        meant: BTreeSet<(u32, u64)>,
    ) -> Release {
        let mut watched: BTreeSet<u32> = signalled.iter().map(|p| p.pid).collect();
        // Matched zombies that NVML lists: their memory is part of the ask.
        watched.extend(report.skipped.iter().filter(|k| !k.refused).map(|k| k.pid));
        let mut expected = BTreeMap::new();
        for g in &initial.gpus {
            let theirs: u64 = g
                .nvml_processes
                .iter()
                .filter(|p| watched.contains(&p.pid))
                .filter_map(|p| p.used_bytes)
                .fold(0, u64::saturating_add);
            let touched = theirs > 0
                || signalled.iter().any(|p| p.touches_gpu(g.index))
                || g.nvml_processes.iter().any(|p| watched.contains(&p.pid));
            if touched {
                expected.insert(g.index, g.memory.used_bytes.saturating_sub(theirs));
            }
        }
        let children = initial
            .processes
            .iter()
            .filter_map(|p| {
                signalled
                    .iter()
                    .find(|t| t.pid == p.ppid)
                    .map(|t| ((p.pid, p.start_time_ticks), t.pid))
            })
            .collect();
        Release {
            expected,
            watched,
            meant,
            children,
            gpus: sel
                .gpus_only()
                .then(|| sel.gpus.clone().unwrap_or_default()),
        }
    }

    /// What still holds the watched memory on these GPUs (empty: it is
    /// back). A GPU whose memory cannot be read is held until it can be.
    fn memory_held(&self, gpus: &[crate::model::Gpu], nvml: bool) -> Vec<String> {
        let mut held = Vec::new();
        for (&index, &expected) in &self.expected {
            let Some(g) = gpus.iter().find(|g| g.index == index).filter(|_| nvml) else {
                held.push(format!("GPU {index}: NVML did not report it"));
                continue;
            };
            if !g.memory.known {
                held.push(format!("GPU {index}: its memory could not be read"));
                continue;
            }
            let listed: Vec<u32> = g
                .nvml_processes
                .iter()
                .filter(|p| self.watched.contains(&p.pid))
                .map(|p| p.pid)
                .collect();
            let limit = expected.saturating_add(IDLE_SLACK_BYTES);
            if !listed.is_empty() || g.memory.used_bytes > limit {
                held.push(format!(
                    "GPU {index}: {} used (expected at most {}){}",
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
        held
    }

    /// How `p`, not a target, keeps the release from counting, if it does:
    /// a child the targets had, or a process started during the kill by a
    /// target's parent, in a target's unit, pod or container, or with its
    /// user and cgroup (a fork that left the session), that holds what the
    /// target held.
    fn stranger<'a>(
        &self,
        end: &'a Snapshot,
        p: &Process,
        signalled: &'a [Process],
        first_tick: u64,
    ) -> Option<Stranger<'a>> {
        if !p.is_live() || p.protected {
            return None;
        }
        if let Some(&parent) = self.children.get(&(p.pid, p.start_time_ticks)) {
            return Some(Stranger::Child { parent });
        }
        // A CUDA context maps its GPU's node or has memory; a monitor
        // (nvidia-smi, nvtop, gpufree serve) only opens nodes, and the
        // control nodes (nvidiactl, nvidia-uvm) are everyone's.
        let context = p.memory_bytes() > 0
            || p.devices
                .iter()
                .any(|d| d.gpu.is_some() && d.via.contains(&crate::model::Via::Mmap));
        if !context {
            return None;
        }
        let gpus = crate::diagnose::gpus_of(p);
        let shares = |t: &Process| crate::diagnose::gpus_of(t).iter().any(|g| gpus.contains(g));
        let same_owner = |t: &Process| {
            matches!(
                t.owner.kind,
                OwnerKind::SystemdUnit | OwnerKind::Container | OwnerKind::K8sPod
            ) && t.owner.kind == p.owner.kind
                && t.owner.id == p.owner.id
        };
        let t = signalled.iter().find(|t| {
            shares(t)
                && p.start_time_ticks >= first_tick
                && (p.ppid == t.pid
                    || p.ppid == t.ppid
                    || same_owner(t)
                    || (p.uid == t.uid && p.cgroup == t.cgroup))
        })?;
        let by_parent = p.ppid == t.ppid && p.ppid > 1;
        // A unit whose files say Restart=no did not start it again.
        let restarting_unit = t
            .owner
            .system_unit()
            .filter(|u| same_owner(t) && end.units.get(*u).is_none_or(|r| r.restart != "no"));
        Some(if by_parent {
            Stranger::ByParent {
                target: t.pid,
                parent: p.ppid,
            }
        } else if let Some(unit) = restarting_unit {
            Stranger::ByUnit {
                target: t.pid,
                unit,
            }
        } else {
            Stranger::Beside { target: t.pid }
        })
    }

    /// Why `p`, not a target, keeps the release from counting, in words
    /// with what stops its supervisor; None when it does not.
    fn restarted(
        &self,
        end: &Snapshot,
        p: &Process,
        signalled: &[Process],
        first_tick: u64,
    ) -> Option<String> {
        let holds = reason(p);
        let holds = holds.trim_start_matches("holds ");
        let gpus = crate::diagnose::gpus_of(p);
        let by_parent = |parent: u32| {
            format!(
                "stop PID {parent} first, then free the GPU: `gpufree kill {}`",
                crate::diagnose::gpu_args(&gpus).join(" ")
            )
        };
        Some(match self.stranger(end, p, signalled, first_tick)? {
            Stranger::Child { parent } => format!(
                "PID {} ({}), a child of target {parent}, still holds {holds}; it was not a target (free the GPU with --gpu, or name it)",
                p.pid, p.comm
            ),
            // A supervisor goes first; its workers, orphaned then, are
            // freed by GPU.
            Stranger::ByParent { target, parent } => format!(
                "PID {} ({}) holds {holds}: target {target}'s parent, PID {parent} ({}), started it again during the kill; a supervisor restarts what dies: {}",
                p.pid,
                p.comm,
                end.comm_of(parent).unwrap_or("?"),
                by_parent(parent)
            ),
            Stranger::ByUnit { target, unit } => format!(
                "PID {} ({}) holds {holds}: target {target}'s unit {unit} started it again during the kill; a supervisor restarts what dies: {}",
                p.pid,
                p.comm,
                crate::diagnose::supervisors::stop_unit(unit, &gpus)
                    .map_or_else(|| by_parent(p.ppid), |cmd| format!("`{cmd}`"))
            ),
            Stranger::Beside { target } => format!(
                "PID {} ({}), started during the kill beside target {target}, holds {holds}",
                p.pid, p.comm
            ),
        })
    }

    /// The end verdict from a fresh snapshot.
    fn judge(
        &self,
        end: &Snapshot,
        report: &Report,
        signalled: &[Process],
        first_tick: u64,
        holders_only: bool,
    ) -> crate::model::Verdict {
        let policy = Policy {
            holders_only,
            ..Policy::default()
        };
        let unchecked: Vec<String> = report
            .unchecked
            .iter()
            .map(|u| format!("PID {} {}; it was not signalled", u.pid, u.why))
            .collect();
        if let Some(gpus) = &self.gpus {
            // "Free these GPUs": their verdict is the answer.
            let v = verdict::overall(&select(end.clone(), gpus), &policy);
            let (busy, unknown) = match v.state {
                // Name what started a holder again, where it did.
                VerdictState::Busy => (
                    end.processes
                        .iter()
                        .filter(|p| gpus.iter().any(|&g| p.touches_gpu(g)))
                        .filter_map(|p| self.restarted(end, p, signalled, first_tick))
                        .chain(v.reasons)
                        .collect(),
                    unchecked,
                ),
                _ => (Vec::new(), unchecked.into_iter().chain(v.reasons).collect()),
            };
            return verdict::finish(busy, unknown, v.caveats);
        }
        let mut busy = Vec::new();
        let mut unknown = unchecked;
        let listed = |pid: u32| {
            end.gpus
                .iter()
                .any(|g| g.nvml_processes.iter().any(|n| n.pid == pid))
        };
        for p in &end.processes {
            let meant = self.meant.contains(&(p.pid, p.start_time_ticks));
            if report.changed.iter().any(|c| c.pid == p.pid) && listed(p.pid) {
                busy.push(format!(
                    "PID {} changed before the signal (it exec'd or let go) and was not signalled, but NVML still lists it with memory",
                    p.pid
                ));
            } else if meant && p.is_live() {
                busy.push(format!(
                    "PID {} ({}) still holds {}{}",
                    p.pid,
                    p.comm,
                    reason(p).trim_start_matches("holds "),
                    if p.state == "D" {
                        format!(
                            ", in uninterruptible sleep{}: SIGKILL acts when that kernel wait ends (usually seconds); one that lasts minutes is a hung driver call, which only a reset ends (`gpufree why` prints the plan)",
                            p.wchan.as_deref().map(|w| format!(" in {w}")).unwrap_or_default()
                        )
                    } else {
                        String::new()
                    }
                ));
            } else if self.watched.contains(&p.pid) && !p.is_live() && listed(p.pid) {
                busy.push(format!(
                    "zombie PID {} is still listed by NVML with its memory: its parent PID {} must reap it",
                    p.pid, p.ppid
                ));
            } else if let Some(why) = self.restarted(end, p, signalled, first_tick) {
                busy.push(why);
            }
        }
        // The targets' memory, from the end snapshot's NVML: what cannot be
        // read leaves the release unknown, unless the holders alone count.
        for held in self.memory_held(&end.gpus, end.nvml.available) {
            if !held.contains("NVML did not report") && !held.contains("could not be read") {
                busy.push(held);
            } else if !holders_only {
                unknown.push(format!(
                    "the release cannot be proven: {held}{}; --holders-only accepts the holders alone",
                    end.nvml
                        .error
                        .as_deref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                ));
            }
        }
        verdict::finish(busy, unknown, Vec::new())
    }
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
        // A user's unit of the same name is another owner, named in full.
        let mut mine = s.clone();
        let mut u = p(103, 10, Some(0), 5);
        u.owner = Owner {
            kind: OwnerKind::SystemdUnit,
            id: "vllm.service".into(),
            name: "vllm.service (user 1000)".into(),
        };
        mine.processes.push(u);
        assert_eq!(pids(&plan(&mine, &unit, &safety())), vec![101]);
        let full = Selectors {
            unit: Some("vllm.service (user 1000)".into()),
            ..Selectors::default()
        };
        assert_eq!(pids(&plan(&mine, &full, &safety())), vec![103]);
        assert!(check_unit(&mine, "vllm").is_ok());
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
            .any(|k| k.pid == 777 && !k.refused && k.reason.contains("never a target")));
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

    #[test]
    fn a_known_supervisor_is_given_its_restart_delay_and_a_start_up() {
        assert_eq!(restart_sec("5"), Duration::from_secs(5));
        assert_eq!(restart_sec("100ms"), Duration::from_millis(100));
        assert_eq!(restart_sec("1min 30s"), Duration::from_secs(90));
        assert_eq!(restart_sec("soon"), Duration::from_millis(100));
        let mut t = p(10, 1, Some(0), 1 << 30);
        t.owner = crate::model::Owner {
            kind: OwnerKind::SystemdUnit,
            id: "vllm.service".into(),
            name: "vllm.service".into(),
        };
        let mut s = snap(vec![t.clone()]);
        assert_eq!(
            known_restart_watch(&s, &[t.clone()]),
            Duration::ZERO,
            "no unit file read"
        );
        let unit = |restart: &str, sec: Option<&str>| crate::model::UnitRestart {
            restart: restart.into(),
            restart_sec: sec.map(str::to_string),
            source: String::new(),
            unreadable: Vec::new(),
        };
        s.units.insert("vllm.service".into(), unit("no", None));
        assert_eq!(known_restart_watch(&s, &[t.clone()]), Duration::ZERO);
        s.units
            .insert("vllm.service".into(), unit("always", Some("2s")));
        assert_eq!(
            known_restart_watch(&s, &[t.clone()]),
            Duration::from_secs(2) + SUSPECT_WATCH
        );
        t.owner.kind = OwnerKind::K8sPod;
        assert_eq!(known_restart_watch(&s, &[t]), SUSPECT_WATCH);
    }

    /// NVML sizes near u64::MAX (a lying or broken driver) neither
    /// overflow the targets' listed memory nor the expected memory plus
    /// its slack, in a debug build.
    #[test]
    fn release_of_huge_nvml_sizes_does_not_overflow() {
        use crate::model::{Gpu, Memory, NvmlProcess, NvmlProcessKind};
        let listed = |pid| NvmlProcess {
            pid,
            used_bytes: Some(u64::MAX),
            kind: NvmlProcessKind::Compute,
        };
        let full = |index, pids: Vec<u32>| Gpu {
            index,
            memory: Memory {
                used_bytes: u64::MAX,
                known: true,
                ..Memory::default()
            },
            nvml_processes: pids.into_iter().map(listed).collect(),
            ..Gpu::default()
        };
        // GPU 0: both targets listed at u64::MAX; GPU 1: full, listing
        // only a process that is no target.
        let s = Snapshot {
            gpus: vec![full(0, vec![101, 102]), full(1, vec![999])],
            ..snap(vec![p(101, 10, Some(0), 5), p(102, 10, Some(1), 5)])
        };
        let r = Release::new(
            &s,
            &s.processes,
            &Report::default(),
            &Selectors::default(),
            BTreeSet::new(),
        );
        assert_eq!(r.expected[&0], 0);
        assert_eq!(r.expected[&1], u64::MAX);
        let mut after = s.gpus.clone();
        after[0].nvml_processes.clear();
        after[0].memory.used_bytes = 0;
        assert!(r.memory_held(&after, true).is_empty());
        after[0].memory.used_bytes = 1 << 40;
        assert_eq!(r.memory_held(&after, true).len(), 1);
    }
}
