//! `--gpu` selectors (index, UUID or prefix, PCI bus id, MIG device as
//! `GPU:MIG` or `MIG-` UUID, `all`) and a snapshot narrowed to what they
//! name.

use crate::model::{Activity, BadSelector, Gpu, GpuMiss, Here, Lookup, Snapshot};
use crate::model::{MigDevice, Selection};
use std::collections::{BTreeMap, BTreeSet};

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
    /// A MIG device by GPU index and MIG index (`0:1`).
    Mig(u32, u32),
    /// A MIG device by its UUID or a prefix of it (`MIG-5c1e`).
    MigUuid(String),
}

impl std::str::FromStr for GpuSelector {
    type Err = BadSelector;
    fn from_str(s: &str) -> Result<Self, BadSelector> {
        let s = s.trim();
        if s.is_empty() {
            return Err(BadSelector::Empty);
        }
        if s.eq_ignore_ascii_case("all") {
            Ok(GpuSelector::All)
        } else if let Ok(i) = s.parse() {
            Ok(GpuSelector::Index(i))
        } else if let Some((gpu, mig)) = s
            .split_once(':')
            .and_then(|(g, m)| Some((decimal(g)?, decimal(m)?)))
        {
            Ok(GpuSelector::Mig(gpu, mig))
        } else if s.len() > 4 && s.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("MIG-")) {
            Ok(GpuSelector::MigUuid(s.to_string()))
        } else if s.contains(':') {
            normalize_pci(s)
                .map(GpuSelector::PciBusId)
                .ok_or_else(|| BadSelector::NotPci(s.to_string()))
        } else if s.len() >= 4
            && (s.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("GPU-"))
                || s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
        {
            Ok(GpuSelector::Uuid(s.to_string()))
        } else {
            Err(BadSelector::Unknown(s.to_string()))
        }
    }
}

impl std::fmt::Display for GpuSelector {
    /// As it parses back: `all`, `0`, `GPU-7f3a`, `00000000:01:00.0`,
    /// `0:1`, `MIG-5c1e`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuSelector::All => f.write_str("all"),
            GpuSelector::Index(i) => write!(f, "{i}"),
            GpuSelector::Uuid(s) | GpuSelector::PciBusId(s) | GpuSelector::MigUuid(s) => {
                f.write_str(s)
            }
            GpuSelector::Mig(gpu, mig) => write!(f, "{gpu}:{mig}"),
        }
    }
}

/// A number as `GPU:MIG` spells it: plain decimal digits, no sign, no
/// leading zero (`01:00` is a PCI address cut short, never MIG device 1:0).
fn decimal(s: &str) -> Option<u32> {
    let n: u32 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
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
    /// The MIG devices of `g` this selector names (a MIG selector only).
    fn mig_hits(&self, g: &Gpu) -> Vec<u32> {
        let named = |m: &&MigDevice| match self {
            GpuSelector::Mig(gpu, index) => g.index == *gpu && m.index == *index,
            GpuSelector::MigUuid(u) => uuid_matches(&m.uuid, u, "mig-"),
            _ => false,
        };
        g.mig_devices
            .iter()
            .filter(named)
            .map(|m| m.index)
            .collect()
    }

    fn is_mig(&self) -> bool {
        matches!(self, GpuSelector::Mig(..) | GpuSelector::MigUuid(_))
    }

    fn matches(&self, g: &Gpu) -> bool {
        match self {
            GpuSelector::Mig(..) | GpuSelector::MigUuid(_) => !self.mig_hits(g).is_empty(),
            GpuSelector::All => true,
            GpuSelector::Index(i) => g.index == *i,
            GpuSelector::Uuid(u) => uuid_matches(&g.uuid, u, "gpu-"),
            GpuSelector::PciBusId(p) => normalize_pci(&g.pci_bus_id).is_some_and(|q| q == *p),
        }
    }
}

/// Whether `have` is the UUID `want` names, whole or by a prefix, with
/// or without its `GPU-`/`MIG-` kind (`prefix`, lower case).
fn uuid_matches(have: &str, want: &str, prefix: &str) -> bool {
    let want = want.to_ascii_lowercase();
    let have = have.to_ascii_lowercase();
    !have.is_empty()
        && (have.starts_with(&want) || have.trim_start_matches(prefix).starts_with(&want))
}

/// Resolves selectors; none means every GPU. A selector that names no GPU
/// or MIG device (or a UUID prefix that names several) is an error. A GPU
/// named whole and by one of its MIG devices is selected whole.
pub fn resolve(gpus: &[Gpu], selectors: &[GpuSelector]) -> Result<Selection, GpuMiss> {
    if selectors.is_empty() || selectors.contains(&GpuSelector::All) {
        return Ok(Selection::whole(gpus.iter().map(|g| g.index).collect()));
    }
    let mut out = BTreeSet::new();
    let mut mig: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for s in selectors {
        let hits: Vec<u32> = gpus
            .iter()
            .filter(|g| s.matches(g))
            .map(|g| g.index)
            .collect();
        if s.is_mig() {
            for g in gpus.iter().filter(|g| hits.contains(&g.index)) {
                mig.entry(g.index).or_default().extend(s.mig_hits(g));
            }
        }
        let several = hits.len() > 1 || gpus.iter().map(|g| s.mig_hits(g).len()).sum::<usize>() > 1;
        match hits.as_slice() {
            [] => return Err(no_such(gpus, s)),
            _ if several && matches!(s, GpuSelector::Uuid(_) | GpuSelector::MigUuid(_)) => {
                return Err(GpuMiss::Several {
                    selector: describe_selector(s),
                    mig: s.is_mig(),
                });
            }
            _ => out.extend(hits),
        }
    }
    // Named whole as well: whole.
    let named_whole = |g: &u32| {
        selectors
            .iter()
            .any(|s| !s.is_mig() && gpus.iter().any(|x| x.index == *g && s.matches(x)))
    };
    mig.retain(|g, _| !named_whole(g));
    Ok(Selection {
        gpus: out.into_iter().collect(),
        mig,
    })
}

/// Why selector `s` names nothing, with what there is.
fn no_such(gpus: &[Gpu], s: &GpuSelector) -> GpuMiss {
    let here = if s.is_mig() {
        let migs = gpus
            .iter()
            .flat_map(|g| g.mig_devices.iter().map(|m| (g.index, m.index)));
        Here::Mig(migs.collect())
    } else {
        Here::Gpus(gpus.iter().map(|g| g.index).collect())
    };
    GpuMiss::NoSuch {
        selector: describe_selector(s),
        here,
    }
}

pub(super) fn describe_selector(s: &GpuSelector) -> String {
    match s {
        GpuSelector::All => "all".into(),
        GpuSelector::Index(i) => i.to_string(),
        GpuSelector::Uuid(u) | GpuSelector::PciBusId(u) | GpuSelector::MigUuid(u) => u.clone(),
        GpuSelector::Mig(g, m) => crate::model::mig_label(*g, *m),
    }
}

/// Keeps only the selected GPUs and the processes that touch them (and
/// those that hold only shared nodes, which belong to every GPU); a GPU
/// selected in part becomes its selected MIG devices
/// ([`Snapshot::restrict_mig`]). The diagnosis of what is left is
/// `crate::pipeline::select`'s.
pub fn narrow(mut snap: Snapshot, sel: &Selection) -> Snapshot {
    if sel.is_all(&snap.gpus) {
        return snap;
    }
    let indexes = &sel.gpus;
    // What each holder did on the GPUs left out, judged before they go:
    // a holder busy on GPU 1 is not idle on GPU 0.
    let look = Lookup::new(&snap);
    let elsewhere: BTreeMap<u32, Activity> = snap
        .processes
        .iter()
        .filter_map(|p| {
            let mut there = p.clone();
            there.gpu_memory.retain(|m| !indexes.contains(&m.gpu));
            Some((p.pid, look.process_activity(&there)?))
        })
        .collect();
    snap.gpus.retain(|g| indexes.contains(&g.index));
    snap.processes.retain(|p| {
        indexes.iter().any(|&i| p.touches_gpu(i))
            || (p.gpu_memory.is_empty() && p.devices.iter().all(|d| d.gpu.is_none()))
    });
    for p in &mut snap.processes {
        p.gpu_memory.retain(|m| indexes.contains(&m.gpu));
        p.unselected_activity = elsewhere.get(&p.pid).copied();
    }
    for (&gpu, keep) in &sel.mig {
        snap.restrict_mig(gpu, keep);
    }
    // The PIDs NVML lists that no process here is (another namespace's,
    // or gone): only those on what is left, or a GPU left out would lend
    // its hidden holders to the selection's findings.
    let listed: std::collections::HashSet<u32> = (snap.gpus.iter())
        .flat_map(|g| {
            let mig = g.mig_devices.iter().flat_map(|m| &m.nvml_processes);
            g.nvml_processes.iter().chain(mig)
        })
        .map(|p| p.pid)
        .collect();
    let v = &mut snap.visibility;
    v.nvml_pids_not_visible.retain(|pid| listed.contains(pid));
    v.nvml_pids_stale.retain(|pid| listed.contains(pid));
    snap
}
