//! Issue 31's bar: the demo's incident (`gpufree demo --hold`: eight
//! workers renamed `VLLM::Worker_TP0..7` holding the GPUs, a launcher and
//! a resource tracker holding `nvidia-uvm`, all in the demo's own
//! temporary device directory on the simulator), recorded while `gpufree
//! kill --yes` frees it as the demo does, replays from the stuck state
//! through the kill to the release, in the order and at the times they
//! happened.

use crate::harness::Gpufree;
use crate::record::{has_event, lines, stop, wait_line};
use crate::scene::Scene;
use serde_json::Value;

/// `gpufree CMD` against the held demo, as the line it prints.
fn on(scene: &Scene, args: &[&str]) -> Gpufree {
    scene
        .env()
        .into_iter()
        .fold(Gpufree::new(args.iter().copied()), |g, (k, v)| g.env(k, v))
}

/// The state `--from` reads from `rec` at `ms` (ms since the epoch).
fn at(rec: &std::path::Path, ms: u64) -> Value {
    let r = Gpufree::new(["status"])
        .json()
        .arg("--from")
        .arg(rec)
        .args(["--at", &format!("{}.{:03}", ms / 1000, ms % 1000)])
        .run();
    r.json()
}

/// The renamed workers of document `doc`.
fn workers(doc: &Value) -> usize {
    let procs = doc["processes"].as_array().unwrap();
    procs
        .iter()
        .filter(|p| {
            p["comm"]
                .as_str()
                .is_some_and(|c| c.starts_with("VLLM::Worker"))
        })
        .count()
}

#[test]
fn the_demos_incident_recorded_replays_stuck_then_killed_then_released() {
    let scene = Scene::start();
    let tmp = tempfile::tempdir().unwrap();
    let (rec_path, log) = (
        tmp.path().join("incident.jsonl"),
        tmp.path().join("kills.jsonl"),
    );
    let rec = on(&scene, &["record"])
        .args(["--out", rec_path.to_str().unwrap(), "--interval", "200ms"])
        .args(["--audit-log", log.to_str().unwrap()])
        .spawn();
    let full = wait_line(&rec_path, "full snapshot", |l| l.get("full").is_some());
    let stuck_ms = lines(&rec_path)[full]["t"].as_u64().unwrap();
    on(
        &scene,
        &["kill", "--yes", "--audit-log", log.to_str().unwrap()],
    )
    .run()
    .assert_exit(0);
    let kill = wait_line(&rec_path, "the kill", |l| l.get("kill").is_some());
    let out = stop(rec);
    out.assert_exit(0);
    let all = lines(&rec_path);
    let free = all
        .iter()
        .position(|l| has_event(l, "verdict", |e| e["state"] == "free"))
        .unwrap_or_else(|| panic!("no release in {all:?}"));
    let t = |i: usize| all[i]["t"].as_u64().unwrap();
    let record = &all[kill]["kill"];
    let began = gpufree::model::rfc3339_ms(record["started"].as_str().unwrap()).unwrap();
    // Stuck, then the kill began, then the memory came back, then the
    // kill's record was written (it waits for the release).
    assert!(
        stuck_ms <= began && began <= t(free) && t(free) <= t(kill),
        "{all:?}"
    );
    assert_eq!(record["outcome"]["result"], "released");
    assert_eq!(record["outcome"]["signalled"].as_array().unwrap().len(), 10);
    // Read back: at the start the eight renamed workers and the two node
    // holders, busy; just before the kill began the same; at the end free.
    let then = at(&rec_path, stuck_ms);
    assert_eq!(workers(&then), 8, "{then}");
    assert_eq!(then["processes"].as_array().unwrap().len(), 10, "{then}");
    assert_eq!(then["verdict"]["state"], "busy");
    assert_eq!(
        at(&rec_path, began.saturating_sub(1).max(stuck_ms))["verdict"]["state"],
        "busy"
    );
    let end = at(&rec_path, t(all.len() - 1));
    assert_eq!(end["verdict"]["state"], "free", "{end}");
    assert_eq!(workers(&end), 0);
}
