//! The frame drawn into a test terminal: a PID and a memory figure are
//! never cut, cut lines end with `…`, the key help keeps whole entries,
//! counts are singular for one; a replay's kill moment says what the kill
//! did.

use super::draw::draw_snapshot;
use super::holders::{layout, Col};
use super::App;
use crate::model::{GpuMemory, KillSeen, Owner, OwnerKind, Process, Snapshot};
use crate::present::words::watch::{help, replay_kill};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

/// A host with one renamed, orphaned holder: a 7-digit PID, 10,240 MiB,
/// a long comm and owner.
fn host() -> Snapshot {
    let p = Process {
        pid: 4_194_303,
        ppid: 1,
        user: "a-rather-long-user-name".into(),
        comm: "VLLM::Worker_TP0_long".into(),
        gpu_memory: vec![GpuMemory {
            gpu: 0,
            used_bytes: Some(10_240 << 20),
        }],
        owner: Owner {
            kind: OwnerKind::SystemdUnit,
            id: "vllm-inference-server.service".into(),
            name: "vllm-inference-server.service".into(),
            ..Owner::default()
        },
        renamed: true,
        orphaned: true,
        ..Process::default()
    };
    let mut s = Snapshot {
        processes: vec![p],
        ..Snapshot::default()
    };
    s.gpus.push(super::tests::busy_gpu());
    s
}

/// The frame of `s` at `width` columns, the detail pane open or not, as
/// lines of text.
fn frame(s: &Snapshot, width: u16, detail: bool) -> Vec<String> {
    let mut term = Terminal::new(TestBackend::new(width, 20)).unwrap();
    let mut app = App::new(false);
    app.detail = detail;
    term.draw(|f| {
        let area = f.area();
        draw_snapshot(f, &mut app, s, area)
    })
    .unwrap();
    let buf = term.backend().buffer();
    (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol())
                .collect::<String>()
        })
        .collect()
}

/// The holders table's rows: the lines between the header and the
/// detail pane's border, left of it.
fn table_text(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| l.split("││").next().unwrap_or(l).to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_pid_and_memory_are_whole_at_60_80_and_100_columns_with_the_detail_open() {
    let s = host();
    for width in [60, 80, 100] {
        for detail in [true, false] {
            let lines = frame(&s, width, detail);
            let table = table_text(&lines);
            let row = lines
                .iter()
                .find(|l| l.contains("│4194303 "))
                .unwrap_or_else(|| panic!("no whole PID at {width}:\n{}", lines.join("\n")));
            let row = row.split("││").next().unwrap_or(row);
            assert!(
                row.contains("10,240 MiB"),
                "memory cut at {width}:\n{table}"
            );
            assert!(table.contains("PID") && table.contains("MEMORY"), "{table}");
        }
    }
}

#[test]
fn where_pid_and_memory_cannot_fit_no_number_is_shown_in_the_table() {
    let lines = frame(&host(), 30, true);
    let all = lines.join("\n");
    assert!(all.contains("too narrow"), "{all}");
    // The table shows no digit of the PID (the detail pane may, whole).
    for l in &lines {
        let table = l.split("││").next().unwrap_or(l);
        assert!(!table.contains("4194"), "a cut PID:\n{all}");
    }
}

#[test]
fn columns_narrow_then_go_owner_flags_age_first_and_never_cut_pid_or_memory() {
    let shown = |room| -> Vec<Col> { layout(room, 7, 10).iter().map(|c| c.0).collect() };
    assert_eq!(shown(200).len(), 9);
    // Room to spare: PID and MEMORY at their usual widths, OWNER the rest.
    let wide = layout(200, 5, 10);
    assert_eq!((wide[0], wide[3]), ((Col::Pid, 8), (Col::Memory, 12)));
    assert_eq!(wide.iter().map(|c| c.1).sum::<usize>() + 8, 200);
    let mid = layout(53, 7, 10);
    assert!(mid.contains(&(Col::Pid, 7)) && mid.contains(&(Col::Memory, 10)));
    assert!(!shown(53).contains(&Col::Owner), "{mid:?}");
    assert_eq!(shown(18), vec![Col::Pid, Col::Memory]);
    assert!(shown(17).is_empty());
    for room in 18..200 {
        let l = layout(room, 7, 10);
        let total: usize = l.iter().map(|c| c.1).sum::<usize>() + l.len() - 1;
        assert!(total <= room, "{room}: {l:?}");
    }
}

#[test]
fn cut_lines_end_with_an_ellipsis_and_one_is_said_in_the_singular() {
    let lines = frame(&host(), 80, true);
    let all = lines.join("\n");
    assert!(all.contains("1 GPU, 1 holder,"), "{all}");
    // The GPU's figures are never cut: the bar goes first, then the
    // accounted figure (used less unaccounted); at 60, 80 and 100 columns
    // each figure shown is whole.
    for cols in [60, 80, 100] {
        let lines = frame(&host(), cols, true);
        let bar = lines.iter().find(|l| l.contains("GPU 0")).unwrap();
        assert!(!bar.contains('…'), "{cols}: {bar}");
        assert!(bar.contains("unaccounted 10 MiB"), "{cols}: {bar}");
    }
    // The comm, narrowed, is cut with `…`.
    assert!(table_text(&lines).contains('…'), "{all}");
}

#[test]
fn the_key_help_drops_whole_entries() {
    let whole = help(true, 500);
    assert!(whole.ends_with("g/u/o filter"), "{whole}");
    for room in 0..whole.len() {
        let short = help(true, room);
        assert!(crate::safe::width(&short) <= room, "{room}: {short}");
        assert!(whole.starts_with(&short), "{room}: {short}");
        let rest = &whole[short.len()..];
        let whole_entries = short.is_empty() || rest.is_empty() || rest.starts_with("  ");
        assert!(whole_entries, "{room}: {short}");
    }
    assert_eq!(help(false, 30), "q quit  ↑/↓ select");
}

#[test]
fn a_kill_moment_says_who_which_signal_which_pids_and_the_outcome() {
    let record = serde_json::json!({
        "version": 1, "time": "2026-12-05T22:50:35.113Z", "host": "vm",
        "command": "kill",
        "invoker": {"pid": 15740, "uid": 0, "euid": 0, "user": "root", "argv": []},
        "signal": "TERM",
        "targets": [{"pid": 15148, "comm": "sleep\u{1b}[2J", "round": 1}],
        "outcome": {"result": "released", "released": true, "verdict": "free",
            "reasons": [], "seconds_to_release": 0.52, "signalled": [15148],
            "survivors": [], "killed_hard": [], "identity_changed": [], "rounds": 1}
    });
    let seen = KillSeen::read(&record);
    assert_eq!(
        replay_kill(seen.as_ref()),
        "kill by root (pid 15740): SIGTERM to 1 process: 15148 sleep\\e[2J → released in 0.52 s"
    );
    // Its start, where the record has it (the record is written at the
    // end, after the release the timeline shows; newuser38 3); a start
    // that is no time is not shown.
    let mut began = record.clone();
    began["started"] = "2026-12-05T22:50:33.500Z".into();
    let line = replay_kill(KillSeen::read(&began).as_ref());
    assert!(
        line.starts_with("kill by root (pid 15740) began 2026-12-05T22:50:33.500Z: SIGTERM"),
        "{line}"
    );
    began["started"] = "\u{1b}[2J yesterday".into();
    let line = replay_kill(KillSeen::read(&began).as_ref());
    assert!(
        line.starts_with("kill by root (pid 15740): SIGTERM"),
        "{line}"
    );
    let mut survived = record.clone();
    survived["outcome"]["result"] = "not-released".into();
    survived["outcome"]["survivors"] = serde_json::json!([15148]);
    let line = replay_kill(KillSeen::read(&survived).as_ref());
    assert!(
        line.ends_with("→ memory not released; 1 process survived"),
        "{line}"
    );
    // A record without the fields (or with one of another type): unread.
    for bad in [
        serde_json::json!({"version": 1}),
        serde_json::json!({"invoker": {"pid": "x"}}),
    ] {
        assert_eq!(
            replay_kill(KillSeen::read(&bad).as_ref()),
            "a kill (its record unread)"
        );
    }
}
