//! The driver's own evidence per GPU (issue 29): NVIDIA's recovery
//! action, the row remapper's state and the kernel log's Xid reports by
//! number. A reading the driver does not support exports no series (never
//! a 0 that would read as "no fault").

use super::{gauge_family, l, label_value};
use crate::model::{RecoveryAction, Snapshot};
use prometheus_client::registry::Registry;

/// The recovery actions as the `action` label spells them (NVML's names
/// in lower case, as the simulator's state file does).
const ACTIONS: [(RecoveryAction, &str); 5] = [
    (RecoveryAction::None, "none"),
    (RecoveryAction::GpuReset, "gpu_reset"),
    (RecoveryAction::NodeReboot, "node_reboot"),
    (RecoveryAction::DrainP2p, "drain_p2p"),
    (RecoveryAction::DrainAndReset, "drain_and_reset"),
];

/// Per GPU with NVML's evidence: `gpu_recovery_action{action}` (1 for the
/// action now, 0 for the others; `other` for a value newer than this
/// build), `gpu_row_remap{state="pending|failure"}` (0 or 1) and
/// `gpu_xid_reports{xid}` (reports of that Xid in the kernel log's ring,
/// or NVML's events since a long-running command started).
pub(super) fn add_driver(r: &mut Registry, s: &Snapshot) {
    let evidence: Vec<_> = s
        .gpus
        .iter()
        .filter_map(|g| g.driver_evidence.as_ref().map(|e| (g, e)))
        .collect();
    if evidence.is_empty() {
        return;
    }
    let action = gauge_family(
        r,
        "gpu_recovery_action",
        "1 for NVIDIA's recovery action for the GPU now (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), 0 for the others; absent where not supported",
    );
    let remap = gauge_family(
        r,
        "gpu_row_remap",
        "1 where a row remap is pending (applied at the next reset) or failed, else 0; absent where not supported",
    );
    let xids = gauge_family(
        r,
        "gpu_xid_reports",
        "Xid reports for the GPU by Xid: in the kernel log's ring (one-shot metrics), or delivered by NVML's event API since serve started",
    );
    for (g, e) in evidence {
        let gpu = [("gpu", g.index.to_string()), ("uuid", label_value(&g.uuid))];
        let with = |k: &'static str, v: String| {
            let mut labels = gpu.to_vec();
            labels.push((k, v));
            l(&labels)
        };
        if let Some(now) = e.recovery_action.value() {
            for (a, name) in ACTIONS {
                action
                    .get_or_create(&with("action", name.into()))
                    .set(i64::from(a == *now));
            }
            if matches!(now, RecoveryAction::Other(_)) {
                action.get_or_create(&with("action", "other".into())).set(1);
            }
        }
        if let Some(rows) = e.remapped_rows.value() {
            remap
                .get_or_create(&with("state", "pending".into()))
                .set(i64::from(rows.pending));
            remap
                .get_or_create(&with("state", "failure".into()))
                .set(i64::from(rows.failure));
        }
        for x in &e.xids {
            xids.get_or_create(&with("xid", x.xid.to_string())).inc();
        }
    }
}
