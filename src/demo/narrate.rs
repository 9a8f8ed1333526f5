//! The demo's story as the operator reads it: what `pkill` and `ps | grep`
//! would have done, `status` and `why` on the incident, then the kill and
//! the proof that the memory came back.

use super::{Error, Incident, PKILL_PATTERN};
use crate::model::Snapshot;
use crate::pipeline;
use crate::present::columns::{command, write_lines};
use crate::present::words::demo as words;
use crate::present::{table, why, Printer};
use crate::snapshot;
use regex::Regex;
use std::io::Write;

/// The second half: `gpufree kill` on the demo's own processes, the
/// simulated release (about 2 s), and the GPUs free.
pub(super) fn free_it<W: Write>(
    w: &mut W,
    inc: &Incident,
    c: &snapshot::Collector,
    snap: &Snapshot,
    printer: &Printer,
) -> Result<bool, Error> {
    use crate::act::kill;
    writeln!(w)?;
    writeln!(w, "{}", printer.bold(words::KILL))?;
    let sel = kill::Selectors {
        gpus: Some(crate::model::Selection::whole(
            snap.gpus.iter().map(|g| g.index).collect(),
        )),
        ..kill::Selectors::default()
    };
    let safety = kill::Safety::current();
    let plan = kill::plan(snap, &sel, &safety);
    let ours: Vec<u32> = inc.spawned.pids.iter().map(|(p, _)| *p).collect();
    if let Some(stranger) = plan.targets.iter().find(|e| !ours.contains(&e.pid)) {
        return Err(Error::Stranger(stranger.pid));
    }
    crate::present::kill::write_plan(w, snap, &plan, "TERM", 10.0, printer)?;
    let opts = kill::Options {
        timeout: std::time::Duration::from_secs(30),
        ..kill::Options::default()
    };
    let (report, _) = kill::execute(c, snap, plan, &sel, &safety, &opts);
    crate::present::kill::write_report(w, &report, true, printer)?;
    let after = pipeline::judged(c)?;
    writeln!(w)?;
    writeln!(w, "{}", printer.bold(words::STATUS_QUIET))?;
    table::write_status(
        w,
        &Snapshot {
            findings: Vec::new(),
            ..after.clone()
        },
        printer,
    )?;
    let free = after.verdict.state == crate::model::VerdictState::Free;
    let ending = words::ending(free && report.released);
    write_lines(w, ending, 0, printer, |l| printer.bold(l))?;
    Ok(free && report.released)
}

/// The first half: the incident, what the operator's tools saw, then
/// `gpufree status` and `gpufree why` on it.
pub(super) fn narrate<W: Write>(
    w: &mut W,
    inc: &Incident,
    snap: &Snapshot,
    printer: &Printer,
) -> Result<(), Error> {
    introduce(w, inc, printer)?;
    pkill_f(w, snap, printer)?;
    ps_grep(w, snap, printer)?;
    writeln!(w)?;
    writeln!(w, "{}", printer.bold(words::STATUS))?;
    let plain = Snapshot {
        findings: Vec::new(),
        ..snap.clone()
    };
    table::write_status(w, &plain, printer)?;
    writeln!(w)?;
    write_lines(w, words::FIRST_THEORY, 0, printer, |l| printer.bold(l))?;
    writeln!(w, "{}", printer.bold(words::WHY))?;
    why::write_why(w, snap, printer)?;
    Ok(())
}

/// The host, the processes started and where their files are.
fn introduce<W: Write>(w: &mut W, inc: &Incident, printer: &Printer) -> std::io::Result<()> {
    let pid = |l: &str| inc.pid(l).map_or("?".into(), |p| p.to_string());
    writeln!(w, "{}", printer.bold(words::TITLE))?;
    let (launcher, tracker) = (pid("launcher"), pid("tracker"));
    let (first, last) = (pid("worker0"), pid("worker7"));
    writeln!(w, "{}", words::host(&launcher, &tracker, &first, &last))?;
    let files = words::files(&inc.dev, &inc.state);
    write_lines(w, &files, 2, printer, |l| printer.dim(l))
}

/// What the operator's `pkill -9 -f` would have hit and missed, as `why
/// --pattern` computes it; never run.
fn pkill_f<W: Write>(w: &mut W, snap: &Snapshot, printer: &Printer) -> Result<(), Error> {
    writeln!(w)?;
    writeln!(w, "{}", printer.bold(&words::pkill(PKILL_PATTERN)))?;
    let re = Regex::new(PKILL_PATTERN)?;
    let (hits, misses): (Vec<&crate::model::Process>, Vec<_>) = snap
        .processes
        .iter()
        .partition(|p| re.is_match(&crate::diagnose::pkill_f_text(&p.comm, &p.cmdline)));
    writeln!(
        w,
        "{}",
        words::would_signal(hits.len(), snap.processes.len())
    )?;
    for p in misses.iter().filter(|p| p.renamed) {
        write_lines(w, &words::misses(p), 11, printer, str::to_string)?;
    }
    Ok(())
}

/// What `ps aux | grep` would have listed among the holders.
fn ps_grep<W: Write>(w: &mut W, snap: &Snapshot, printer: &Printer) -> Result<(), Error> {
    writeln!(w)?;
    writeln!(w, "{}", printer.bold(words::PS_GREP))?;
    let grep = Regex::new("python|vllm")?;
    for p in snap
        .processes
        .iter()
        .filter(|p| grep.is_match(&p.cmdline_joined()))
    {
        let cmdline = command(&p.cmdline_joined(), printer.room(10, 20));
        writeln!(w, "  {:>7} {cmdline}", p.pid)?;
    }
    writeln!(w, "  {}", printer.dim(words::NOT_SHOWN))?;
    Ok(())
}
