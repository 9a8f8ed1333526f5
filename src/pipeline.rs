//! The pipeline, one way: collect (`snapshot`, over `proc` and `nvml`) →
//! narrow to the selected GPUs → diagnose (`diagnose`: verdicts and
//! findings). Collection never judges; every command that needs a judged
//! snapshot takes it from here, so a snapshot is diagnosed exactly where
//! it is made and nowhere else.

use crate::diagnose::{self, verdict, Options};
use crate::model::{Selection, Snapshot};
use crate::nvml::NvmlReport;
use crate::snapshot::{self, fold_memory, narrow, Collector, Config, SnapshotError};
use std::time::Instant;

/// A judged snapshot from `c`: one collection, then the diagnosis. The
/// collector's own `collect_until` gives the snapshot unjudged (no
/// verdicts, no findings); these three give it judged, and are the only
/// way a command gets a judged snapshot from a collector.
pub fn judged(c: &Collector) -> Result<Snapshot, SnapshotError> {
    judged_until(c, None)
}

/// [`judged`], with reads that end by `deadline` (what is not read by then
/// is reported as timed out).
pub fn judged_until(c: &Collector, deadline: Option<Instant>) -> Result<Snapshot, SnapshotError> {
    judged_with(c, deadline, &Options::default())
}

/// [`judged_until`], diagnosed with `opts` (`why --pattern`).
pub fn judged_with(
    c: &Collector,
    deadline: Option<Instant>,
    opts: &Options,
) -> Result<Snapshot, SnapshotError> {
    let mut snap = c.collect_until(deadline)?;
    judge_with(&mut snap, opts);
    Ok(snap)
}

/// A judged snapshot of every GPU and every holder, with a collector of
/// its own (made and dropped here).
pub fn take_judged(cfg: &Config) -> Result<Snapshot, SnapshotError> {
    let mut snap = snapshot::collect(cfg)?;
    judge(&mut snap);
    Ok(snap)
}

/// Narrows a judged snapshot to the GPUs (and MIG devices) `sel` names and
/// judges what is left (nothing to do when every GPU is selected whole).
pub fn select(snap: Snapshot, sel: &Selection) -> Snapshot {
    select_with(snap, sel, &Options::default())
}

/// [`select`], diagnosed with `opts`.
pub fn select_with(snap: Snapshot, sel: &Selection, opts: &Options) -> Snapshot {
    if sel.is_all(&snap.gpus) {
        return snap;
    }
    let mut snap = narrow(snap, sel);
    judge_with(&mut snap, opts);
    snap
}

/// Folds a fresh NVML reading into a judged snapshot and judges it again;
/// false (and nothing changed) when only a full snapshot can describe what
/// changed (see [`fold_memory`]).
pub fn refresh_memory(snap: &mut Snapshot, report: &NvmlReport) -> bool {
    if !fold_memory(snap, report) {
        return false;
    }
    judge(snap);
    true
}

/// Sets the verdicts and the findings from what the snapshot holds now.
fn judge(snap: &mut Snapshot) {
    judge_with(snap, &Options::default());
}

/// Sets the verdicts and the findings, diagnosed with `opts`: what every
/// judged snapshot went through (the presenters' golden tests judge their
/// snapshot values with it too).
pub fn judge_with(snap: &mut Snapshot, opts: &Options) {
    verdict::apply(snap);
    snap.findings = diagnose::diagnose_with(snap, opts);
}
