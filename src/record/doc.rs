//! What the recorder writes, as typed values and then bytes: a snapshot's
//! document (less its findings), its quiet copy (what moves while nothing
//! happens zeroed), the clock a change keeps, and one record as a line.

use crate::model::{Entry, Line, Snapshot, RECORD_VERSION};
use serde_json::Value;

/// The clock fields of a full snapshot (`uptime_ticks`, `taken_unix_ms`):
/// the changes after it keep them, as a reader moves them on by each
/// record's time ([`crate::model::Replay`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    uptime_ticks: u64,
    taken_unix_ms: Option<u64>,
}

impl Clock {
    /// `snap`'s.
    pub(super) fn of(snap: &Snapshot) -> Clock {
        Clock {
            uptime_ticks: snap.uptime_ticks,
            taken_unix_ms: snap.taken_unix_ms,
        }
    }

    /// When it was taken (ms).
    pub(super) fn ms(self) -> u64 {
        self.taken_unix_ms.unwrap_or_default()
    }

    /// `snap` with this clock.
    pub(super) fn on(self, snap: &Snapshot) -> Snapshot {
        let mut s = snap.clone();
        s.uptime_ticks = self.uptime_ticks;
        s.taken_unix_ms = self.taken_unix_ms;
        s
    }

    /// `snap` with this clock moved on to `t`, as a reader moves it.
    pub(super) fn moved_on(self, snap: &Snapshot, t: u64) -> Snapshot {
        let mut s = snap.clone();
        let since = t.saturating_sub(self.ms());
        s.uptime_ticks = self.uptime_ticks + since * s.ticks_per_second / 1000;
        s.taken_unix_ms = Some(t);
        s
    }
}

/// The document of `snap` without what moves on every look while nothing
/// happens (the clock, how many processes the scan read, the start of the
/// driver's utilisation window): a change of those alone is not recorded;
/// with another, it is. A document, not the snapshot: the snapshot has
/// more than its document (every process the scan read, as `parents`),
/// whose changes are not the document's.
pub(super) fn quiet(snap: &Snapshot) -> Result<Value, serde_json::Error> {
    document(&quiet_copy(snap))
}

/// `snap` with what moves while nothing happens zeroed.
fn quiet_copy(snap: &Snapshot) -> Snapshot {
    let mut s = snap.clone();
    s.uptime_ticks = 0;
    s.taken_unix_ms = None;
    s.visibility.processes_scanned = 0;
    s.visibility.scan_reread = 0;
    s.visibility.scan_kept = 0;
    for g in &mut s.gpus {
        if let Some(e) = &mut g.driver_evidence {
            e.utilization_window = None;
        }
    }
    s
}

/// The snapshot document of `snap`, as `record` keeps it
/// ([`crate::present::from::recorded_document`]).
pub(super) fn document(snap: &Snapshot) -> Result<Value, serde_json::Error> {
    crate::present::from::recorded_document(snap)
}

/// One record as a line ([`crate::present::from::json_line`]).
pub(super) fn line(t: u64, entry: Entry) -> Result<Vec<u8>, serde_json::Error> {
    crate::present::from::json_line(&Line {
        record: RECORD_VERSION,
        t,
        entry,
    })
}

#[cfg(test)]
mod tests {
    use super::{document, quiet, Clock};
    use crate::model::Snapshot;

    #[test]
    fn a_look_that_moved_only_the_clock_the_scan_counts_or_a_non_holder_is_quiet() {
        let was = Snapshot {
            uptime_ticks: 100,
            taken_unix_ms: Some(1_000),
            ticks_per_second: 100,
            ..Snapshot::default()
        };
        let mut now = was.clone();
        now.uptime_ticks = 300;
        now.taken_unix_ms = Some(3_000);
        now.visibility.processes_scanned = 7;
        now.visibility.scan_reread = 2;
        now.visibility.scan_kept = 3;
        now.parents.insert(42, crate::model::Kin::default());
        assert_eq!(quiet(&was).unwrap(), quiet(&now).unwrap());
        now.dev_dir = "/elsewhere".into();
        assert_ne!(quiet(&was).unwrap(), quiet(&now).unwrap());
    }

    #[test]
    fn a_change_keeps_the_full_clock_and_a_new_file_moves_it_on() {
        let full = Snapshot {
            uptime_ticks: 100,
            taken_unix_ms: Some(1_000),
            ticks_per_second: 100,
            ..Snapshot::default()
        };
        let clock = Clock::of(&full);
        let mut later = full.clone();
        later.uptime_ticks = 500;
        later.taken_unix_ms = Some(5_000);
        let doc = document(&clock.on(&later)).unwrap();
        assert_eq!(doc["uptime_ticks"], 100);
        assert_eq!(doc["taken_unix_ms"], 1_000);
        assert!(doc.get("findings").is_none(), "{doc}");
        let moved = clock.moved_on(&later, 3_000);
        assert_eq!(
            (moved.uptime_ticks, moved.taken_unix_ms),
            (300, Some(3_000))
        );
    }
}
