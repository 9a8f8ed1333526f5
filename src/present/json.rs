//! The JSON documents of SPEC.md: a snapshot with its findings in words
//! (`status --json`, `why --json`, and the part of `kill --json` and
//! `wait --json` that is the status).

use super::words::words;
use crate::model::{
    Brief, Finding, FindingKind, Gpu, KubeletView, MigCap, MpsGpu, NvmlStatus, PodName, Process,
    Severity, Snapshot, Unavailable, UnitRestart, Verdict, Visibility,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// One finding as JSON has it: its kind, severity and words.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FindingDoc {
    /// Machine-readable kind, e.g. `live-holders`, `renamed-holders`.
    pub kind: FindingKind,
    /// How bad.
    pub severity: Severity,
    /// One or two sentences for a person.
    pub message: String,
    /// The processes it is about.
    pub pids: Vec<u32>,
    /// The GPUs it is about.
    pub gpus: Vec<u32>,
    /// The exact next command.
    pub next: String,
    /// Evidence, one line each (processes, states, commands).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// Bytes of GPU memory this finding explains (for ordering).
    pub bytes: u64,
}

impl FindingDoc {
    /// Finding `f` in words.
    pub fn new(f: &Finding) -> FindingDoc {
        let w = words(f);
        FindingDoc {
            kind: f.kind(),
            severity: f.severity,
            message: w.message,
            pids: f.pids.clone(),
            gpus: f.gpus.clone(),
            next: w.next,
            details: w.details,
            bytes: f.bytes,
        }
    }
}

/// A snapshot as `status --json` prints it: its fields in their order,
/// with the findings in words.
#[derive(Debug, Serialize)]
pub struct SnapshotDoc<'a> {
    gpus: &'a [Gpu],
    processes: &'a [Process],
    findings: Vec<FindingDoc>,
    visibility: &'a Visibility,
    nvml: &'a NvmlStatus,
    unavailable: &'a [Unavailable],
    dev_dir: &'a str,
    uptime_ticks: u64,
    ticks_per_second: u64,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    others: &'a [Brief],
    verdict: &'a Verdict,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    units: &'a BTreeMap<String, UnitRestart>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pods: &'a BTreeMap<String, PodName>,
    /// MIG capability nodes and what each opens (an addition to SPEC.md).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    mig_caps: &'a BTreeMap<String, MigCap>,
    /// The kubelet's allocations (an addition to SPEC.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    kubelet: &'a Option<KubeletView>,
    /// NVIDIA MPS, where any GPU runs under it (an addition to SPEC.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    mps: Option<MpsDoc>,
}

/// MPS as JSON has it: the control daemons, and per GPU its servers and
/// the clients whose memory they hold.
#[derive(Debug, Serialize)]
pub struct MpsDoc {
    /// `nvidia-cuda-mps-control` PIDs among the holders.
    controls: Vec<u32>,
    /// Each GPU under MPS.
    gpus: Vec<MpsGpu>,
}

impl MpsDoc {
    /// The MPS of `s`; None where there is none.
    fn of(s: &Snapshot) -> Option<MpsDoc> {
        let doc = MpsDoc {
            controls: s.mps_controls(),
            gpus: s.mps(),
        };
        (!doc.controls.is_empty() || !doc.gpus.is_empty()).then_some(doc)
    }
}

impl<'a> SnapshotDoc<'a> {
    /// The document of `s`.
    pub fn new(s: &'a Snapshot) -> SnapshotDoc<'a> {
        // Every field named: a field added to the snapshot fails to
        // compile here until the document says whether JSON has it.
        let Snapshot {
            gpus,
            processes,
            findings,
            visibility,
            nvml,
            unavailable,
            dev_dir,
            uptime_ticks,
            ticks_per_second,
            others,
            verdict,
            pins: _,
            parents: _,
            units,
            pods,
            mig_caps,
            kubelet,
        } = s;
        let mps = MpsDoc::of(s);
        SnapshotDoc {
            gpus,
            processes,
            findings: findings.iter().map(FindingDoc::new).collect(),
            visibility,
            nvml,
            unavailable,
            dev_dir,
            uptime_ticks: *uptime_ticks,
            ticks_per_second: *ticks_per_second,
            others,
            verdict,
            units,
            pods,
            mig_caps,
            kubelet,
            mps,
        }
    }
}
