//! MIG in the status table: a row per MIG device under its GPU, and the
//! MIG devices a holder is on.

use super::table::gpu_row;
use crate::model::{Gpu, MigDevice, Process, Snapshot, VerdictState};

/// The table's rows for `g` and then each of its MIG devices (`0:1`,
/// indented), each with whether it should stand out.
pub(super) fn rows(g: &Gpu) -> Vec<([String; 6], bool)> {
    let striking =
        |state: VerdictState, unaccounted: u64| state != VerdictState::Free || unaccounted > 0;
    let mut rows = vec![(
        gpu_row(&g.index.to_string(), &g.name, &g.memory, g.verdict.state),
        striking(g.verdict.state, g.memory.unaccounted_bytes),
    )];
    for m in &g.mig_devices {
        rows.push((
            gpu_row(
                &format!(" {}", m.label(g.index)),
                &m.name,
                &m.memory,
                m.verdict.state,
            ),
            striking(m.verdict.state, m.memory.unaccounted_bytes),
        ));
    }
    rows
}

/// The MIG devices `p` holds, in words (`0:1 (MIG-5c1e...)`); None when
/// it holds none.
pub(super) fn held(s: &Snapshot, p: &Process) -> Option<String> {
    let held: Vec<String> = s
        .gpus
        .iter()
        .flat_map(|g| s.migs_held(p, g).map(move |m| describe(g, m)))
        .collect();
    (!held.is_empty()).then(|| held.join(", "))
}

fn describe(g: &Gpu, m: &MigDevice) -> String {
    if m.uuid.is_empty() {
        m.label(g.index)
    } else {
        format!("{} ({})", m.label(g.index), m.uuid)
    }
}
