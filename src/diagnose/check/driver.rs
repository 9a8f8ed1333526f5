//! `check`'s conditions from the driver's own evidence (issue 29):
//! `reset-required` from the diagnosis's driver-fault findings, and `xid`
//! from the kernel log's Xids by the catalog's action.

use super::problem;
use crate::model::{Condition, Evidence, Level, Problem, Snapshot, Xid, XidAction};

/// A GPU the driver says needs a reset or a reboot: critical, naming the
/// processes that hold it (they block the reset, or go with the reboot).
pub(super) fn reset_required(s: &Snapshot) -> Vec<Problem> {
    s.findings
        .iter()
        .filter_map(|f| match &f.evidence {
            Evidence::DriverFault(d) => Some((f, d)),
            _ => None,
        })
        .map(|(f, d)| {
            let mut p = problem(Condition::ResetRequired, Level::Critical, Some(d.gpu));
            p.bytes = f.bytes;
            p.processes = d
                .blockers
                .iter()
                .map(|(w, _)| (w.pid, w.comm.clone()))
                .collect();
            p.finding = Some(f.kind());
            p
        })
        .collect()
}

/// One problem per GPU and Xid number in the kernel log: critical where
/// the catalog's action is a reset or a reboot, none where NVIDIA says to
/// ignore it, else a warning; with the processes the log names.
pub(super) fn xids(s: &Snapshot) -> Vec<Problem> {
    let mut out: Vec<Problem> = Vec::new();
    for g in &s.gpus {
        let Some(e) = &g.driver_evidence else {
            continue;
        };
        for x in &e.xids {
            let level = match Xid::lookup(x.xid).action {
                XidAction::Ignore => continue,
                XidAction::ResetGpu | XidAction::RebootNode => Level::Critical,
                XidAction::RestartApp | XidAction::ContactSupport | XidAction::SeeTable => {
                    Level::Warning
                }
            };
            let at = out
                .iter()
                .position(|p| p.gpu == Some(g.index) && p.xid == Some(x.xid));
            let p = match at {
                Some(i) => &mut out[i],
                None => {
                    let mut p = problem(Condition::Xid, level, Some(g.index));
                    p.xid = Some(x.xid);
                    out.push(p);
                    let last = out.len() - 1;
                    &mut out[last]
                }
            };
            if let Some(pid) = x.pid.filter(|pid| !p.processes.iter().any(|q| q.0 == *pid)) {
                p.processes.push((pid, x.comm.clone().unwrap_or_default()));
            }
        }
    }
    out
}
