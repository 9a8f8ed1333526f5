//! The Xid catalog: what each Xid the NVIDIA driver reports means, who is
//! at fault and what NVIDIA recommends, for the Xids that matter to
//! "why is this GPU's memory not free".
//!
//! Written from NVIDIA's published tables: the Xid catalog for Ampere and
//! newer GPUs, its "Resolution Bucket (Immediate Action)" column
//! (<https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>),
//! the older "Xid Errors" table of causes
//! (<https://docs.nvidia.com/deploy/xid-errors/index.html>), and the A100
//! memory error management guide for 48, 63, 64, 94 and 95
//! (<https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html>).
//! The wording is ours; where NVIDIA lists several causes the fault is
//! [`Fault::Mixed`]. An Xid not listed here is [`Xid::unknown`]: look it
//! up in NVIDIA's table.

use serde::Serialize;

/// Who is at fault, by NVIDIA's table of causes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The application (a bug in it, or it was ended): the GPU is healthy.
    Application,
    /// The driver or the GPU's firmware.
    Driver,
    /// The hardware (memory, the bus, NVLink).
    Hardware,
    /// Several: the application, the driver or the hardware.
    Mixed,
    /// Not in this catalog.
    Unknown,
}

/// NVIDIA's recommended immediate action (its resolution buckets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum XidAction {
    /// Nothing to do (informational, or already handled).
    Ignore,
    /// Restart the application (RESTART_APP).
    RestartApp,
    /// Reset the GPU (RESET_GPU).
    ResetGpu,
    /// Reboot the node (RESTART_BM).
    RebootNode,
    /// Contact NVIDIA support (CONTACT_SUPPORT).
    ContactSupport,
    /// Not in this catalog: see NVIDIA's table.
    SeeTable,
}

/// One catalog entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Xid {
    /// The Xid number.
    pub number: u32,
    /// What it means, in a few words.
    pub meaning: &'static str,
    /// Who is at fault.
    pub fault: Fault,
    /// What NVIDIA recommends first.
    pub action: XidAction,
}

impl Xid {
    /// An Xid this catalog does not list.
    pub fn unknown(number: u32) -> Xid {
        Xid {
            number,
            meaning: "unknown, see NVIDIA's Xid table",
            fault: Fault::Unknown,
            action: XidAction::SeeTable,
        }
    }

    /// The entry for `number` (an unknown one where not listed).
    pub fn lookup(number: u32) -> Xid {
        CATALOG
            .iter()
            .find(|x| x.number == number)
            .copied()
            .unwrap_or_else(|| Xid::unknown(number))
    }
}

const fn x(number: u32, meaning: &'static str, fault: Fault, action: XidAction) -> Xid {
    Xid {
        number,
        meaning,
        fault,
        action,
    }
}

use Fault::{Application as App, Driver as Drv, Hardware as Hw, Mixed};
use XidAction::{
    ContactSupport as Support, Ignore, RebootNode as Reboot, ResetGpu as Reset,
    RestartApp as Restart,
};

/// The catalog, by number.
pub const CATALOG: &[Xid] = &[
    x(8, "GPU stopped processing", Mixed, Restart),
    x(13, "graphics engine exception", App, Restart),
    x(31, "GPU memory page fault (illegal address)", App, Restart),
    x(
        32,
        "invalid or corrupted push buffer stream (PBDMA, often the PCIe bus)",
        Mixed,
        Restart,
    ),
    x(38, "driver firmware error", Drv, Reset),
    x(
        43,
        "GPU stopped processing: the application's channel was reset",
        App,
        Restart,
    ),
    x(
        45,
        "preemptive cleanup after an earlier error or the application's end",
        App,
        Ignore,
    ),
    x(48, "double-bit (uncorrectable) ECC error", Hw, Reset),
    x(
        61,
        "internal micro-controller breakpoint or warning",
        Drv,
        Reset,
    ),
    x(62, "internal micro-controller halt", Drv, Reset),
    x(
        63,
        "ECC page retirement or row remap recorded: reset to apply",
        Hw,
        Reset,
    ),
    x(
        64,
        "ECC page retirement or row remap recording failed",
        Hw,
        Reset,
    ),
    x(68, "video decoder (NVDEC) exception", Mixed, Restart),
    x(69, "graphics engine class error", Mixed, Restart),
    x(74, "NVLink error", Hw, Reset),
    x(79, "GPU has fallen off the bus", Hw, Reboot),
    x(92, "high single-bit ECC error rate", Hw, Ignore),
    x(
        94,
        "contained ECC error: only the applications that touched it",
        Hw,
        Restart,
    ),
    x(95, "uncontained ECC error", Hw, Reset),
    x(109, "context switch timeout", Mixed, Restart),
    x(119, "GSP RPC timeout", Drv, Reset),
    x(120, "GSP error", Drv, Reset),
    x(121, "C2C link corrected error", Hw, Ignore),
    x(140, "unrecovered ECC error", Hw, Reset),
    x(143, "GPU initialisation failure", Hw, Reset),
    x(144, "NVLink SAW error", Hw, Reset),
    x(145, "NVLink RLW error", Hw, Reset),
    x(146, "NVLink TLW error", Hw, Reset),
    x(147, "NVLink TREX error", Hw, Reset),
    x(148, "NVLink NVLPW control error", Hw, Reset),
    x(149, "NVLink NETIR error", Hw, Reset),
    x(150, "NVLink MSE error", Hw, Reset),
    x(
        154,
        "GPU recovery action changed: read the recovery action",
        Drv,
        Support,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_lists_each_xid_once_in_order() {
        for w in CATALOG.windows(2) {
            assert!(
                w[0].number < w[1].number,
                "{} before {}",
                w[0].number,
                w[1].number
            );
        }
        for n in [
            13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95,
        ] {
            assert_ne!(Xid::lookup(n).fault, Fault::Unknown, "Xid {n}");
        }
        for n in [
            109, 119, 120, 121, 140, 143, 144, 145, 146, 147, 148, 149, 150,
        ] {
            assert_ne!(Xid::lookup(n).fault, Fault::Unknown, "Xid {n}");
        }
    }

    #[test]
    fn who_is_at_fault_follows_nvidias_table() {
        assert_eq!(Xid::lookup(79).action, XidAction::RebootNode);
        assert_eq!(Xid::lookup(48).fault, Fault::Hardware);
        assert_eq!(Xid::lookup(31).fault, Fault::Application);
        assert_eq!(Xid::lookup(13).action, XidAction::RestartApp);
        let u = Xid::lookup(7777);
        assert_eq!((u.fault, u.action), (Fault::Unknown, XidAction::SeeTable));
        assert!(u.meaning.contains("NVIDIA's Xid table"));
    }
}
