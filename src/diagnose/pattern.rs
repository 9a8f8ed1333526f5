//! What `pkill` and `ps | grep` see: the renamed holders a pattern
//! misses, and which holders `pkill -f REGEX` would hit and miss, with
//! procps' own view of a command line.

use super::{gpus_of_all, printable, unprotected};
use crate::model::{rename_of, started_as, Miss, PatternHits, Rename, Renamed};
use crate::model::{Evidence, Finding, Next, Process, Severity, Snapshot};
use regex::Regex;

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

pub(super) fn pkill_text(s: &str, line_break: char) -> String {
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

/// Renamed holders, one finding per kind of change: comm only
/// (`prctl(PR_SET_NAME)`), which defeats plain `pkill NAME`; and a
/// rewritten command line (setproctitle), which defeats `pkill -f` and
/// `ps aux | grep`. Whether each still hits is read with the texts `why
/// --pattern` matches ([`pkill_comm_text`], [`pkill_f_text`]) for the
/// name the program was started as.
pub(super) fn renamed(s: &Snapshot, out: &mut Vec<Finding>) {
    let live = || s.processes.iter().filter(|p| p.is_live() && p.renamed);
    // What each changed: None where its exe or command line is not
    // shown (another user's process in serve's view), so not told.
    let changed = |p: &Process| rename_of(&p.comm, &p.cmdline, p.exe.as_deref());
    for how in [Some(Rename::Cmdline), Some(Rename::Comm), None] {
        let holders: Vec<(&Process, Option<Rename>)> = live()
            .map(|p| (p, changed(p)))
            .filter(|(_, c)| match (how, c) {
                (Some(h), Some(c)) => c.cmdline() == h.cmdline(),
                (None, None) => true,
                _ => false,
            })
            .collect();
        if holders.is_empty() {
            continue;
        }
        let ps: Vec<&Process> = holders.iter().map(|(p, _)| *p).collect();
        out.push(Finding {
            severity: Severity::Warning,
            pids: ps.iter().map(|p| p.pid).collect(),
            gpus: gpus_of_all(ps.iter().copied()),
            bytes: crate::model::saturating_sum(ps.iter().map(|p| p.memory_bytes())),
            next: Next::Kill(unprotected(&ps)),
            evidence: Evidence::Renamed {
                how,
                holders: holders.iter().map(|(p, c)| renamed_one(p, *c)).collect(),
            },
        });
    }
}

/// A renamed holder, and whether `pkill NAME` and `pkill -f NAME` still
/// hit it for the name it was started as.
fn renamed_one(p: &Process, changed: Option<Rename>) -> Renamed {
    let started = started_as(&p.cmdline, p.exe.as_deref());
    let re = started
        .as_deref()
        .and_then(|n| Regex::new(&regex::escape(n)).ok());
    let hits = |text: String| re.as_ref().is_some_and(|r| r.is_match(&text));
    Renamed {
        pid: p.pid,
        comm: p.comm.clone(),
        cmdline: p.cmdline_joined(),
        exe: p.exe.clone(),
        changed,
        pkill: hits(pkill_comm_text(&p.comm)),
        pkill_f: hits(pkill_f_text(&p.comm, &p.cmdline)),
        started_as: started,
    }
}

/// `why --pattern`: which holders `pkill -f REGEX` would hit and miss
/// (and why), which other processes it would hit by accident, and the
/// command that frees them all.
pub(super) fn pattern(s: &Snapshot, text: &str, re: &Regex, out: &mut Vec<Finding>) {
    let holders: Vec<&Process> = s.processes.iter().filter(|p| p.is_live()).collect();
    let (hits, misses): (Vec<&Process>, Vec<&Process>) = holders
        .iter()
        .partition(|p| re.is_match(&pkill_f_text(&p.comm, &p.cmdline)));
    let comm_hits = holders
        .iter()
        .filter(|p| re.is_match(&pkill_comm_text(&p.comm)))
        .count();
    let collateral: Vec<(u32, String, String)> = s
        .others
        .iter()
        .map(|o| (o.pid, o.comm.clone(), pkill_f_text(&o.comm, &o.cmdline)))
        .filter(|(_, _, seen)| re.is_match(seen))
        .collect();
    let severity = if misses.is_empty() && collateral.is_empty() {
        Severity::Info
    } else {
        Severity::Warning
    };
    out.push(Finding {
        severity,
        pids: misses.iter().map(|p| p.pid).collect(),
        gpus: gpus_of_all(misses.iter().copied()),
        bytes: crate::model::saturating_sum(misses.iter().map(|p| p.memory_bytes())),
        next: pattern_next(text, &holders, &misses),
        evidence: Evidence::Pattern(Box::new(PatternHits {
            pattern: text.to_string(),
            holders: holders.len(),
            hits: hits.iter().map(|p| (p.pid, p.comm.clone())).collect(),
            misses: misses.iter().map(|p| missed(p)).collect(),
            comm_hits,
            collateral,
        })),
    });
}

/// Why the pattern misses holder `p`: its new command line, or what
/// `pkill -f` sees of it.
fn missed(p: &Process) -> Miss {
    Miss {
        pid: p.pid,
        comm: p.comm.clone(),
        renamed: p.renamed,
        seen: if p.renamed {
            p.cmdline_joined()
        } else {
            pkill_f_text(&p.comm, &p.cmdline)
        },
    }
}

/// The kill by the pattern itself when it hits every holder (and can be
/// pasted safely), else the kill of every unprotected holder by PID.
fn pattern_next(text: &str, holders: &[&Process], misses: &[&Process]) -> Next {
    if misses.is_empty() && printable(&[text]) {
        Next::KillMatch(text.to_string())
    } else {
        Next::Kill(unprotected(holders))
    }
}
