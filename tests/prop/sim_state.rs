//! The simulator's state file (`State::parse`) and what the simulated
//! driver reports from it: no panic on any bytes or any numbers, a
//! generated state reads back as written, used memory never above total.

use crate::{bytes, cases, mutate, re, PARSER_CASES};
use gpufree_nvml_sim::state::{view_device, GoneLog, State};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::path::Path;

fn process() -> impl Strategy<Value = Value> {
    (
        any::<u32>(),
        any::<u64>(),
        proptest::sample::select(vec!["compute", "graphics", "mps"]),
        proptest::sample::select(vec!["while-alive", "always"]),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(pid, used, kind, visible, start)| {
            let mut p = json!({"pid": pid, "used_bytes": used, "type": kind, "visible": visible});
            if let Some(s) = start {
                p["start_time_ticks"] = json!(s);
            }
            p
        })
}

fn device() -> impl Strategy<Value = Value> {
    (
        re("[ -~]{0,30}"),
        re("(GPU-[0-9a-f-]{0,36})?"),
        re("[0-9A-Fa-f:.]{0,16}"),
        any::<u32>(),
        (any::<u64>(), any::<u64>(), any::<u64>(), 0u64..5),
        proptest::collection::vec(process(), 0..5),
        proptest::collection::btree_map(
            proptest::sample::select(vec!["memory_info", "name", "uuid", "compute_processes"]),
            any::<u32>(),
            0..3,
        ),
        proptest::collection::btree_map(re("[a-z_]{1,12}"), 0u64..3, 0..2),
    )
        .prop_map(
            |(name, uuid, bus, minor, (total, base, leaked, delay), procs, errors, hang)| {
                json!({
                    "name": name, "uuid": uuid, "pci_bus_id": bus, "minor_number": minor,
                    "memory_total_bytes": total, "memory_baseline_bytes": base,
                    "leaked_bytes": leaked, "release_delay_ms": delay,
                    "processes": procs, "errors": errors, "hang_ms": hang,
                })
            },
        )
}

/// A whole state document as SPEC.md writes it.
pub fn state_json() -> impl Strategy<Value = Value> {
    (re("[0-9.]{0,12}"), any::<i32>(), proptest::collection::vec(device(), 0..4)).prop_map(
        |(driver, cuda, devices)| {
            json!({"driver_version": driver, "cuda_driver_version": cuda, "devices": devices})
        },
    )
}

/// Valid state documents to damage, generated once.
fn valid_states() -> impl Strategy<Value = Vec<u8>> {
    crate::pool(
        state_json().prop_map(|d| serde_json::to_vec_pretty(&d).unwrap()),
        512,
    )
}

/// Round trips of generated states (each builds and compares JSON trees).
const STATE_ROUND_TRIPS: u32 = 5_000;

proptest! {
    #![proptest_config(cases(STATE_ROUND_TRIPS))]

    #[test]
    fn state_round_trips(doc in state_json()) {
        let text = serde_json::to_vec(&doc).unwrap();
        let named = doc["devices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["name"] != "" && d["uuid"] != "");
        match State::parse(&text, Path::new("state.json")) {
            Ok(state) => {
                prop_assert!(named);
                let back = serde_json::to_value(&state).unwrap();
                prop_assert_eq!(&back["devices"], &doc["devices"]);
                prop_assert_eq!(&back["driver_version"], &doc["driver_version"]);
                // What the driver reports: used within total, whatever the numbers.
                for d in &state.devices {
                    let mut log = GoneLog::default();
                    let v = view_device(d, u64::MAX, &|pid, _| pid % 2 == 0, &mut log, &mut false);
                    prop_assert!(v.used_bytes <= d.memory_total_bytes);
                    let v = view_device(d, 0, &|_, _| false, &mut log, &mut false);
                    prop_assert!(v.used_bytes <= d.memory_total_bytes);
                }
            }
            Err(e) => {
                prop_assert!(!named, "{}", e);
                prop_assert!(e.0.contains("state.json") && e.0.contains("needs a name and a uuid"), "{}", e);
            }
        }
    }

}

proptest! {
    #![proptest_config(cases(PARSER_CASES))]

    #[test]
    fn state_never_panics(input in prop_oneof![
        bytes(200),
        valid_states().prop_flat_map(mutate),
    ]) {
        if let Err(e) = State::parse(&input, Path::new("/x/state.json")) {
            // One line naming the file.
            prop_assert!(e.0.contains("/x/state.json"), "{}", e);
            prop_assert!(!e.0.contains('\n'), "{}", e);
        }
    }
}
