//! A recording copied into a bundle, redacted by its records' types so
//! that the copy still replays (`--from`, `watch --replay`) and holds what
//! the bundle's own `status.json` holds of command lines and environments:
//! each full snapshot and each change's patch with the fields
//! [`crate::model::Snapshot::redact`] clears cleared by their paths
//! ([`redact_document`], [`redact_patch`]: line by line, in time linear in
//! the bytes), a change's events kept (PIDs, comms, kinds, memory), a
//! kill's audit record by the allowlist ([`redact_json`]), the end as it
//! is. A line that is no record, and a change before the copy's first full
//! snapshot (nothing to apply it to), is left out and counted.

use crate::model::{redact_document, redact_json, redact_patch, Entry, Keep, Line};
use crate::present::bundle::write_line;
use std::io;

/// `bytes`, a recording's whole lines, written to `w` redacted as `keep`
/// says. Returns how many records were left out.
pub fn write_redacted_recording<W: io::Write>(
    w: &mut W,
    bytes: &[u8],
    keep: Keep,
) -> io::Result<u64> {
    let mut left_out = 0;
    let mut full_seen = false;
    let lines = bytes.split(|&b| b == b'\n');
    for text in lines.filter(|l| !l.trim_ascii().is_empty()) {
        let Ok(mut line) = serde_json::from_slice::<Line>(text) else {
            left_out += 1;
            continue;
        };
        match &mut line.entry {
            Entry::Full(doc) => {
                full_seen = true;
                redact_document(doc, keep);
            }
            Entry::Change(_) if !full_seen => {
                left_out += 1;
                continue;
            }
            Entry::Change(delta) => redact_patch(&mut delta.patch, keep),
            Entry::Kill(record) => redact_json(record, keep),
            Entry::End(_) => {}
        }
        write_line(w, &line)?;
    }
    Ok(left_out)
}
