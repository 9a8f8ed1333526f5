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

use crate::model::{Finding, FindingKind, OwnerKind, Process, Severity, Snapshot, VerdictState};
use crate::safe::{shell_command, shell_word};
use crate::units::{gib, mib};
use regex::Regex;
use std::collections::{BTreeMap, HashMap};

mod daemons;
mod groups;
mod pattern;
mod shapes;
mod states;
pub(crate) mod supervisors;
mod unaccounted;
pub mod verdict;

use daemons::{program, protected, stop_command};
pub use groups::Groups;
use groups::{live_holders, node_only, Ctx, Group};
use pattern::{pattern, renamed};
pub use pattern::{pkill_comm_text, pkill_f_text};
use shapes::{role, shape};
use states::{blocked, orphans, zombies};
use unaccounted::{outside_namespace, partial_view, stale_pids, unaccounted};
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

fn finding(
    kind: FindingKind,
    severity: Severity,
    message: String,
    pids: Vec<u32>,
    gpus: Vec<u32>,
    next: String,
) -> Finding {
    Finding {
        kind,
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
            FindingKind::Free,
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

#[cfg(test)]
mod tests;
