//! `gpufree wait` as it prints: its JSON document (the last snapshot and
//! the wait), or one line: free after how long (with its caveats), or not
//! free by the timeout and why.

use super::json::SnapshotDoc;
use super::{write_json, Printer};
use crate::model::{Snapshot, VerdictState};
use crate::safe::fit;
use std::io::{self, Write};

/// How a wait ended, as `wait` prints it.
pub struct Waited<'a> {
    /// What was waited for: "GPU 0", "GPUs 0-3".
    pub which: &'a str,
    /// The last snapshot, with the wait's verdict.
    pub last: &'a Snapshot,
    /// Seconds waited.
    pub seconds: f64,
    /// Full snapshots taken.
    pub snapshots: u32,
}

/// The document `wait --json` prints.
#[derive(serde::Serialize)]
struct WaitDoc<'a> {
    #[serde(flatten)]
    snapshot: SnapshotDoc<'a>,
    wait: WaitResult,
}

#[derive(serde::Serialize)]
struct WaitResult {
    free: bool,
    verdict: VerdictState,
    seconds: f64,
    snapshots: u32,
}

/// Writes the end of a wait: the JSON document, or (unless quiet) its
/// line.
pub fn write_wait_command<W: Write>(
    w: &mut W,
    waited: &Waited<'_>,
    printer: &Printer,
) -> io::Result<()> {
    if printer.json() {
        write_json(w, &wait_doc(waited))
    } else if !printer.quiet() {
        write_wait(w, waited, printer)
    } else {
        Ok(())
    }
}

/// `wait --json`'s document: the last snapshot (with the wait's verdict)
/// and the wait.
fn wait_doc<'a>(waited: &Waited<'a>) -> WaitDoc<'a> {
    let state = waited.last.verdict.state;
    WaitDoc {
        snapshot: SnapshotDoc::new(waited.last),
        wait: WaitResult {
            free: state == VerdictState::Free,
            verdict: state,
            seconds: waited.seconds,
            snapshots: waited.snapshots,
        },
    }
}

/// `wait`'s one line: free after how long (with its caveats), or not free
/// by the timeout and why; nothing when unknown (the error says it).
fn write_wait<W: Write>(out: &mut W, waited: &Waited<'_>, printer: &Printer) -> io::Result<()> {
    let max = crate::safe::MESSAGE_MAX;
    let which = waited.which;
    let verdict = &waited.last.verdict;
    match verdict.state {
        VerdictState::Free => {
            writeln!(out, "{which} free after {:.2} s", waited.seconds)?;
            for c in &verdict.caveats {
                let c = super::words::verdict::caveat(c);
                writeln!(out, "  {} {}", printer.warn("caveat:"), fit(&c, max))?;
            }
        }
        VerdictState::Busy => writeln!(
            out,
            "{} {which} not free after {:.1} s: {}",
            printer.error("timeout:"),
            waited.seconds,
            fit(&super::words::verdict::reasons_line(&verdict.reasons), max)
        )?,
        VerdictState::Unknown => {}
    }
    Ok(())
}
