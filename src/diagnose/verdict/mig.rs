//! The verdict of each MIG device: the snapshot narrowed to it, judged as
//! a GPU of its own.

use super::{gpu, Policy};
use crate::model::{Snapshot, Verdict};

/// Each MIG device judged as a GPU of its own: the snapshot narrowed to it
/// (its memory, its processes, the holders of its capabilities).
pub(super) fn mig_verdicts(s: &Snapshot, policy: &Policy) -> Vec<(u32, u32, Verdict)> {
    let mut out = Vec::new();
    for g in s.gpus.iter().filter(|g| !g.mig_devices.is_empty()) {
        for m in &g.mig_devices {
            let mut one = s.clone();
            one.restrict_mig(g.index, &std::iter::once(m.index).collect());
            if let Some(rg) = one.gpus.iter().find(|x| x.index == g.index) {
                out.push((g.index, m.index, gpu(&one, rg, policy)));
            }
        }
    }
    out
}
