//! The simulator's tests; `abi` and `abi_health` call the exported ABI
//! as a C client would.

mod abi;
mod abi_health;

use crate::memory::{Memory, MemoryV2};
use crate::pci::{Pci, PciInfo};
use crate::session::{handle_of, mig_handle_of, target_of, MAX_DEVICES};
use crate::state::{Target, MAX_MIG};

#[test]
fn pci_bus_ids_round_trip() {
    let p = Pci::parse("00000000:C1:00.0");
    assert_eq!((p.domain, p.bus, p.device), (0, 0xC1, 0));
    assert_eq!(p.bus_id(), "00000000:C1:00.0");
    assert_eq!(p.legacy(), "0000:C1:00.0");
}

#[test]
fn handles_are_stable_and_decodable() {
    for i in [0, 7, MAX_DEVICES - 1] {
        assert_eq!(target_of(handle_of(i)), Some((i, Target::Whole)));
        for j in [0, 3, MAX_MIG - 1] {
            assert_eq!(target_of(mig_handle_of(i, j)), Some((i, Target::Mig(j))));
        }
    }
    assert_eq!(target_of(std::ptr::null()), None);
}

#[test]
fn struct_sizes_match_nvml_h() {
    assert_eq!(std::mem::size_of::<PciInfo>(), 68);
    assert_eq!(std::mem::size_of::<Memory>(), 24);
    assert_eq!(std::mem::size_of::<MemoryV2>(), 40);
}
