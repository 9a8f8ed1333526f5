//! A recording copied into a bundle, redacted by its types so that the
//! copy still replays (`--from`, `watch --replay`) and holds what the
//! bundle's own `status.json` holds, no more: each full snapshot read
//! back, redacted ([`Snapshot::redact`]), judged again and written as
//! `record` writes one; each change made again between the redacted
//! documents (its events kept: PIDs, comms, kinds, memory); a kill's
//! audit record by the allowlist ([`redact_json`]); the end as it is. A
//! line no redacted document can be made of (before the tail's first full
//! snapshot, a record that does not read, a change after one) is left out
//! and counted.

use crate::model::{
    diff_json, redact_json, Delta, Entry, Event, Keep, Line, Patch, Replay, ReplayStep, Snapshot,
    RECORD_VERSION,
};
use crate::present::bundle::write_line;
use crate::present::from::recorded_document;
use serde_json::Value;
use std::io;

/// `bytes`, a recording's whole lines, written to `w` redacted as `keep`
/// says. Returns how many records were left out.
pub fn write_redacted_recording<W: io::Write>(
    w: &mut W,
    bytes: &[u8],
    keep: Keep,
) -> io::Result<u64> {
    let mut replay = Replay::new(bytes);
    // The redacted document before, and its full snapshot's time: None
    // before a full snapshot, and after a record that did not read (the
    // changes after it build on what was not seen).
    let mut before: Option<(Value, u64)> = None;
    let mut left_out = 0;
    while let Some(step) = replay.step() {
        let Ok((t, step)) = step else {
            before = None;
            left_out += 1;
            continue;
        };
        let entry = match step {
            ReplayStep::Full => redacted(&replay, t, keep).map(|doc| {
                before = Some((doc.clone(), t));
                Entry::Full(doc)
            }),
            ReplayStep::Change(events) => change(&replay, &mut before, events, keep),
            ReplayStep::Kill(mut record) => {
                redact_json(&mut record, keep);
                Some(Entry::Kill(record))
            }
            ReplayStep::End(end) => Some(Entry::End(end)),
        };
        match entry {
            Some(entry) => write_line(
                w,
                &Line {
                    record: RECORD_VERSION,
                    t,
                    entry,
                },
            )?,
            None => left_out += 1,
        }
    }
    Ok(left_out)
}

/// A change made again between the redacted document before and the
/// redacted state now (None: there is no document before).
fn change(
    replay: &Replay,
    before: &mut Option<(Value, u64)>,
    events: Vec<Event>,
    keep: Keep,
) -> Option<Entry> {
    let (was, full_t) = before.as_mut()?;
    // At the full snapshot's clock: a reader moves the clock on from it.
    let Some(now) = redacted(replay, *full_t, keep) else {
        *before = None;
        return None;
    };
    let patch = diff_json(was, &now).unwrap_or(Patch::Object {
        fields: Default::default(),
        removed: Vec::new(),
    });
    *was = now;
    Some(Entry::Change(Delta { events, patch }))
}

/// The replay's state, its clock at `at_ms`, redacted and judged again,
/// as `record` writes a document (None: the state does not read).
fn redacted(replay: &Replay, at_ms: u64, keep: Keep) -> Option<Value> {
    let mut snap: Snapshot = replay.snapshot(at_ms)?.ok()?;
    snap.redact(keep);
    crate::pipeline::judge_with(&mut snap, &Default::default());
    recorded_document(&snap).ok()
}
