//! The diagnosis: a pure function from a [`Snapshot`] to ordered findings,
//! each with its evidence and the exact next command. It never reads /proc
//! or NVML, so every finding is tested from a snapshot value.
//!
//! It names the true cause first: live holders (grouped by what started
//! them), renamed holders, device-node holders, orphans, zombies, D and T
//! states, processes outside this PID namespace, protected daemons. Only when
//! memory is used with no holder at all, and the view is complete, may it
//! speak of a driver-level leak and print a GPU reset for the operator (never
//! run by gpufree).

use crate::model::{Finding, OwnerKind, Process, Severity, Snapshot, VerdictState};
use crate::safe::{shell_command, shell_word};
use crate::units::{gib, mib};
use regex::Regex;
use std::collections::{BTreeMap, HashMap};

pub(crate) mod supervisors;
pub mod verdict;

pub use verdict::IDLE_SLACK_BYTES;

/// Options of the diagnosis.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `why --pattern`: the pattern as typed and compiled.
    pub pattern: Option<(String, Regex)>,
}

/// GPU indexes as `0-7` or `0, 2, 5`.
pub fn gpu_list(gpus: &[u32]) -> String {
    let mut g = gpus.to_vec();
    g.sort_unstable();
    g.dedup();
    if g.len() > 2 && g.windows(2).all(|w| w[1] == w[0] + 1) {
        return format!("{}-{}", g[0], g[g.len() - 1]);
    }
    g.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

fn gpus_phrase(gpus: &[u32]) -> String {
    let list = gpu_list(gpus);
    if list.contains([',', '-']) {
        format!("GPUs {list}")
    } else {
        format!("GPU {list}")
    }
}

fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `--gpu N` for each of `gpus`: what a next command selects them with.
pub(crate) fn gpu_args(gpus: &[u32]) -> Vec<String> {
    let mut g = gpus.to_vec();
    g.sort_unstable();
    g.dedup();
    g.iter()
        .flat_map(|i| ["--gpu".to_string(), i.to_string()])
        .collect()
}

/// `FLAG VALUE` for a value from outside, or the one word `FLAG=VALUE`
/// when the value starts with `-` (so that it is never read as a flag).
fn flag(name: &str, value: &str) -> Vec<String> {
    if value.starts_with('-') {
        vec![format!("{name}={value}")]
    } else {
        vec![name.to_string(), value.to_string()]
    }
}

/// `gpufree SUB ARGS...` as a line a shell runs as exactly that argv;
/// None when a value cannot be printed safely (a control character in a
/// unit's name: the caller suggests the PIDs instead).
fn gpufree_command(args: &[String]) -> Option<String> {
    let mut argv = vec!["gpufree".to_string()];
    argv.extend(args.iter().cloned());
    shell_command(&argv)
}

/// `gpufree kill FLAG VALUE` for a value from outside; None when it cannot
/// be printed safely.
fn kill_by(name: &str, value: &str) -> Option<String> {
    gpufree_command(&[vec!["kill".into()], flag(name, value)].concat())
}

/// `gpufree ARGS...` of numbers and fixed words only: nothing to quote.
fn fixed_command(args: &[String]) -> String {
    debug_assert!(args
        .iter()
        .all(|a| shell_word(a).as_deref() == Some(a.as_str())));
    format!("gpufree {}", args.join(" "))
}

/// `s` in single quotes for a message (not for pasting): shell-quoted
/// where it can be, else as it is (the presenter escapes it).
fn quoted(s: &str) -> String {
    shell_word(s).unwrap_or_else(|| format!("'{s}'"))
}

/// The `gpufree kill` command that targets exactly these PIDs.
pub fn kill_command(pids: &[u32]) -> String {
    if pids.is_empty() {
        return String::new();
    }
    let mut cmd = String::from("gpufree kill");
    for p in pids {
        cmd.push_str(&format!(" --pid {p}"));
    }
    cmd
}

pub(crate) fn gpus_of(p: &Process) -> Vec<u32> {
    let mut g: Vec<u32> = p.gpu_memory.iter().map(|m| m.gpu).collect();
    g.extend(p.devices.iter().filter_map(|d| d.gpu));
    g.sort_unstable();
    g.dedup();
    g
}

fn gpus_of_all<'a>(ps: impl IntoIterator<Item = &'a Process>) -> Vec<u32> {
    let mut g: Vec<u32> = ps.into_iter().flat_map(gpus_of).collect();
    g.sort_unstable();
    g.dedup();
    g
}

/// What `pkill -f` matches: the command line joined by spaces, or comm when
/// the command line is empty (kernel threads, zombies), as procps-ng 4
/// shows it to the regex (measured against `pgrep -f` 4.0.2): a line break
/// becomes a space, any other control character (C0, DEL, C1) a `?`;
/// other characters stay as they are, and the regex matches characters,
/// not bytes. (Where a command line is not UTF-8, procps may fall back to
/// a `?` per byte, and gpufree keeps such a byte as the text `\xHH`:
/// there the prediction can differ.)
pub fn pkill_f_text(comm: &str, cmdline: &[String]) -> String {
    if cmdline.is_empty() {
        pkill_text(comm, '?')
    } else {
        pkill_text(&cmdline.join(" "), ' ')
    }
}

/// What plain `pkill` (without -f) matches: comm, shown as `pkill -f`
/// shows text, except that a line break there is a `?` too.
pub fn pkill_comm_text(comm: &str) -> String {
    pkill_text(comm, '?')
}

fn pkill_text(s: &str, line_break: char) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push(line_break),
            c if c.is_control() => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// `96,610 MiB on GPU 0, 2,048 MiB on GPU 1`: a process's GPU memory.
pub fn memory_on_gpus(p: &Process) -> String {
    p.gpu_memory
        .iter()
        .map(|m| {
            format!(
                "{} on GPU {}",
                m.used_bytes.map_or("n/a".into(), mib),
                m.gpu
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A short description: `9635 VLLM::Worker_TP ('VLLM::Worker_TP0')`.
fn who(p: &Process) -> String {
    let cmd = p.cmdline_joined();
    let mut s = if cmd.is_empty() || cmd == p.comm {
        format!("{} {}", p.pid, p.comm)
    } else {
        format!("{} {} ('{}')", p.pid, p.comm, shorten(&cmd, 60))
    };
    if let Some(role) = role(p) {
        s.push_str(&format!(" [{role}]"));
    }
    if p.nspid.len() > 1 {
        s.push_str(&format!(
            " = PID {} in its container",
            p.nspid[p.nspid.len() - 1]
        ));
    }
    s
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(max).collect::<String>())
    }
}

/// Well-known helper processes, named for the operator.
fn role(p: &Process) -> Option<&'static str> {
    shape(&p.comm, &p.cmdline_joined())
}

/// What a process is in the common frameworks' process trees, by its comm
/// (what a title sets) and command line.
fn shape(comm: &str, cmd: &str) -> Option<&'static str> {
    let has = |s: &str| cmd.contains(s);
    let starts = |s: &str| comm.starts_with(s) || cmd.starts_with(s);
    Some(if has("multiprocessing.resource_tracker") {
        "multiprocessing resource tracker"
    } else if has("torch/utils/data") || comm.starts_with("pt_data_worker") {
        "DataLoader worker"
    } else if has("multiprocessing.forkserver") || has("from multiprocessing.spawn") {
        "multiprocessing spawn child"
    } else if starts("VLLM::Worker") {
        "vLLM worker"
    } else if starts("VLLM::EngineCor") {
        // (comm keeps 15 bytes: "VLLM::EngineCore" loses its last letter)
        "vLLM engine core"
    } else if has("vllm.entrypoints") || cmd.starts_with("vllm serve") || has("bin/vllm serve") {
        "vLLM API server"
    } else if has("sglang.launch_server") {
        "SGLang server"
    } else if starts("sglang::") {
        "SGLang process"
    } else if starts("ray::") {
        "Ray worker"
    } else if comm == "raylet" || has("/raylet") {
        "Ray raylet"
    } else if comm == "torchrun" || has("torch.distributed.run") || has("bin/torchrun") {
        "torchrun elastic agent"
    } else if comm == "deepspeed" || has("deepspeed.launcher") {
        "DeepSpeed launcher"
    } else if has("accelerate launch") || has("accelerate/commands/launch") {
        "accelerate launcher"
    } else if matches!(
        comm,
        "mpirun" | "mpiexec" | "orterun" | "prterun" | "hydra_pmi_proxy"
    ) {
        "MPI launcher"
    } else if comm == "srun" {
        "Slurm step launcher"
    } else if has("ipykernel_launcher") || has("ipykernel") {
        "Jupyter kernel"
    } else {
        return None;
    })
}

/// What started a group of holders.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Group {
    /// A unit, container, pod or job (from the cgroup).
    Owner(OwnerKind, String, String),
    /// A process tree: its topmost holder.
    Tree(u32),
    /// Holders started by a process that holds nothing itself (a torchrun
    /// agent, an mpirun, a Python launcher): that process.
    Launcher(u32),
    /// Trees of holders whose parent died (now children of init or a
    /// subreaper): that reaper's PID and the user's UID.
    Orphans(u32, u32),
}

/// Parents that start everything and launch nothing in particular: a
/// holder under one of these is its own group.
const NOT_LAUNCHERS: &[&str] = &[
    "systemd",
    "init",
    "bash",
    "sh",
    "dash",
    "zsh",
    "fish",
    "ksh",
    "mksh",
    "tcsh",
    "csh",
    "ash",
    "busybox",
    "sshd",
    "sudo",
    "su",
    "login",
    "tmux: server",
    "screen",
    "SCREEN",
    "containerd-shim",
    "conmon",
    "runc",
    "tini",
    "dumb-init",
    "docker-init",
    "catatonit",
    "s6-svscan",
    "runsvdir",
    "supervisord",
    "cron",
    "slurmstepd",
    "sshd-session",
];

struct Ctx<'a> {
    s: &'a Snapshot,
    by_pid: HashMap<u32, &'a Process>,
}

impl<'a> Ctx<'a> {
    fn group(&self, p: &Process) -> Group {
        if matches!(
            p.owner.kind,
            OwnerKind::SystemdUnit | OwnerKind::Container | OwnerKind::K8sPod | OwnerKind::SlurmJob
        ) {
            return Group::Owner(p.owner.kind, p.owner.id.clone(), p.owner.name.clone());
        }
        let mut root = p;
        for _ in 0..64 {
            match self.by_pid.get(&root.ppid) {
                Some(parent) if !parent.protected && parent.pid != root.pid => root = parent,
                _ => break,
            }
        }
        if root.orphaned {
            return Group::Orphans(root.ppid, root.uid);
        }
        Group::Tree(root.pid)
    }

    /// The process that started the tree topped by `root`, if it holds
    /// nothing itself and is not a shell, init or session (see
    /// [`NOT_LAUNCHERS`]).
    fn launcher_of(&self, root: u32) -> Option<u32> {
        let ppid = self.by_pid.get(&root)?.ppid;
        match self.s.parents.get(&ppid) {
            // PID 1 counts: in a container, the launcher is often its init.
            Some(k) if ppid > 0 && !NOT_LAUNCHERS.contains(&k.comm.as_str()) => Some(ppid),
            _ => None,
        }
    }

    fn group_name(&self, g: &Group, members: &[&Process]) -> String {
        match g {
            Group::Owner(_, _, name) => name.clone(),
            Group::Tree(root) => match self.by_pid.get(root) {
                Some(r) if members.len() > 1 || members.iter().any(|m| m.pid != *root) => {
                    match role(r) {
                        Some(what) => format!("launcher {} ({}) [{what}]", r.pid, r.comm),
                        None => format!("launcher {} ({})", r.pid, r.comm),
                    }
                }
                Some(r) => format!("{} ({})", r.pid, r.comm),
                None => format!("PID {root}"),
            },
            Group::Launcher(pid) => match self.s.parents.get(pid) {
                Some(k) => match shape(&k.comm, &k.cmdline.join(" ")) {
                    Some(what) => format!("launcher {pid} ({}) [{what}]", k.comm),
                    None => format!("launcher {pid} ({})", k.comm),
                },
                None => format!("launcher {pid}"),
            },
            Group::Orphans(reaper, _) => match self.s.parents.get(reaper) {
                Some(k) => format!("a dead parent (now under PID {reaper} ({}))", k.comm),
                None => format!("a dead parent (now under PID {reaper})"),
            },
        }
    }

    fn group_kill(&self, g: &Group, members: &[&Process]) -> String {
        let by_unit = match g {
            Group::Owner(OwnerKind::SystemdUnit, id, name) if id != name => kill_by("--unit", name),
            Group::Owner(_, id, _) => kill_by("--unit", id),
            Group::Tree(_) | Group::Orphans(..) => None,
            // Every holder below it, as one selector (a worker it starts
            // again is below it too), when the group is all that is below
            // it; else exactly the group's PIDs.
            Group::Launcher(pid) => {
                let below_only_members = self
                    .s
                    .processes
                    .iter()
                    .filter(|q| q.is_live() && !q.protected && self.s.descends_from(q.pid, *pid))
                    .all(|q| members.iter().any(|m| m.pid == q.pid));
                below_only_members
                    .then(|| fixed_command(&["kill".into(), "--tree".into(), pid.to_string()]))
            }
        };
        by_unit.unwrap_or_else(|| {
            let mut pids: Vec<u32> = members
                .iter()
                .filter(|p| !p.protected)
                .map(|p| p.pid)
                .collect();
            pids.sort_unstable();
            kill_command(&pids)
        })
    }
}

/// What started each holder of a snapshot, looked up through one PID map.
pub struct Groups<'a>(Ctx<'a>);

impl<'a> Groups<'a> {
    /// Indexes the holders of `s`.
    pub fn new(s: &'a Snapshot) -> Groups<'a> {
        Groups(Ctx {
            s,
            by_pid: s.processes.iter().map(|q| (q.pid, q)).collect(),
        })
    }

    /// A stable key for what started `p`: its unit, container, pod or job,
    /// or the top of its tree of holders (the launcher).
    pub fn key(&self, p: &Process) -> String {
        match self.0.group(p) {
            Group::Owner(kind, id, _) => format!("{}:{id}", kind.as_str()),
            Group::Tree(root) => format!("tree:{root}"),
            Group::Launcher(pid) => format!("launcher:{pid}"),
            Group::Orphans(reaper, uid) => format!("orphans:{reaper}:{uid}"),
        }
    }
}

fn finding(
    kind: &str,
    severity: Severity,
    message: String,
    pids: Vec<u32>,
    gpus: Vec<u32>,
    next: String,
) -> Finding {
    Finding {
        kind: kind.into(),
        severity,
        message,
        pids,
        gpus,
        next,
        details: Vec::new(),
        bytes: 0,
    }
}

fn with(mut f: Finding, details: Vec<String>, bytes: u64) -> Finding {
    const MAX: usize = 12;
    if details.len() > MAX {
        let more = details.len() - MAX;
        f.details = details.into_iter().take(MAX).collect();
        f.details.push(format!("... and {more} more"));
    } else {
        f.details = details;
    }
    f.bytes = bytes;
    f
}

/// Diagnoses a snapshot with default options.
pub fn diagnose(s: &Snapshot) -> Vec<Finding> {
    diagnose_with(s, &Options::default())
}

/// Diagnoses a snapshot; the finding that explains the most memory, most
/// surely, comes first.
pub fn diagnose_with(s: &Snapshot, opts: &Options) -> Vec<Finding> {
    let ctx = Ctx {
        s,
        by_pid: s.processes.iter().map(|p| (p.pid, p)).collect(),
    };
    let mut out = Vec::new();
    live_holders(&ctx, &mut out);
    renamed(s, &mut out);
    if let Some((text, re)) = &opts.pattern {
        pattern(s, text, re, &mut out);
    }
    node_only(&ctx, &mut out);
    orphans(&ctx, &mut out);
    zombies(s, &mut out);
    blocked(s, &mut out);
    protected(s, &mut out);
    let overall = verdict::overall(s, &verdict::Policy::default());
    partial_view(s, overall.state, &mut out);
    outside_namespace(s, &mut out);
    stale_pids(s, &mut out);
    unaccounted(s, &mut out);
    if overall.state == VerdictState::Free {
        let gpus: Vec<u32> = s.gpus.iter().map(|g| g.index).collect();
        out.push(finding(
            "free",
            Severity::Info,
            if overall.caveats.is_empty() {
                format!("{} free: no process holds memory or a device node, used memory at the idle baseline", gpus_phrase(&gpus))
            } else {
                format!("{} free: NVML shows no process with memory and the memory at the idle baseline; processes gpufree could not read may still hold device nodes ({})", gpus_phrase(&gpus), overall.caveats.join("; "))
            },
            Vec::new(),
            gpus,
            String::new(),
        ));
    }
    out.sort_by_key(|f| (std::cmp::Reverse(f.severity), std::cmp::Reverse(f.bytes)));
    out
}

fn live_holders(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    let s = ctx.s;
    let mut groups: BTreeMap<Group, Vec<&Process>> = BTreeMap::new();
    for p in s.processes.iter().filter(|p| p.is_live()) {
        groups.entry(ctx.group(p)).or_default().push(p);
    }
    // Trees whose tops share a parent that holds nothing (the ranks of a
    // torchrun agent, the workers of a Python launcher) are one group: that
    // launcher's. A single tree keeps its own top.
    // Only siblings of one kind (the same comm: ranks and workers look
    // alike) count as one launcher's: two different programs under one
    // parent are two jobs.
    let mut by_launcher: BTreeMap<(u32, String), Vec<Group>> = BTreeMap::new();
    for g in groups.keys() {
        if let Group::Tree(root) = g {
            if let (Some(l), Some(top)) = (ctx.launcher_of(*root), ctx.by_pid.get(root)) {
                // Ray's busy and idle workers, vLLM's workers: one kind.
                let kind = role(top).map_or_else(|| top.comm.clone(), str::to_string);
                by_launcher.entry((l, kind)).or_default().push(g.clone());
            }
        }
    }
    for ((l, _), trees) in by_launcher.into_iter().filter(|(_, t)| t.len() > 1) {
        if groups.contains_key(&Group::Launcher(l)) {
            continue; // two kinds under one launcher: the second stays apart
        }
        let mut merged = Vec::new();
        for t in trees {
            merged.extend(groups.remove(&t).unwrap_or_default());
        }
        groups.insert(Group::Launcher(l), merged);
    }
    for (g, members) in &groups {
        let holding: Vec<&&Process> = members
            .iter()
            .filter(|p| p.memory_bytes() > 0 && !p.protected)
            .collect();
        if holding.is_empty() {
            continue;
        }
        let bytes: u64 = crate::model::saturating_sum(holding.iter().map(|p| p.memory_bytes()));
        let gpus = gpus_of_all(holding.iter().map(|p| **p));
        let mut details: Vec<String> = holding
            .iter()
            .map(|p| format!("{}: {}", who(p), memory_on_gpus(p)))
            .collect();
        if let Group::Launcher(pid) = g {
            details.push(format!(
                "launcher {pid} holds no GPU, so gpufree never signals it; if it starts workers again, stop it as well"
            ));
        }
        let orphans = matches!(g, Group::Orphans(..));
        // Something that starts them again is stopped first.
        let supervisor = supervisors::of(s, g, members, &gpus);
        let message = format!(
            "{} of {} {} {} on {}{}",
            count(holding.len(), "live process", "live processes"),
            ctx.group_name(g, members),
            if holding.len() == 1 { "holds" } else { "hold" },
            gib(bytes),
            gpus_phrase(&gpus),
            match &supervisor {
                Some(sup) => format!("; {}", sup.what),
                None if orphans => format!(
                    ": nothing that started {} is left to stop {0}",
                    if holding.len() == 1 { "it" } else { "them" }
                ),
                None => String::new(),
            }
        );
        let next = match supervisor {
            Some(sup) => {
                details.insert(0, format!("restarts: {} ({})", sup.what, sup.evidence));
                sup.next
            }
            None => ctx.group_kill(g, members),
        };
        let f = finding(
            if orphans { "orphans" } else { "live-holders" },
            Severity::Error,
            message,
            holding.iter().map(|p| p.pid).collect(),
            gpus,
            next,
        );
        out.push(with(f, details, bytes));
    }
}

fn renamed(s: &Snapshot, out: &mut Vec<Finding>) {
    let renamed: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| p.renamed && p.is_live())
        .collect();
    if renamed.is_empty() {
        return;
    }
    let grep = renamed
        .iter()
        .filter(|p| p.cmdline_joined().contains("python"))
        .count();
    let mut details: Vec<String> = renamed
        .iter()
        .map(|p| {
            format!(
                "{}: comm '{}', cmdline '{}', exe {}",
                p.pid,
                p.comm,
                shorten(&p.cmdline_joined(), 60),
                p.exe.as_deref().unwrap_or("?")
            )
        })
        .collect();
    details.insert(
        0,
        format!(
            "`ps aux | grep python` shows {} of them; `pkill` and `pkill -f` match the new comm and cmdline, never the exe",
            grep
        ),
    );
    let bytes = crate::model::saturating_sum(renamed.iter().map(|p| p.memory_bytes()));
    let f = finding(
        "renamed-holders",
        Severity::Warning,
        format!(
            "{} renamed {} (setproctitle): patterns written for the original command line, like `pkill -f 'python3.*vllm'`, miss {}",
            count(renamed.len(), "holder has", "holders have"),
            if renamed.len() == 1 { "itself" } else { "themselves" },
            if renamed.len() == 1 { "it" } else { "them" },
        ),
        renamed.iter().map(|p| p.pid).collect(),
        gpus_of_all(renamed.iter().copied()),
        kill_command(&renamed.iter().filter(|p| !p.protected).map(|p| p.pid).collect::<Vec<_>>()),
    );
    out.push(with(f, details, bytes));
}

fn pattern(s: &Snapshot, text: &str, re: &Regex, out: &mut Vec<Finding>) {
    let holders: Vec<&Process> = s.processes.iter().filter(|p| p.is_live()).collect();
    let f_hit = |p: &Process| re.is_match(&pkill_f_text(&p.comm, &p.cmdline));
    let comm_hit = |comm: &str| re.is_match(&pkill_comm_text(comm));
    let hits: Vec<&Process> = holders.iter().copied().filter(|p| f_hit(p)).collect();
    let misses: Vec<&Process> = holders.iter().copied().filter(|p| !f_hit(p)).collect();
    let comm_hits = holders.iter().filter(|p| comm_hit(&p.comm)).count();
    let collateral: Vec<String> = s
        .others
        .iter()
        .filter(|o| re.is_match(&pkill_f_text(&o.comm, &o.cmdline)))
        .map(|o| {
            format!(
                "also hits {} {} ('{}'), which holds no GPU",
                o.pid,
                o.comm,
                shorten(&pkill_f_text(&o.comm, &o.cmdline), 60)
            )
        })
        .collect();
    let mut details = Vec::new();
    for p in &misses {
        let why = if p.renamed {
            format!(
                "its cmdline is now '{}' (renamed)",
                shorten(&p.cmdline_joined(), 50)
            )
        } else {
            format!(
                "'{}' does not match",
                shorten(&pkill_f_text(&p.comm, &p.cmdline), 50)
            )
        };
        details.push(format!("misses {} {}: {why}", p.pid, p.comm));
    }
    for p in &hits {
        details.push(format!("hits {} {}", p.pid, p.comm));
    }
    if text.len() > 15 {
        details.push(format!("`pkill {}` (without -f) matches comm, at most 15 bytes: a pattern this long matches nothing", quoted(text)));
    }
    let n_collateral = collateral.len();
    details.extend(collateral);
    let bytes = crate::model::saturating_sum(misses.iter().map(|p| p.memory_bytes()));
    let severity = if misses.is_empty() && n_collateral == 0 {
        Severity::Info
    } else {
        Severity::Warning
    };
    let by_match = misses
        .is_empty()
        .then(|| kill_by("--match", text))
        .flatten();
    let next = if let Some(cmd) = by_match {
        cmd
    } else {
        kill_command(
            &holders
                .iter()
                .filter(|p| !p.protected)
                .map(|p| p.pid)
                .collect::<Vec<_>>(),
        )
    };
    let f = finding(
        "pattern",
        severity,
        format!(
            "`pkill -f {q}` would hit {} of {} holders and {}; `pkill {q}` (comm) would hit {} of {}",
            hits.len(),
            holders.len(),
            count(n_collateral, "other process", "other processes"),
            comm_hits,
            holders.len(),
            q = quoted(text),
        ),
        misses.iter().map(|p| p.pid).collect(),
        gpus_of_all(misses.iter().copied()),
        next,
    );
    out.push(with(f, details, bytes));
}

fn node_only(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    let s = ctx.s;
    let memory_groups: Vec<Group> = s
        .processes
        .iter()
        .filter(|p| p.memory_bytes() > 0 && p.is_live())
        .map(|p| ctx.group(p))
        .collect();
    let node_only: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| p.memory_bytes() == 0 && !p.devices.is_empty() && p.is_live() && !p.protected)
        .collect();
    let (with_group, alone): (Vec<&Process>, Vec<&Process>) = node_only
        .iter()
        .partition(|p| memory_groups.contains(&ctx.group(p)));
    if !with_group.is_empty() {
        let f = finding(
            "device-holders",
            Severity::Warning,
            format!(
                "{} GPU device nodes open without GPU memory, started with the memory holders: free {} together with the memory holders",
                count(with_group.len(), "process holds", "processes hold"),
                if with_group.len() == 1 { "it" } else { "them" }
            ),
            with_group.iter().map(|p| p.pid).collect(),
            gpus_of_all(with_group.iter().copied()),
            kill_command(&with_group.iter().map(|p| p.pid).collect::<Vec<_>>()),
        );
        out.push(with(
            f,
            with_group
                .iter()
                .map(|p| format!("{}: {}", who(p), nodes(p)))
                .collect(),
            0,
        ));
    }
    if !alone.is_empty() {
        let f = finding(
            "device-holders",
            Severity::Info,
            format!(
                "{} GPU device nodes open without GPU memory: not needed to free memory, but the driver keeps its files open until {}",
                count(alone.len(), "process holds", "processes hold"),
                if alone.len() == 1 { "it exits" } else { "they exit" }
            ),
            alone.iter().map(|p| p.pid).collect(),
            gpus_of_all(alone.iter().copied()),
            kill_command(&alone.iter().map(|p| p.pid).collect::<Vec<_>>()),
        );
        out.push(with(
            f,
            alone
                .iter()
                .map(|p| format!("{}: {}", who(p), nodes(p)))
                .collect(),
            0,
        ));
    }
}

fn nodes(p: &Process) -> String {
    p.devices
        .iter()
        .map(|d| {
            let name = d.path.rsplit('/').next().unwrap_or(&d.path);
            let via: Vec<String> = d
                .via
                .iter()
                .map(|v| format!("{v:?}").to_lowercase())
                .collect();
            format!("{name} ({})", via.join("+"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn orphans(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    let s = ctx.s;
    // Orphans with memory outside a unit, container, pod or job are a
    // group of their own (live_holders).
    let grouped = |p: &Process| {
        p.memory_bytes() > 0 && !p.protected && matches!(ctx.group(p), Group::Orphans(..))
    };
    let orphans: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| p.orphaned && p.is_live() && !grouped(p))
        .collect();
    if orphans.is_empty() {
        return;
    }
    let bytes = crate::model::saturating_sum(orphans.iter().map(|p| p.memory_bytes()));
    let f = finding(
        "orphans",
        Severity::Warning,
        format!(
            "{} whose parent died (reparented to init or a subreaper): the service that started {} is gone, and a restart will find the GPU full",
            count(orphans.len(), "holder", "holders"),
            if orphans.len() == 1 { "it" } else { "them" }
        ),
        orphans.iter().map(|p| p.pid).collect(),
        gpus_of_all(orphans.iter().copied()),
        kill_command(&orphans.iter().filter(|p| !p.protected).map(|p| p.pid).collect::<Vec<_>>()),
    );
    let details = orphans
        .iter()
        .map(|p| {
            format!(
                "{}: parent now {}, owner {}",
                who(p),
                p.ppid,
                if p.owner.name.is_empty() {
                    "-"
                } else {
                    &p.owner.name
                }
            )
        })
        .collect();
    out.push(with(f, details, bytes));
}

fn zombies(s: &Snapshot, out: &mut Vec<Finding>) {
    for p in s.processes.iter().filter(|p| p.state == "Z") {
        let listed = s
            .gpus
            .iter()
            .any(|g| g.nvml_processes.iter().any(|n| n.pid == p.pid));
        let (severity, message) = if p.threads > 1 {
            (
                Severity::Error,
                format!(
                    "{} is a zombie leader whose {} still {} and {} the GPU: killing the process ends {}",
                    p.pid,
                    count(p.threads as usize - 1, "other thread", "other threads"),
                    if p.threads == 2 { "runs" } else { "run" },
                    if p.threads == 2 { "holds" } else { "hold" },
                    if p.threads == 2 { "it" } else { "them" }
                ),
            )
        } else if listed {
            (
                Severity::Warning,
                format!("{} is a zombie that NVML still lists: the driver is releasing its memory; killing does nothing, parent {} must reap it", p.pid, p.ppid),
            )
        } else {
            (
                Severity::Info,
                format!("{} is a zombie: its memory is already released; killing does nothing, parent {} must reap it", p.pid, p.ppid),
            )
        };
        let next = if p.threads > 1 {
            kill_command(&[p.pid])
        } else {
            format!("kill -s CHLD {}", p.ppid)
        };
        let f = finding("zombies", severity, message, vec![p.pid], gpus_of(p), next);
        out.push(with(f, vec![who(p)], p.memory_bytes()));
    }
}

fn blocked(s: &Snapshot, out: &mut Vec<Finding>) {
    for p in s.processes.iter() {
        let wchan = p
            .wchan
            .as_deref()
            .map(|w| format!(" (waiting in {w})"))
            .unwrap_or_default();
        let (kind, message, next) = match p.state.as_str() {
            "D" => (
                "uninterruptible",
                format!("{} is in uninterruptible sleep{wchan}: SIGKILL takes effect only when it leaves that kernel wait, and its memory comes back after that; a wait that lasts minutes is a hung driver call, which only a GPU reset ends", p.pid),
                fixed_command(
                    &[
                        vec!["wait".to_string()],
                        gpu_args(&gpus_of(p)),
                        vec!["--timeout".into(), "300s".into()],
                    ]
                    .concat(),
                ),
            ),
            "T" | "t" => (
                "stopped",
                format!("{} is stopped{wchan}: it cannot handle SIGTERM until it gets SIGCONT", p.pid),
                kill_command(&[p.pid]),
            ),
            _ => continue,
        };
        let f = finding(
            kind,
            Severity::Warning,
            message,
            vec![p.pid],
            gpus_of(p),
            next,
        );
        out.push(with(f, vec![who(p)], p.memory_bytes()));
    }
}

fn protected(s: &Snapshot, out: &mut Vec<Finding>) {
    let prot: Vec<&Process> = s.processes.iter().filter(|p| p.protected).collect();
    if prot.is_empty() {
        return;
    }
    let stop: Vec<String> = prot
        .iter()
        .map(|p| format!("{}: stop with `{}`", who(p), stop_command(p)))
        .collect();
    let f = finding(
        "protected-holders",
        Severity::Info,
        format!(
            "{} ({}): never part of a kill by default; a GPU reset fails while {} the GPU",
            count(
                prot.len(),
                "driver daemon or display server holds the GPU",
                "driver daemons or display servers hold the GPU"
            ),
            prot.iter()
                .map(|p| p.comm.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if prot.len() == 1 {
                "it holds"
            } else {
                "they hold"
            }
        ),
        prot.iter().map(|p| p.pid).collect(),
        gpus_of_all(prot.iter().copied()),
        prot.first().map(|p| stop_command(p)).unwrap_or_default(),
    );
    let bytes = crate::model::saturating_sum(prot.iter().map(|p| p.memory_bytes()));
    out.push(with(f, stop, bytes));
}

/// The program a process runs: its exe's file name, or comm when the exe
/// cannot be read.
fn program(p: &Process) -> &str {
    let exe = p.exe.as_deref().unwrap_or(&p.comm);
    exe.rsplit('/').next().unwrap_or(exe)
}

/// How an operator stops a protected daemon (printed, never run).
fn stop_command(p: &Process) -> String {
    match program(p) {
        "nvidia-persistenced" => "systemctl stop nvidia-persistenced".into(),
        "nv-fabricmanager" => "systemctl stop nvidia-fabricmanager".into(),
        "nv-hostengine" => "systemctl stop nvidia-dcgm".into(),
        "nvidia-cuda-mps-control" | "nvidia-cuda-mps-server" => {
            "echo quit | nvidia-cuda-mps-control".into()
        }
        "Xorg" | "X" | "Xwayland" | "gnome-shell" | "kwin_wayland" => {
            "systemctl stop display-manager".into()
        }
        _ => fixed_command(&[
            "kill".into(),
            "--force-protected".into(),
            "--pid".into(),
            p.pid.to_string(),
        ]),
    }
}

/// Reports what could not be seen: a warning when it leaves the verdict
/// open, a note when NVML accounts for the memory all the same.
fn partial_view(s: &Snapshot, state: VerdictState, out: &mut Vec<Finding>) {
    let v = &s.visibility;
    let mut why = Vec::new();
    if !v.unreadable.is_empty() {
        let each: Vec<String> = v
            .unreadable
            .iter()
            .take(6)
            .map(|u| format!("PID {}: {}", u.pid, u.why))
            .collect();
        why.push(format!(
            "{} could not be read ({}{})",
            count(v.unreadable.len(), "process", "processes"),
            each.join("; "),
            if v.unreadable.len() > 6 { "; ..." } else { "" }
        ));
    }
    if v.hidepid && !v.root {
        why.push("/proc is mounted with hidepid: other users' processes are invisible".into());
    }
    if !s.nvml.available {
        why.push(format!(
            "NVML is unavailable ({})",
            s.nvml.error.as_deref().unwrap_or("?")
        ));
    }
    for u in &s.unavailable {
        let gpu = u.gpu.map(|g| format!("GPU {g} ")).unwrap_or_default();
        why.push(format!("{gpu}{}: {}", u.what, u.why));
    }
    if why.is_empty() {
        return;
    }
    let next = if v.root {
        "gpufree why --json  # see visibility and unavailable".into()
    } else {
        "sudo gpufree why".into()
    };
    let (severity, message) = match state {
        VerdictState::Unknown => (
            Severity::Warning,
            format!(
                "partial view: {}; gpufree cannot call these GPUs free or speak of a driver leak",
                why.join("; ")
            ),
        ),
        VerdictState::Free => (
            Severity::Info,
            format!(
                "not everything could be read: {}; NVML accounts for all used memory, so this does not change the verdict",
                why.join("; ")
            ),
        ),
        VerdictState::Busy => (
            Severity::Info,
            format!("not everything could be read: {}", why.join("; ")),
        ),
    };
    let f = finding(
        "partial-view",
        severity,
        message,
        v.unreadable_pids.iter().take(32).copied().collect(),
        Vec::new(),
        next,
    );
    out.push(f);
}

/// The memory NVML lists for `pids`, and the GPUs it is on.
fn listed_memory(s: &Snapshot, pids: &[u32]) -> (u64, Vec<u32>) {
    let mut bytes = 0;
    let mut gpus = Vec::new();
    for g in &s.gpus {
        for p in g.nvml_processes.iter().filter(|p| pids.contains(&p.pid)) {
            bytes = p.used_bytes.unwrap_or(0).saturating_add(bytes);
            gpus.push(g.index);
        }
    }
    gpus.sort_unstable();
    gpus.dedup();
    (bytes, gpus)
}

fn outside_namespace(s: &Snapshot, out: &mut Vec<Finding>) {
    let hidden = &s.visibility.nvml_pids_not_visible;
    if hidden.is_empty() {
        return;
    }
    let (bytes, gpus) = listed_memory(s, hidden);
    let f = finding(
        "outside-namespace",
        Severity::Error,
        format!(
            "NVML lists {} with {} that this /proc does not have: processes of another PID namespace (the host, or a container on an older driver); run gpufree on the host (or with hostPID) to see and free them",
            count(hidden.len(), "PID", "PIDs"),
            gib(bytes)
        ),
        hidden.clone(),
        gpus,
        "nsenter --target 1 --pid --mount -- gpufree why".into(),
    );
    out.push(with(f, Vec::new(), bytes));
}

fn stale_pids(s: &Snapshot, out: &mut Vec<Finding>) {
    let stale = &s.visibility.nvml_pids_stale;
    if stale.is_empty() {
        return;
    }
    let (bytes, gpus) = listed_memory(s, stale);
    let f = finding(
        "stale-nvml-pid",
        Severity::Error,
        format!(
            "NVML lists {} with {} whose process here holds no GPU device node: not that process's memory (it was never signalled for it), but kept by a process that had the PID before (reused since) or one that inherited its GPU files",
            count(stale.len(), "PID", "PIDs"),
            gib(bytes)
        ),
        stale.clone(),
        gpus.clone(),
        fixed_command(&[vec!["why".to_string()], gpu_args(&gpus)].concat()),
    );
    out.push(with(f, Vec::new(), bytes));
}

/// What must stop before `nvidia-smi --gpu-reset -i GPU` can work, in the
/// order to stop it: every process holding a node of that GPU or a shared
/// NVIDIA node (work first, then monitors such as a gpufree `serve` or
/// `watch`, DCGM and its exporter, then the fabric manager, the
/// persistence daemon last), then the reset itself. Printed for the
/// operator; gpufree never resets a GPU.
fn reset_plan(s: &Snapshot, gpu: u32) -> Vec<String> {
    let rank = |p: &Process| -> u8 {
        match program(p) {
            "nvidia-persistenced" => 5,
            "nv-fabricmanager" => 4,
            "nv-hostengine" | "dcgm-exporter" => 3,
            "gpufree" => 2,
            _ if p.protected => 1,
            _ => 0,
        }
    };
    let mut blockers: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| {
            p.is_live() && (p.touches_gpu(gpu) || p.devices.iter().any(|d| d.gpu.is_none()))
        })
        .collect();
    blockers.sort_by_key(|p| (rank(p), p.pid));
    let mut plan = vec![
        "printed for the operator, never run by gpufree; a reset needs root, no process using any GPU of the board, and on NVLink systems all GPUs of the fabric reset together".to_string(),
    ];
    if blockers.is_empty() {
        plan.push("blockers: none holds a GPU device node now".into());
    }
    for (i, p) in blockers.iter().enumerate() {
        let how = if p.protected {
            stop_command(p)
        } else {
            kill_command(&[p.pid])
        };
        plan.push(format!("{}. stop {}: `{how}`", i + 1, who(p)));
    }
    plan.push(format!(
        "{}. reset: `nvidia-smi --gpu-reset -i {gpu}`",
        blockers.len() + 1
    ));
    plan
}

fn unaccounted(s: &Snapshot, out: &mut Vec<Finding>) {
    let in_container = s.visibility.nested_pid_namespace;
    for g in &s.gpus {
        let m = &g.memory;
        if !m.known || m.unaccounted_bytes <= IDLE_SLACK_BYTES {
            continue;
        }
        let unexplained = verdict::unexplained_bytes(s, g);
        if unexplained <= IDLE_SLACK_BYTES {
            continue;
        }
        let holders: Vec<&Process> = s
            .processes
            .iter()
            .filter(|p| {
                // A driver daemon holds nodes, not contexts: it blocks a
                // reset (the plan names it) but explains no memory.
                p.is_live()
                    && !p.protected
                    && (p.touches_gpu(g.index)
                        || (p.gpu_memory.is_empty() && p.devices.iter().all(|d| d.gpu.is_none())))
            })
            .collect();
        let blind = verdict::blind_spots(s, g.index);
        let reset = format!("nvidia-smi --gpu-reset -i {}", g.index);
        // A CUDA context maps the device; an NVML monitor (gpufree serve,
        // nvidia-smi -l, nvtop) only opens the nodes.
        let (mapping, openers): (Vec<&Process>, Vec<&Process>) = holders.iter().partition(|p| {
            p.devices
                .iter()
                .any(|d| d.via.contains(&crate::model::Via::Mmap))
        });
        let (kind, severity, message, next, details) = if !openers.is_empty() && mapping.is_empty()
        {
            let mut details: Vec<String> = openers.iter().map(|p| who(p)).collect();
            details.extend(reset_plan(s, g.index));
            (
                "unaccounted-memory",
                Severity::Warning,
                format!(
                    "GPU {}: {} used that no visible process accounts for; {} its device nodes open without mapping them, as NVML monitors do (a CUDA context maps them): the driver likely holds the memory",
                    g.index,
                    mib(unexplained),
                    count(openers.len(), "process holds", "processes hold")
                ),
                reset.clone(),
                details,
            )
        } else if !holders.is_empty() {
            // They come first: they may own contexts NVML lists under no
            // PID gpufree can see.
            let targets: Vec<u32> = holders.iter().map(|p| p.pid).collect();
            (
                "unaccounted-memory",
                Severity::Warning,
                format!(
                    "GPU {}: {} used that no visible process accounts for; {} its device nodes and may own the contexts",
                    g.index,
                    mib(unexplained),
                    count(holders.len(), "process holds", "processes hold")
                ),
                kill_command(&targets),
                holders.iter().map(|p| who(p)).collect::<Vec<_>>(),
            )
        } else if in_container {
            (
                "unaccounted-memory",
                Severity::Warning,
                format!(
                    "GPU {}: {} used that no visible process accounts for; gpufree runs in a nested PID namespace: new drivers hide other namespaces' processes but count their memory",
                    g.index,
                    mib(unexplained)
                ),
                "nsenter --target 1 --pid --mount -- gpufree why".to_string(),
                Vec::new(),
            )
        } else if !blind.is_empty() && !s.visibility.root {
            (
                "unaccounted-memory",
                Severity::Warning,
                format!(
                    "GPU {}: {} used that no visible process accounts for; the view is partial: {}",
                    g.index,
                    mib(unexplained),
                    blind.join("; ")
                ),
                "sudo gpufree why".to_string(),
                Vec::new(),
            )
        } else if !blind.is_empty() {
            // Root, and still some process cannot be read (an outer
            // sandbox's init): the driver's memory is the likely answer,
            // with those processes named as what could prove it wrong.
            let mut plan: Vec<String> = s
                .visibility
                .unreadable
                .iter()
                .take(6)
                .map(|u| {
                    format!(
                        "caveat: PID {}{} could not be read ({}), even as root; it may hold the memory",
                        u.pid,
                        u.comm.as_deref().map(|c| format!(" ({c})")).unwrap_or_default(),
                        u.why
                    )
                })
                .collect();
            if s.visibility.unreadable.len() > 6 {
                plan.push(format!(
                    "caveat: and {} more processes could not be read",
                    s.visibility.unreadable.len() - 6
                ));
            }
            if plan.is_empty() {
                plan.push(format!("caveat: {}", blind.join("; ")));
            }
            plan.extend(reset_plan(s, g.index));
            (
                "driver-held-memory",
                Severity::Warning,
                format!(
                    "GPU {}: {} used with no process listed by NVML and no readable holder of any GPU device node: memory the driver holds, unless a process even root cannot read holds it",
                    g.index,
                    mib(unexplained)
                ),
                reset.clone(),
                plan,
            )
        } else {
            (
                "driver-leak",
                Severity::Error,
                format!(
                    "GPU {}: {} used with no process listed by NVML and no holder of any GPU device node: memory the driver has not released",
                    g.index,
                    mib(unexplained)
                ),
                reset.clone(),
                reset_plan(s, g.index),
            )
        };
        let f = finding(
            kind,
            severity,
            message,
            holders.iter().map(|p| p.pid).collect(),
            vec![g.index],
            next,
        );
        out.push(with(f, details, unexplained));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_paste_as_one_word() {
        assert_eq!(quoted("vllm.service"), "vllm.service");
        assert_eq!(
            quoted("vllm.service (user 1000)"),
            "'vllm.service (user 1000)'"
        );
        assert_eq!(quoted("$(reboot)"), "'$(reboot)'");
        assert_eq!(quoted(""), "''");
    }
    use crate::model::{
        DeviceUse, Gpu, GpuMemory, Memory, NvmlProcess, NvmlProcessKind, NvmlStatus, Owner, Via,
        Visibility,
    };

    const W: u64 = 96_610 << 20;

    fn is_free(f: &[Finding]) -> bool {
        f.iter().any(|x| x.kind == "free")
    }

    fn denied(pids: &[u32]) -> Vec<crate::model::Unreadable> {
        pids.iter()
            .map(|&pid| crate::model::Unreadable {
                pid,
                comm: None,
                reason: crate::model::UnreadableReason::Permission,
                why: "permission denied".into(),
            })
            .collect()
    }

    fn gpu(i: u32, used: u64, accounted: u64) -> Gpu {
        Gpu {
            index: i,
            memory: Memory {
                total_bytes: 102_642_810_880,
                used_bytes: used,
                accounted_bytes: accounted,
                unaccounted_bytes: used - accounted,
                known: true,
                ..Memory::default()
            },
            ..Gpu::default()
        }
    }

    fn base(gpus: Vec<Gpu>, processes: Vec<Process>) -> Snapshot {
        Snapshot {
            gpus,
            processes,
            nvml: NvmlStatus {
                available: true,
                ..NvmlStatus::default()
            },
            visibility: Visibility {
                root: true,
                ..Visibility::default()
            },
            ..Snapshot::default()
        }
    }

    fn node(gpu: Option<u32>, name: &str) -> DeviceUse {
        DeviceUse {
            path: format!("/dev/{name}"),
            gpu,
            via: vec![Via::Fd],
        }
    }

    fn worker(pid: u32, ppid: u32, gpu: u32) -> Process {
        Process {
            pid,
            ppid,
            comm: "VLLM::Worker_TP".into(),
            cmdline: vec![format!("VLLM::Worker_TP{gpu}")],
            exe: Some("/usr/bin/python3.12".into()),
            state: "S".into(),
            threads: 40,
            renamed: true,
            gpu_memory: vec![GpuMemory {
                gpu,
                used_bytes: Some(W),
            }],
            devices: vec![
                node(Some(gpu), &format!("nvidia{gpu}")),
                node(None, "nvidia-uvm"),
            ],
            ..Process::default()
        }
    }

    fn kin(ppid: u32, comm: &str) -> crate::model::Kin {
        crate::model::Kin {
            ppid,
            comm: comm.into(),
            start_time_ticks: 1,
            cmdline: Vec::new(),
        }
    }

    fn plain(pid: u32, ppid: u32, comm: &str, cmdline: &[&str]) -> Process {
        Process {
            pid,
            ppid,
            comm: comm.into(),
            cmdline: cmdline.iter().map(|s| s.to_string()).collect(),
            exe: Some("/usr/bin/python3.12".into()),
            state: "S".into(),
            threads: 1,
            devices: vec![node(None, "nvidia-uvm"), node(Some(0), "nvidia0")],
            ..Process::default()
        }
    }

    /// The seed incident as a snapshot value.
    fn incident() -> Snapshot {
        let mut procs = vec![
            Process {
                comm: "VLLM::EngineCor".into(),
                cmdline: vec!["VLLM::EngineCore".into()],
                renamed: true,
                ..plain(202_515, 4000, "", &[])
            },
            plain(
                212_437,
                202_515,
                "python3",
                &[
                    "/usr/bin/python3",
                    "-c",
                    "from multiprocessing.resource_tracker import main;main(25)",
                ],
            ),
        ];
        procs.extend((0..8).map(|i| worker(212_702 + i, 202_515, i)));
        base((0..8).map(|i| gpu(i, W, W)).collect(), procs)
    }

    #[test]
    fn seed_incident_live_renamed_workers_first_with_a_kill_of_exactly_the_ten() {
        let f = diagnose(&incident());
        assert_eq!(f[0].kind, "live-holders");
        assert_eq!(
            f[0].message,
            "8 live processes of launcher 202515 (VLLM::EngineCor) [vLLM engine core] hold 754.8 GiB on GPUs 0-7"
        );
        assert_eq!(f[0].pids.len(), 8);
        let mut ten: Vec<u32> = vec![202_515, 212_437];
        ten.extend(212_702..212_710);
        assert_eq!(f[0].next, kill_command(&ten));
        let kinds: Vec<&str> = f.iter().map(|x| x.kind.as_str()).collect();
        assert!(kinds.contains(&"renamed-holders"));
        assert!(kinds.contains(&"device-holders"));
        assert!(
            !kinds.contains(&"driver-leak"),
            "never a driver leak while live holders exist"
        );
        assert!(!kinds.contains(&"free"));
        let dev = f.iter().find(|x| x.kind == "device-holders").unwrap();
        assert_eq!(dev.pids, vec![202_515, 212_437]);
        assert!(dev.message.contains("started with the memory holders"));
        assert!(dev
            .details
            .iter()
            .any(|d| d.contains("multiprocessing resource tracker")));
        assert!(!is_free(&f));
    }

    #[test]
    fn pattern_says_what_pkill_hits_misses_and_hits_by_accident() {
        let mut s = incident();
        s.others = vec![
            crate::model::Brief {
                pid: 77,
                comm: "python3".into(),
                cmdline: vec![
                    "python3".into(),
                    "-m".into(),
                    "vllm.entrypoints.openai.api_server".into(),
                ],
            },
            crate::model::Brief {
                pid: 78,
                comm: "bash".into(),
                cmdline: vec!["bash".into()],
            },
        ];
        let opts = Options {
            pattern: Some(("python3.*vllm".into(), Regex::new("python3.*vllm").unwrap())),
        };
        let f = diagnose_with(&s, &opts);
        let p = f.iter().find(|x| x.kind == "pattern").unwrap();
        assert_eq!(p.message, "`pkill -f 'python3.*vllm'` would hit 0 of 10 holders and 1 other process; `pkill 'python3.*vllm'` (comm) would hit 0 of 10");
        assert_eq!(p.pids.len(), 10, "every holder is missed");
        assert!(p.details.iter().any(|d| d.starts_with(
            "misses 212702 VLLM::Worker_TP: its cmdline is now 'VLLM::Worker_TP0' (renamed)"
        )));
        assert!(p
            .details
            .iter()
            .any(|d| d.starts_with("also hits 77 python3")));
        let opts = Options {
            pattern: Some(("Worker_TP".into(), Regex::new("Worker_TP").unwrap())),
        };
        let p = diagnose_with(&s, &opts)
            .into_iter()
            .find(|x| x.kind == "pattern")
            .unwrap();
        assert!(
            p.message
                .contains("would hit 8 of 10 holders and 0 other processes"),
            "{}",
            p.message
        );
    }

    #[test]
    fn zombies_stopped_and_uninterruptible_holders() {
        let mut z = worker(10, 9, 0);
        z.state = "Z".into();
        z.threads = 1;
        z.gpu_memory.clear();
        let mut zl = worker(11, 9, 1);
        zl.state = "Z".into();
        let mut t = worker(12, 9, 2);
        t.state = "T".into();
        let mut d = worker(13, 9, 3);
        d.state = "D".into();
        d.wchan = Some("uvm_va_space_destroy".into());
        let s = base(
            (0..4)
                .map(|i| gpu(i, if i == 0 { 0 } else { W }, if i == 0 { 0 } else { W }))
                .collect(),
            vec![z, zl, t, d],
        );
        let f = diagnose(&s);
        let z = f
            .iter()
            .find(|x| x.kind == "zombies" && x.pids == [10])
            .unwrap();
        assert!(
            z.message.contains("already released") && z.next == "kill -s CHLD 9",
            "{z:?}"
        );
        let zl = f
            .iter()
            .find(|x| x.kind == "zombies" && x.pids == [11])
            .unwrap();
        assert_eq!(zl.severity, Severity::Error);
        assert!(
            zl.message.contains("39 other threads still run"),
            "{}",
            zl.message
        );
        assert!(
            f.iter()
                .any(|x| x.kind == "live-holders" && x.pids.contains(&11)),
            "a zombie leader with threads is live"
        );
        let t = f.iter().find(|x| x.kind == "stopped").unwrap();
        assert!(t.message.contains("SIGCONT"));
        let d = f.iter().find(|x| x.kind == "uninterruptible").unwrap();
        assert!(d.message.contains("uvm_va_space_destroy"));
    }

    #[test]
    fn driver_leak_only_with_no_holder_and_a_complete_view() {
        let leak = base(vec![gpu(0, 40 << 30, 0)], vec![]);
        let f = diagnose(&leak);
        assert_eq!(f[0].kind, "driver-leak");
        assert_eq!(f[0].next, "nvidia-smi --gpu-reset -i 0");
        // With a holder of the node: not a leak.
        let held = base(
            vec![gpu(0, 40 << 30, 0)],
            vec![plain(5, 1, "python3", &["python3"])],
        );
        assert!(diagnose(&held).iter().all(|x| x.kind != "driver-leak"));
        // Partial view: not a leak, and not free.
        let mut partial = leak.clone();
        partial.visibility.unreadable = denied(&[7, 8, 9]);
        let f = diagnose(&partial);
        assert!(f.iter().all(|x| x.kind != "driver-leak"));
        assert!(f.iter().any(|x| x.kind == "partial-view"));
        assert!(!is_free(&f), "never free from a partial view");
        // Hidden processes while NVML accounts for all memory: free, with
        // the caveat said (SPEC.md).
        let mut idle = base(vec![gpu(0, 0, 0)], vec![]);
        idle.visibility.hidepid = true;
        idle.visibility.root = false;
        let f = diagnose(&idle);
        assert!(is_free(&f));
        assert!(f
            .iter()
            .any(|x| x.kind == "partial-view" && x.message.contains("hidepid")));
        // In a nested PID namespace: another namespace's processes, not a leak.
        let mut nested = leak.clone();
        nested.visibility.nested_pid_namespace = true;
        let f = diagnose(&nested);
        assert_eq!(f[0].kind, "unaccounted-memory");
        assert!(f[0].next.starts_with("nsenter"));
    }

    #[test]
    fn unaccounted_memory_names_holders_first_and_never_offers_sudo_to_root() {
        // Root, no readable holder, PID 1 unreadable even to root (an outer
        // sandbox's init): the driver's memory first, PID 1 the caveat, and
        // a reset plan with its blockers in order.
        let mut blind = base(vec![gpu(0, 40 << 30, 0)], vec![]);
        blind.visibility.unreadable = denied(&[1]);
        let mut daemon = plain(900, 1, "nvidia-persiste", &["nvidia-persistenced"]);
        daemon.exe = Some("/usr/bin/nvidia-persistenced".into());
        daemon.protected = true;
        daemon.devices = vec![node(None, "nvidiactl")];
        let mut with_daemon = blind.clone();
        with_daemon.processes.push(daemon);
        let f = diagnose(&blind);
        assert_eq!(f[0].kind, "driver-held-memory", "{f:#?}");
        assert_eq!(f[0].next, "nvidia-smi --gpu-reset -i 0");
        assert!(f[0].details[0].contains("PID 1"), "{:?}", f[0].details);
        assert!(f.iter().all(|x| !x.next.contains("sudo")), "{f:#?}");
        // Not root: sudo is the way to see more.
        let mut user = blind.clone();
        user.visibility.root = false;
        assert!(diagnose(&user).iter().any(|x| x.next == "sudo gpufree why"));
        // A holder of the nodes comes first, and its kill is the next step.
        let mut held = blind.clone();
        let mut trainer = plain(77, 1, "python3", &["python3", "train.py"]);
        trainer.devices[1].via = vec![Via::Fd, Via::Mmap];
        held.processes.push(trainer);
        let f = diagnose(&held);
        let u = f.iter().find(|x| x.kind == "unaccounted-memory").unwrap();
        assert_eq!(u.next, "gpufree kill --pid 77");
        // A monitor that only opens the nodes (NVML does) owns no context:
        // never the next kill, and the reset plan names it.
        let mut watched = blind.clone();
        watched.processes.push(plain(78, 1, "nvtop", &["nvtop"]));
        let f = diagnose(&watched);
        let u = f.iter().find(|x| x.kind == "unaccounted-memory").unwrap();
        assert_eq!(u.next, "nvidia-smi --gpu-reset -i 0");
        assert!(
            u.details.iter().any(|d| d.contains("stop 78")),
            "{:?}",
            u.details
        );
        assert!(f.iter().all(|x| !x.next.contains("sudo")), "{f:#?}");
        // The reset plan: work first, the persistence daemon last, then
        // the reset.
        let mut leak = base(vec![gpu(0, 40 << 30, 0)], vec![]);
        let mut d = plain(900, 1, "nvidia-persiste", &["nvidia-persistenced"]);
        d.exe = Some("/usr/bin/nvidia-persistenced".into());
        d.protected = true;
        d.devices = vec![node(None, "nvidiactl")];
        leak.processes.push(d);
        let f = diagnose(&leak);
        let plan = &f.iter().find(|x| x.kind == "driver-leak").unwrap().details;
        let n = plan.len();
        assert!(
            plan[n - 2].contains("systemctl stop nvidia-persistenced"),
            "{plan:?}"
        );
        assert!(
            plan[n - 1].contains("reset: `nvidia-smi --gpu-reset -i 0`"),
            "{plan:?}"
        );
        // A daemon holding the control node does not hide the driver's
        // memory from a root that cannot read PID 1 either.
        assert_eq!(diagnose(&with_daemon)[0].kind, "driver-held-memory");
    }

    #[test]
    fn a_launcher_groups_siblings_of_one_kind_only() {
        let rank = |pid: u32, comm: &str| Process {
            comm: comm.into(),
            cmdline: vec![comm.into()],
            ..worker(pid, 50, pid % 2)
        };
        let mut s = base(
            vec![gpu(0, 2 << 30, 2 << 30), gpu(1, 2 << 30, 2 << 30)],
            vec![rank(60, "pt_main_thread"), rank(61, "pt_main_thread")],
        );
        s.parents.insert(50, kin(1, "torchrun"));
        let f = diagnose(&s);
        let live: Vec<&Finding> = f.iter().filter(|x| x.kind == "live-holders").collect();
        assert_eq!(live.len(), 1, "{live:#?}");
        assert!(live[0]
            .message
            .contains("launcher 50 (torchrun) [torchrun elastic agent]"));
        assert_eq!(live[0].next, "gpufree kill --tree 50");
        // Two different programs under one parent are two jobs.
        let mut two = s.clone();
        two.processes[1] = rank(61, "other_job");
        let f = diagnose(&two);
        assert_eq!(f.iter().filter(|x| x.kind == "live-holders").count(), 2);
        assert!(f.iter().all(|x| !x.next.contains("--tree")), "{f:#?}");
        // A shell is never a launcher.
        let mut shell = s.clone();
        shell.parents.insert(50, kin(1, "bash"));
        assert_eq!(
            diagnose(&shell)
                .iter()
                .filter(|x| x.kind == "live-holders")
                .count(),
            2
        );
    }

    #[test]
    fn framework_shapes_are_named() {
        for (comm, cmd, want) in [
            ("VLLM::Worker_TP", "VLLM::Worker_TP3", "vLLM worker"),
            ("VLLM::EngineCor", "VLLM::EngineCore", "vLLM engine core"),
            (
                "python3",
                "/usr/bin/python3 -c from multiprocessing.resource_tracker import main;main(25)",
                "multiprocessing resource tracker",
            ),
            ("pt_data_worker", "python3 train.py", "DataLoader worker"),
            ("sglang::schedu", "sglang::scheduler_TP0", "SGLang process"),
            ("ray::IDLE", "ray::IDLE", "Ray worker"),
            (
                "raylet",
                "/usr/lib/python3/site-packages/ray/core/src/ray/raylet/raylet --node",
                "Ray raylet",
            ),
            (
                "python3",
                "/usr/bin/python3 -m torch.distributed.run --nproc-per-node 8 train.py",
                "torchrun elastic agent",
            ),
            ("torchrun", "", "torchrun elastic agent"),
            (
                "python3",
                "python3 -m deepspeed.launcher.launch --world_info=x",
                "DeepSpeed launcher",
            ),
            ("mpirun", "mpirun -np 8 python3 train.py", "MPI launcher"),
            (
                "python3",
                "python3 -m ipykernel_launcher -f kernel.json",
                "Jupyter kernel",
            ),
        ] {
            assert_eq!(shape(comm, cmd), Some(want), "{comm} {cmd}");
        }
        assert_eq!(shape("python3", "python3 train.py"), None);
        assert_eq!(shape("bash", "bash"), None);
    }

    #[test]
    fn outside_namespace_pids_are_named() {
        let mut s = base(vec![gpu(0, 5000 << 20, 0)], vec![]);
        s.gpus[0].nvml_processes = vec![NvmlProcess {
            pid: 4_194_304,
            used_bytes: Some(5000 << 20),
            kind: NvmlProcessKind::Compute,
        }];
        s.visibility.nvml_pids_not_visible = vec![4_194_304];
        let f = diagnose(&s);
        assert_eq!(f[0].kind, "outside-namespace");
        assert!(f
            .iter()
            .all(|x| x.kind != "driver-leak" && x.kind != "unaccounted-memory"));
    }

    #[test]
    fn protected_daemons_are_named_and_left_out_of_kills() {
        let mut pd = plain(900, 1, "nvidia-persiste", &["/usr/bin/nvidia-persistenced"]);
        pd.exe = Some("/usr/bin/nvidia-persistenced".into());
        pd.protected = true;
        let mut w = worker(901, 1, 0);
        w.owner = Owner {
            kind: OwnerKind::None,
            ..Owner::default()
        };
        let s = base(vec![gpu(0, W, W)], vec![pd, w]);
        let f = diagnose(&s);
        let p = f.iter().find(|x| x.kind == "protected-holders").unwrap();
        assert_eq!(p.next, "systemctl stop nvidia-persistenced");
        let live = f.iter().find(|x| x.kind == "live-holders").unwrap();
        assert!(!live.next.contains("900"), "{}", live.next);
    }

    #[test]
    fn units_are_freed_by_unit_and_orphans_named() {
        let mut a = worker(1, 1, 0);
        a.owner = Owner {
            kind: OwnerKind::SystemdUnit,
            id: "vllm.service".into(),
            name: "vllm.service".into(),
        };
        a.orphaned = true;
        let s = base(vec![gpu(0, W, W)], vec![a]);
        let f = diagnose(&s);
        assert_eq!(
            f[0].message,
            "1 live process of vllm.service holds 94.3 GiB on GPU 0"
        );
        assert_eq!(f[0].next, "gpufree kill --unit vllm.service");
        assert!(f
            .iter()
            .any(|x| x.kind == "orphans" && x.message.contains("restart will find the GPU full")));
    }

    #[test]
    fn supervisors_are_stopped_first() {
        use crate::model::{Kin, PodName, UnitRestart};
        let owned = |kind, id: &str| {
            let mut w = worker(10, 1, 0);
            w.owner = Owner {
                kind,
                id: id.into(),
                name: id.into(),
            };
            w
        };
        // A unit that restarts: systemctl stop, then the wait that proves it.
        let mut s = base(
            vec![gpu(0, W, W)],
            vec![owned(OwnerKind::SystemdUnit, "vllm.service")],
        );
        let restart = |r: &str| UnitRestart {
            restart: r.into(),
            restart_sec: None,
            source: "/etc/systemd/system/vllm.service".into(),
            unreadable: Vec::new(),
        };
        s.units.insert("vllm.service".into(), restart("always"));
        let f = &diagnose(&s)[0];
        assert_eq!(
            f.next,
            "systemctl stop vllm.service && gpufree wait --gpu 0"
        );
        assert!(
            f.message
                .contains("systemd starts vllm.service again when it dies (Restart=always)"),
            "{}",
            f.message
        );
        s.units.insert("vllm.service".into(), restart("no"));
        assert_eq!(diagnose(&s)[0].next, "gpufree kill --unit vllm.service");
        // A pod named by a Deployment's ReplicaSet: scale the Deployment.
        let uid = "1234abcd-5678-90ab-cdef-1234567890ab";
        let mut s = base(vec![gpu(0, W, W)], vec![owned(OwnerKind::K8sPod, uid)]);
        s.pods.insert(
            uid.into(),
            PodName {
                namespace: "ml".into(),
                name: "vllm-7d9c5b6f4-x2x9k".into(),
            },
        );
        assert_eq!(
            diagnose(&s)[0].next,
            "kubectl -n ml scale deployment/vllm --replicas 0 && gpufree wait --gpu 0"
        );
        // Another name says nothing sure of a controller (worker-3 may be
        // bare or a StatefulSet's): the lookup of its owner, no stop.
        s.pods.get_mut(uid).unwrap().name = "worker-3".into();
        let f = &diagnose(&s)[0];
        assert!(
            f.next
                .starts_with("kubectl -n ml get pod worker-3 -o 'jsonpath="),
            "{}",
            f.next
        );
        assert!(
            f.message.contains("`kubectl -n ml delete pod worker-3`"),
            "{}",
            f.message
        );
        // Not named by the kubelet: the lookup by UID.
        s.pods.clear();
        assert!(diagnose(&s)[0].next.ends_with(&format!("| grep {uid}")));
        // torchrun with restarts left: the agent goes first.
        let ranks: Vec<Process> = (0..2)
            .map(|i| {
                let mut w = worker(20 + i, 50, i);
                w.environment
                    .insert("TORCHELASTIC_RESTART_COUNT".into(), "1".into());
                w.environment
                    .insert("TORCHELASTIC_MAX_RESTARTS".into(), "3".into());
                w
            })
            .collect();
        let mut s = base(vec![gpu(0, W, W), gpu(1, W, W)], ranks);
        s.parents.insert(
            50,
            Kin {
                cmdline: vec!["/usr/bin/python3".into(), "/usr/local/bin/torchrun".into()],
                ..kin(1, "pt_elastic")
            },
        );
        let f = &diagnose(&s)[0];
        assert_eq!(f.next, "kill -s TERM 50 && gpufree wait --gpu 0 --gpu 1");
        assert!(
            f.message.contains("(2 of 3 restarts left)"),
            "{}",
            f.message
        );
        // None left: the agent gives up when a rank dies; the tree is freed.
        for p in &mut s.processes {
            p.environment
                .insert("TORCHELASTIC_RESTART_COUNT".into(), "3".into());
        }
        assert_eq!(diagnose(&s)[0].next, "gpufree kill --tree 50");
    }

    #[test]
    fn idle_gpus_with_no_holders_are_free() {
        let s = base(vec![gpu(0, 0, 0), gpu(1, 300 << 20, 0)], vec![]);
        let f = diagnose(&s);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].message, "GPUs 0, 1 free: no process holds memory or a device node, used memory at the idle baseline");
        assert!(is_free(&f));
    }

    #[test]
    fn findings_are_ordered_by_severity_then_memory() {
        let mut s = incident();
        s.gpus.push(gpu(8, 0, 0));
        let mut small = worker(5, 1, 8);
        small.gpu_memory = vec![GpuMemory {
            gpu: 8,
            used_bytes: Some(1 << 30),
        }];
        small.renamed = false;
        s.processes.push(small);
        let f = diagnose(&s);
        assert_eq!(
            f[0].bytes,
            8 * W,
            "the group explaining the most memory first"
        );
        assert_eq!(f[1].bytes, 1 << 30);
        for w in f.windows(2) {
            assert!(w[0].severity >= w[1].severity);
        }
    }

    #[test]
    fn gpu_lists_read_as_ranges() {
        assert_eq!(gpu_list(&[3, 1, 2, 0]), "0-3");
        assert_eq!(gpu_list(&[0, 2]), "0, 2");
        assert_eq!(gpu_list(&[5]), "5");
    }
}
