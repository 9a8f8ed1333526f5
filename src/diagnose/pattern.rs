//! What `pkill` and `ps | grep` see: the renamed holders a pattern
//! misses, and which holders `pkill -f REGEX` would hit and miss, with
//! procps' own view of a command line.

use super::*;

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

pub(super) fn renamed(s: &Snapshot, out: &mut Vec<Finding>) {
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
        FindingKind::RenamedHolders,
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
    let collateral = collateral(s, re);
    let mut details: Vec<String> = misses.iter().map(|p| missed(p)).collect();
    details.extend(hits.iter().map(|p| format!("hits {} {}", p.pid, p.comm)));
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
    let f = finding(
        FindingKind::Pattern,
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
        pattern_next(text, &holders, &misses),
    );
    out.push(with(f, details, bytes));
}

/// The processes that hold no GPU but that the pattern hits too.
fn collateral(s: &Snapshot, re: &Regex) -> Vec<String> {
    s.others
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
        .collect()
}

/// Why the pattern misses holder `p`: its new command line, or what
/// `pkill -f` sees of it.
fn missed(p: &Process) -> String {
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
    format!("misses {} {}: {why}", p.pid, p.comm)
}

/// The kill by the pattern itself when it hits every holder (and can be
/// pasted safely), else the kill of every unprotected holder by PID.
fn pattern_next(text: &str, holders: &[&Process], misses: &[&Process]) -> String {
    let by_match = misses
        .is_empty()
        .then(|| kill_by("--match", text))
        .flatten();
    by_match.unwrap_or_else(|| {
        kill_command(
            &holders
                .iter()
                .filter(|p| !p.protected)
                .map(|p| p.pid)
                .collect::<Vec<_>>(),
        )
    })
}
