//! The JSON documents of SPEC.md: a snapshot with its findings in words
//! (`status --json`, `why --json`, and the part of `kill --json` and
//! `wait --json` that is the status); the fleet view with its commands
//! and reasons in words (`fleet --json`).

use super::from::ReadBack;
use super::kmsg::KernelLogDoc;
use super::kubelet::KubeletDoc;
use super::nvml::{DriverEvidenceDoc, NvmlDoc};
use super::restart::{units_doc, UnitRestartDoc};
use super::visibility::VisibilityDoc;
use super::words::verdict::{caveats, reasons};
use super::words::words;
use crate::model::{
    Brief, Call, Caveat, Failure, Finding, FindingKind, Fleet, FleetNode, Gpu, Memory, MigCap,
    MigDevice, MpsGpu, NvmlProcess, PodName, Process, Reason, Severity, Snapshot, StaleNode,
    Unavailable, Unplaced, Vendor, Verdict, VerdictState,
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
    gpus: Vec<GpuDoc<'a>>,
    processes: &'a [Process],
    /// None: left out (`record`'s documents: a reader judges them again).
    #[serde(skip_serializing_if = "Option::is_none")]
    findings: Option<Vec<FindingDoc>>,
    visibility: VisibilityDoc<'a>,
    nvml: NvmlDoc<'a>,
    unavailable: Vec<UnavailableDoc<'a>>,
    dev_dir: &'a str,
    uptime_ticks: u64,
    ticks_per_second: u64,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    others: &'a [Brief],
    verdict: VerdictDoc<'a>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    units: BTreeMap<&'a str, UnitRestartDoc<'a>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pods: &'a BTreeMap<String, PodName>,
    /// MIG capability nodes and what each opens (an addition to SPEC.md).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    mig_caps: &'a BTreeMap<String, MigCap>,
    /// The kubelet's allocations (an addition to SPEC.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    kubelet: Option<KubeletDoc<'a>>,
    /// NVIDIA MPS, where any GPU runs under it (an addition to SPEC.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    mps: Option<MpsDoc>,
    /// The kernel log's Xid reports, where read (an addition to SPEC.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_log: Option<KernelLogDoc<'a>>,
    /// What `--from` needs besides (additions: `present/from.rs`).
    #[serde(flatten)]
    readback: ReadBack<'a>,
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
    /// Its findings left out.
    pub fn findings_left_out(&mut self) {
        self.findings = None;
    }

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
            kernel_log,
            taken_unix_ms: _,
            host: _,
            from_file: _,
        } = s;
        let mps = MpsDoc::of(s);
        SnapshotDoc {
            gpus: gpus.iter().map(GpuDoc::new).collect(),
            processes,
            findings: Some(findings.iter().map(FindingDoc::new).collect()),
            visibility: VisibilityDoc::new(visibility),
            nvml: NvmlDoc::new(nvml),
            unavailable: unavailable.iter().map(UnavailableDoc::new).collect(),
            dev_dir,
            uptime_ticks: *uptime_ticks,
            ticks_per_second: *ticks_per_second,
            others,
            verdict: VerdictDoc::new(verdict),
            units: units_doc(units),
            pods,
            mig_caps,
            kubelet: kubelet.as_ref().map(KubeletDoc::new),
            mps,
            kernel_log: kernel_log.as_ref().map(KernelLogDoc::new),
            readback: ReadBack::new(s),
        }
    }
}

/// The fleet view as `fleet --json` prints it: the [`Fleet`]'s fields in
/// their order, each node with the command to run there, each stale node
/// with its reason in words.
#[derive(Debug, Serialize)]
pub struct FleetDoc<'a> {
    prometheus: &'a str,
    node_label: &'a str,
    selector: &'a str,
    queries: usize,
    history_seconds: u64,
    max_age_seconds: u64,
    leftovers_only: bool,
    nodes_seen: usize,
    nodes_free: usize,
    nodes: Vec<FleetNodeDoc<'a>>,
    stale: Vec<StaleDoc<'a>>,
}

/// A node and the command to run there (null where its host is no safe
/// ssh host).
#[derive(Debug, Serialize)]
struct FleetNodeDoc<'a> {
    #[serde(flatten)]
    node: &'a FleetNode,
    command: Option<String>,
}

/// A stale node, and why in words.
#[derive(Debug, Serialize)]
struct StaleDoc<'a> {
    #[serde(flatten)]
    stale: &'a StaleNode,
    why: String,
}

impl<'a> FleetDoc<'a> {
    /// The document of `f`.
    pub fn new(f: &'a Fleet) -> FleetDoc<'a> {
        FleetDoc {
            prometheus: &f.prometheus,
            node_label: &f.node_label,
            selector: &f.selector,
            queries: f.queries,
            history_seconds: f.history_seconds,
            max_age_seconds: f.max_age_seconds,
            leftovers_only: f.leftovers_only,
            nodes_seen: f.nodes_seen,
            nodes_free: f.nodes_free,
            nodes: (f.nodes.iter())
                .map(|node| FleetNodeDoc {
                    node,
                    command: super::next::fleet_command(node),
                })
                .collect(),
            stale: (f.stale.iter())
                .map(|stale| StaleDoc {
                    stale,
                    why: super::fleet::stale_why(stale, f.max_age_seconds),
                })
                .collect(),
        }
    }
}

/// A verdict as JSON has it: SPEC.md's `reasons` and `caveats` in words,
/// and the same typed beside them (`causes`, `caveat_causes`).
#[derive(Debug, Serialize)]
pub struct VerdictDoc<'a> {
    state: VerdictState,
    reasons: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    caveats: Vec<String>,
    causes: &'a [Reason],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    caveat_causes: &'a [Caveat],
}

impl<'a> VerdictDoc<'a> {
    /// The document of `v`.
    pub fn new(v: &'a Verdict) -> VerdictDoc<'a> {
        VerdictDoc {
            state: v.state,
            reasons: reasons(&v.reasons),
            caveats: caveats(&v.caveats),
            causes: &v.reasons,
            caveat_causes: &v.caveats,
        }
    }
}

/// A GPU as JSON has it: its fields in their order, its verdict (and its
/// MIG devices') in words.
#[derive(Debug, Serialize)]
pub struct GpuDoc<'a> {
    index: u32,
    uuid: &'a str,
    name: &'a str,
    pci_bus_id: &'a str,
    vendor: Vendor,
    minor_number: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    driver: &'a Option<String>,
    memory: &'a Memory,
    nvml_processes: &'a [NvmlProcess],
    verdict: VerdictDoc<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mig_mode: Option<bool>,
    mig_devices: Vec<MigDoc<'a>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    mig_only: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    driver_evidence: Option<DriverEvidenceDoc<'a>>,
}

impl<'a> GpuDoc<'a> {
    /// The document of `g`.
    pub fn new(g: &'a Gpu) -> GpuDoc<'a> {
        // Every field named: a field added to the GPU fails to compile
        // here until the document says whether JSON has it.
        let Gpu {
            index,
            uuid,
            name,
            pci_bus_id,
            vendor,
            minor_number,
            driver,
            memory,
            nvml_processes,
            verdict,
            mig_mode,
            mig_devices,
            mig_only,
            driver_evidence,
        } = g;
        GpuDoc {
            index: *index,
            uuid,
            name,
            pci_bus_id,
            vendor: *vendor,
            minor_number: *minor_number,
            driver,
            memory,
            nvml_processes,
            verdict: VerdictDoc::new(verdict),
            mig_mode: *mig_mode,
            mig_devices: mig_devices.iter().map(MigDoc::new).collect(),
            mig_only: *mig_only,
            driver_evidence: driver_evidence.as_ref().map(DriverEvidenceDoc::new),
        }
    }
}

/// A MIG device as JSON has it, its verdict in words.
#[derive(Debug, Serialize)]
pub struct MigDoc<'a> {
    index: u32,
    uuid: &'a str,
    name: &'a str,
    gpu_instance_id: Option<u32>,
    compute_instance_id: Option<u32>,
    memory: &'a Memory,
    nvml_processes: &'a [NvmlProcess],
    verdict: VerdictDoc<'a>,
}

impl<'a> MigDoc<'a> {
    /// The document of `m`.
    pub fn new(m: &'a MigDevice) -> MigDoc<'a> {
        let MigDevice {
            index,
            uuid,
            name,
            gpu_instance_id,
            compute_instance_id,
            memory,
            nvml_processes,
            verdict,
        } = m;
        MigDoc {
            index: *index,
            uuid,
            name,
            gpu_instance_id: *gpu_instance_id,
            compute_instance_id: *compute_instance_id,
            memory,
            nvml_processes,
            verdict: VerdictDoc::new(verdict),
        }
    }
}

/// A call that failed as JSON has it: SPEC.md's `what` and `why` in
/// words, `call` and `cause` typed beside them.
#[derive(Debug, Serialize)]
pub struct UnavailableDoc<'a> {
    what: String,
    gpu: Option<u32>,
    why: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    unplaced: Option<Unplaced>,
    call: &'a Call,
    cause: &'a Failure,
}

impl<'a> UnavailableDoc<'a> {
    /// The document of `u`.
    pub fn new(u: &'a Unavailable) -> UnavailableDoc<'a> {
        UnavailableDoc {
            what: super::words::unavailable::what(u),
            gpu: u.gpu,
            why: super::words::unavailable::why(u),
            unplaced: u.unplaced,
            call: &u.what,
            cause: &u.why,
        }
    }
}
