//! The `gpufree kill` plan and its outcome, as text, and its JSON
//! document (`doc.rs`).

mod doc;

use super::next::next_line;
use super::words::restarter;
use super::words::target::{left, target};
use super::words::verdict::reasons_line;
use super::Printer;
use crate::model::{Evidence, Lookup, Process, Snapshot};
use crate::model::{Plan, PlanEntry, Report};
use crate::safe::{fit, pad, MESSAGE_MAX, TEXT_MAX};
pub use doc::{write_kill_command, write_kill_json, write_plan_json, Killed};
use std::collections::HashSet;
use std::io::{self, Write};

/// Writes the plan: each target with user, comm, cmdline, owner, memory and
/// why it is a target; then what is left out and why.
pub fn write_plan<W: Write + ?Sized>(
    w: &mut W,
    snap: &Snapshot,
    plan: &Plan,
    signal: &str,
    grace: f64,
    printer: &Printer,
) -> io::Result<()> {
    writeln!(w, "{}", printer.bold(&plan_heading(plan, signal, grace)))?;
    let look = Lookup::new(snap);
    for e in &plan.targets {
        write_target(w, look.process(e.pid), e, printer)?;
    }
    write_restarts(w, snap, plan, printer)?;
    if !plan.skipped.is_empty() {
        writeln!(w, "{}", printer.bold("Left out:"))?;
        for k in &plan.skipped {
            writeln!(w, "  {:>7}  {}", k.pid, fit(&left(&k.why), MESSAGE_MAX))?;
        }
    }
    Ok(())
}

/// Asks whether to signal `n` processes (the answer is read by the
/// caller).
pub fn write_question<W: Write>(w: &mut W, n: usize) -> io::Result<()> {
    match n {
        1 => write!(w, "Signal this process? [y/N] "),
        _ => write!(w, "Signal these {n} processes? [y/N] "),
    }
}

/// After a plan with nothing to signal because only protected daemons
/// hold the GPUs `which` names (`several` of them), within their slack:
/// the GPUs are free.
pub fn write_only_protected<W: Write + ?Sized>(
    w: &mut W,
    which: &str,
    several: bool,
) -> io::Result<()> {
    let (are, them) = if several {
        ("are", "them")
    } else {
        ("is", "it")
    };
    writeln!(
        w,
        "Nothing to signal: {which} {are} free; only protected daemons hold {them}, within their idle slack."
    )
}

/// What the plan does, in one line: how many, which signal, then KILL.
fn plan_heading(plan: &Plan, signal: &str, grace: f64) -> String {
    if plan.targets.is_empty() && plan.skipped.is_empty() {
        return "Nothing to signal: no GPU holder matches.".into();
    }
    if plan.targets.is_empty() {
        return "Nothing to signal: every GPU holder that matches is left out.".into();
    }
    let then = if signal == "KILL" {
        String::new()
    } else {
        format!(
            ", SIGKILL after {} if still running",
            crate::units::seconds(grace)
        )
    };
    format!(
        "Plan: signal {} process{} with SIG{signal}{then}:",
        plan.targets.len(),
        if plan.targets.len() == 1 { "" } else { "es" }
    )
}

/// One target: PID, user, comm and why; then its command line and owner.
fn write_target<W: Write + ?Sized>(
    w: &mut W,
    p: Option<&Process>,
    e: &PlanEntry,
    printer: &Printer,
) -> io::Result<()> {
    let (user, comm, cmd, owner) = p.map_or(Default::default(), |p| {
        (
            fit(&p.user, crate::present::table::USER_MAX),
            fit(&p.comm, crate::present::table::COMM_MAX),
            p.cmdline_joined(),
            match p.owner.described() {
                o if o.is_empty() => "-".to_string(),
                o => fit(&o, TEXT_MAX),
            },
        )
    });
    // The command line takes what the line leaves after its labels and
    // the owner, named by its program's file name when cut.
    let used = 11 + "cmdline: ".len() + 3 + "owner: ".len() + crate::safe::width(&owner);
    let cmd = crate::present::columns::command(&cmd, printer.room(used, 20).min(TEXT_MAX));
    writeln!(
        w,
        "  {:>7}  {} {} {}",
        e.pid,
        pad(&user, 8),
        pad(&comm, 16),
        fit(&target(&e.why), MESSAGE_MAX)
    )?;
    writeln!(
        w,
        "           {} {}   {} {}",
        printer.dim("cmdline:"),
        cmd,
        printer.dim("owner:"),
        owner
    )
}

/// What will start the targets again (a launch group's restarter), each
/// with the command that stops it first.
fn write_restarts<W: Write + ?Sized>(
    w: &mut W,
    snap: &Snapshot,
    plan: &Plan,
    printer: &Printer,
) -> io::Result<()> {
    let targets: HashSet<u32> = plan.targets.iter().map(|e| e.pid).collect();
    let targeted = |pid: &u32| targets.contains(pid);
    for f in snap.findings.iter().filter(|f| f.pids.iter().any(targeted)) {
        let Evidence::Group(g) = &f.evidence else {
            continue;
        };
        if let Some(r) = &g.restarter {
            let (what, evidence) = restarter(r);
            writeln!(
                w,
                "{} {}; first: `{}`",
                printer.warn("restarts:"),
                fit(&format!("{what} ({evidence})"), MESSAGE_MAX),
                fit(&next_line(&f.next), MESSAGE_MAX)
            )?;
        }
    }
    Ok(())
}

/// Writes what happened.
pub fn write_report<W: Write>(
    w: &mut W,
    r: &Report,
    waited: bool,
    printer: &Printer,
) -> io::Result<()> {
    write_signalled(w, r)?;
    write_not_signalled(w, r, printer)?;
    write_survivors(w, r, printer)?;
    if !waited {
        return Ok(());
    }
    if r.released && r.rounds == 0 {
        writeln!(
            w,
            "Nothing signalled, and nothing selected holds GPU memory."
        )
    } else if r.released {
        write_released(w, r, printer)
    } else {
        write_not_released(w, r, printer)
    }
}

/// How many were signalled and exited, which needed SIGKILL, which the
/// rescan found.
fn write_signalled<W: Write>(w: &mut W, r: &Report) -> io::Result<()> {
    let gone = r.targets.len().saturating_sub(r.survivors.len());
    if r.rounds > 0 {
        let hard = if r.killed_hard.is_empty() {
            String::new()
        } else {
            format!(
                ", {} needed SIGKILL ({:?})",
                r.killed_hard.len(),
                r.killed_hard
            )
        };
        writeln!(w, "Signalled {}: {gone} exited{hard}.", r.targets.len())?;
    }
    if !r.found_by_rescan.is_empty() {
        writeln!(
            w,
            "Found by the rescan and handled too: {:?}",
            r.found_by_rescan
        )?;
    }
    Ok(())
}

/// How the targets were held still, and those that were not signalled
/// because they had changed.
fn write_not_signalled<W: Write>(w: &mut W, r: &Report, printer: &Printer) -> io::Result<()> {
    if !r.frozen_cgroups.is_empty() {
        writeln!(
            w,
            "{} {}",
            printer.dim("held still by freezing:"),
            fit(&r.frozen_cgroups.join(", "), MESSAGE_MAX)
        )?;
    }
    if !r.identity_changed.is_empty() {
        writeln!(
            w,
            "{} {:?}: the PID now names another process; not signalled",
            printer.warn("identity changed:"),
            r.identity_changed
        )?;
    }
    for c in r.changed.iter().chain(&r.unchecked) {
        writeln!(
            w,
            "{} {} {}; not signalled",
            printer.warn("changed:"),
            c.pid,
            fit(&c.why.to_string(), MESSAGE_MAX)
        )?;
    }
    Ok(())
}

/// Targets still running, and those the kernel holds in a wait.
fn write_survivors<W: Write>(w: &mut W, r: &Report, printer: &Printer) -> io::Result<()> {
    if !r.survivors.is_empty() {
        writeln!(w, "{} {:?}", printer.error("still running:"), r.survivors)?;
    }
    if !r.waiting_for_kernel.is_empty() {
        writeln!(
            w,
            "{} {:?}: in uninterruptible sleep; SIGKILL acts when the kernel wait ends",
            printer.warn("waiting for the kernel:"),
            r.waiting_for_kernel
        )?;
    }
    Ok(())
}

/// The release: how long it took, the driver's teardown, and the watch
/// for restarts after it.
fn write_released<W: Write>(w: &mut W, r: &Report, printer: &Printer) -> io::Result<()> {
    let teardown = r
        .seconds_after_exit
        .map(|t| format!(" ({t:.2} s after the last target exited: the driver's teardown)"))
        .unwrap_or_default();
    let released = format!(
        "GPU memory released after {:.2} s{teardown}.",
        r.seconds_to_release
    );
    crate::present::columns::write_lines(w, &released, 0, printer, |l| printer.bold(l))?;
    if let Some(e) = &r.restart_watch_error {
        writeln!(
            w,
            "{} {}",
            printer.warn("not watched for restarts:"),
            fit(&e.to_string(), MESSAGE_MAX)
        )?;
    } else if r.seconds_watched_for_restarts > 0.0 {
        writeln!(
            w,
            "{}",
            printer.dim(&format!(
                "watched {:.1} s more: nothing started again",
                r.seconds_watched_for_restarts
            ))
        )?;
    }
    Ok(())
}

/// Why the memory is not back (or that this is unknown), and, when only
/// the memory is left, that a teardown takes seconds.
fn write_not_released<W: Write>(w: &mut W, r: &Report, printer: &Printer) -> io::Result<()> {
    let head = if r.verdict == crate::model::VerdictState::Unknown {
        printer.warn("GPU memory release unknown:")
    } else {
        printer.error("GPU memory not released:")
    };
    writeln!(w, "{head} {}", fit(&reasons_line(&r.reasons), MESSAGE_MAX))?;
    // Only when nothing but the memory is left (no holder named).
    let only_memory = r.reasons.iter().all(|x| x.gpu.is_some());
    if let (Some(t), false, true) = (
        r.seconds_after_exit,
        r.still_holding.is_empty(),
        only_memory,
    ) {
        writeln!(
            w,
            "Every target exited {t:.1} s before the end and the memory stayed: a teardown takes seconds; memory that stays longer after its holders are gone is the driver's (`gpufree why` prints the reset plan)."
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WatchFailed;

    fn text(r: &Report) -> String {
        let mut out = Vec::new();
        write_report(&mut out, r, true, &Printer::default()).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_report_says_the_teardown_the_watch_and_what_cut_it_short() {
        let mut r = Report {
            targets: vec![7],
            rounds: 1,
            released: true,
            verdict: crate::model::VerdictState::Free,
            seconds_to_release: 2.5,
            seconds_after_exit: Some(2.0),
            seconds_watched_for_restarts: 1.0,
            ..Report::default()
        };
        let t = text(&r);
        assert!(t.contains("GPU memory released after 2.50 s (2.00 s after the last target exited: the driver's teardown)."), "{t}");
        assert!(
            t.contains("watched 1.0 s more: nothing started again"),
            "{t}"
        );
        r.restart_watch_error = Some(WatchFailed {
            error: "EMFILE".into(),
        });
        let t = text(&r);
        assert!(
            t.contains("not watched for restarts: a snapshot failed: EMFILE"),
            "{t}"
        );
        assert!(!t.contains("nothing started again"), "{t}");
        // Not released: the teardown line only when nothing but the memory
        // is left, never beside a restarted holder.
        r.released = false;
        r.verdict = crate::model::VerdictState::Busy;
        r.still_holding = vec![crate::model::Held::Over {
            gpu: 0,
            used: 900 << 20,
            limit: 0,
            listed: Vec::new(),
        }];
        use crate::model::{GpuName, Reason, Why};
        let (used, limit, listed) = (900 << 20, 0, Vec::new());
        let over = Why::MemoryOver {
            used,
            limit,
            listed,
        };
        r.reasons = vec![Reason::new(over).on(GpuName::default())];
        assert!(text(&r).contains("a teardown takes seconds"));
        let text_ =
            "PID 9 (python3) holds nvidia0: target 7's parent, PID 2 (sup), started it again";
        r.reasons.push(Why::Said { text: text_.into() }.into());
        assert!(!text(&r).contains("a teardown takes seconds"));
    }
}
