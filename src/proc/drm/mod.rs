//! DRM clients from `/proc/PID/fdinfo/FD`: what an fd on a `dri/card*` or
//! `dri/renderD*` node holds, in the kernel's drm-usage-stats format
//! (Documentation/gpu/drm-usage-stats.rst), the way AMD (amdgpu), Intel
//! (i915, xe) and other DRM drivers report per-client memory; and
//! amdgpu's older lines (Linux 5.14 to 5.18: `pdev`, `pasid`,
//! `vram mem: N kB`), from before it took up that format.
//!
//! A DRM client is one open of the device (a `struct drm_file`); fork, dup
//! and SCM_RIGHTS share it between fds and processes, and each of those fds
//! shows the same client. The format says a `drm-client-id` is unique
//! either globally or per device (then with a `drm-pdev`), so clients are
//! counted once, keyed by (driver, `drm-pdev`, `drm-client-id`), with every
//! process that shares one named ([`clients`]). (nvtop keys its cache by
//! client id, pid and pdev instead: it tracks each process's usage over
//! time, not memory counted once.)
//!
//! The parser takes bytes, never a file, and never panics: a line it does
//! not understand is skipped, a number it cannot read is absent, and a
//! sum saturates.

use crate::sysfs::pci_slot;
use std::collections::{BTreeMap, BTreeSet};

/// One fd's DRM client, as its fdinfo tells it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fdinfo {
    /// `drm-driver`: the kernel driver (`amdgpu`, `i915`, `xe`, ...).
    pub driver: String,
    /// `drm-pdev`: the PCI slot of the device (`0000:03:00.0`), when the
    /// driver says it.
    pub pdev: Option<String>,
    /// `drm-client-id`: the client, unique per device (or globally). For
    /// amdgpu's older lines, which have none, its `pasid`: one per open
    /// of the device (amdgpu_driver_open_kms allocates it with the
    /// client's VM).
    pub client_id: u64,
    /// Memory per region (`vram`, `vram0`, `gtt`, `system`, ...).
    pub regions: BTreeMap<String, Region>,
}

/// One memory region of a client, in bytes; absent where the driver does
/// not say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Region {
    /// `drm-total-REGION`: every buffer the client has a handle on there,
    /// shared and imported ones included, resident or not.
    pub total: Option<u64>,
    /// `drm-resident-REGION`: what of it has its backing store present.
    pub resident: Option<u64>,
    /// `drm-memory-REGION`: the deprecated key, printed by amdgpu only;
    /// the format calls it an alias of `drm-resident-`. amdgpu's older
    /// `vram mem:` lines land here too.
    pub memory: Option<u64>,
    /// `drm-shared-REGION`: what of the total is in buffers shared with
    /// another client (more than one handle), which that client counts
    /// too.
    pub shared: Option<u64>,
}

impl Region {
    /// The client's memory in the region: what is resident (`resident`,
    /// else its alias `memory`), else the total. The total counts buffers
    /// the client only shares or imported, which another client holds.
    pub fn bytes(&self) -> Option<u64> {
        self.resident.or(self.memory).or(self.total)
    }
}

impl Fdinfo {
    /// The client's device-local memory: what a GPU's memory total
    /// counts. These regions: amdgpu's and xe's `vram*`; i915's `local*`
    /// and `stolen-local*` (the stolen part of a discrete card's local
    /// memory); xe's `stolen` when the client's device has VRAM (xe lists
    /// every region of its device, and keeps stolen memory in VRAM on
    /// discrete parts and in system memory on integrated ones, as its
    /// `resource_is_stolen_vram` says). Not `gtt`, `system*`, `cpu` or
    /// `stolen-system*`, which are host memory. None when no such region
    /// says.
    pub fn device_bytes(&self) -> Option<u64> {
        self.device_regions()
            .filter_map(Region::bytes)
            .reduce(u64::saturating_add)
    }

    /// What of [`Fdinfo::device_bytes`]'s regions the client shares with
    /// other clients (`drm-shared-*`); None when no such region says.
    pub fn device_shared_bytes(&self) -> Option<u64> {
        self.device_regions()
            .filter_map(|r| r.shared)
            .reduce(u64::saturating_add)
    }

    fn device_regions(&self) -> impl Iterator<Item = &Region> {
        let discrete = self.regions.keys().any(|n| n.starts_with("vram"));
        self.regions
            .iter()
            .filter(move |(name, _)| {
                name.starts_with("vram")
                    || name.starts_with("local")
                    || name.starts_with("stolen-local")
                    || (discrete && name.as_str() == "stolen")
            })
            .map(|(_, r)| r)
    }
}

/// Parses one fdinfo file; None when it is no DRM client's (no
/// `drm-driver`, or no readable `drm-client-id`; for amdgpu's older lines,
/// no `pdev` or no non-zero `pasid`).
pub fn parse_fdinfo(bytes: &[u8]) -> Option<Fdinfo> {
    let mut info = Fdinfo::default();
    let mut client_id = None;
    let mut legacy = Legacy::default();
    for line in bytes.split(|&b| b == b'\n') {
        if legacy_line(&mut legacy, &mut info.regions, line) {
            continue;
        }
        let Some((key, value)) = key_value(line) else {
            continue;
        };
        match key {
            "drm-driver" => info.driver = value.to_string(),
            "drm-pdev" => info.pdev = Some(value.to_string()),
            "drm-client-id" => client_id = value.parse().ok(),
            _ => region_line(&mut info.regions, key, value),
        }
    }
    if info.driver.is_empty() {
        // amdgpu before drm-usage-stats: its pdev, and its pasid as the
        // client (0 is what it keeps when none could be allocated).
        let (pdev, pasid) = (legacy.pdev?, legacy.pasid.filter(|&p| p != 0)?);
        return Some(Fdinfo {
            driver: "amdgpu".to_string(),
            pdev: Some(pdev),
            client_id: pasid,
            regions: info.regions,
        });
    }
    info.client_id = client_id?;
    Some(info)
}

/// What amdgpu's lines before drm-usage-stats name: `pdev` and `pasid`.
#[derive(Default)]
struct Legacy {
    pdev: Option<String>,
    pasid: Option<u64>,
}

/// Records one of amdgpu's lines from Linux 5.14 to 5.18 (`pdev:`,
/// `pasid:`, and `vram mem:`, `gtt mem:`, `cpu mem:` in `kB`, which is
/// KiB: the driver divides bytes by 1024) into the `vram`, `gtt` and
/// `cpu` regions; false for any other line.
fn legacy_line(legacy: &mut Legacy, regions: &mut BTreeMap<String, Region>, line: &[u8]) -> bool {
    let Some((key, value)) = std::str::from_utf8(line)
        .ok()
        .and_then(|l| l.split_once(':'))
        .map(|(k, v)| (k, v.trim()))
    else {
        return false;
    };
    match key {
        "pdev" => legacy.pdev = Some(value.to_string()).filter(|p| pci_slot(p)),
        "pasid" => legacy.pasid = value.parse().ok(),
        "vram mem" | "gtt mem" | "cpu mem" => {
            let region = key.trim_end_matches(" mem");
            let kib = value
                .strip_suffix(" kB")
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(bytes) = kib.and_then(|n| n.checked_mul(1 << 10)) {
                regions.entry(region.to_string()).or_default().memory = Some(bytes);
            }
        }
        _ => return false,
    }
    true
}

/// A line's key and its value (whitespace after the colon ignored); None
/// for a line that is not `key: value` in UTF-8.
fn key_value(line: &[u8]) -> Option<(&str, &str)> {
    let line = std::str::from_utf8(line).ok()?;
    let (key, value) = line.split_once(':')?;
    // Keys hold no whitespace, and begin the line.
    (!key.is_empty() && !key.contains(char::is_whitespace)).then_some((key, value.trim()))
}

/// Records a `drm-total-`, `drm-resident-`, `drm-memory-` or `drm-shared-`
/// line. Engine
/// cycles are no region: `drm-total-cycles-ENGINE` (xe) shares the
/// `drm-total-` prefix and is left out.
fn region_line(regions: &mut BTreeMap<String, Region>, key: &str, value: &str) {
    if key.starts_with("drm-total-cycles-") {
        return;
    }
    let (field, region): (fn(&mut Region) -> &mut Option<u64>, &str) =
        if let Some(r) = key.strip_prefix("drm-total-") {
            (|r| &mut r.total, r)
        } else if let Some(r) = key.strip_prefix("drm-resident-") {
            (|r| &mut r.resident, r)
        } else if let Some(r) = key.strip_prefix("drm-memory-") {
            (|r| &mut r.memory, r)
        } else if let Some(r) = key.strip_prefix("drm-shared-") {
            (|r| &mut r.shared, r)
        } else {
            return;
        };
    if region.is_empty() {
        return;
    }
    if let Some(bytes) = size(value) {
        *field(regions.entry(region.to_string()).or_default()) = Some(bytes);
    }
}

/// A size as drm-usage-stats writes it: bytes, or with a `KiB` or `MiB`
/// unit; None for anything else (a unit it does not define, a number that
/// does not fit).
fn size(value: &str) -> Option<u64> {
    let mut words = value.split_whitespace();
    let number: u64 = words.next()?.parse().ok()?;
    let scale = match words.next() {
        None => 1,
        Some("KiB") => 1 << 10,
        Some("MiB") => 1 << 20,
        Some(_) => return None,
    };
    if words.next().is_some() {
        return None;
    }
    number.checked_mul(scale)
}

/// One DRM client, counted once however many fds and processes share it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// What its fdinfo says (the first fd read of it).
    pub info: Fdinfo,
    /// Every process with an fd on it.
    pub pids: BTreeSet<u32>,
}

/// The distinct clients of `fds` (each a process's fd on a DRM node, with
/// its parsed fdinfo), keyed by (driver, `drm-pdev`, `drm-client-id`), as
/// the format's uniqueness rule allows: a client shared by fork, dup or
/// SCM_RIGHTS is one client, with all its processes. Without a `drm-pdev`
/// the driver's client id is taken as globally unique, as the format
/// requires of a driver that prints none.
pub fn clients(fds: impl IntoIterator<Item = (u32, Fdinfo)>) -> Vec<Client> {
    let mut by_key: BTreeMap<(String, Option<String>, u64), Client> = BTreeMap::new();
    for (pid, info) in fds {
        let key = (info.driver.clone(), info.pdev.clone(), info.client_id);
        by_key
            .entry(key)
            .or_insert_with(|| Client {
                info,
                pids: BTreeSet::new(),
            })
            .pids
            .insert(pid);
    }
    by_key.into_values().collect()
}

#[cfg(test)]
mod tests;
