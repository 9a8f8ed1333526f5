//! The flag parsers of the command line, through clap as `gpufree` runs
//! them: `kill --signal`, `kill --timeout`, `--read-timeout` (flag and
//! environment), `wait --max-used`/`--interval`, `--gpu`; and GPU
//! selectors resolved against GPUs. No input panics; each flag accepts
//! exactly what its parser accepts, with the same value.

use crate::{bytes, cases, hostile_bytes, re, PARSER_CASES, ROUND_TRIP_CASES};
use clap::{CommandFactory, FromArgMatches};
use gpufree::cli::{Cli, Command};
use gpufree::model::Gpu;
use gpufree::present::words::selector::gpu_miss;
use gpufree::snapshot::{resolve, GpuSelector};
use gpufree::units::{parse_duration, parse_size};
use proptest::prelude::*;
use std::cell::RefCell;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

thread_local! {
    /// Built once per thread: building the clap command costs more than a parse.
    static CLI: RefCell<clap::Command> = RefCell::new(Cli::command());
}

/// Parses `gpufree ARGS` as the binary does (no environment given).
fn parse(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    CLI.with(|c| {
        let mut c = c.borrow_mut();
        let mut argv = vec![OsString::from("gpufree")];
        argv.extend(args);
        let m = c.try_get_matches_from_mut(argv)?;
        Cli::from_arg_matches(&m)
    })
}

/// `--flag=VALUE` as one argument (a value may start with '-').
fn flag(name: &str, value: &[u8]) -> OsString {
    let mut a = format!("--{name}=").into_bytes();
    a.extend_from_slice(value);
    OsString::from_vec(a)
}

/// Text a user might give a flag: near-valid durations, sizes, signal
/// names and numbers, and anything at all (invalid UTF-8 included).
fn flag_value() -> impl Strategy<Value = Vec<u8>> {
    let valid = crate::pool(
        prop_oneof![
            re("[ ]?[0-9]{0,12}(\\.[0-9]{0,4})?(ms|s|m|h|min|MiB|GiB|B|x)?[ ]?"),
            re("(SIG|sig)?(TERM|term|INT|HUP|QUIT|USR1|USR2|KILL|STOP|[A-Z]{1,5}|[0-9]{1,3})"),
        ]
        .prop_map(String::into_bytes),
        4096,
    );
    prop_oneof![
        3 => valid.clone(),
        1 => valid.prop_flat_map(crate::mutate),
        1 => hostile_bytes(16),
        1 => bytes(24),
    ]
}

fn kill_args(cli: Cli) -> gpufree::cli::KillArgs {
    match cli.command {
        Some(Command::Kill(k)) => k,
        other => panic!("not kill: {other:?}"),
    }
}

proptest! {
    #![proptest_config(cases(PARSER_CASES))]

    #[test]
    fn signal_flag_accepts_exactly_the_seven_signals(v in flag_value()) {
        let r = parse(vec!["kill".into(), flag("signal", &v)]);
        let text = std::str::from_utf8(&v).ok();
        let name = text.map(|t| {
            let up = t.trim().to_ascii_uppercase();
            up.strip_prefix("SIG").map(str::to_string).unwrap_or(up)
        });
        let known = [
            ("TERM", "15"), ("INT", "2"), ("HUP", "1"), ("QUIT", "3"),
            ("USR1", "10"), ("USR2", "12"), ("KILL", "9"),
        ];
        let want = name.as_deref().and_then(|n| {
            known.iter().find(|(s, num)| n == *s || n == *num).map(|(s, _)| *s)
        });
        match (r, want) {
            (Ok(cli), Some(canonical)) => prop_assert_eq!(gpufree::act::kill::signal_name(kill_args(cli).signal), canonical),
            (Err(e), None) => prop_assert!(e.use_stderr(), "{e}"),
            (r, want) => prop_assert!(false, "{v:?}: {r:?} but wanted {want:?}"),
        }
    }

    #[test]
    fn kill_timeout_is_a_duration_of_at_least_100ms(v in flag_value()) {
        let r = parse(vec!["kill".into(), flag("timeout", &v)]);
        let want = std::str::from_utf8(&v)
            .ok()
            .and_then(|t| parse_duration(t).ok())
            .filter(|d| *d >= Duration::from_millis(100));
        match (r, want) {
            (Ok(cli), Some(d)) => prop_assert_eq!(kill_args(cli).timeout, d),
            (Err(e), None) => prop_assert!(e.use_stderr(), "{e}"),
            (r, want) => prop_assert!(false, "{v:?}: {r:?} but wanted {want:?}"),
        }
    }

    #[test]
    fn read_timeout_is_a_duration_of_at_least_10ms(v in flag_value()) {
        let r = parse(vec![flag("read-timeout", &v), "status".into()]);
        let want = std::str::from_utf8(&v)
            .ok()
            .and_then(|t| parse_duration(t).ok())
            .filter(|d| *d >= Duration::from_millis(10));
        match (r, want) {
            (Ok(cli), Some(d)) => prop_assert_eq!(cli.common.read_timeout, Some(d)),
            (Err(e), None) => prop_assert!(e.use_stderr(), "{e}"),
            (r, want) => prop_assert!(false, "{v:?}: {r:?} but wanted {want:?}"),
        }
    }

    #[test]
    fn wait_sizes_and_intervals_parse_as_their_parsers_do(size in flag_value(), interval in flag_value()) {
        let r = parse(vec!["wait".into(), flag("max-used", &size), flag("interval", &interval)]);
        let s = std::str::from_utf8(&size).ok().and_then(|t| parse_size(t).ok());
        let i = std::str::from_utf8(&interval)
            .ok()
            .and_then(|t| parse_duration(t).ok())
            .filter(|d| *d >= Duration::from_millis(10));
        match (r, s, i) {
            (Ok(cli), Some(s), Some(i)) => match cli.command {
                Some(Command::Wait(w)) => {
                    prop_assert_eq!(w.max_used, Some(s));
                    prop_assert_eq!(w.interval, i);
                }
                other => prop_assert!(false, "not wait: {other:?}"),
            },
            (Err(e), s, i) => prop_assert!(e.use_stderr() && (s.is_none() || i.is_none()), "{e}"),
            (r, s, i) => prop_assert!(false, "{r:?} but wanted {s:?} {i:?}"),
        }
    }

    #[test]
    fn gpu_flag_accepts_what_a_selector_parses(v in prop_oneof![
        flag_value(),
        selector_text().prop_map(String::into_bytes),
    ]) {
        let r = parse(vec!["status".into(), flag("gpu", &v)]);
        let want = std::str::from_utf8(&v).ok().and_then(|t| t.parse::<GpuSelector>().ok());
        if let Some(GpuSelector::PciBusId(p)) = &want {
            // Normalised: 8-digit domain, 2-digit bus and device.
            prop_assert!(p.len() >= 16, "{}", p);
        }
        match (r, want) {
            (Ok(cli), Some(sel)) => prop_assert_eq!(cli.common.gpu, vec![sel]),
            (Err(e), None) => prop_assert!(e.use_stderr(), "{e}"),
            (r, want) => prop_assert!(false, "{v:?}: {r:?} but wanted {want:?}"),
        }
    }
}

/// `GPUFREE_READ_TIMEOUT` goes through the same parser as the flag.
#[test]
fn read_timeout_from_the_environment() {
    for (v, ok) in [
        ("5ms", false),
        ("10ms", true),
        ("2s", true),
        ("x", false),
        ("", false),
    ] {
        // clap reads the environment of the process: a child's, not ours.
        let out = crate::cmd::Gpufree::new(["completions", "bash"])
            .env("GPUFREE_READ_TIMEOUT", v)
            .run();
        if ok {
            out.assert_exit(0);
        } else {
            out.assert_exit(2);
            assert!(
                out.stderr.starts_with("gpufree: GPUFREE_READ_TIMEOUT: "),
                "{v}: {}",
                out.stderr
            );
        }
    }
}

/// Selectors in their valid spellings.
fn selector_text() -> impl Strategy<Value = String> {
    crate::pool(selector_spellings(), 4096)
}

fn selector_spellings() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u32>().prop_map(|i| i.to_string()),
        re("(all|ALL|All)"),
        re("(GPU-|MIG-)?[0-9a-fA-F-]{0,40}"),
        (any::<u16>(), any::<u8>(), 0u8..32, 0u8..8)
            .prop_map(|(d, b, dev, f)| format!("{d:04x}:{b:02x}:{dev:02x}.{f}")),
        (any::<u8>(), 0u8..32, 0u8..8).prop_map(|(b, dev, f)| format!("{b:02X}:{dev:02x}.{f}")),
        re("[0-9a-fA-F:.]{0,20}"),
    ]
}

fn gpus() -> impl Strategy<Value = Vec<Gpu>> {
    some_gpus(0)
}

fn some_gpus(min: usize) -> impl Strategy<Value = Vec<Gpu>> {
    proptest::collection::vec(
        (
            any::<u32>(),
            re("(GPU-[0-9a-f]{8}-[0-9a-f]{4})?"),
            any::<u8>(),
            0u8..32,
        ),
        min..6,
    )
    .prop_map(|gs| {
        gs.into_iter()
            .map(|(index, uuid, bus, dev)| Gpu {
                index,
                uuid,
                pci_bus_id: format!("00000000:{bus:02X}:{dev:02X}.0"),
                ..Gpu::default()
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(cases(ROUND_TRIP_CASES))]

    #[test]
    fn selectors_resolve_to_the_gpus_they_name(gpus in some_gpus(1), pick in any::<prop::sample::Index>(), how in 0u8..4) {
        let g = pick.get(&gpus);
        let text = match how {
            0 => g.index.to_string(),
            1 if !g.uuid.is_empty() => g.uuid.clone(),
            2 => g.pci_bus_id.to_lowercase(),
            _ => g.pci_bus_id[4..].to_string(), // a 4-digit domain
        };
        let sel: GpuSelector = text.parse().unwrap();
        match resolve(&gpus, &[sel]) {
            Ok(idx) => prop_assert!(idx.gpus.contains(&g.index), "{text}: {idx:?}"),
            // Generated GPUs may share a UUID prefix or a bus id.
            Err(e) => {
                let e = gpu_miss(&e);
                prop_assert!(e.starts_with("--gpu ") && gpus.len() > 1, "{e}")
            }
        }
    }

    #[test]
    fn resolve_never_panics(gpus in gpus(), texts in proptest::collection::vec(selector_text(), 0..4)) {
        let sels: Vec<GpuSelector> = texts.iter().filter_map(|t| t.parse().ok()).collect();
        match resolve(&gpus, &sels) {
            Ok(idx) => prop_assert!(idx.gpus.iter().all(|i| gpus.iter().any(|g| g.index == *i))),
            Err(e) => {
                let e = gpu_miss(&e);
                prop_assert!(e.starts_with("--gpu "), "{e}")
            }
        }
    }
}
