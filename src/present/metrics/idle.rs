//! Per holder and GPU (issue 29): its SM utilisation over the idle window
//! and whether it is idle (memory, and no SM, memory, encoder or decoder
//! activity on any GPU it holds). Only where the GPU answered: a reading
//! the driver does not support exports no series (never a 0 that would
//! read as "busy" or "idle").

use super::{gauge, gauge_family, l, label_value, Labels};
use crate::model::{Activity, FindingKind, Lookup, Snapshot};
use prometheus_client::registry::Registry;
use std::collections::HashSet;

/// `process_sm_util_percent` and `process_idle` per holder and GPU,
/// labelled `gpu`, `uuid`, `pid`, `comm` as its memory series is; idle
/// as the judged snapshot's `idle-holders` finding names it.
pub(super) fn add_idle(r: &mut Registry, s: &Snapshot) {
    let rows = rows(s);
    if rows.is_empty() {
        return;
    }
    let util = gauge_family(
        r,
        "process_sm_util_percent",
        "SM utilisation of one holder on one GPU over the idle window, the largest sample (nvmlDeviceGetProcessUtilization); absent where not supported",
    );
    let idle = gauge_family(
        r,
        "process_idle",
        "1 for a holder with GPU memory and no SM, memory, encoder or decoder activity on any of its GPUs over the idle window, else 0; absent where unknown",
    );
    let since = gauge_family(
        r,
        "process_idle_since_timestamp_seconds",
        "Since when serve or watch has found the holder idle at every collection (the start of the first such window), seconds since the epoch; absent while not idle and in one-shot metrics",
    );
    for (labels, sm, is_idle, idle_since) in rows {
        util.get_or_create(&labels).set(gauge(sm));
        if let Some(v) = is_idle {
            idle.get_or_create(&labels).set(gauge(v));
        }
        if let Some(ms) = idle_since {
            since.get_or_create(&labels).set(gauge(ms / 1000));
        }
    }
}

/// One series of a holder on a GPU: its labels, SM %, idle (where known)
/// and idle since (ms since the epoch, where a long-running command knows).
type Row = (Labels, u32, Option<u32>, Option<u64>);

/// The rows of every live holder on every GPU whose utilisation answered.
fn rows(s: &Snapshot) -> Vec<Row> {
    // Idle as the diagnosis found it (live, not protected, no MPS server).
    let idle_pids: HashSet<u32> = s
        .findings
        .iter()
        .filter(|f| f.kind() == FindingKind::IdleHolders)
        .flat_map(|f| f.pids.iter().copied())
        .collect();
    let look = Lookup::new(s);
    let mut rows = Vec::new();
    for p in s.processes.iter().filter(|p| p.is_live()) {
        let Some(whole) = look.process_activity(p) else {
            continue;
        };
        for m in &p.gpu_memory {
            let Some(g) = look.gpu(m.gpu) else {
                continue;
            };
            let Some(sm) = look.sm_on(g.index, p.pid) else {
                continue;
            };
            let idle = u32::from(idle_pids.contains(&p.pid));
            let labels = l(&[
                ("gpu", g.index.to_string()),
                ("uuid", label_value(&g.uuid)),
                ("pid", p.pid.to_string()),
                ("comm", label_value(&p.comm)),
            ]);
            let known = (whole != Activity::Unknown).then_some(idle);
            rows.push((labels, sm, known, p.idle_since_unix_ms));
        }
    }
    rows
}
