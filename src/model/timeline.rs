//! A recording read back (`--from REC --at TIME`, and a replay): its
//! records in order, each applied to the document of the full snapshot
//! before it, so that the state after any record is the snapshot `status
//! --json` would have written then.

use super::patch::apply;
use super::record::{At, Entry, Event, Line, RecordBad, RecordEnd, RECORD_VERSION};
use super::Snapshot;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

/// What a line says of itself, read before the rest of it.
#[derive(Deserialize)]
struct Head {
    record: u64,
    t: u64,
    #[serde(flatten)]
    _rest: IgnoredAny,
}

/// Whether `bytes` are a recording: its first line is a record.
pub fn is_recording(bytes: &[u8]) -> bool {
    let first = bytes
        .split(|&b| b == b'\n')
        .find(|l| !l.trim_ascii().is_empty());
    first.is_some_and(|l| serde_json::from_slice::<Head>(l).is_ok())
}

/// One record, applied.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayStep {
    /// A full snapshot: the state is it.
    Full,
    /// Changes: the state is changed so.
    Change(Vec<Event>),
    /// A kill's audit record (the state is unchanged).
    Kill(Value),
    /// The recording (or this file of it) ended.
    End(RecordEnd),
}

/// A recording's lines, numbered from 0.
type Lines<'a> = std::iter::Enumerate<std::slice::Split<'a, u8, fn(&u8) -> bool>>;

/// A recording, stepped through record by record.
pub struct Replay<'a> {
    lines: Lines<'a>,
    /// The document now, and when its full snapshot was taken.
    doc: Option<(Value, u64)>,
    /// The time of the last record applied.
    t: u64,
}

fn newline(b: &u8) -> bool {
    *b == b'\n'
}

impl<'a> Replay<'a> {
    /// At the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Replay<'a> {
        Replay {
            lines: bytes.split(newline as fn(&u8) -> bool).enumerate(),
            doc: None,
            t: 0,
        }
    }

    /// The next record applied, with its time; None at the end. A last
    /// line cut short (the recorder stopped mid-write) is the end.
    pub fn step(&mut self) -> Option<Result<(u64, ReplayStep), RecordBad>> {
        loop {
            let (i, line) = self.lines.next()?;
            if line.trim_ascii().is_empty() {
                continue;
            }
            let number = i + 1;
            let parsed = match serde_json::from_slice::<Head>(line) {
                Ok(h) if h.record > u64::from(RECORD_VERSION) => {
                    return Some(Err(RecordBad::Newer {
                        line: number,
                        version: h.record,
                    }))
                }
                Ok(_) => serde_json::from_slice::<Line>(line),
                Err(e) => Err(e),
            };
            return Some(match parsed {
                Ok(l) => self.apply(number, l),
                Err(e) if e.is_eof() && self.lines.clone().all(|(_, l)| l.is_empty()) => {
                    return None
                }
                Err(e) => Err(RecordBad::Line {
                    line: number,
                    error: e.to_string(),
                }),
            });
        }
    }

    /// The time of the next record, without applying it.
    pub fn next_t(&self) -> Option<u64> {
        self.lines
            .clone()
            .map(|(_, l)| l)
            .find(|l| !l.trim_ascii().is_empty())
            .and_then(|l| serde_json::from_slice::<Head>(l).ok())
            .map(|h| h.t)
    }

    /// When the last record applied was taken (0: none yet).
    pub fn t(&self) -> u64 {
        self.t
    }

    fn apply(&mut self, line: usize, l: Line) -> Result<(u64, ReplayStep), RecordBad> {
        self.t = l.t;
        let step = match l.entry {
            Entry::Full(doc) => {
                self.doc = Some((doc, l.t));
                ReplayStep::Full
            }
            Entry::Change(c) => {
                let (doc, _) = self.doc.as_mut().ok_or(RecordBad::Misfit { line })?;
                apply(doc, &c.patch).map_err(|_| RecordBad::Misfit { line })?;
                ReplayStep::Change(c.events)
            }
            Entry::Kill(k) => ReplayStep::Kill(k),
            Entry::End(e) => ReplayStep::End(e),
        };
        Ok((l.t, step))
    }

    /// The snapshot now (None before the first full one), taken at
    /// `at_ms`: its clock moved on from its full snapshot's by as much.
    pub fn snapshot(&self, at_ms: u64) -> Option<Result<Snapshot, serde_json::Error>> {
        let (doc, full_ms) = self.doc.as_ref()?;
        Some(
            serde_json::from_value::<Snapshot>(doc.clone()).map(|mut s| {
                let since = at_ms.saturating_sub(*full_ms);
                s.uptime_ticks += since.saturating_mul(s.ticks_per_second) / 1000;
                s.taken_unix_ms = Some(at_ms);
                s
            }),
        )
    }
}

/// The first and last record's times in `bytes`.
fn span(bytes: &[u8]) -> Result<(u64, u64), RecordBad> {
    let mut times = bytes
        .split(|&b| b == b'\n')
        .filter_map(|l| serde_json::from_slice::<Head>(l).ok())
        .map(|h| h.t);
    let first = times.next().ok_or(RecordBad::Before {
        at_ms: 0,
        first_ms: None,
    })?;
    Ok((first, times.next_back().unwrap_or(first)))
}

/// The state of the recording in `bytes` at `at` (None: its end): the
/// last full snapshot at or before it and the changes up to it.
pub fn state_at(bytes: &[u8], at: Option<At>) -> Result<Snapshot, RecordBad> {
    let (first, last) = span(bytes)?;
    let at_ms = at.map_or(last, |a| a.resolve(first, last));
    let mut replay = Replay::new(bytes);
    let mut first_full = None;
    let mut shown = None;
    while replay.next_t().is_some_and(|t| t <= at_ms) {
        let Some(step) = replay.step() else { break };
        let (t, step) = step?;
        if step == ReplayStep::Full {
            first_full.get_or_insert(t);
        }
        shown = Some(t);
    }
    let before = RecordBad::Before {
        at_ms,
        // Before the file's first record: that record's time is the
        // earliest a moment can be.
        first_ms: first_full.or((at_ms < first).then_some(first)),
    };
    if first_full.is_none() || shown.is_none() {
        return Err(before);
    }
    match replay.snapshot(at_ms.min(last)) {
        Some(Ok(s)) => Ok(s),
        Some(Err(e)) => Err(RecordBad::Line {
            line: 0,
            error: e.to_string(),
        }),
        None => Err(before),
    }
}

#[cfg(test)]
mod tests {
    use super::{is_recording, state_at, Replay, ReplayStep};
    use crate::model::{At, RecordBad};

    /// A recording: a full snapshot of a free GPU at 1000, a holder's
    /// memory at 2000 (the patch of `used_bytes`), a kill at 2500, the end.
    fn recording() -> String {
        let doc = crate::model::Snapshot {
            ticks_per_second: 100,
            uptime_ticks: 500,
            ..Default::default()
        };
        let full = serde_json::to_value(crate::present::json::SnapshotDoc::new(&doc)).unwrap();
        let lines = [
            serde_json::json!({"record": 1, "t": 1000, "full": full}),
            serde_json::json!({"record": 1, "t": 2000, "change": {
                "events": [{"event": "holder-left", "pid": 7}],
                "patch": {"object": {"fields": {"dev_dir": {"set": "/changed"}}}}}}),
            serde_json::json!({"record": 1, "t": 2500, "kill": {"version": 1}}),
            serde_json::json!({"record": 1, "t": 3000, "end": "stopped"}),
        ];
        lines.iter().map(|l| l.to_string() + "\n").collect()
    }

    #[test]
    fn the_state_at_a_moment_is_the_full_snapshot_and_the_changes_up_to_it() {
        let rec = recording();
        assert!(is_recording(rec.as_bytes()));
        assert!(!is_recording(b"{\"gpus\": []}"));
        let at = |a| state_at(rec.as_bytes(), a);
        let before = at(Some(At::Unix(1500))).unwrap();
        assert_eq!(before.dev_dir, "");
        assert_eq!(before.taken_unix_ms, Some(1500));
        // The clock moved on from the full snapshot's: 0.5 s is 50 ticks.
        assert_eq!(before.uptime_ticks, 550);
        assert_eq!(at(Some(At::Unix(2000))).unwrap().dev_dir, "/changed");
        let end = at(None).unwrap();
        assert_eq!(
            (end.dev_dir.as_str(), end.taken_unix_ms),
            ("/changed", Some(3000))
        );
        assert_eq!(at(Some(At::BeforeEnd(1500))).unwrap().dev_dir, "");
        assert_eq!(at(Some(At::AfterStart(1000))).unwrap().dev_dir, "/changed");
        assert!(matches!(
            at(Some(At::Unix(999))),
            Err(RecordBad::Before {
                at_ms: 999,
                first_ms: Some(1000)
            })
        ));
        let mut r = Replay::new(rec.as_bytes());
        let steps: Vec<_> = std::iter::from_fn(|| r.step())
            .map(Result::unwrap)
            .collect();
        assert_eq!(steps.len(), 4);
        assert_eq!(steps[0], (1000, ReplayStep::Full));
        assert!(matches!(&steps[2].1, ReplayStep::Kill(_)));
    }

    #[test]
    fn a_line_cut_short_at_the_end_is_the_end_and_a_bad_one_is_named() {
        let rec = recording();
        let cut = format!("{rec}{{\"record\":1,\"t\":4000,\"chan");
        assert_eq!(state_at(cut.as_bytes(), None).unwrap().dev_dir, "/changed");
        let bad = rec
            .replace("\"t\":2500", "\"t\":2500,\"what\":1")
            .replace("\"kill\"", "\"oops\"");
        assert!(matches!(
            state_at(bad.as_bytes(), None),
            Err(RecordBad::Line { line: 3, .. })
        ));
        let newer = rec.replacen("\"record\":1", "\"record\":9", 1);
        assert!(matches!(
            state_at(newer.as_bytes(), None),
            Err(RecordBad::Newer {
                line: 1,
                version: 9
            })
        ));
        let misfit = rec.replace(
            r#"{"object":{"fields":{"dev_dir":{"set":"/changed"}}}}"#,
            r#"{"array":{"len":3,"items":[]}}"#,
        );
        assert_ne!(misfit, rec);
        assert!(matches!(
            state_at(misfit.as_bytes(), None),
            Err(RecordBad::Misfit { line: 2 })
        ));
    }
}
