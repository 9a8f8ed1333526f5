//! `check`'s `idle` condition (issue 29): the diagnosis's idle holders
//! (memory, no GPU activity over the window) that hold at least
//! `--idle-min` on a GPU, a warning per GPU: the memory is kept from the
//! next job, but nothing is broken.

use super::problem;
use crate::model::{Condition, Evidence, Level, Problem, Snapshot};

/// One warning per GPU where idle holders each hold at least `min`
/// there, naming them, with their memory there.
pub(super) fn idle(s: &Snapshot, min: u64) -> Vec<Problem> {
    let mut out: Vec<Problem> = Vec::new();
    let holders = s.findings.iter().flat_map(|f| match &f.evidence {
        Evidence::Idle(i) => i.holders.as_slice(),
        _ => &[],
    });
    for h in holders {
        for (gpu, bytes) in &h.memory {
            let Some(bytes) = bytes.filter(|b| *b >= min) else {
                continue;
            };
            let at = out.iter().position(|p| p.gpu == Some(*gpu));
            let p = match at {
                Some(i) => &mut out[i],
                None => {
                    out.push(problem(Condition::Idle, Level::Warning, Some(*gpu)));
                    let last = out.len() - 1;
                    &mut out[last]
                }
            };
            p.bytes = p.bytes.saturating_add(bytes);
            p.processes.push((h.who.pid, h.who.comm.clone()));
            p.finding = Some(crate::model::FindingKind::IdleHolders);
        }
    }
    out
}
