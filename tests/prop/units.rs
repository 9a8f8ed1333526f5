//! Sizes and durations as typed on the command line, and MiB as printed:
//! no panic on any text, exact answers for generated valid input, a clear
//! error (never a wrap or a saturation taken for a value) out of range.

use crate::{cases, hostile_bytes, re, PARSER_CASES, ROUND_TRIP_CASES};
use gpufree::units::{gib, mib, parse_duration, parse_size};
use proptest::prelude::*;
use std::time::Duration;

const YEAR_SECS: f64 = 365.0 * 86400.0;

/// Text close to a size or a duration: digits, dots, a unit, spaces.
fn near_number() -> impl Strategy<Value = String> {
    let valid = crate::pool(
        prop_oneof![
            re("[ ]{0,2}[0-9.]{0,25}[ ]{0,2}(ms|s|m|min|h|B|K|KiB|M|MiB|G|GiB|T|TiB|kB|KB|MB|GB|TB|[a-zA-Z]{0,4})[ ]{0,2}"),
            re("[-+]?[0-9]{0,400}(\\.[0-9]{0,30})?(s|ms|GiB|TB)?"),
            any::<String>(),
        ]
        .prop_map(String::into_bytes),
        4096,
    );
    prop_oneof![
        2 => valid.clone(),
        2 => valid.prop_flat_map(crate::mutate),
        1 => hostile_bytes(30),
    ]
    .prop_map(|b: Vec<u8>| String::from_utf8_lossy(&b).into_owned())
}

fn duration_unit() -> impl Strategy<Value = (&'static str, f64)> {
    proptest::sample::select(vec![
        ("ms", 0.001),
        ("s", 1.0),
        ("m", 60.0),
        ("min", 60.0),
        ("h", 3600.0),
    ])
}

fn size_unit() -> impl Strategy<Value = (&'static str, u64)> {
    proptest::sample::select(vec![
        ("", 1),
        ("B", 1),
        ("K", 1 << 10),
        ("KiB", 1 << 10),
        ("M", 1 << 20),
        ("MiB", 1 << 20),
        ("G", 1 << 30),
        ("GiB", 1 << 30),
        ("T", 1 << 40),
        ("TiB", 1 << 40),
        ("kB", 1_000),
        ("KB", 1_000),
        ("MB", 1_000_000),
        ("GB", 1_000_000_000),
        ("TB", 1_000_000_000_000),
    ])
}

proptest! {
    #![proptest_config(cases(PARSER_CASES))]

    /// Durations and sizes: 100,000 texts each, none panics; a duration
    /// is at most a year, an error is one line.
    #[test]
    fn sizes_and_durations_never_panic(s in near_number()) {
        match parse_duration(&s) {
            Ok(d) => prop_assert!(d.as_secs_f64() <= YEAR_SECS),
            Err(e) => prop_assert!(!e.to_string().contains('\n') || s.contains('\n'), "{e}"),
        }
        match parse_size(&s) {
            Ok(_) => prop_assert!(s.trim().starts_with(|c: char| c.is_ascii_digit() || c == '.')),
            Err(e) => prop_assert!(!e.to_string().contains('\n') || s.contains('\n'), "{e}"),
        }
    }
}

proptest! {
    #![proptest_config(cases(ROUND_TRIP_CASES))]

    #[test]
    fn durations_round_trip(n in 0u64..40_000_000_000, (unit, secs_per) in duration_unit(), pad in re("[ ]{0,2}")) {
        let s = format!("{pad}{n}{unit}{pad}");
        let want = n as f64 * secs_per;
        match parse_duration(&s) {
            Ok(d) => {
                prop_assert!(want <= YEAR_SECS, "{s} accepted above a year");
                let expect = Duration::from_secs_f64(want);
                let diff = d.abs_diff(expect);
                prop_assert!(diff <= Duration::from_micros(1), "{s}: {d:?} vs {expect:?}");
            }
            Err(e) => {
                prop_assert!(want > YEAR_SECS, "{s} refused: {e}");
                prop_assert!(e.to_string().contains("out of range"), "{e}");
            }
        }
    }

    #[test]
    fn bare_numbers_other_than_zero_need_a_unit(n in 1u64..u64::MAX) {
        let e = parse_duration(&n.to_string()).unwrap_err();
        prop_assert!(e.to_string().contains("needs a unit"), "{e}");
    }

    #[test]
    fn sizes_round_trip(n in prop_oneof![0u64..(1 << 40), any::<u64>()], (unit, mult) in size_unit(), pad in re("[ ]{0,2}")) {
        let s = format!("{pad}{n}{unit}{pad}");
        match n.checked_mul(mult) {
            Some(bytes) => prop_assert_eq!(parse_size(&s), Ok(bytes)),
            None => prop_assert!(parse_size(&s).unwrap_err().to_string().contains("out of range")),
        }
    }

    #[test]
    fn fractional_sizes_round_down(whole in 0u64..(1 << 20), tenths in 0u64..10, (unit, mult) in size_unit()) {
        let s = format!("{whole}.{tenths}{unit}");
        let want = (whole as f64 + tenths as f64 / 10.0) * mult as f64;
        let got = parse_size(&s).unwrap();
        prop_assert!(got as f64 <= want && want - (got as f64) < 1.0 + want * 1e-15, "{s}: {got} vs {want}");
    }

    #[test]
    fn mib_reads_back(bytes in any::<u64>()) {
        let text = mib(bytes);
        let digits = text.strip_suffix(" MiB").unwrap();
        // Groups of three after the first, as nvidia-smi's readers expect.
        let groups: Vec<&str> = digits.split(',').collect();
        prop_assert!(groups[1..].iter().all(|g| g.len() == 3));
        prop_assert!((1..=3).contains(&groups[0].len()));
        prop_assert_eq!(digits.replace(',', "").parse::<u64>().unwrap(), bytes >> 20);
        prop_assert!(gib(bytes).ends_with(" GiB"));
    }
}

/// Values at the edges: the largest u64, overflow, a 400-digit number.
#[test]
fn sizes_and_durations_at_the_edges() {
    assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    assert!(parse_size("18446744073709551616")
        .unwrap_err()
        .to_string()
        .contains("out of range"));
    assert!(parse_size("17179869184GiB")
        .unwrap_err()
        .to_string()
        .contains("out of range"));
    assert!(parse_size("16777216.0TiB")
        .unwrap_err()
        .to_string()
        .contains("out of range"));
    assert!(parse_size(&"9".repeat(400))
        .unwrap_err()
        .to_string()
        .contains("out of range"));
    assert!(parse_duration(&format!("{}s", "9".repeat(400)))
        .unwrap_err()
        .to_string()
        .contains("out of range"));
    assert!(parse_duration("8761h")
        .unwrap_err()
        .to_string()
        .contains("out of range"));
    assert_eq!(
        parse_duration("8760h").unwrap(),
        Duration::from_secs(365 * 86400)
    );
}
