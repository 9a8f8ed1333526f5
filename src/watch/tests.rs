//! The live view's colours follow the printer's choice; a replay's
//! moments and its time bar.

use super::draw::bars;
use super::replay::Recording;
use crate::model::RecordBad;
use crate::model::{Gpu, Memory, VerdictState};
use crate::present::words::watch::{replay_bar, ReplayAt};

pub(super) fn busy_gpu() -> Gpu {
    let mut g = Gpu {
        memory: Memory {
            total_bytes: 100 << 20,
            used_bytes: 60 << 20,
            accounted_bytes: 50 << 20,
            unaccounted_bytes: 10 << 20,
            known: true,
            ..Memory::default()
        },
        ..Gpu::default()
    };
    g.verdict.state = VerdictState::Busy;
    g
}

#[test]
fn bars_are_coloured_only_when_the_printer_says_so() {
    let g = busy_gpu();
    let bar = super::draw::Bar {
        cells: 20,
        short: false,
    };
    let coloured = bars(bar, &g, true);
    assert!(
        coloured[0].spans.iter().any(|s| s.style.fg.is_some()),
        "{coloured:?}"
    );
    let plain = bars(bar, &g, false);
    assert!(
        plain[0].spans.iter().all(|s| s.style.fg.is_none()),
        "--no-color and NO_COLOR: no colour at all: {plain:?}"
    );
    // The same text either way.
    let text = |l: &ratatui::text::Line<'_>| l.to_string();
    assert_eq!(text(&coloured[0]), text(&plain[0]));
}

/// A change before any full snapshot (not a moment), a full snapshot
/// at 1000, a change at 2000, a kill at 2500, the end at 3000, and a
/// last line cut short.
fn recording() -> String {
    let doc = crate::model::Snapshot {
        ticks_per_second: 100,
        uptime_ticks: 500,
        ..Default::default()
    };
    let full = serde_json::to_value(crate::present::json::SnapshotDoc::new(&doc)).unwrap();
    let change = |t, dir| {
        serde_json::json!({"record": 1, "t": t, "change": {"events": [],
            "patch": {"object": {"fields": {"dev_dir": {"set": dir}}}}}})
    };
    let lines = [
        change(500, "/before"),
        serde_json::json!({"record": 1, "t": 1000, "full": full}),
        change(2000, "/changed"),
        serde_json::json!({"record": 1, "t": 2500, "kill": {"version": 1}}),
        serde_json::json!({"record": 1, "t": 3000, "end": "stopped"}),
    ];
    let whole: String = lines.iter().map(|l| l.to_string() + "\n").collect();
    whole + "{\"record\":1,\"t\":4000,\"ch"
}

#[test]
fn moments_start_at_the_first_full_snapshot_and_each_is_built_alone() {
    let rec = Recording::open(recording().into_bytes()).unwrap();
    assert_eq!(rec.len(), 4);
    let at = |i| rec.state(i).unwrap();
    assert_eq!(
        (at(0).dev_dir.as_str(), at(0).taken_unix_ms),
        ("", Some(1000))
    );
    assert_eq!(at(1).dev_dir, "/changed");
    assert_eq!(at(2).dev_dir, "/changed");
    // The clock moved on from the full snapshot's: 2 s is 200 ticks.
    assert_eq!((at(3).uptime_ticks, at(3).taken_unix_ms), (700, Some(3000)));
    // Backwards as well as forwards: each moment from its full snapshot.
    assert_eq!(at(0).dev_dir, "");
}

#[test]
fn a_recording_without_a_full_snapshot_or_of_a_newer_version_does_not_open() {
    let rec = recording();
    let no_full = rec.replace("\"full\"", "\"kill\"");
    assert!(matches!(
        Recording::open(no_full.into_bytes()),
        Err(RecordBad::Before { first_ms: None, .. })
    ));
    let newer = rec.replacen("\"record\":1,\"t\":2000", "\"record\":9,\"t\":2000", 1);
    assert!(matches!(
        Recording::open(newer.into_bytes()),
        Err(RecordBad::Newer {
            line: 3,
            version: 9
        })
    ));
    let bad = rec.replacen("\"record\":1,\"t\":2500}", "\"recor}", 1);
    assert_ne!(bad, rec);
    assert!(matches!(
        Recording::open(bad.into_bytes()),
        Err(RecordBad::Line { line: 4, .. })
    ));
}

#[test]
fn the_time_bar_says_when_where_how_fast_and_that_nothing_is_live() {
    let bar = replay_bar(&ReplayAt {
        t_ms: 1_764_967_420_250,
        start_ms: 1_764_967_418_750,
        pos: 1,
        count: 4,
        speed: -4,
        playing: false,
    });
    assert_eq!(
        bar.trim(),
        "2025-12-05T20:43:40.250Z  +1.5 s  moment 2/4  ×1/16  paused  REPLAY — nothing here is live"
    );
    let bar = replay_bar(&ReplayAt {
        speed: 6,
        playing: true,
        pos: 3,
        ..ReplayAt {
            t_ms: 0,
            start_ms: 0,
            pos: 0,
            count: 4,
            speed: 0,
            playing: false,
        }
    });
    assert!(bar.contains("moment 4/4  ×64  playing"), "{bar}");
}
