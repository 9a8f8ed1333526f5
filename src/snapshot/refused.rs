//! The device directory's refused entries as the model has them, and the
//! NVIDIA GPUs its `nvidiaN` entries stand for when NVML cannot say.

use super::drm::DrmGpus;
use crate::model::Gpu;
use crate::model::{RefusedNode, Vendor};
use crate::proc::nodes::{NodeKind, NodeSet};
use std::collections::BTreeSet;

/// The NVIDIA GPUs the device directory names when NVML cannot say: one
/// per `nvidiaN`, a node or a refused entry (its holders may be unseen,
/// and its verdict says so).
pub(super) fn gpus_without_nvml(nodes: &NodeSet) -> Vec<Gpu> {
    let named = nodes.nodes.iter().map(|n| n.kind);
    let refused = nodes.refused.iter().map(|r| r.kind);
    let minors: BTreeSet<u32> = named
        .chain(refused)
        .filter_map(|k| match k {
            NodeKind::NvidiaGpu(minor) => Some(minor),
            _ => None,
        })
        .collect();
    minors
        .into_iter()
        .map(|minor| Gpu {
            index: minor,
            name: "unknown (NVML unavailable)".into(),
            minor_number: Some(minor),
            ..Gpu::default()
        })
        .collect()
}

/// The device directory's refused entries, each with the GPUs whose
/// holders it may hide (`model::RefusedNode`).
pub(super) fn refused_nodes(nodes: &NodeSet, gpus: &[Gpu], drm_gpus: &DrmGpus) -> Vec<RefusedNode> {
    let every = |keep: &dyn Fn(&Gpu) -> bool| -> Vec<u32> {
        gpus.iter().filter(|g| keep(g)).map(|g| g.index).collect()
    };
    nodes
        .refused
        .iter()
        .map(|r| {
            let gpus = match r.kind {
                // The GPU of that minor number, and any NVIDIA GPU whose
                // minor NVML could not say.
                NodeKind::NvidiaGpu(minor) => every(&|g| {
                    g.vendor == Vendor::Nvidia && g.minor_number.is_none_or(|m| m == minor)
                }),
                NodeKind::NvidiaShared | NodeKind::NvidiaCap => {
                    every(&|g| g.vendor == Vendor::Nvidia)
                }
                NodeKind::Kfd => every(&|g| g.vendor == Vendor::Amd),
                NodeKind::DriCard | NodeKind::DriRender => match drm_gpus.of_node(&r.rel) {
                    Some(g) => vec![g],
                    None => every(&|_| true),
                },
            };
            RefusedNode {
                path: r.path.display().to_string(),
                why: r.why.clone(),
                gpus,
            }
        })
        .collect()
}
