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

/// What a line says of itself, read before the rest of it: its version,
/// its time, and whether it is a full snapshot (the rest is skipped, not
/// kept).
#[derive(Deserialize)]
struct Head {
    record: u64,
    t: u64,
    #[serde(default)]
    full: Option<IgnoredAny>,
}

/// Whether `bytes` are a recording: its first line is a record.
pub fn is_recording(bytes: &[u8]) -> bool {
    next_line(&mut lines(bytes)).is_some_and(|(_, _, head)| head.is_ok())
}

/// `bytes` as lines, numbered from 0.
fn lines(bytes: &[u8]) -> Lines<'_> {
    bytes.split(newline as fn(&u8) -> bool).enumerate()
}

/// A line of a recording: its number from 1, its bytes, and its head as
/// read (once: every reader takes it from here).
type Read<'a> = (usize, &'a [u8], serde_json::Result<Head>);

/// The next record's line of `lines`, its head read: past blank lines,
/// and past a line cut short that a full snapshot follows: a recorder
/// stopped mid-write and started again on the file, which begins on a
/// line of its own with a full snapshot, so nothing after the cut depends
/// on what the cut line held. None at the end.
fn next_line<'a>(lines: &mut Lines<'a>) -> Option<Read<'a>> {
    loop {
        let (i, line) = lines.next()?;
        if line.trim_ascii().is_empty() {
            continue;
        }
        let head = read_head(line);
        // Cut short: it ended before its value did.
        let cut = head.as_ref().is_err_and(serde_json::Error::is_eof);
        if cut && full_follows(lines.clone()) {
            continue;
        }
        return Some((i + 1, line, head));
    }
}

/// `line`'s head: an object's only (serde would take `[1, 2]` for one).
fn read_head(line: &[u8]) -> serde_json::Result<Head> {
    if !line.trim_ascii_start().starts_with(b"{") {
        return Err(serde::de::Error::custom("not a JSON object"));
    }
    serde_json::from_slice::<Head>(line)
}

/// Whether the next record of `rest` is a full snapshot.
fn full_follows(mut rest: Lines<'_>) -> bool {
    rest.find(|(_, l)| !l.trim_ascii().is_empty())
        .is_some_and(|(_, l)| read_head(l).is_ok_and(|h| h.full.is_some()))
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
    /// The lines before the first of `lines` (its errors name lines
    /// counted from the file's start).
    skipped: usize,
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
        Replay::starting(bytes, Moment::default())
    }

    /// At moment `m`'s line of `bytes` (a full snapshot's, for a state).
    pub fn starting(bytes: &'a [u8], m: Moment) -> Replay<'a> {
        Replay {
            lines: lines(&bytes[m.start.min(bytes.len())..]),
            skipped: m.line.saturating_sub(1),
            doc: None,
            t: 0,
        }
    }

    /// The next record applied, with its time; None at the end. A last
    /// line cut short (the recorder stopped mid-write) is the end.
    pub fn step(&mut self) -> Option<Result<(u64, ReplayStep), RecordBad>> {
        let (number, line, head) = next_line(&mut self.lines)?;
        let number = number + self.skipped;
        let parsed = match head {
            Ok(h) if h.record > u64::from(RECORD_VERSION) => {
                return Some(Err(RecordBad::Newer {
                    line: number,
                    version: h.record,
                }))
            }
            Ok(_) => serde_json::from_slice::<Line>(line),
            Err(e) => Err(e),
        };
        Some(match parsed {
            Ok(l) => self.apply(number, l),
            Err(e) if e.is_eof() && self.lines.clone().all(|(_, l)| l.trim_ascii().is_empty()) => {
                return None
            }
            Err(e) => Err(RecordBad::Line {
                line: number,
                error: e.to_string(),
            }),
        })
    }

    /// The time of the next record, without applying it.
    pub fn next_t(&self) -> Option<u64> {
        let (_, _, head) = next_line(&mut self.lines.clone())?;
        head.ok().map(|h| h.t)
    }

    /// When the last record applied was taken (0: none yet).
    pub fn t(&self) -> u64 {
        self.t
    }

    fn apply(&mut self, line: usize, l: Line) -> Result<(u64, ReplayStep), RecordBad> {
        if l.t < self.t {
            return Err(RecordBad::BackInTime { line });
        }
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

/// One record of a recording, as [`index`] finds it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moment {
    /// Its time (ms since the epoch).
    pub t: u64,
    /// Where its line starts in the file.
    pub start: usize,
    /// Its line's number, from 1.
    pub line: usize,
    /// The index of the moment of the full snapshot it builds on.
    pub base: usize,
}

/// Every record's moment from the first full snapshot on, reading only
/// each line's head, passing over the lines [`Replay`] passes over.
pub fn index(bytes: &[u8]) -> Result<Vec<Moment>, RecordBad> {
    let mut moments: Vec<Moment> = Vec::new();
    let mut base = None;
    let mut rest = lines(bytes);
    while let Some((line, text, head)) = next_line(&mut rest) {
        let head = match head {
            Ok(h) => h,
            Err(e) if e.is_eof() && rest.clone().all(|(_, l)| l.trim_ascii().is_empty()) => break,
            Err(e) => {
                let error = e.to_string();
                return Err(RecordBad::Line { line, error });
            }
        };
        if head.record > u64::from(RECORD_VERSION) {
            let version = head.record;
            return Err(RecordBad::Newer { line, version });
        }
        if moments.last().is_some_and(|m| head.t < m.t) {
            return Err(RecordBad::BackInTime { line });
        }
        if head.full.is_some() {
            base = Some(moments.len());
        }
        if let Some(base) = base {
            // Where the line starts: its distance from the file's start.
            let start = text.as_ptr().addr() - bytes.as_ptr().addr();
            moments.push(Moment {
                t: head.t,
                start,
                line,
                base,
            });
        }
    }
    Ok(moments)
}

/// The first and last record's times in `bytes`.
fn span(bytes: &[u8]) -> Result<(u64, u64), RecordBad> {
    let mut rest = lines(bytes);
    let mut span: Option<(u64, u64)> = None;
    while let Some((line, _, head)) = next_line(&mut rest) {
        // A line that is no record is said when it is stepped into.
        let Ok(h) = head else {
            continue;
        };
        // Every record is read up to the moment asked and no further, so
        // one dated past those after it would hide them.
        if span.is_some_and(|(_, last)| h.t < last) {
            return Err(RecordBad::BackInTime { line });
        }
        span = Some((span.map_or(h.t, |(first, _)| first), h.t));
    }
    span.ok_or(RecordBad::Before {
        at_ms: 0,
        first_ms: None,
    })
}

/// The state of the recording in `bytes` at `at` (None: its end): the
/// last full snapshot at or before it and the changes up to it; and the
/// time of the last record at or before it, whose state that is.
pub fn state_at(bytes: &[u8], at: Option<At>) -> Result<(Snapshot, u64), RecordBad> {
    let (first, last) = span(bytes)?;
    let at_ms = at.map_or(last, |a| a.resolve(first, last));
    let mut replay = Replay::new(bytes);
    let mut first_full = None;
    let mut shown = None;
    // A line whose time cannot be read is stepped into, so that its
    // error is said: the state before it is not the state at `at`.
    while replay.next_t().is_none_or(|t| t <= at_ms) {
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
    let (Some(_), Some(shown)) = (first_full, shown) else {
        return Err(before);
    };
    match replay.snapshot(at_ms.min(last)) {
        Some(Ok(s)) => Ok((s, shown)),
        Some(Err(e)) => Err(RecordBad::Line {
            line: 0,
            error: e.to_string(),
        }),
        None => Err(before),
    }
}

#[cfg(test)]
mod tests;
