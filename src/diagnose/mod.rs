//! The diagnosis: a pure function from a [`Snapshot`] to ordered findings,
//! each with its evidence and the exact next command. It never reads /proc
//! or NVML, so every finding is tested from a snapshot value.
//!
//! A fault the driver itself reports (NVIDIA's recovery action, the row
//! remapper, an Xid whose catalog action is a reset or a reboot) comes
//! before everything; then it names the true cause: live holders (grouped by what started
//! them), renamed holders, device-node holders, orphans, zombies, D and T
//! states, processes outside this PID namespace, protected daemons, and
//! the holders the driver shows idle over the window. Only when
//! memory is used with no holder at all, and the view is complete, may it
//! infer a driver-level leak and print a GPU reset for the operator (never
//! run by gpufree), labelled inferred unless the driver's own evidence
//! backs it.

use crate::model::{Evidence, Finding, Next, Process, Severity, Snapshot, VerdictState, Who};
use crate::safe::shell_command;
use regex::Regex;

mod allocation;
pub mod check;
mod daemons;
mod fault;
mod groups;
mod idle;
mod mps;
mod pattern;
mod shapes;
mod states;
pub(crate) mod supervisors;
mod unaccounted;
pub mod verdict;

use daemons::protected;
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

/// Whether every word of a command prints safely as a shell word (a
/// name from outside may not: the caller then suggests another command).
fn printable(words: &[&str]) -> bool {
    shell_command(words).is_some()
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

/// A process as a finding names it.
fn who(p: &Process) -> Who {
    Who {
        pid: p.pid,
        comm: p.comm.clone(),
        program: p.program().to_string(),
        cmdline: p.cmdline_joined(),
        role: role(p),
        container_pid: (p.nspid.len() > 1).then(|| p.nspid[p.nspid.len() - 1]),
        not_protected: p.not_protected.clone(),
        protected_for: (p.protection == Some(crate::model::Protection::User))
            .then(|| p.user.clone()),
    }
}

/// The unprotected PIDs of `ps`: what a kill by PID targets.
fn unprotected(ps: &[&Process]) -> Vec<u32> {
    ps.iter()
        .filter(|p| !p.protected_for_all())
        .map(|p| p.pid)
        .collect()
}

/// Diagnoses a snapshot with default options.
pub fn diagnose(s: &Snapshot) -> Vec<Finding> {
    diagnose_with(s, &Options::default())
}

/// Diagnoses a snapshot; the finding that explains the most memory, most
/// surely, comes first.
pub fn diagnose_with(s: &Snapshot, opts: &Options) -> Vec<Finding> {
    let ctx = Ctx::new(s);
    let mut out = Vec::new();
    fault::faults(s, &mut out);
    fault::app_faults(s, &mut out);
    live_holders(&ctx, &mut out);
    idle::idle(&ctx.look, &mut out);
    idle::unknown(&ctx.look, &mut out);
    renamed(s, &mut out);
    if let Some((text, re)) = &opts.pattern {
        pattern(s, text, re, &mut out);
    }
    node_only(&ctx, &mut out);
    orphans(&ctx, &mut out);
    zombies(&ctx.look, &mut out);
    blocked(s, &mut out);
    protected(s, &mut out);
    mps::mps(&ctx.look, &mut out);
    allocation::allocation(s, &mut out);
    let overall = verdict::overall(s, &verdict::Policy::default());
    let said = if overall.state == VerdictState::Free {
        overall.caveats.as_slice()
    } else {
        &[]
    };
    partial_view(s, overall.state, said, &mut out);
    outside_namespace(s, &mut out);
    stale_pids(s, &mut out);
    unaccounted(s, &mut out);
    fault::heard(s, &mut out);
    fault::no_kill_on_lost(&mut out);
    no_why_of_itself(s, &mut out);
    if overall.state == VerdictState::Free {
        let gpus: Vec<u32> = s.gpus.iter().map(|g| g.index).collect();
        out.push(Finding {
            severity: Severity::Info,
            pids: Vec::new(),
            gpus,
            bytes: 0,
            next: Next::Nothing,
            evidence: Evidence::Free(overall.caveats),
        });
    }
    // A fault the driver says needs a reset or a reboot comes first: no
    // memory of its GPU comes back until then.
    out.sort_by_key(|f| {
        (
            f.kind() != crate::model::FindingKind::DriverFault,
            std::cmp::Reverse(f.severity),
            std::cmp::Reverse(f.bytes),
        )
    });
    out
}

/// A `gpufree why` over every GPU of the snapshot, selected as they were,
/// is the `why` just run (or, for `status`, one that says nothing more):
/// never a finding's next. A PID NVML lists in vain is seen in full in the
/// visibility; anything else has no command to suggest beyond its words.
fn no_why_of_itself(s: &Snapshot, out: &mut [Finding]) {
    let here = s.selection_of(&s.gpus.iter().map(|g| g.index).collect::<Vec<u32>>());
    for f in out.iter_mut() {
        let Next::Why(sel) = &f.next else { continue };
        let covers = here.gpus.iter().all(|g| sel.gpus.contains(g));
        if covers && sel.mig == here.mig {
            f.next = match f.evidence {
                Evidence::StaleNvmlPid => Next::SeeVisibility,
                _ => Next::Nothing,
            };
        }
    }
}

#[cfg(test)]
mod tests;
