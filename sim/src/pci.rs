//! PCI identity: `nvmlPciInfo_t`, bus-id parsing and formatting, and
//! `nvmlDeviceGetPciInfo*`.

use crate::out::write;
use crate::session::{with_device, NvmlDevice};
use std::ffi::c_uint;

/// `nvmlPciInfo_t` (68 bytes).
#[repr(C)]
pub struct PciInfo {
    bus_id_legacy: [u8; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [u8; 32],
}

pub(crate) struct Pci {
    pub(crate) domain: u32,
    pub(crate) bus: u32,
    pub(crate) device: u32,
}

impl Pci {
    /// Parses `DDDDDDDD:BB:DD.F` (or with a 4-digit domain); bad parts are 0.
    pub(crate) fn parse(s: &str) -> Pci {
        let mut parts = s.split([':', '.']);
        let mut next = || {
            parts
                .next()
                .and_then(|p| u32::from_str_radix(p, 16).ok())
                .unwrap_or(0)
        };
        Pci {
            domain: next(),
            bus: next(),
            device: next(),
        }
    }
    pub(crate) fn bus_id(&self) -> String {
        format!("{:08X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }
    pub(crate) fn legacy(&self) -> String {
        format!("{:04X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }
}

fn fill<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N - 1);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

/// `nvmlDeviceGetPciInfo_v3`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(dev: NvmlDevice, pci: *mut PciInfo) -> u32 {
    with_device(dev, |d, _, _| {
        if let Some(e) = d.injected("pci_info") {
            return e;
        }
        let p = Pci::parse(&d.pci_bus_id);
        let info = PciInfo {
            bus_id_legacy: fill(&p.legacy()),
            domain: p.domain,
            bus: p.bus,
            device: p.device,
            pci_device_id: (0x2BB1 << 16) | 0x10DE,
            pci_sub_system_id: 0,
            bus_id: fill(&p.bus_id()),
        };
        // SAFETY: `pci` points to an nvmlPciInfo_t owned by the caller.
        unsafe { write(pci, info) }
    })
}

/// `nvmlDeviceGetPciInfo_v2` (same layout).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(dev: NvmlDevice, pci: *mut PciInfo) -> u32 {
    // SAFETY: as for `_v3`.
    unsafe { nvmlDeviceGetPciInfo_v3(dev, pci) }
}

/// `nvmlDeviceGetPciInfo` (same layout).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(dev: NvmlDevice, pci: *mut PciInfo) -> u32 {
    // SAFETY: as for `_v3`.
    unsafe { nvmlDeviceGetPciInfo_v3(dev, pci) }
}
