//! DRM clients from `/proc/PID/fdinfo/FD`: what an fd on a `dri/card*` or
//! `dri/renderD*` node holds, in the kernel's drm-usage-stats format
//! (Documentation/gpu/drm-usage-stats.rst), the way AMD (amdgpu), Intel
//! (i915, xe) and other DRM drivers report per-client memory.
//!
//! A DRM client is one open of the device (a `struct drm_file`); fork, dup
//! and SCM_RIGHTS share it between fds and processes, and each of those fds
//! shows the same client. So clients are counted once, keyed by
//! (`drm-pdev`, `drm-client-id`) as nvtop does, with every process that
//! shares one named ([`clients`]).
//!
//! The parser takes bytes, never a file, and never panics: a line it does
//! not understand is skipped, a number it cannot read is absent, and a
//! sum saturates.

use std::collections::{BTreeMap, BTreeSet};

/// One fd's DRM client, as its fdinfo tells it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fdinfo {
    /// `drm-driver`: the kernel driver (`amdgpu`, `i915`, `xe`, ...).
    pub driver: String,
    /// `drm-pdev`: the PCI slot of the device (`0000:03:00.0`), when the
    /// driver says it.
    pub pdev: Option<String>,
    /// `drm-client-id`: the client, unique per device (or globally).
    pub client_id: u64,
    /// Memory per region (`vram`, `vram0`, `gtt`, `system`, ...).
    pub regions: BTreeMap<String, Region>,
}

/// One memory region of a client, in bytes; absent where the driver does
/// not say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Region {
    /// `drm-total-REGION`: every buffer the client can see there.
    pub total: Option<u64>,
    /// `drm-resident-REGION`: what of it is resident.
    pub resident: Option<u64>,
    /// `drm-memory-REGION`: the older key (amdgpu before the total and
    /// resident keys).
    pub memory: Option<u64>,
}

impl Region {
    /// The client's memory in the region: its total, else the older
    /// `drm-memory-` value, else its resident part.
    pub fn bytes(&self) -> Option<u64> {
        self.total.or(self.memory).or(self.resident)
    }
}

impl Fdinfo {
    /// The client's device-local memory (amdgpu's and xe's `vram*`
    /// regions, i915's `local*`): what a GPU's memory total counts. None
    /// when no such region says.
    pub fn device_bytes(&self) -> Option<u64> {
        self.regions
            .iter()
            .filter(|(name, _)| name.starts_with("vram") || name.starts_with("local"))
            .filter_map(|(_, r)| r.bytes())
            .reduce(u64::saturating_add)
    }
}

/// Parses one fdinfo file; None when it is no DRM client's (no
/// `drm-driver`, or no readable `drm-client-id`).
pub fn parse_fdinfo(bytes: &[u8]) -> Option<Fdinfo> {
    let mut info = Fdinfo::default();
    let mut client_id = None;
    for line in bytes.split(|&b| b == b'\n') {
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
        return None;
    }
    info.client_id = client_id?;
    Some(info)
}

/// A line's key and its value (whitespace after the colon ignored); None
/// for a line that is not `key: value` in UTF-8.
fn key_value(line: &[u8]) -> Option<(&str, &str)> {
    let line = std::str::from_utf8(line).ok()?;
    let (key, value) = line.split_once(':')?;
    // Keys hold no whitespace, and begin the line.
    (!key.is_empty() && !key.contains(char::is_whitespace)).then_some((key, value.trim()))
}

/// Records a `drm-total-`, `drm-resident-` or `drm-memory-` line.
fn region_line(regions: &mut BTreeMap<String, Region>, key: &str, value: &str) {
    let (field, region): (fn(&mut Region) -> &mut Option<u64>, &str) =
        if let Some(r) = key.strip_prefix("drm-total-") {
            (|r| &mut r.total, r)
        } else if let Some(r) = key.strip_prefix("drm-resident-") {
            (|r| &mut r.resident, r)
        } else if let Some(r) = key.strip_prefix("drm-memory-") {
            (|r| &mut r.memory, r)
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
/// its parsed fdinfo), keyed by (driver, `drm-pdev`, `drm-client-id`): a client
/// shared by fork, dup or SCM_RIGHTS is one client, with all its
/// processes. Without a `drm-pdev` the driver's client id is taken as
/// unique per driver.
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
