//! The `gpufree why` explanation: the findings in order, each with its
//! evidence and the exact next command.

use super::columns::{wrap, write_wrapped};
use super::words::gpu_list;
use super::words::verdict::reasons_line;
use super::words::words;
use super::Printer;
use crate::model::{FindingKind, Selection, Severity, Snapshot, VerdictState};
use crate::safe::{escape, fit, MESSAGE_MAX, TEXT_MAX};
use std::io::{self, Write};

/// What `s` is about, as the heading names it, and whether that is one.
fn which(s: &Snapshot) -> (String, bool) {
    let gpus: Vec<u32> = s.gpus.iter().map(|g| g.index).collect();
    let sel = s.selection_of(&gpus);
    (selected(&sel), sel.count() == 1)
}

/// What `sel` selects in words: `GPU 0`, `GPUs 0-3`, `GPU 0:1` for a MIG
/// device, `no GPU`.
pub fn selected(sel: &Selection) -> String {
    let named = if sel.mig.is_empty() {
        gpu_list(&sel.gpus)
    } else {
        sel.names().join(", ")
    };
    match sel.count() {
        0 => "no GPU".to_string(),
        1 => format!("GPU {named}"),
        _ => format!("GPUs {named}"),
    }
}

/// Writes `why --format slurm`: one drain reason for Slurm, the first
/// finding's message (`gpufree: GPU 0: ...`); without one, the heading's
/// verdict.
pub fn write_slurm<W: Write>(w: &mut W, s: &Snapshot) -> io::Result<()> {
    let (which, one) = which(s);
    let is = if one { "is" } else { "are" };
    let first = s.findings.iter().find(|f| f.kind() != FindingKind::Free);
    let text = match (first, s.verdict.state) {
        (Some(f), _) => words(f).message,
        (None, VerdictState::Free) => format!("{which} {is} free"),
        (None, VerdictState::Busy) => format!("{which} {is} not free"),
        (None, VerdictState::Unknown) => format!(
            "whether {which} {is} free is unknown: {}",
            reasons_line(&s.verdict.reasons)
        ),
    };
    writeln!(w, "{}", super::check::slurm_reason(&text))
}

/// Writes the diagnosis of `s`; quiet (`why -q`), the findings' messages
/// only, without their evidence and next commands.
pub fn write_why<W: Write>(w: &mut W, s: &Snapshot, printer: &Printer) -> io::Result<()> {
    let (which, one) = which(s);
    if s.verdict.state == VerdictState::Free {
        writeln!(w, "{}", printer.bold(&format!("{which}: free.")))?;
    } else if s.verdict.state == VerdictState::Unknown {
        writeln!(
            w,
            "{}",
            printer.bold(&format!(
                "Whether {which} {} free is unknown: {}",
                if one { "is" } else { "are" },
                fit(&reasons_line(&s.verdict.reasons), MESSAGE_MAX)
            ))
        )?;
    } else {
        writeln!(
            w,
            "{}",
            printer.bold(&format!(
                "Why {which} {} not free:",
                if one { "is" } else { "are" }
            ))
        )?;
    }
    // A command line in the evidence takes the room of its line (11
    // columns in), whole under --wide.
    let room = printer.width().map(|_| printer.room(11, 20));
    for (i, f) in s.findings.iter().enumerate() {
        let said = super::columns::with_room(room, || words(f));
        if f.kind() == FindingKind::Free {
            writeln!(w, "  {}", fit(&said.message, MESSAGE_MAX))?;
            continue;
        }
        let tag = match f.severity {
            Severity::Error => printer.error("error"),
            Severity::Warning => printer.warn("warn "),
            Severity::Info => printer.dim("info "),
        };
        let number = format!("{:>2}. {tag}", i + 1);
        write_wrapped(w, &number, 10, &fit(&said.message, MESSAGE_MAX), printer)?;
        if printer.quiet() {
            continue;
        }
        let room = printer.room(11, 20);
        for d in &said.details {
            for (j, line) in wrap(&fit(d, TEXT_MAX), room, room - 2).iter().enumerate() {
                let indent = if j == 0 { "" } else { "  " };
                writeln!(w, "           {indent}{}", printer.dim(line))?;
            }
        }
        if !said.next.is_empty() {
            writeln!(
                w,
                "           {} {}",
                printer.bold("next:"),
                escape(&said.next)
            )?;
        }
    }
    Ok(())
}
