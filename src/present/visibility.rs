//! `visibility` as JSON has it: the snapshot's [`Visibility`] in its
//! fields' order, with why the walk that ran was chosen in words
//! (`scan_reason`) and as a value beside them (`scan_cause`), and each
//! refused node's `why` in words beside its `cause`.

use super::words::scan::scan_reason;
use crate::model::{
    NodeRefusal, RefusedNode, ScanMethod, ScanReason, Unreadable, ViewFrom, Visibility,
};
use serde::Serialize;

/// A snapshot's visibility as `status --json` prints it.
#[derive(Debug, Serialize)]
pub struct VisibilityDoc<'a> {
    processes_scanned: u32,
    processes_unreadable: u32,
    unreadable_pids: &'a [u32],
    unreadable: &'a [Unreadable],
    vanished_pids: &'a [u32],
    nvml_pids_not_visible: &'a [u32],
    nvml_pids_stale: &'a [u32],
    hidepid: bool,
    root: bool,
    nested_pid_namespace: bool,
    scan: ScanMethod,
    scan_reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    scan_cause: &'a Option<ScanReason>,
    scan_reread: u32,
    scan_kept: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    view: &'a Option<ViewFrom>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    hidden: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    refused_nodes: Vec<RefusedNodeDoc<'a>>,
}

/// A refused node as JSON has it: why in words, and as a value.
#[derive(Debug, Serialize)]
pub struct RefusedNodeDoc<'a> {
    path: &'a str,
    why: String,
    gpus: &'a [u32],
    cause: &'a NodeRefusal,
}

impl<'a> RefusedNodeDoc<'a> {
    /// The document of `r`.
    fn new(r: &'a RefusedNode) -> RefusedNodeDoc<'a> {
        RefusedNodeDoc {
            path: &r.path,
            why: r.why.to_string(),
            gpus: &r.gpus,
            cause: &r.why,
        }
    }
}

impl<'a> VisibilityDoc<'a> {
    /// The document of `v`.
    pub fn new(v: &'a Visibility) -> VisibilityDoc<'a> {
        // Every field named: a field added to visibility fails to compile
        // here until the document says whether JSON has it.
        let Visibility {
            processes_scanned,
            processes_unreadable,
            unreadable_pids,
            unreadable,
            vanished_pids,
            nvml_pids_not_visible,
            nvml_pids_stale,
            hidepid,
            root,
            nested_pid_namespace,
            scan,
            scan_reason: scan_cause,
            scan_reread,
            scan_kept,
            view,
            hidden,
            refused_nodes,
        } = v;
        VisibilityDoc {
            processes_scanned: *processes_scanned,
            processes_unreadable: *processes_unreadable,
            unreadable_pids,
            unreadable,
            vanished_pids,
            nvml_pids_not_visible,
            nvml_pids_stale,
            hidepid: *hidepid,
            root: *root,
            nested_pid_namespace: *nested_pid_namespace,
            scan: *scan,
            scan_reason: scan_reason(v),
            scan_cause,
            scan_reread: *scan_reread,
            scan_kept: *scan_kept,
            view,
            hidden,
            refused_nodes: refused_nodes.iter().map(RefusedNodeDoc::new).collect(),
        }
    }
}
