//! `gpufree record`: a timeline of the host appended to a file, one JSON
//! line per record ([`crate::model::Line`]): a full snapshot (the
//! document `status --json` writes, less its findings in words) at start,
//! every `--full-every` and at the head of each new file, and between
//! them only what changed (typed
//! events and the patch that rebuilds the document), the kills the audit
//! log gains, and a last record when stopped. Like `serve`, one collector
//! (the in-kernel walk loaded once, NVML's Xid events heard) and the one
//! monitor loop; the clock fields of a document (`uptime_ticks`,
//! `taken_unix_ms`) follow from each record's time, so a host where
//! nothing changes writes nothing between its full snapshots.

mod audit;
mod sink;

pub use sink::Bounds;

use crate::act::monitor::{self, Tick, Watch};
use crate::model::{diff_json, events, Delta, Entry, Line, RecordEnd, Snapshot, RECORD_VERSION};
use crate::paths::OpenError;
use crate::pipeline;
use crate::snapshot::{self, Collector, GpuSelector};
use serde_json::Value;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The fields of a snapshot document that a record's time gives.
const CLOCK_FIELDS: [&str; 2] = ["uptime_ticks", "taken_unix_ms"];

/// Options of `gpufree record`.
#[derive(Debug, Clone)]
pub struct Options {
    /// The timeline's file.
    pub out: PathBuf,
    /// How often to look.
    pub interval: Duration,
    /// A full snapshot at least this often.
    pub full_every: Duration,
    /// A full holder scan at least this often; NVML alone between (a
    /// change of its process lists scans at once).
    pub scan_every: Duration,
    /// When a new file starts.
    pub bounds: Bounds,
    /// The audit log whose new kills go into the timeline.
    pub audit_log: Option<PathBuf>,
    /// The GPUs recorded (`--gpu`; empty: all).
    pub gpus: Vec<GpuSelector>,
}

/// Why recording could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// `--out` names what gpufree does not write (a usage error).
    #[error("--out {}: {why}", crate::safe::escape(&path.to_string_lossy()))]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why.
        why: crate::paths::Refused,
    },
    /// The file could not be opened or written.
    #[error("--out {}: {error}", crate::safe::escape(&path.to_string_lossy()))]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        error: std::io::Error,
    },
    /// `--gpu` names no GPU of the first snapshot (a usage error).
    #[error("{}", crate::present::words::selector::gpu_miss(.0))]
    Gpu(crate::model::GpuMiss),
}

/// What was written last: the judged snapshot and its document (with the
/// clock fields of the last full one), and when the full one was.
struct Last {
    snap: Snapshot,
    doc: Value,
    full_ms: u64,
}

/// The loop's state.
struct Recording<'a> {
    collector: Collector,
    opts: &'a Options,
    sink: sink::Sink,
    audit: Option<audit::Tail>,
    last: Option<Last>,
    stop: &'a AtomicBool,
    failed: Option<std::io::Error>,
    /// When the last full holder scan was.
    scanned: std::time::Instant,
}

/// Records until `stop` is set (the caller's SIGINT and SIGTERM handler),
/// then writes the last record.
pub fn record(collector: Collector, opts: &Options, stop: &AtomicBool) -> Result<(), RecordError> {
    let refused = |e: OpenError| match e {
        OpenError::Refused(why) => RecordError::Refused {
            path: opts.out.clone(),
            why,
        },
        OpenError::Io(error) => RecordError::Io {
            path: opts.out.clone(),
            error,
        },
    };
    let sink = sink::Sink::open(&opts.out, opts.bounds).map_err(refused)?;
    let mut r = Recording {
        collector,
        opts,
        sink,
        audit: opts.audit_log.clone().map(audit::Tail::start),
        last: None,
        stop,
        failed: None,
        scanned: std::time::Instant::now(),
    };
    let first = r.take().map_err(RecordError::Gpu)?;
    r.write_full(first).map_err(refused)?;
    let _ = monitor::run(&mut r, opts.interval);
    let end = r.failed.take().map_or_else(
        || {
            let now = crate::units::unix_now_ms();
            r.write(now, Entry::End(RecordEnd::Stopped))?;
            r.sink.sync().map_err(OpenError::from)
        },
        |e| Err(OpenError::Io(e)),
    );
    end.map_err(refused)
}

impl Recording<'_> {
    /// One judged snapshot of the selected GPUs, with its time and host;
    /// a failed collection is said on stderr and skipped (None via Ok).
    fn take(&self) -> Result<Option<Snapshot>, crate::model::GpuMiss> {
        let taken = crate::units::unix_now_ms();
        let mut snap = match pipeline::judged(&self.collector) {
            Ok(s) => s,
            Err(e) => {
                let _ = crate::present::notice::write_record_skipped(
                    &mut std::io::stderr(),
                    &e.to_string(),
                );
                return Ok(None);
            }
        };
        let indexes = snapshot::resolve(&snap.gpus, &self.opts.gpus)?;
        snap.taken_unix_ms = Some(taken);
        snap.host = Some(
            rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned(),
        );
        snap = pipeline::select(snap, &indexes);
        snap.pins = crate::model::Pins::default();
        Ok(Some(snap))
    }

    /// `entry` at `t` as one line, into a new file first where due (the
    /// old one ended, the new one starting with the last full state).
    fn write(&mut self, t: u64, entry: Entry) -> Result<(), OpenError> {
        let bytes = line(t, entry);
        if self.sink.due(bytes.len() as u64, t) {
            let end = line(t, Entry::End(RecordEnd::Rotated));
            self.sink.append(&end)?;
            self.sink.rotate(t)?;
            if let Some(last) = &self.last {
                let mut doc = last.doc.clone();
                set_clock(&mut doc, last.full_ms, t);
                self.sink.append(&line(t, Entry::Full(doc)))?;
            }
        }
        self.sink.append(&bytes)?;
        Ok(())
    }

    /// A full snapshot.
    fn write_full(&mut self, snap: Option<Snapshot>) -> Result<(), OpenError> {
        let Some(snap) = snap else { return Ok(()) };
        let t = snap.taken_unix_ms.unwrap_or_default();
        let doc = document(&snap);
        self.write(t, Entry::Full(doc.clone()))?;
        self.last = Some(Last {
            snap,
            doc,
            full_ms: t,
        });
        Ok(())
    }

    /// What changed since the last record, if anything.
    fn write_change(&mut self, snap: Snapshot) -> Result<(), OpenError> {
        let Some(last) = &self.last else {
            return self.write_full(Some(snap));
        };
        let t = snap.taken_unix_ms.unwrap_or_default();
        let mut doc = document(&snap);
        for f in CLOCK_FIELDS {
            match last.doc.get(f) {
                Some(v) => doc[f] = v.clone(),
                None => {
                    doc.as_object_mut().map(|o| o.remove(f));
                }
            }
        }
        if quiet(&last.doc) == quiet(&doc) {
            return Ok(());
        }
        let Some(patch) = diff_json(&last.doc, &doc) else {
            return Ok(());
        };
        let change = Delta {
            events: events(&last.snap, &snap),
            patch,
        };
        let full_ms = last.full_ms;
        self.write(t, Entry::Change(change))?;
        self.last = Some(Last { snap, doc, full_ms });
        Ok(())
    }

    /// The kills the audit log gained, at their own times.
    fn write_kills(&mut self) -> Result<(), OpenError> {
        let kills = self
            .audit
            .as_mut()
            .map(audit::Tail::new_records)
            .unwrap_or_default();
        for k in kills {
            let t = k
                .get("time")
                .and_then(Value::as_str)
                .and_then(crate::model::At::parse)
                .map_or_else(crate::units::unix_now_ms, |a| a.resolve(0, 0));
            self.write(t, Entry::Kill(k))?;
        }
        Ok(())
    }

    /// The last snapshot with NVML's memory now, judged again; None
    /// where only a full scan can tell (NVML's process lists changed).
    fn refreshed(&self) -> Option<Snapshot> {
        let mut snap = self.last.as_ref()?.snap.clone();
        if !pipeline::refresh_memory(&mut snap, &self.collector.nvml()) {
            return None;
        }
        snap.taken_unix_ms = Some(crate::units::unix_now_ms());
        Some(snap)
    }

    fn look_once(&mut self) -> Result<(), OpenError> {
        self.write_kills()?;
        let cheap = (self.scanned.elapsed() < self.opts.scan_every)
            .then(|| self.refreshed())
            .flatten();
        let snap = match cheap {
            Some(snap) => snap,
            None => {
                self.scanned = std::time::Instant::now();
                let Ok(Some(snap)) = self.take() else {
                    return Ok(());
                };
                snap
            }
        };
        let t = snap.taken_unix_ms.unwrap_or_default();
        let full_due = self.last.as_ref().is_none_or(|l| {
            Duration::from_millis(t.saturating_sub(l.full_ms)) >= self.opts.full_every
        });
        if full_due {
            self.write_full(Some(snap))
        } else {
            self.write_change(snap)
        }
    }
}

impl Watch for Recording<'_> {
    type Out = ();

    fn look(&mut self, tick: Tick) -> ControlFlow<()> {
        if self.stop.load(Ordering::SeqCst) {
            return ControlFlow::Break(());
        }
        if tick.first() {
            return ControlFlow::Continue(());
        }
        match self.look_once() {
            Ok(()) if !self.stop.load(Ordering::SeqCst) => ControlFlow::Continue(()),
            Ok(()) => ControlFlow::Break(()),
            Err(e) => {
                self.failed = Some(match e {
                    OpenError::Io(e) => e,
                    OpenError::Refused(r) => std::io::Error::other(r),
                });
                ControlFlow::Break(())
            }
        }
    }

    fn deadline(&self) -> Option<std::time::Instant> {
        None
    }
}

/// `doc` without what moves on every look while nothing happens (how
/// many processes the scan read, the start of the driver's utilisation
/// window): a change of those alone is not recorded; with another, it is.
fn quiet(doc: &Value) -> Value {
    let mut d = doc.clone();
    if let Some(v) = d.get_mut("visibility").and_then(Value::as_object_mut) {
        for f in NOISE {
            v.remove(f);
        }
    }
    for g in d
        .get_mut("gpus")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(e) = g.get_mut("driver_evidence").and_then(Value::as_object_mut) {
            e.remove("utilization_window");
        }
    }
    d
}

/// The fields of `visibility` that move while nothing happens.
const NOISE: [&str; 2] = ["processes_scanned", "scan_reread"];

/// The snapshot document of `snap`, as a value, without its findings in
/// words: a reader judges the snapshot again (`--from` does), the events
/// name each finding's kind, and the words quote holders' command lines
/// where no key says so (a bundle's redaction goes by key).
fn document(snap: &Snapshot) -> Value {
    let mut doc =
        serde_json::to_value(crate::present::json::SnapshotDoc::new(snap)).unwrap_or(Value::Null);
    doc.as_object_mut().map(|o| o.remove("findings"));
    doc
}

/// `doc`'s clock fields (those of its full snapshot, taken at `full_ms`)
/// moved on to `t`, as a reader moves them ([`crate::model::Replay`]).
fn set_clock(doc: &mut Value, full_ms: u64, t: u64) {
    let field = |doc: &Value, f: &str| doc.get(f).and_then(Value::as_u64).unwrap_or_default();
    let since = t.saturating_sub(full_ms);
    let ticks = field(doc, "uptime_ticks") + since * field(doc, "ticks_per_second") / 1000;
    doc["uptime_ticks"] = ticks.into();
    doc["taken_unix_ms"] = t.into();
}

/// One record as a line of compact JSON, the characters a terminal would
/// act on escaped (`cat` of the file shows them, never obeys them).
fn line(t: u64, entry: Entry) -> Vec<u8> {
    let l = Line {
        record: RECORD_VERSION,
        t,
        entry,
    };
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Escaping);
    if serde::Serialize::serialize(&l, &mut ser).is_err() {
        out.clear();
    }
    out.push(b'\n');
    out
}

/// serde_json's compact layout, with [`crate::safe::json_fragment`]'s
/// escapes.
struct Escaping;

impl serde_json::ser::Formatter for Escaping {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        crate::safe::json_fragment(w, fragment)
    }
}
