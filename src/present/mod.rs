//! Presenters: they read a [`crate::model::Snapshot`] and write text or
//! JSON into any writer; none touches /proc or NVML.

pub mod bundle;
pub mod check;
pub(crate) mod columns;
pub mod doctor;
mod drm;
pub mod fleet;
pub mod from;
mod gpus;
pub mod json;
pub mod kill;
mod kmsg;
mod kubelet;
pub mod metrics;
mod mig;
pub mod next;
pub mod notice;
mod nvml;
mod printer;
mod restart;
pub mod table;
mod visibility;
pub mod wait;
pub mod why;
pub mod words;

#[cfg(test)]
mod tests;

pub use printer::{Printer, PrinterBuilder};
use std::io::{self, Write};

/// A holder's flags as the table and the live view show them:
/// `renamed,orphaned,protected` and the state when it matters.
pub fn flags(p: &crate::model::Process) -> String {
    let mut f = Vec::new();
    if p.renamed {
        f.push("renamed");
    }
    if p.orphaned {
        f.push("orphaned");
    }
    if p.protected {
        f.push("protected");
    }
    match p.state.as_str() {
        "Z" => f.push("zombie"),
        "D" => f.push("uninterruptible"),
        "T" | "t" => f.push("stopped"),
        _ => {}
    }
    f.join(",")
}

/// Writes `value` as one pretty JSON document and a newline; the
/// characters a terminal would obey are `\uXXXX` escapes ([`crate::safe`]).
pub fn write_json<W: Write, T: serde::Serialize>(w: &mut W, value: &T) -> io::Result<()> {
    // serde_json writes a key, a value, an indent at a time: gathered
    // here into 64 KiB pieces, so that `w` (a guard that looks at every
    // piece) sees a few hundred where a `status --json` of 3,000 holders
    // has a million.
    let mut pieces = io::BufWriter::with_capacity(64 * 1024, &mut *w);
    let mut ser =
        serde_json::Serializer::with_formatter(&mut pieces, crate::safe::JsonFormatter::default());
    // io::Error::from keeps a write error's kind (a closed pipe stays
    // BrokenPipe, which is success for the caller).
    value.serialize(&mut ser).map_err(io::Error::from)?;
    writeln!(pieces)?;
    pieces.flush()
}

/// `gpufree status` as it prints: the JSON document, or the table (quiet:
/// without findings or footer). The command line's own scan and root's
/// serve answering a user's view both print through it.
pub fn write_status_command<W: Write>(
    w: &mut W,
    s: &crate::model::Snapshot,
    printer: &Printer,
) -> io::Result<()> {
    if printer.json() {
        return write_json(w, &json::SnapshotDoc::new(s));
    }
    table::write_status(w, s, printer)
}

/// `gpufree why` as it prints: the JSON document, or the findings (quiet:
/// without details or next commands).
pub fn write_why_command<W: Write>(
    w: &mut W,
    s: &crate::model::Snapshot,
    printer: &Printer,
) -> io::Result<()> {
    if printer.json() {
        return write_json(w, &json::SnapshotDoc::new(s));
    }
    why::write_why(w, s, printer)
}
