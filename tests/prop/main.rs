//! Property tests (proptest): every parser of outside input — /proc files,
//! cgroup paths, sizes, durations, signals, GPU selectors, the simulator's
//! state file, systemd units — on 100,000 generated inputs each without a
//! panic, round trips where a parser has a known answer, and the whole
//! pipeline (scan, NVML, diagnosis, every presenter) over random fake /proc
//! trees and random snapshots.
//!
//! Each generator mixes arbitrary bytes with structured input close to
//! valid (then cut, spliced or corrupted), so the deep paths are reached.
//! Case counts are fixed per test (`cases`), not taken from `PROPTEST_CASES`.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.
#![allow(clippy::too_many_lines)] // A test reads as one story; its length is exempt.

mod args;
#[allow(dead_code)] // The integration tests' command builder; this binary uses a part.
#[path = "../it/cmd.rs"]
mod cmd;
mod doctor;
#[allow(dead_code)] // The tests' environment, which the command builder gives.
#[path = "../common/env.rs"]
mod env;
mod parsers;
mod pipeline;
mod sim_state;
mod snapshot;
mod truth;
mod units;

use proptest::prelude::*;

/// A configuration running `n` cases, without writing regression files
/// into the source tree (a failure prints its minimal input; a panic found
/// becomes a named regression test instead). `GPUFREE_PROP_CASES=N` runs N
/// cases instead, for a quick look or a long soak.
pub fn cases(n: u32) -> ProptestConfig {
    let n = std::env::var("GPUFREE_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n);
    ProptestConfig {
        failure_persistence: None,
        max_shrink_iters: 10_000,
        ..ProptestConfig::with_cases(n)
    }
}

/// The figure of the issue: cases per parser, each without a panic.
pub const PARSER_CASES: u32 = 100_000;

/// Cases of a round trip (generated valid input parses to what was
/// generated): each is also a case without a panic, on the valid paths.
pub const ROUND_TRIP_CASES: u32 = 20_000;

/// Strings matching a regular expression, compiled once (a `&str` used as
/// a strategy is compiled again for every case: the slowest part of a run).
pub fn re(pattern: &str) -> proptest::string::RegexGeneratorStrategy<String> {
    proptest::string::string_regex(pattern).unwrap()
}

/// A small pseudo-random generator (splitmix64) that turns one generated
/// seed into many bytes. Generating a long input from proptest value trees,
/// one per byte, costs more in a debug build than the parser it feeds;
/// from a seed it costs next to nothing (and a failure still prints the
/// input; only the shrinking is coarser).
pub struct Bytes(u64);

impl Bytes {
    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.bits() % n as u64) as usize
        }
    }
}

/// Arbitrary bytes up to `max` long.
pub fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    (any::<u64>(), 0..=max).prop_map(|(seed, len)| {
        let mut r = Bytes(seed);
        (0..len).map(|_| r.bits() as u8).collect()
    })
}

/// Damages valid input: cut it, flip, insert or delete a byte, or splice in
/// arbitrary bytes, once or a few times, so a parser sees input a step or
/// two away from valid.
pub fn mutate(valid: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    (any::<u64>(), 1usize..4).prop_map(move |(seed, times)| {
        let mut r = Bytes(seed);
        let mut v = valid.clone();
        for _ in 0..times {
            let at = r.below(v.len() + 1);
            match r.below(6) {
                0 => v.truncate(at),
                1 if at < v.len() => v[at] = r.bits() as u8,
                2 => v.insert(at, r.bits() as u8),
                3 if at < v.len() => {
                    v.remove(at);
                }
                4 => {
                    let junk: Vec<u8> = (0..r.below(24)).map(|_| r.bits() as u8).collect();
                    v.splice(at..at, junk);
                }
                _ => {}
            }
        }
        v
    })
}

/// Fragments that are likely to upset a parser: separators, brackets,
/// digits, controls, a multi-byte character and invalid UTF-8.
const HOSTILE: &[&[u8]] = &[
    b" ",
    b"(",
    b")",
    b":",
    b"/",
    b"\n",
    b"\0",
    b"\t",
    b"=",
    b"%",
    b"$",
    b"{",
    b"}",
    b"\\",
    b"\"",
    b"'",
    b"0",
    b"9",
    b"-",
    b".",
    b"\xe2\x80\xae", // U+202E
    b"\xff",
    b"\xc3",
    b"\x1b[2J",
];

/// Up to `max` hostile fragments or arbitrary bytes, mixed.
pub fn hostile_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    (any::<u64>(), 0..=max).prop_map(|(seed, len)| {
        let mut r = Bytes(seed);
        let mut out = Vec::new();
        for _ in 0..len {
            match r.below(HOSTILE.len() + 8) {
                i if i < HOSTILE.len() => out.extend_from_slice(HOSTILE[i]),
                _ => out.push(r.bits() as u8),
            }
        }
        out
    })
}

/// `n` values of `strategy`, generated once: a pool to pick from (and to
/// damage with [`mutate`]) when building a structured value for each of
/// 100,000 cases would cost more than the parser it feeds.
pub fn pool<S: Strategy>(strategy: S, n: usize) -> proptest::sample::Select<S::Value>
where
    S::Value: Clone + std::fmt::Debug + 'static,
{
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let values: Vec<S::Value> = (0..n)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect();
    proptest::sample::select(values)
}
