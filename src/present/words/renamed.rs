//! The words of the renamed-holders findings: which name each holder
//! changed (comm, command line) and which of `pkill NAME`, `pkill -f NAME`
//! and `ps aux | grep NAME` that defeats, for the name it was started as.

use crate::model::{Rename, Renamed};
use crate::present::next::{count, one_or, quoted};
use crate::safe::width;

/// Holders that changed their comm only, or rewrote their command line
/// (`how`), and what each still shows to `pkill` and `ps | grep`.
pub(super) fn renamed(how: Option<Rename>, holders: &[Renamed]) -> (String, Vec<String>) {
    let n = holders.len();
    let Some(how) = how else {
        return untold(holders);
    };
    let mut names: Vec<&str> = holders
        .iter()
        .filter_map(|r| r.started_as.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    let one_name = (names.len() == 1 && holders.iter().all(|r| r.started_as.is_some()))
        .then(|| quoted(names[0]));
    let name = one_name.as_deref().unwrap_or("NAME");
    let comm_misses = holders.iter().filter(|r| !r.pkill).count();
    let f_misses = holders.iter().filter(|r| !r.pkill_f).count();
    let of = |k: usize| {
        if k == 0 {
            "none".to_string()
        } else if k == n {
            one_or(n, "it", "all of them").to_string()
        } else {
            format!("{k} of them")
        }
    };
    let started = if one_name.is_some() {
        String::new()
    } else {
        " (NAME: each one's program, below)".to_string()
    };
    let message = if how.cmdline() {
        let comm_too = holders
            .iter()
            .filter(|r| r.changed.is_some_and(Rename::comm))
            .count();
        format!(
            "{} rewrote {} command line (setproctitle){}: `pkill -f {name}` and `ps aux | grep {name}` miss {}; plain `pkill {name}` (comm) misses {}{started}",
            count(n, "holder", "holders"),
            one_or(n, "its", "their"),
            match comm_too {
                0 => ", comm unchanged".to_string(),
                k if k == n => format!(" and {} comm", one_or(n, "its", "their")),
                k => format!(", {k} of them their comm too"),
            },
            of(f_misses),
            of(comm_misses),
        )
    } else {
        format!(
            "{} changed only {} comm (prctl PR_SET_NAME), {} command line untouched: plain `pkill {name}` (comm) and `ps -e` miss {}; `pkill -f {name}` and `ps aux | grep {name}` miss {}{started}",
            count(n, "holder", "holders"),
            one_or(n, "its", "their"),
            one_or(n, "its", "their"),
            of(comm_misses),
            of(f_misses),
        )
    };
    let details = holders.iter().map(|r| holder(r, true)).collect();
    (message, details)
}

/// Holders whose change cannot be told (their executable or command line
/// is not shown).
fn untold(holders: &[Renamed]) -> (String, Vec<String>) {
    let n = holders.len();
    let message = format!(
        "{} renamed {} (comm or command line: which is not shown here, nor what `pkill` or `pkill -f` would miss)",
        count(n, "holder has", "holders have"),
        one_or(n, "itself", "themselves"),
    );
    (message, holders.iter().map(|r| holder(r, false)).collect())
}

/// One renamed holder: its names now, and what each `pkill` does to it;
/// `pkill -f`'s only where its command line is `told` (what it would hit
/// of a command line not shown cannot be said).
fn holder(r: &Renamed, told: bool) -> String {
    let hits = |yes: bool| if yes { "hits" } else { "misses" };
    let verdict = match r.started_as.as_deref() {
        Some(n) if told => {
            let q = quoted(n);
            format!(
                "; started as {q}: `pkill {q}` {}, `pkill -f {q}` {}",
                hits(r.pkill),
                hits(r.pkill_f)
            )
        }
        Some(n) => {
            let q = quoted(n);
            format!("; started as {q}: `pkill {q}` {}", hits(r.pkill))
        }
        None => String::new(),
    };
    let head = format!("{}: comm '{}', cmdline '", r.pid, r.comm);
    let cmdline = crate::present::columns::command_in(&r.cmdline, width(&head) + 2);
    format!(
        "{head}{cmdline}', exe {}{verdict}",
        r.exe.as_deref().unwrap_or("?")
    )
}
