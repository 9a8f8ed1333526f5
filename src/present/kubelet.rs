//! The kubelet's part of the JSON documents: its view, with why it could
//! not be read in words (`kubelet.error`) beside the value
//! (`kubelet.cause`).

use crate::model::{Allocation, KubeletDown, KubeletView, PodName};
use serde::Serialize;

/// The kubelet's view as JSON has it.
#[derive(Debug, Serialize)]
pub struct KubeletDoc<'a> {
    socket: &'a str,
    pods: &'a [PodName],
    allocations: &'a [Allocation],
    allocatable: &'a [String],
    /// Why the kubelet could not be read, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Why, as a value (an addition to SPEC.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    cause: &'a Option<KubeletDown>,
}

impl<'a> KubeletDoc<'a> {
    /// The document of `k`.
    pub fn new(k: &'a KubeletView) -> KubeletDoc<'a> {
        let KubeletView {
            socket,
            pods,
            allocations,
            allocatable,
            error,
        } = k;
        KubeletDoc {
            socket,
            pods,
            allocations,
            allocatable,
            error: error.as_ref().map(ToString::to_string),
            cause: error,
        }
    }
}
