//! `--gpu` selectors (index, UUID or prefix, PCI bus id, `all`) and a
//! snapshot narrowed to the GPUs they name.

use super::*;

/// One `--gpu` selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSelector {
    /// Every GPU.
    All,
    /// An NVML index.
    Index(u32),
    /// A UUID or a prefix of one (`GPU-7f3a`).
    Uuid(String),
    /// A PCI bus id in any common spelling (`01:00.0`, `0000:01:00.0`).
    PciBusId(String),
}

impl std::str::FromStr for GpuSelector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty GPU selector".into());
        }
        if s.eq_ignore_ascii_case("all") {
            Ok(GpuSelector::All)
        } else if let Ok(i) = s.parse() {
            Ok(GpuSelector::Index(i))
        } else if s.contains(':') {
            normalize_pci(s)
                .map(GpuSelector::PciBusId)
                .ok_or_else(|| format!("'{s}' is not a PCI bus id (like 0000:01:00.0)"))
        } else if s.len() >= 4
            && (s.starts_with("GPU-")
                || s.starts_with("MIG-")
                || s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
        {
            Ok(GpuSelector::Uuid(s.to_string()))
        } else {
            Err(format!(
                "'{s}' is not a GPU index, UUID, PCI bus id or 'all'"
            ))
        }
    }
}

/// `domain:bus:device.function` as numbers, from any common spelling.
pub(super) fn normalize_pci(s: &str) -> Option<String> {
    let parts: Vec<&str> = s.split([':', '.']).collect();
    let nums: Option<Vec<u32>> = parts
        .iter()
        .map(|p| u32::from_str_radix(p, 16).ok())
        .collect();
    let nums = nums?;
    let (domain, bus, dev, func) = match nums.as_slice() {
        [b, d, f] => (0, *b, *d, *f),
        [dom, b, d, f] => (*dom, *b, *d, *f),
        _ => return None,
    };
    Some(format!("{domain:08x}:{bus:02x}:{dev:02x}.{func:x}"))
}

impl GpuSelector {
    fn matches(&self, g: &Gpu) -> bool {
        match self {
            GpuSelector::All => true,
            GpuSelector::Index(i) => g.index == *i,
            GpuSelector::Uuid(u) => {
                let want = u.to_ascii_lowercase();
                let have = g.uuid.to_ascii_lowercase();
                !have.is_empty()
                    && (have.starts_with(&want)
                        || have.trim_start_matches("gpu-").starts_with(&want))
            }
            GpuSelector::PciBusId(p) => normalize_pci(&g.pci_bus_id).is_some_and(|q| q == *p),
        }
    }
}

/// Resolves selectors to GPU indexes; an empty list means all. A selector
/// that names no GPU (or a UUID prefix that names several) is an error.
pub fn resolve(gpus: &[Gpu], selectors: &[GpuSelector]) -> Result<Vec<u32>, String> {
    if selectors.is_empty() || selectors.contains(&GpuSelector::All) {
        return Ok(gpus.iter().map(|g| g.index).collect());
    }
    let mut out = BTreeSet::new();
    for s in selectors {
        let hits: Vec<u32> = gpus
            .iter()
            .filter(|g| s.matches(g))
            .map(|g| g.index)
            .collect();
        match hits.as_slice() {
            [] => {
                let have: Vec<String> = gpus.iter().map(|g| g.index.to_string()).collect();
                return Err(format!(
                    "--gpu {}: no such GPU (GPUs here: {})",
                    describe_selector(s),
                    if have.is_empty() {
                        "none".into()
                    } else {
                        have.join(", ")
                    }
                ));
            }
            [_, _, ..] if matches!(s, GpuSelector::Uuid(_)) => {
                return Err(format!(
                    "--gpu {}: UUID prefix matches several GPUs",
                    describe_selector(s)
                ));
            }
            _ => out.extend(hits),
        }
    }
    Ok(out.into_iter().collect())
}

pub(super) fn describe_selector(s: &GpuSelector) -> String {
    match s {
        GpuSelector::All => "all".into(),
        GpuSelector::Index(i) => i.to_string(),
        GpuSelector::Uuid(u) | GpuSelector::PciBusId(u) => u.clone(),
    }
}

/// Keeps only the selected GPUs and the processes that touch them (and
/// those that hold only shared nodes, which belong to every GPU). The
/// diagnosis of what is left is `crate::pipeline::select`'s.
pub fn narrow(mut snap: Snapshot, indexes: &[u32]) -> Snapshot {
    if indexes.len() == snap.gpus.len() {
        return snap;
    }
    snap.gpus.retain(|g| indexes.contains(&g.index));
    snap.processes.retain(|p| {
        indexes.iter().any(|&i| p.touches_gpu(i))
            || (p.gpu_memory.is_empty() && p.devices.iter().all(|d| d.gpu.is_none()))
    });
    for p in &mut snap.processes {
        p.gpu_memory.retain(|m| indexes.contains(&m.gpu));
    }
    snap
}
