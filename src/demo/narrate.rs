//! The demo's story as the operator reads it: what `pkill` and `ps | grep`
//! would have done, `status` and `why` on the incident, then the kill and
//! the proof that the memory came back.

use super::{Error, Incident, PKILL_PATTERN};
use crate::model::Snapshot;
use crate::pipeline;
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
    writeln!(
        w,
        "{}",
        printer.bold("$ gpufree kill --yes    (the demo signals only the processes it started)")
    )?;
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
    writeln!(w, "{}", printer.bold("$ gpufree status --quiet"))?;
    table::write_status(
        w,
        &Snapshot {
            findings: Vec::new(),
            ..after.clone()
        },
        printer,
    )?;
    let free = after.verdict.state == crate::model::VerdictState::Free;
    writeln!(
        w,
        "{}",
        printer.bold(if free && report.released {
            "All 8 GPUs are free again: no driver bug, no GPU reset; 10 processes by identity, and the release confirmed."
        } else {
            "The GPUs did not come back: see above."
        })
    )?;
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
    writeln!(w, "{}", printer.bold("$ gpufree status"))?;
    let plain = Snapshot {
        findings: Vec::new(),
        ..snap.clone()
    };
    table::write_status(w, &plain, printer)?;
    writeln!(w)?;
    writeln!(
        w,
        "{}",
        printer.bold("The operator's first theory: \"CUDA memory stays pinned after process death in LXC containers; reset the GPUs.\"")
    )?;
    writeln!(w, "{}", printer.bold("$ gpufree why"))?;
    why::write_why(w, snap, printer)?;
    Ok(())
}

/// The host, the processes started and where their files are.
fn introduce<W: Write>(w: &mut W, inc: &Incident, printer: &Printer) -> std::io::Result<()> {
    let pid = |l: &str| inc.pid(l).map_or("?".into(), |p| p.to_string());
    writeln!(
        w,
        "{}",
        printer.bold(
            "gpufree demo: the seed incident, replayed with real processes on simulated GPUs"
        )
    )?;
    writeln!(
        w,
        "An 8-GPU vLLM host (8 x RTX PRO 6000 Blackwell, 97,887 MiB each). Started here:\n  \
         launcher VLLM::EngineCore (pid {}), resource tracker (pid {}),\n  \
         8 workers that renamed themselves VLLM::Worker_TP0..7 (pids {}..{}),\n  \
         each worker holding 96,610 MiB on its GPU.",
        pid("launcher"),
        pid("tracker"),
        pid("worker0"),
        pid("worker7")
    )?;
    writeln!(
        w,
        "{}",
        printer.dim(&format!(
            "device dir {}, simulator state {}",
            inc.dev.display(),
            inc.state.display()
        ))
    )
}

/// What the operator's `pkill -9 -f` would have hit and missed, as `why
/// --pattern` computes it; never run.
fn pkill_f<W: Write>(w: &mut W, snap: &Snapshot, printer: &Printer) -> Result<(), Error> {
    writeln!(w)?;
    writeln!(
        w,
        "{}",
        printer.bold(&format!(
            "$ pkill -9 -f \"{PKILL_PATTERN}\"    (computed here, never run)"
        ))
    )?;
    let re = Regex::new(PKILL_PATTERN)?;
    let (hits, misses): (Vec<&crate::model::Process>, Vec<_>) = snap
        .processes
        .iter()
        .partition(|p| re.is_match(&crate::diagnose::pkill_f_text(&p.comm, &p.cmdline)));
    writeln!(
        w,
        "  would signal {} of the {} GPU holders",
        hits.len(),
        snap.processes.len()
    )?;
    for p in misses.iter().filter(|p| p.renamed) {
        writeln!(
            w,
            "  misses {:>7} {:<16} cmdline is now \"{}\", exe {}",
            p.pid,
            p.comm,
            p.cmdline_joined(),
            p.exe.as_deref().unwrap_or("?")
        )?;
    }
    Ok(())
}

/// What `ps aux | grep` would have listed among the holders.
fn ps_grep<W: Write>(w: &mut W, snap: &Snapshot, printer: &Printer) -> Result<(), Error> {
    writeln!(w)?;
    writeln!(
        w,
        "{}",
        printer.bold("$ ps aux | grep -E \"python|vllm\"    (computed over the holders)")
    )?;
    let grep = Regex::new("python|vllm")?;
    for p in snap
        .processes
        .iter()
        .filter(|p| grep.is_match(&p.cmdline_joined()))
    {
        writeln!(w, "  {:>7} {}", p.pid, p.cmdline_joined())?;
    }
    writeln!(
        w,
        "  {}",
        printer.dim("(the eight workers and the launcher do not show: they renamed themselves)")
    )?;
    Ok(())
}
