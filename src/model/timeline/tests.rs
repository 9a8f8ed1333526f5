use super::{is_recording, state_at, Replay, ReplayStep};
use crate::model::{At, RecordBad};

/// A recording: a full snapshot of a free GPU at 1000, a holder's
/// memory at 2000 (the patch of `used_bytes`), a kill at 2500, the end.
fn recording() -> String {
    let doc = crate::model::Snapshot {
        ticks_per_second: 100,
        uptime_ticks: 500,
        ..Default::default()
    };
    let full = serde_json::to_value(crate::present::json::SnapshotDoc::new(&doc)).unwrap();
    let lines = [
        serde_json::json!({"record": 1, "t": 1000, "full": full}),
        serde_json::json!({"record": 1, "t": 2000, "change": {
            "events": [{"event": "holder-left", "pid": 7}],
            "patch": {"object": {"fields": {"dev_dir": {"set": "/changed"}}}}}}),
        serde_json::json!({"record": 1, "t": 2500, "kill": {"version": 1}}),
        serde_json::json!({"record": 1, "t": 3000, "end": "stopped"}),
    ];
    lines.iter().map(|l| l.to_string() + "\n").collect()
}

#[test]
fn the_state_at_a_moment_is_the_full_snapshot_and_the_changes_up_to_it() {
    let rec = recording();
    assert!(is_recording(rec.as_bytes()));
    assert!(!is_recording(b"{\"gpus\": []}"));
    let at = |a| state_at(rec.as_bytes(), a).map(|(s, _)| s);
    let before = at(Some(At::Unix(1500))).unwrap();
    assert_eq!(before.dev_dir, "");
    assert_eq!(before.taken_unix_ms, Some(1500));
    // The clock moved on from the full snapshot's: 0.5 s is 50 ticks.
    assert_eq!(before.uptime_ticks, 550);
    assert_eq!(at(Some(At::Unix(2000))).unwrap().dev_dir, "/changed");
    let end = at(None).unwrap();
    assert_eq!(
        (end.dev_dir.as_str(), end.taken_unix_ms),
        ("/changed", Some(3000))
    );
    assert_eq!(at(Some(At::BeforeEnd(1500))).unwrap().dev_dir, "");
    assert_eq!(at(Some(At::AfterStart(1000))).unwrap().dev_dir, "/changed");
    assert!(matches!(
        at(Some(At::Unix(999))),
        Err(RecordBad::Before {
            at_ms: 999,
            first_ms: Some(1000)
        })
    ));
    let mut r = Replay::new(rec.as_bytes());
    let steps: Vec<_> = std::iter::from_fn(|| r.step())
        .map(Result::unwrap)
        .collect();
    assert_eq!(steps.len(), 4);
    assert_eq!(steps[0], (1000, ReplayStep::Full));
    assert!(matches!(&steps[2].1, ReplayStep::Kill(_)));
}

#[test]
fn a_line_cut_short_at_the_end_is_the_end_and_a_bad_one_is_named() {
    let rec = recording();
    let cut = format!("{rec}{{\"record\":1,\"t\":4000,\"chan");
    assert_eq!(
        state_at(cut.as_bytes(), None)
            .map(|(s, _)| s)
            .unwrap()
            .dev_dir,
        "/changed"
    );
    let bad = rec
        .replace("\"t\":2500", "\"t\":2500,\"what\":1")
        .replace("\"kill\"", "\"oops\"");
    assert!(matches!(
        state_at(bad.as_bytes(), None).map(|(s, _)| s),
        Err(RecordBad::Line { line: 3, .. })
    ));
    // A bad line in the middle is said, whatever the moment after it:
    // the state before it is not the state then (attack38 1).
    let lines: Vec<&str> = rec.lines().collect();
    let mid = format!("{}\ngarbage\n{}\n", lines[0], lines[1..].join("\n"));
    for at in [None, Some(At::Unix(2000))] {
        assert!(matches!(
            state_at(mid.as_bytes(), at).map(|(s, _)| s),
            Err(RecordBad::Line { line: 2, .. })
        ));
    }
    // A recorder cut mid-write and started again on its file: the cut
    // line is passed over, the new full snapshot is the state (and the
    // cut at the file's start leaves it a recording).
    let again = lines[0].replace("\"t\":1000", "\"t\":5000");
    let restarted = format!("{rec}{{\"record\":1,\"t\":4000,\"chan\n{again}\n");
    let end = state_at(restarted.as_bytes(), None)
        .map(|(s, _)| s)
        .unwrap();
    assert_eq!((end.dev_dir.as_str(), end.taken_unix_ms), ("", Some(5000)));
    let at_start = format!("{{\"record\":1,\"t\":900,\"fu\n{again}\n");
    assert!(is_recording(at_start.as_bytes()));
    assert!(state_at(at_start.as_bytes(), None).map(|(s, _)| s).is_ok());
    // Written onto the cut line, the new one makes a bad line.
    let glued = format!("{rec}{{\"record\":1,\"t\":4000,\"chan{again}\n");
    assert!(matches!(
        state_at(glued.as_bytes(), None).map(|(s, _)| s),
        Err(RecordBad::Line { line: 5, .. })
    ));
    // A record dated past the ones after it (a kill's own time, a clock
    // stepped back): said, not the state before it shown at every moment
    // after (attack39 2); the index of a replay says it too.
    let future = rec.replace("\"t\":2500", "\"t\":9000");
    for at in [None, Some(At::Unix(2600))] {
        assert!(matches!(
            state_at(future.as_bytes(), at).map(|(s, _)| s),
            Err(RecordBad::BackInTime { line: 4 })
        ));
    }
    assert!(matches!(
        super::index(future.as_bytes()),
        Err(RecordBad::BackInTime { line: 4 })
    ));
    let newer = rec.replacen("\"record\":1", "\"record\":9", 1);
    assert!(matches!(
        state_at(newer.as_bytes(), None).map(|(s, _)| s),
        Err(RecordBad::Newer {
            line: 1,
            version: 9
        })
    ));
    let misfit = rec.replace(
        r#"{"object":{"fields":{"dev_dir":{"set":"/changed"}}}}"#,
        r#"{"array":{"len":3,"items":[]}}"#,
    );
    assert_ne!(misfit, rec);
    assert!(matches!(
        state_at(misfit.as_bytes(), None).map(|(s, _)| s),
        Err(RecordBad::Misfit { line: 2 })
    ));
}
