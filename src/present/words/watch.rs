//! The words of `gpufree watch`: its frame's titles, a holder's detail
//! pane, and the kill's popups (its plan, its progress, its outcome).
//! `watch/draw.rs` and `watch/keys.rs` lay them out; none is made there.

use super::target::{left, not_ours, target};
use super::verdict::reasons_line;
use crate::model::{NotOurProc, Plan, Process, Report};
use crate::safe::{fit, TEXT_MAX};
use crate::units::mib;
use std::fmt::Display;

/// A string from a process, a cgroup or the driver, made safe for a
/// table cell: escaped and cut to the longest text gpufree shows.
fn cell(s: &str) -> String {
    fit(s, TEXT_MAX)
}

/// The GPU pane's title: what the frame counts, and how long ago the
/// snapshot was taken (`updated`, seconds), where known.
pub fn gpus_title(gpus: usize, holders: usize, scanned: u32, updated: Option<f64>) -> String {
    let updated = updated
        .map(|u| format!(", updated {u:.0}s ago"))
        .unwrap_or_default();
    format!(" gpufree watch: {gpus} GPUs, {holders} holders, {scanned} processes scanned{updated} ")
}

/// The holders table's title: its sort key and filters (`gpu=0 user=ann`).
pub fn holders_title(sort: &str, filter: &str) -> String {
    format!(" holders, sorted by {sort} {filter} ")
}

/// The detail pane's lines for one process.
pub fn detail(p: &Process) -> Vec<String> {
    let mut text = vec![
        format!(
            "PID {}  parent {}  user {} ({})  state {}  threads {}",
            p.pid,
            p.ppid,
            cell(&p.user),
            p.uid,
            cell(&p.state),
            p.threads
        ),
        format!("comm:    {}", cell(&p.comm)),
        format!("cmdline: {}", cell(&p.cmdline_joined())),
        format!("exe:     {}", cell(p.exe.as_deref().unwrap_or("?"))),
        format!(
            "owner:   {} {}",
            p.owner.kind.as_str(),
            cell(&p.owner.described())
        ),
        format!("cgroup:  {}", cell(&p.cgroup)),
    ];
    if p.nspid.len() > 1 {
        text.push(format!("NSpid:   {:?}", p.nspid));
    }
    for m in &p.gpu_memory {
        text.push(format!(
            "GPU {}: {}",
            m.gpu,
            m.used_bytes.map_or("n/a".into(), mib)
        ));
    }
    for d in &p.devices {
        let via: Vec<String> = d
            .via
            .iter()
            .map(|v| format!("{v:?}").to_lowercase())
            .collect();
        text.push(format!("{} via {}", cell(&d.path), via.join("+")));
    }
    if let Some(w) = &p.wchan {
        text.push(format!("waiting in {}", cell(w)));
    }
    text
}

/// The kill popup's text for `plan`: each target and each process left
/// out, then the keys.
pub fn plan(plan: &Plan) -> String {
    let mut lines: Vec<String> = plan
        .targets
        .iter()
        .map(|e| format!("{}  {}", e.pid, cell(&target(&e.why))))
        .collect();
    lines.extend(
        plan.skipped
            .iter()
            .map(|k| format!("{}  left out: {}", k.pid, cell(&left(&k.why)))),
    );
    if plan.targets.is_empty() {
        lines.push("nothing to signal".into());
        lines.push("Esc: close".into());
    } else {
        lines.push(String::new());
        lines.push(format!(
            "y: signal {} (TERM, KILL after 10s) and wait for the memory   n/Esc: cancel",
            plan.targets.len()
        ));
    }
    lines.join("\n")
}

/// The kill popup while `targets` processes are signalled.
pub fn signalling(targets: usize) -> String {
    format!("signalling {targets} and waiting for the memory...")
}

/// The kill's outcome when gpufree may not signal at all.
pub fn not_signalled(why: NotOurProc) -> String {
    format!("nothing signalled: {}", not_ours(why))
}

/// The kill's outcome: what was signalled, what survived, whether the
/// memory was released; `audit`: why its audit record could not be
/// written, where it could not.
pub fn outcome(r: &Report, audit: Option<&dyn Display>) -> String {
    let audited = audit.map(|e| format!("; {e}")).unwrap_or_default();
    let released = if r.released {
        format!("memory released after {:.2} s", r.seconds_to_release)
    } else {
        format!(
            "memory not released ({}): {}",
            r.verdict.as_str(),
            reasons_line(&r.reasons)
        )
    };
    format!(
        "signalled {:?}; survivors {:?}; {released}{audited}",
        r.targets, r.survivors
    )
}
