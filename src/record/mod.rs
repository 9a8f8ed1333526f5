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
mod doc;
mod sink;

pub use sink::Bounds;

use crate::act::monitor::{self, Tick, Watch};
use crate::model::{diff_json, events, Delta, Entry, RecordEnd, Snapshot};
use crate::paths::OpenError;
use crate::pipeline;
use crate::present::notice;
use crate::snapshot::{self, Collector, GpuSelector};
use doc::{document, line, quiet, Clock};
use serde_json::Value;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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

/// What was written last: the judged snapshot, its document (with the
/// clock of the last full one) and its quiet document, and that clock.
struct Last {
    snap: Snapshot,
    doc: Value,
    quiet: Value,
    full: Clock,
}

/// What was said on stderr and not said again until it clears.
#[derive(Default)]
struct Said {
    /// `--gpu` named no GPU of a look.
    gpu_miss: bool,
    /// The audit log could not be read, or had lines that are no record.
    audit: bool,
}

/// The loop's state.
struct Recorder<'a> {
    collector: Collector,
    opts: &'a Options,
    sink: sink::Sink,
    audit: Option<audit::Tail>,
    last: Option<Last>,
    stop: &'a AtomicBool,
    failed: Option<OpenError>,
    said: Said,
    /// When the last full holder scan was.
    scanned: std::time::Instant,
    /// The time of the last line written: no line is dated before it (a
    /// kill's record read a look late, a clock stepped back), so a reader
    /// that stops at the first line past a moment misses nothing.
    written_ms: u64,
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
    let mut r = Recorder {
        collector,
        opts,
        sink,
        audit: opts.audit_log.clone().map(audit::Tail::start),
        last: None,
        stop,
        failed: None,
        said: Said::default(),
        scanned: std::time::Instant::now(),
        written_ms: 0,
    };
    let first = r.take().map_err(RecordError::Gpu)?;
    r.write_full(first).map_err(refused)?;
    match monitor::run(&mut r, opts.interval) {
        // Stopped: by `stop`, or by a write that failed (`r.failed`);
        // Interrupted: the signal heard before `stop` was read; the
        // recorder sets no deadline. Each ends the file the same way.
        monitor::Ended::Stopped(()) | monitor::Ended::Interrupted | monitor::Ended::Deadline => {}
    }
    let end = match r.failed.take() {
        Some(e) => Err(e),
        None => r
            .write(crate::units::unix_now_ms(), Entry::End(RecordEnd::Stopped))
            .and_then(|()| r.sink.sync().map_err(OpenError::from)),
    };
    end.map_err(refused)
}

/// A document or line serde_json could not write, as the file's error.
fn unwritable(e: serde_json::Error) -> OpenError {
    OpenError::Io(e.into())
}

impl Recorder<'_> {
    /// One judged snapshot of the selected GPUs, with its time and host;
    /// a failed collection is said on stderr and skipped (None via Ok).
    fn take(&self) -> Result<Option<Snapshot>, crate::model::GpuMiss> {
        let taken = crate::units::unix_now_ms();
        let mut snap = match pipeline::judged(&self.collector) {
            Ok(s) => s,
            Err(e) => {
                let _ = notice::write_record_skipped(&mut std::io::stderr(), &e.to_string());
                return Ok(None);
            }
        };
        let indexes = snapshot::resolve(&snap.gpus, &self.opts.gpus)?;
        snap.taken_unix_ms = Some(taken);
        snap.host = Some(crate::proc::me::hostname());
        snap = pipeline::select(snap, &indexes);
        snap.pins = crate::model::Pins::default();
        Ok(Some(snap))
    }

    /// `entry` at `t` as one line, into a new file first where due (the
    /// old one ended, the new one starting with the last full state).
    fn write(&mut self, t: u64, entry: Entry) -> Result<(), OpenError> {
        let t = t.max(self.written_ms);
        self.written_ms = t;
        let bytes = line(t, entry).map_err(unwritable)?;
        if self.sink.due(bytes.len() as u64, t) {
            let end = line(t, Entry::End(RecordEnd::Rotated)).map_err(unwritable)?;
            self.sink.append(&end)?;
            self.sink.rotate(t)?;
            if let Some(last) = &self.last {
                let doc = document(&last.full.moved_on(&last.snap, t)).map_err(unwritable)?;
                self.sink
                    .append(&line(t, Entry::Full(doc)).map_err(unwritable)?)?;
            }
        }
        self.sink.append(&bytes)?;
        Ok(())
    }

    /// A full snapshot.
    fn write_full(&mut self, snap: Option<Snapshot>) -> Result<(), OpenError> {
        let Some(snap) = snap else { return Ok(()) };
        let full = Clock::of(&snap);
        let doc = document(&snap).map_err(unwritable)?;
        let quiet = quiet(&snap).map_err(unwritable)?;
        self.write(full.ms(), Entry::Full(doc.clone()))?;
        self.last = Some(Last {
            snap,
            doc,
            quiet,
            full,
        });
        Ok(())
    }

    /// What changed since the last record, if anything.
    fn write_change(&mut self, snap: Snapshot) -> Result<(), OpenError> {
        let Some(last) = &self.last else {
            return self.write_full(Some(snap));
        };
        let quiet = quiet(&snap).map_err(unwritable)?;
        if quiet == last.quiet {
            return Ok(());
        }
        let t = snap.taken_unix_ms.unwrap_or_default();
        let doc = document(&last.full.on(&snap)).map_err(unwritable)?;
        let Some(patch) = diff_json(&last.doc, &doc) else {
            return Ok(());
        };
        let change = Delta {
            events: events(&last.snap, &snap),
            patch,
        };
        let full = last.full;
        self.write(t, Entry::Change(change))?;
        self.last = Some(Last {
            snap,
            doc,
            quiet,
            full,
        });
        Ok(())
    }

    /// The kills the audit log gained, at their own times (now, for a
    /// record whose `time` is no RFC 3339; never before the line before);
    /// what kept some from being read said once on stderr.
    fn write_kills(&mut self) -> Result<(), OpenError> {
        let (Some(tail), Some(path)) = (self.audit.as_mut(), &self.opts.audit_log) else {
            return Ok(());
        };
        let read = tail.new_records();
        match &read.trouble {
            None => self.said.audit = false,
            Some(_) if self.said.audit => {}
            Some(trouble) => {
                self.said.audit = true;
                let _ = notice::write_record_audit(&mut std::io::stderr(), path, trouble);
            }
        }
        for (k, ended) in read.records {
            let t = ended.unwrap_or_else(crate::units::unix_now_ms);
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
                match self.take() {
                    Ok(Some(snap)) => {
                        self.said.gpu_miss = false;
                        snap
                    }
                    Ok(None) => return Ok(()),
                    Err(miss) => {
                        if !std::mem::replace(&mut self.said.gpu_miss, true) {
                            let _ = notice::write_record_gpu_miss(&mut std::io::stderr(), &miss);
                        }
                        return Ok(());
                    }
                }
            }
        };
        let t = snap.taken_unix_ms.unwrap_or_default();
        let full_due = self.last.as_ref().is_none_or(|l| {
            Duration::from_millis(t.saturating_sub(l.full.ms())) >= self.opts.full_every
        });
        if full_due {
            self.write_full(Some(snap))
        } else {
            self.write_change(snap)
        }
    }
}

impl Watch for Recorder<'_> {
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
                self.failed = Some(e);
                ControlFlow::Break(())
            }
        }
    }

    fn deadline(&self) -> Option<std::time::Instant> {
        None
    }
}
