//! The words of `gpufree watch`: its frame's titles, a holder's detail
//! pane, and the kill's popups (its plan, its progress, its outcome).
//! `watch/draw.rs` and `watch/keys.rs` lay them out; none is made there.

use super::target::{left, not_ours, target};
use super::verdict::reasons_line;
use crate::model::{
    FromBad, KillResult, KillSeen, NotOurProc, Plan, Process, ReplayBad, ReplayWhy, Report,
};
use crate::present::next::count;
use crate::safe::escape;
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
    format!(
        " gpufree watch: {}, {}, {} scanned{updated} ",
        count(gpus, "GPU", "GPUs"),
        count(holders, "holder", "holders"),
        count(scanned as usize, "process", "processes"),
    )
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

/// The keys the footer lists (the live view's, or a replay's), within
/// `room` columns: whole entries, the last ones left out first.
pub fn help(replay: bool, room: usize) -> String {
    let keys: &[&str] = if replay {
        &[
            "q quit",
            "space play/pause",
            "←/→ moment",
            "Enter detail",
            "↑/↓ select",
            "+/- speed",
            "Home/End first/last",
            "m/p/a sort",
            "g/u/o filter",
        ]
    } else {
        &[
            "q quit",
            "↑/↓ select",
            "Enter detail",
            "k kill",
            "m/p/a sort",
            "g/u/o filter",
            "r rescan",
        ]
    };
    let mut line = String::new();
    for k in keys {
        let sep = if line.is_empty() { "" } else { "  " };
        if crate::safe::width(&line) + sep.len() + crate::safe::width(k) > room {
            break;
        }
        line.push_str(sep);
        line.push_str(k);
    }
    line
}

/// A replay's moment that is a kill's audit record, in one line: who
/// (user, gpufree's PID), the signal, the PIDs signalled (with their
/// comm), and what came of it; `kill`: its typed fields, None where the
/// record lacks them.
pub fn replay_kill(kill: Option<&KillSeen>) -> String {
    let Some(k) = kill else {
        return "a kill (its record unread)".into();
    };
    let comm = |pid: u32| {
        k.targets
            .iter()
            .find(|t| t.pid == pid)
            .map_or(String::new(), |t| format!(" {}", fit(&t.comm, 32)))
    };
    let pids: Vec<String> = k
        .outcome
        .signalled
        .iter()
        .take(8)
        .map(|&p| format!("{p}{}", comm(p)))
        .collect();
    let more = k.outcome.signalled.len().saturating_sub(pids.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let outcome = match k.outcome.result {
        KillResult::Released => format!("released in {:.2} s", k.outcome.seconds_to_release),
        KillResult::NotReleased => "memory not released".into(),
        KillResult::Unknown => "release unknown".into(),
        KillResult::NotWaited => "release not waited for".into(),
    };
    let survivors = match k.outcome.survivors.as_slice() {
        [] => String::new(),
        s => format!("; {} survived", count(s.len(), "process", "processes")),
    };
    // The record is written when the kill ended: the release before it
    // in the timeline came after this.
    let began = k.started_ms().map_or(String::new(), |ms| {
        format!(" began {}", crate::model::rfc3339_of_ms(ms))
    });
    format!(
        "kill by {} (pid {}){began}: SIG{} to {}: {}{more} → {outcome}{survivors}",
        cell(&k.invoker.user),
        k.invoker.pid,
        cell(k.signal.strip_prefix("SIG").unwrap_or(&k.signal)),
        count(k.outcome.signalled.len(), "process", "processes"),
        pids.join(", "),
    )
}

/// What the holders pane says where even its PID and memory columns do
/// not fit (a number cut short would name another process).
pub const TOO_NARROW: &str = "too narrow for PIDs: widen the terminal or close the detail (Enter)";

/// Where a replay stands: the moment shown, of how many, and how it plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayAt {
    /// The moment's time (ms since the epoch).
    pub t_ms: u64,
    /// The first moment's time (ms since the epoch).
    pub start_ms: u64,
    /// Its position, from 0.
    pub pos: usize,
    /// How many moments there are.
    pub count: usize,
    /// The speed, as a power of two (-4: 1/16 of the real pace, 6: 64 times).
    pub speed: i32,
    /// Playing (else paused).
    pub playing: bool,
}

/// The replay's time bar: the moment in RFC 3339 UTC and from the start,
/// its position, the speed, and that nothing here is live.
pub fn replay_bar(at: &ReplayAt) -> String {
    let speed = if at.speed >= 0 {
        format!("×{}", 1u64 << at.speed.unsigned_abs())
    } else {
        format!("×1/{}", 1u64 << at.speed.unsigned_abs())
    };
    let since = at.t_ms.saturating_sub(at.start_ms) as f64 / 1000.0;
    format!(
        " {}  +{since:.1} s  moment {}/{}  {speed}  {}  REPLAY — nothing here is live ",
        crate::model::rfc3339_of_ms(at.t_ms),
        at.pos + 1,
        at.count,
        if at.playing { "playing" } else { "paused" },
    )
}

/// What the kill key says in a replay.
pub const REPLAY_NO_KILL: &str =
    "k: nothing can be signalled from a recording (a file pins no process); run gpufree kill on the host";

/// What the rescan key says in a replay.
pub const REPLAY_NO_RESCAN: &str =
    "r: a recording cannot be scanned again; ←/→ step through its moments";

/// Why `watch --replay FILE` cannot run, in one line: its file (named),
/// or a flag that needs the live host.
pub fn replay_bad(b: &ReplayBad) -> String {
    let (path, why) = match b {
        ReplayBad::File { path, why } => (fit(&escape(path), 1024), why),
        ReplayBad::Flag(flag) => {
            return format!(
                "{flag} with watch --replay: it steers the live host, and a replay reads only \
                 its file"
            )
        }
    };
    let why = match why {
        ReplayWhy::File(FromBad::NotRegular { .. }) => "not a regular file".to_string(),
        ReplayWhy::File(FromBad::TooLarge { .. }) => format!(
            "larger than {} MiB, the most read (a rotated recording's files are replayed one by one)",
            crate::model::FROM_MAX_BYTES >> 20
        ),
        ReplayWhy::File(FromBad::Unreadable { error, .. }) => format!("cannot be read: {error}"),
        ReplayWhy::File(other) => super::from::bad(other),
        ReplayWhy::NotARecording => {
            "not a recording as `gpufree record --out FILE` writes it".to_string()
        }
        ReplayWhy::Record(r) => super::from::record_bad(r),
    };
    format!("watch --replay {path}: {why}")
}
