//! `gpufree record`'s timeline: one JSON line per record, each with its
//! format's version and its time: a full snapshot (the document `status
//! --json` writes), the changes since the record before (typed events for
//! a reader, and the [`Patch`] that rebuilds the document), a kill's audit
//! record, and the end. A moment of it (`--at`) is [`At`].

use super::patch::Patch;
use super::{FindingKind, Snapshot, VerdictState};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The version of the timeline's records (`record`); a reader refuses a
/// newer one.
pub const RECORD_VERSION: u32 = 1;

/// One line of a recording.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Line {
    /// The format's version ([`RECORD_VERSION`]).
    pub record: u32,
    /// When (ms since the Unix epoch).
    pub t: u64,
    /// What.
    #[serde(flatten)]
    pub entry: Entry,
}

/// What a line records.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    /// The whole snapshot, as `status --json` writes it.
    Full(serde_json::Value),
    /// What changed since the line before.
    Change(Delta),
    /// A kill's audit record, as `--audit-log` has it.
    Kill(serde_json::Value),
    /// The recording stopped (a signal, or its file could not be written).
    End(RecordEnd),
}

/// The changes since the record before.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Delta {
    /// What happened, for a reader.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
    /// What rebuilds the document from the one before.
    pub patch: Patch,
}

/// Why a recording ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RecordEnd {
    /// SIGINT or SIGTERM.
    Stopped,
    /// Its file was too large or too old: the next part is a new file.
    Rotated,
}

/// One change a reader is told of.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// A process began to hold a GPU or its node.
    HolderAppeared {
        /// Its PID.
        pid: u32,
        /// Its comm.
        comm: String,
    },
    /// A holder holds nothing any more (or exited).
    HolderLeft {
        /// Its PID.
        pid: u32,
    },
    /// A GPU's used memory changed.
    GpuMemory {
        /// The GPU.
        gpu: u32,
        /// Used bytes now.
        used_bytes: u64,
    },
    /// A holder's memory on a GPU changed (None: NVML does not say).
    ProcessMemory {
        /// The holder.
        pid: u32,
        /// The GPU.
        gpu: u32,
        /// Bytes now (0: none any more).
        used_bytes: Option<u64>,
    },
    /// The verdict over every GPU changed.
    Verdict {
        /// Now.
        state: VerdictState,
    },
    /// A finding appeared. The kind is typed: a reader refuses a line
    /// naming a kind it does not know (a newer gpufree's), as it refuses
    /// a newer [`RECORD_VERSION`].
    FindingAppeared {
        /// Its kind.
        kind: FindingKind,
    },
    /// A finding cleared.
    FindingCleared {
        /// Its kind.
        kind: FindingKind,
    },
    /// The driver reported an Xid the snapshot before did not have.
    Xid {
        /// The GPU.
        gpu: u32,
        /// The Xid.
        xid: u32,
    },
}

/// What happened from judged snapshot `was` to `now`, in this order:
/// holders that left, holders that appeared, memory, Xids, findings, the
/// verdict.
pub fn events(was: &Snapshot, now: &Snapshot) -> Vec<Event> {
    let mut out = Vec::new();
    let pids = |s: &Snapshot| -> BTreeSet<u32> { s.processes.iter().map(|p| p.pid).collect() };
    let (before, after) = (pids(was), pids(now));
    out.extend(
        before
            .difference(&after)
            .map(|&pid| Event::HolderLeft { pid }),
    );
    for p in now.processes.iter().filter(|p| !before.contains(&p.pid)) {
        out.push(Event::HolderAppeared {
            pid: p.pid,
            comm: p.comm.clone(),
        });
    }
    for g in &now.gpus {
        let old = was.gpus.iter().find(|o| o.index == g.index);
        if old.is_none_or(|o| o.memory.used_bytes != g.memory.used_bytes) {
            out.push(Event::GpuMemory {
                gpu: g.index,
                used_bytes: g.memory.used_bytes,
            });
        }
        let xids = |s: Option<&super::Gpu>| {
            s.and_then(|g| g.driver_evidence.as_ref())
                .map_or(0, |e| e.xids.len())
        };
        let new_xids = g.driver_evidence.as_ref().map_or(&[][..], |e| &e.xids[..]);
        for x in new_xids.iter().skip(xids(old)) {
            out.push(Event::Xid {
                gpu: g.index,
                xid: x.xid,
            });
        }
    }
    out.extend(memory_changes(was, now));
    let kinds =
        |s: &Snapshot| -> BTreeSet<FindingKind> { s.findings.iter().map(|f| f.kind()).collect() };
    let (fb, fa) = (kinds(was), kinds(now));
    out.extend(
        fb.difference(&fa)
            .map(|&kind| Event::FindingCleared { kind }),
    );
    out.extend(
        fa.difference(&fb)
            .map(|&kind| Event::FindingAppeared { kind }),
    );
    if was.verdict.state != now.verdict.state {
        out.push(Event::Verdict {
            state: now.verdict.state,
        });
    }
    out
}

/// Each holder's memory per GPU that changed (NVML's listing of it,
/// as the scan put it on the holder), a holder that left included (to 0).
fn memory_changes(was: &Snapshot, now: &Snapshot) -> Vec<Event> {
    let per = |s: &Snapshot| -> BTreeMap<(u32, u32), Option<u64>> {
        s.processes
            .iter()
            .flat_map(|p| p.gpu_memory.iter().map(|m| ((p.pid, m.gpu), m.used_bytes)))
            .collect()
    };
    let (before, after) = (per(was), per(now));
    let mut out: Vec<Event> = after
        .iter()
        .filter(|(k, v)| before.get(k) != Some(v))
        .map(|(&(pid, gpu), &used_bytes)| Event::ProcessMemory {
            pid,
            gpu,
            used_bytes,
        })
        .collect();
    out.extend(
        before
            .keys()
            .filter(|k| !after.contains_key(k))
            .map(|&(pid, gpu)| Event::ProcessMemory {
                pid,
                gpu,
                used_bytes: Some(0),
            }),
    );
    out
}

/// A moment of a recording (`--at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// A time, in ms since the Unix epoch.
    Unix(u64),
    /// This long (ms) before the recording's last record.
    BeforeEnd(u64),
    /// This long (ms) after the recording's first record.
    AfterStart(u64),
}

impl At {
    /// `TIME`: RFC 3339 (`2026-12-05T20:43:40Z`, an offset, a fraction),
    /// Unix seconds (`1733431420`, `1733431420.5`), or a duration before
    /// the recording's end (`-5m`) or after its start (`+30s`). None: none
    /// of these.
    pub fn parse(text: &str) -> Option<At> {
        let t = text.trim();
        let dur_ms = |s: &str| {
            crate::units::parse_duration(s)
                .ok()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        };
        if let Some(d) = t.strip_prefix('-') {
            return dur_ms(d).map(At::BeforeEnd);
        }
        if let Some(d) = t.strip_prefix('+') {
            return dur_ms(d).map(At::AfterStart);
        }
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            let secs: f64 = t.parse().ok()?;
            // Rounded: 1733431420.123 s is 1733431420122.9999 ms as a float.
            let ms = (secs * 1000.0).round();
            return (secs.is_finite() && secs < 1e13).then_some(At::Unix(ms as u64));
        }
        rfc3339_ms(t).map(At::Unix)
    }

    /// The time it names in a recording from `first` to `last` (ms).
    pub fn resolve(self, first: u64, last: u64) -> u64 {
        match self {
            At::Unix(ms) => ms,
            At::BeforeEnd(d) => last.saturating_sub(d),
            At::AfterStart(d) => first.saturating_add(d),
        }
    }
}

/// RFC 3339 (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`, any separator for
/// the `T`, a lower-case `z`, as the RFC allows) in ms since the Unix
/// epoch; None: not RFC 3339, or before 1970.
pub fn rfc3339_ms(t: &str) -> Option<u64> {
    use time::format_description::well_known::Rfc3339;
    let at = time::OffsetDateTime::parse(t, &Rfc3339).ok()?;
    u64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// `ms` since the Unix epoch as RFC 3339 UTC to the millisecond
/// (`2025-01-31T12:00:00.123Z`), the form [`rfc3339_ms`] reads: an audit
/// record's times, a replay's moments. By `units::civil`, which covers
/// every u64 (the time crate stops at year 9999).
pub fn rfc3339_of_ms(ms: u64) -> String {
    let c = crate::units::civil(ms / 1000);
    let (h, mi, s) = c.hms;
    format!(
        "{:04}-{:02}-{:02}T{h:02}:{mi:02}:{s:02}.{:03}Z",
        c.year,
        c.month,
        c.day,
        ms % 1000
    )
}

/// Why a recording cannot be read back at a moment (`--from REC --at`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordBad {
    /// Line `line` is no record of a recording (the parser's reason).
    Line {
        /// Its number, from 1.
        line: usize,
        /// Why.
        error: String,
    },
    /// A record of a newer format than this gpufree reads.
    Newer {
        /// Its number, from 1.
        line: usize,
        /// Its version.
        version: u64,
    },
    /// A change that does not fit the snapshot before it.
    Misfit {
        /// Its number, from 1.
        line: usize,
    },
    /// A record dated before the record before it: `gpufree record`
    /// writes none, and a reader stopping at the first record past a
    /// moment would miss what follows it.
    BackInTime {
        /// Its number, from 1.
        line: usize,
    },
    /// No full snapshot at or before the moment asked.
    Before {
        /// The moment (ms).
        at_ms: u64,
        /// The first full snapshot's time (ms), where there is one.
        first_ms: Option<u64>,
    },
    /// `--at` without a recording.
    NotARecording,
    /// `--at`'s value is no time.
    BadAt(String),
}

#[cfg(test)]
mod tests {
    use super::At;

    #[test]
    fn moments_in_every_form() {
        assert_eq!(At::parse("1733431420"), Some(At::Unix(1_733_431_420_000)));
        for ms in 1_733_431_420_000..1_733_431_421_000 {
            let text = format!("{}.{:03}", ms / 1000, ms % 1000);
            assert_eq!(At::parse(&text), Some(At::Unix(ms)), "{text}");
        }
        assert_eq!(
            At::parse("1733431420.25"),
            Some(At::Unix(1_733_431_420_250))
        );
        assert_eq!(At::parse("-5m"), Some(At::BeforeEnd(300_000)));
        assert_eq!(At::parse("+1.5s"), Some(At::AfterStart(1500)));
        assert_eq!(
            At::parse("1970-01-02T00:00:01Z"),
            Some(At::Unix(86_401_000))
        );
        assert_eq!(
            At::parse("2026-12-05T20:43:40.5+01:00"),
            At::parse("2026-12-05T19:43:40.500Z")
        );
        assert_eq!(
            At::parse("2026-12-05 20:43:40z"),
            At::parse("2026-12-05T20:43:40Z")
        );
        assert_eq!(
            At::parse("2026-12-05T20:43:40Z"),
            Some(At::Unix(1_796_503_420_000))
        );
        for bad in [
            "",
            "yesterday",
            "-5",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "2026-12-05",
            "1e5",
        ] {
            assert_eq!(At::parse(bad), None, "{bad}");
        }
    }
}
