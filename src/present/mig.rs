//! MIG in the status table: the MIG devices a holder is on, said as sure
//! or possible.

use crate::model::{Gpu, MigDevice, MigListings, Process, Snapshot};

/// The MIG devices `p` is on, in words (`0:1 (MIG-5c1e...)`), or may be on
/// (`maybe 0:0, 0:1: holds only their GPU instance's access`); None when
/// none.
pub(super) fn held(s: &Snapshot, listings: &MigListings, p: &Process) -> Option<String> {
    let mut sure = Vec::new();
    let mut maybe = Vec::new();
    for g in &s.gpus {
        let held = g
            .mig_devices
            .iter()
            .filter(|m| listings.may_hold(s, p, g.index, m));
        for m in held {
            if listings.surely_holds(s, p, g.index, m) {
                sure.push(describe(g, m));
            } else {
                maybe.push(crate::model::mig_label(g.index, m.index));
            }
        }
    }
    if !maybe.is_empty() {
        sure.push(format!(
            "maybe {}: holds only their GPU instance's access",
            maybe.join(", ")
        ));
    }
    (!sure.is_empty()).then(|| sure.join("; "))
}

fn describe(g: &Gpu, m: &MigDevice) -> String {
    let label = crate::model::mig_label(g.index, m.index);
    if m.uuid.is_empty() {
        label
    } else {
        format!("{label} ({})", m.uuid)
    }
}
