//! Golden tests of the presenters: every text and JSON output of the seed
//! incident, of the hostile-names corpus and of the cases the incident does
//! not reach (memory nobody accounts for, a partial view, odd states,
//! launch groups), from snapshot values (fixed PIDs and times: no
//! redaction needed), compared with the `.snap` files under `snapshots/`.
//! A change to a presenter or to the diagnosis shows up here as a diff;
//! `cargo insta review` (or `INSTA_UPDATE=always`) accepts a deliberate
//! one. With `CI=true` a missing snapshot fails instead of being written.

mod cases;
mod evil;
mod fixtures;
mod fleet;
mod incident;
mod scale;
mod width;

use super::fleet::{write_fleet, write_fleet_command};
use super::json::{FindingDoc, FleetDoc, SnapshotDoc};
use super::kill::{write_plan, write_report};
use super::metrics::{render_textfile, Extra};
use super::next::quoted;
use super::table::write_status;
use super::why::write_why;
use super::{write_json, Printer, PrinterBuilder};
use crate::act::kill::{plan, Safety, Selectors};
use crate::diagnose::Options;
use crate::model::FindingKind;
use crate::model::{
    Change, Changed, GpuName, Reason, Report, Selection, Snapshot, VerdictState, WatchFailed, Why,
};
use cases::{blind_cases, groups, mps, states, unaccounted_cases};
use evil::{corpus, evil, FIRST_EVIL};
use fixtures::judged;
use fleet::{evil_fleet, fleet};
use incident::{bystanders, incident, incident_under_unit, incident_with_idle_kernel, LAUNCHER};
use regex::Regex;
use std::io;

/// What a presenter wrote, as text (every presenter writes UTF-8).
fn written(f: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> String {
    let mut out = Vec::new();
    f(&mut out).expect("writing into a Vec cannot fail");
    String::from_utf8(out).expect("presenters write UTF-8")
}

/// The JSON document of `s`, checked to parse back (STYLE: JSON is tested
/// by reading it, not only as text) with one finding per finding of `s`.
fn json(s: &Snapshot) -> String {
    let text = written(|w| write_json(w, &SnapshotDoc::new(s)));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("status --json parses back");
    let findings = doc["findings"].as_array().map_or(0, Vec::len);
    assert_eq!(findings, s.findings.len(), "findings lost in the document");
    text
}

/// `text` with each run of more than 64 `A`s (the corpus's 64 KiB name,
/// whole or cut) written as `[A × N]`: the snapshot still proves the
/// length of every run, in a file one can read.
fn folded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('A') {
        out.push_str(&rest[..start]);
        let run = rest[start..].len() - rest[start..].trim_start_matches('A').len();
        if run > 64 {
            out.push_str(&format!("[A × {run}]"));
        } else {
            out.push_str(&rest[start..start + run]);
        }
        rest = &rest[start + run..];
    }
    out.push_str(rest);
    out
}

/// `why --pattern RE` over `s`.
fn with_pattern(s: &Snapshot, re: &str) -> Snapshot {
    let pattern = Some((re.to_string(), Regex::new(re).expect("a valid pattern")));
    judged(s.clone(), &Options { pattern })
}

/// `kill --gpu ... --dry-run` of every GPU of `s`, run as root by a
/// process outside the snapshot.
fn dry_run(s: &Snapshot) -> String {
    let sel = Selectors {
        gpus: Some(Selection::whole(s.gpus.iter().map(|g| g.index).collect())),
        ..Selectors::default()
    };
    let safety = Safety {
        me: 99_999,
        ancestors: vec![99_998, 1],
        ..Safety::default()
    };
    let p = plan(s, &sel, &safety);
    written(|w| write_plan(w, s, &p, "TERM", 10.0, &Printer::default()))
}

/// The metrics text of `s`, each family's samples sorted: the encoder
/// writes a family's label sets in hash order, which changes from run to
/// run; what each line says does not.
fn metrics(s: &Snapshot, label_cmdline: bool) -> String {
    let extra = Extra {
        label_cmdline,
        snapshot_duration_seconds: Some(0.0125),
        ..Extra::default()
    };
    let text = render_textfile(s, &extra);
    let mut out = String::new();
    let mut samples: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            samples.sort_unstable();
            samples.drain(..).for_each(|l| out.extend([l, "\n"]));
            out.extend([line, "\n"]);
        } else {
            samples.push(line);
        }
    }
    samples.sort_unstable();
    samples.drain(..).for_each(|l| out.extend([l, "\n"]));
    out
}

/// A name in a message is quoted as a shell would read it back.
#[test]
fn shell_words_paste_as_one_word() {
    assert_eq!(quoted("vllm.service"), "vllm.service");
    assert_eq!(
        quoted("vllm.service (user 1000)"),
        "'vllm.service (user 1000)'"
    );
    assert_eq!(quoted("$(reboot)"), "'$(reboot)'");
    assert_eq!(quoted(""), "''");
}

#[test]
fn seed_incident_status_table() {
    let s = judged(incident(), &Options::default());
    insta::assert_snapshot!(
        "incident_status",
        written(|w| write_status(w, &s, &Printer::default()))
    );
}

#[test]
fn seed_incident_status_json_is_also_why_json() {
    let s = judged(incident(), &Options::default());
    let doc = json(&s);
    // `why --json` prints the same document (SPEC.md).
    let why = judged(s.clone(), &Options::default());
    assert_eq!(json(&why), doc);
    insta::assert_snapshot!("incident_status_json", doc);
}

#[test]
fn seed_incident_why() {
    let s = judged(incident(), &Options::default());
    insta::assert_snapshot!(
        "incident_why",
        written(|w| write_why(w, &s, &Printer::default()))
    );
}

/// Issue 29: a forgotten Jupyter kernel at 0 % beside the incident's
/// busy workers is named alone as idle, its kill of it only; the
/// workers' own finding comes first and whole.
#[test]
fn seed_incident_with_an_idle_jupyter_kernel_why() {
    let s = judged(incident_with_idle_kernel(), &Options::default());
    insta::assert_snapshot!(
        "incident_idle_kernel_why",
        written(|w| write_why(w, &s, &Printer::default()))
    );
}

/// `why --format slurm`: one line of at most 100 bytes, `gpufree: ` and
/// the first finding's message, hostile names escaped.
#[test]
fn why_slurm_reason_is_one_short_line_of_the_first_finding() {
    for s in [
        judged(incident(), &Options::default()),
        judged(evil(), &Options::default()),
    ] {
        let out = written(|w| super::why::write_slurm(w, &s));
        let line = out.strip_suffix('\n').unwrap();
        assert!(!line.contains('\n'), "{out}");
        assert!(line.len() <= super::check::SLURM_MAX, "{line}");
        let first = s
            .findings
            .iter()
            .find(|f| f.kind() != crate::model::FindingKind::Free)
            .unwrap();
        let said = super::words::words(first).message;
        assert_eq!(line, super::check::slurm_reason(&said));
        assert!(line.starts_with("gpufree: "), "{line}");
    }
}

#[test]
fn seed_incident_why_pattern_text_and_json() {
    let s = with_pattern(&incident(), "python3.*vllm");
    insta::assert_snapshot!(
        "incident_why_pattern",
        written(|w| write_why(w, &s, &Printer::default()))
    );
    insta::assert_snapshot!("incident_why_pattern_json", json(&s));
}

#[test]
fn seed_incident_kill_dry_run_plan() {
    let s = judged(incident(), &Options::default());
    insta::assert_snapshot!("incident_kill_plan", dry_run(&s));
}

#[test]
fn seed_incident_under_its_unit_why_and_kill_plan() {
    let s = judged(incident_under_unit(), &Options::default());
    insta::assert_snapshot!(
        "incident_unit_why",
        written(|w| write_why(w, &s, &Printer::default()))
    );
    insta::assert_snapshot!("incident_unit_kill_plan", dry_run(&s));
}

#[test]
fn seed_incident_kill_report() {
    let mut targets = vec![LAUNCHER, 212_437];
    targets.extend(212_702..212_710);
    let r = Report {
        targets,
        rounds: 1,
        released: true,
        verdict: VerdictState::Free,
        seconds_to_release: 5.21,
        seconds_after_exit: Some(4.87),
        seconds_watched_for_restarts: 2.0,
        killed_hard: vec![212_705],
        ..Report::default()
    };
    insta::assert_snapshot!(
        "incident_kill_report",
        written(|w| write_report(w, &r, true, &Printer::default()))
    );
}

/// The report's other paths: a release found by a rescan with the watch
/// for restarts cut short; an unknown release after every target exited,
/// one left in a kernel wait and one not checked again; nothing to do.
#[test]
fn kill_reports_of_a_rescan_an_unknown_release_and_nothing_to_do() {
    let rescan = Report {
        targets: vec![LAUNCHER, 212_702],
        found_by_rescan: vec![212_703],
        rounds: 2,
        released: true,
        verdict: VerdictState::Free,
        seconds_to_release: 0.75,
        restart_watch_error: Some(WatchFailed {
            error: "EMFILE".into(),
        }),
        ..Report::default()
    };
    let unknown = Report {
        targets: vec![212_702, 212_703],
        survivors: vec![212_703],
        waiting_for_kernel: vec![212_703],
        unchecked: vec![Changed {
            pid: 212_704,
            why: Change::Unchecked(Some("a read timed out after 5.0 s".into())),
        }],
        rounds: 1,
        verdict: VerdictState::Unknown,
        reasons: vec![Reason::new(Why::Said {
            text: "memory unknown (NVML timed out)".into(),
        })
        .on(GpuName {
            index: 3,
            mig: Vec::new(),
        })],
        seconds_after_exit: Some(12.5),
        still_holding: vec![crate::model::Held::Unreadable { gpu: 3 }],
        ..Report::default()
    };
    let nothing = Report {
        released: true,
        verdict: VerdictState::Free,
        ..Report::default()
    };
    let text = |r: &Report, waited| written(|w| write_report(w, r, waited, &Printer::default()));
    insta::assert_snapshot!("kill_report_rescan", text(&rescan, true));
    insta::assert_snapshot!("kill_report_unknown", text(&unknown, true));
    insta::assert_snapshot!("kill_report_no_wait", text(&unknown, false));
    insta::assert_snapshot!("kill_report_nothing", text(&nothing, true));
}

#[test]
fn seed_incident_metrics() {
    let s = judged(incident(), &Options::default());
    insta::assert_snapshot!("incident_metrics", metrics(&s, false));
}

#[test]
fn evil_names_status_table() {
    let s = judged(evil(), &Options::default());
    insta::assert_snapshot!(
        "evil_status",
        folded(&written(|w| write_status(w, &s, &Printer::default())))
    );
}

#[test]
fn evil_names_status_json_keeps_them_whole() {
    let s = judged(evil(), &Options::default());
    insta::assert_snapshot!("evil_status_json", folded(&json(&s)));
}

/// `check --format json` of the hostile names, through the guard as the
/// command writes it, parses back with every name whole.
#[test]
fn evil_names_check_json_parses_back_through_the_guard() {
    // The corpus's leftover (an orphan: its name breaks its cgroup line)
    // renamed with what serde_json writes raw: a bidi override, DEL, C1.
    let mut host = evil();
    let leftover = host
        .processes
        .iter_mut()
        .find(|p| p.orphaned)
        .expect("an orphan");
    leftover.comm = "a\u{202e}b\x7f\u{85}".into();
    let s = judged(host, &Options::default());
    let policy = crate::diagnose::check::CheckPolicy::default();
    let (o, _) =
        crate::diagnose::check::check(&s, &policy, &Default::default(), &Default::default(), 0);
    let mut out = Vec::new();
    {
        let mut g = Printer::default().plain().guard(&mut out);
        crate::present::check::write(&mut g, crate::present::check::Format::Json, &o, &s, 0)
            .unwrap();
    }
    let text = String::from_utf8(out).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).expect("check's JSON parses back");
    let problems = doc["problems"].as_array().expect("problems");
    assert!(!problems.is_empty(), "{text}");
    // Whole: a name's unsafe characters are in the parsed strings, and
    // were never the guard's visible escapes.
    let words = doc.to_string();
    let parsed: Vec<&str> = problems
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert!(
        parsed.iter().any(|m| m.contains("a\u{202e}b\x7f\u{85}")),
        "the hostile name not kept whole: {text}"
    );
    assert!(
        !words.contains("\\u{"),
        "the guard rewrote a string: {text}"
    );
}

#[test]
fn evil_names_why() {
    let s = judged(evil(), &Options::default());
    insta::assert_snapshot!(
        "evil_why",
        folded(&written(|w| write_why(w, &s, &Printer::default())))
    );
}

#[test]
fn evil_names_why_pattern_text_and_json() {
    let s = with_pattern(&evil(), "it's \"q");
    insta::assert_snapshot!(
        "evil_why_pattern",
        folded(&written(|w| write_why(w, &s, &Printer::default())))
    );
    insta::assert_snapshot!("evil_why_pattern_json", folded(&json(&s)));
}

#[test]
fn evil_names_kill_dry_run_plan() {
    let s = judged(evil(), &Options::default());
    insta::assert_snapshot!("evil_kill_plan", folded(&dry_run(&s)));
}

#[test]
fn evil_names_kill_report() {
    let name = |i: usize| String::from_utf8_lossy(&corpus()[i]).into_owned();
    let r = Report {
        targets: (FIRST_EVIL..FIRST_EVIL + 13).collect(),
        survivors: vec![FIRST_EVIL + 3],
        rounds: 1,
        verdict: VerdictState::Busy,
        reasons: vec![Why::Said {
            text: format!("PID {} ({}) holds nvidia0", FIRST_EVIL, name(0)),
        }
        .into()],
        identity_changed: vec![FIRST_EVIL + 5],
        changed: vec![Changed {
            pid: FIRST_EVIL + 4,
            why: Change::Unchecked(Some(name(4))),
        }],
        frozen_cgroups: vec![format!("/system.slice/{}.service", name(2))],
        seconds_after_exit: None,
        ..Report::default()
    };
    insta::assert_snapshot!(
        "evil_kill_report",
        folded(&written(|w| write_report(w, &r, true, &Printer::default())))
    );
}

#[test]
fn evil_names_metrics_with_command_lines() {
    let s = judged(evil(), &Options::default());
    insta::assert_snapshot!("evil_metrics", folded(&metrics(&s, true)));
}

/// Each case's status table and `why`, under its name; then each case's
/// JSON document.
fn cases_text_and_json(cases: Vec<(&str, Snapshot)>) -> (String, String) {
    let mut text = String::new();
    let mut docs = String::new();
    for (name, s) in cases {
        let s = judged(s, &Options::default());
        text.push_str(&format!("==== {name}: status\n"));
        text.push_str(&written(|w| write_status(w, &s, &Printer::default())));
        text.push_str(&format!("==== {name}: why\n"));
        text.push_str(&written(|w| write_why(w, &s, &Printer::default())));
        docs.push_str(&format!("==== {name}\n{}", json(&s)));
    }
    (text, docs)
}

#[test]
fn memory_nobody_accounts_for_each_explanation() {
    let (text, docs) = cases_text_and_json(unaccounted_cases());
    insta::assert_snapshot!("unaccounted", text);
    insta::assert_snapshot!("unaccounted_json", docs);
}

#[test]
fn what_could_not_be_seen_nvml_down_lost_gpu_other_namespaces() {
    let (text, docs) = cases_text_and_json(blind_cases());
    insta::assert_snapshot!("blind", text);
    insta::assert_snapshot!("blind_json", docs);
}

#[test]
fn holders_in_odd_states_zombie_blocked_stopped_orphan_daemon() {
    let (text, docs) = cases_text_and_json(vec![("states", states())]);
    insta::assert_snapshot!("states", text);
    insta::assert_snapshot!("states_json", docs);
    let s = judged(states(), &Options::default());
    insta::assert_snapshot!("states_kill_plan", dry_run(&s));
    insta::assert_snapshot!("states_metrics", metrics(&s, false));
}

/// A GPU under MPS: the clients are its server's, the server and the
/// control daemon are protected, why says to stop the clients first and
/// quit MPS after, and the plan targets the clients, not the server.
#[test]
fn mps_server_clients_and_control_daemon() {
    let (text, docs) = cases_text_and_json(vec![("mps", mps())]);
    insta::assert_snapshot!("mps", text);
    insta::assert_snapshot!("mps_json", docs);
    let s = judged(mps(), &Options::default());
    insta::assert_snapshot!("mps_kill_plan", dry_run(&s));
}

#[test]
fn launch_groups_of_every_kind_and_what_restarts_them() {
    let (text, docs) = cases_text_and_json(vec![("groups", groups())]);
    insta::assert_snapshot!("groups", text);
    insta::assert_snapshot!("groups_json", docs);
    let s = judged(groups(), &Options::default());
    insta::assert_snapshot!("groups_kill_plan", dry_run(&s));
}

/// A pattern that hits every holder of the incident (so the next kill
/// is by the pattern), and a log tail that holds nothing.
#[test]
fn seed_incident_a_pattern_that_hits_every_holder_and_a_bystander() {
    let mut s = incident();
    s.others = bystanders();
    let s = with_pattern(&s, "VLLM::Worker_TP|resource_tracker|EngineCore");
    let pattern: Vec<FindingDoc> = s
        .findings
        .iter()
        .filter(|f| f.kind() == FindingKind::Pattern)
        .map(FindingDoc::new)
        .collect();
    insta::assert_snapshot!(
        "incident_pattern_hits_all",
        written(|w| write_why(w, &s, &Printer::default()))
    );
    insta::assert_snapshot!(
        "incident_pattern_hits_all_json",
        written(|w| write_json(w, &pattern))
    );
}

/// Colours where the presenters put them: headings bold, severities and
/// rows that need attention coloured (ESC written `\e` here).
#[test]
fn colours_of_the_status_table_why_and_plan() {
    let printer = PrinterBuilder::new().color(true).build();
    let s = judged(states(), &Options::default());
    let sel = Selectors {
        gpus: Some(Selection::whole(vec![0])),
        ..Selectors::default()
    };
    let p = plan(&s, &sel, &Safety::default());
    let text = [
        written(|w| write_status(w, &s, &printer)),
        written(|w| write_why(w, &s, &printer)),
        written(|w| write_plan(w, &s, &p, "TERM", 10.0, &printer)),
    ]
    .concat();
    insta::assert_snapshot!("states_coloured", text.replace('\u{1b}', "\\e"));
}

/// One printer for every writer: quiet leaves out the status table's
/// findings and footer and the evidence and next commands of `why`;
/// JSON makes `status` and `why` write the snapshot's document.
#[test]
fn the_printer_says_quiet_and_json_to_every_writer() {
    let s = judged(incident(), &Options::default());
    assert!(!s.findings.is_empty());
    let quiet = PrinterBuilder::new().quiet(true).build();
    let without_findings = Snapshot {
        findings: Vec::new(),
        ..s.clone()
    };
    let full = written(|w| write_status(w, &without_findings, &Printer::default()));
    let footer = full.lines().last().expect("a footer").to_string() + "\n";
    assert!(footer.starts_with("scanned "), "{footer}");
    let short = written(|w| write_status(w, &s, &quiet));
    assert_eq!(short + &footer, full);
    let why = written(|w| write_why(w, &s, &Printer::default()));
    let why_quiet = written(|w| write_why(w, &s, &quiet));
    assert!(why.contains("next:") && !why_quiet.contains("next:"));
    assert!(why_quiet.lines().all(|l| why.lines().any(|f| f == l)));
    let json = PrinterBuilder::new().json(true).build();
    let doc = written(|w| write_json(w, &SnapshotDoc::new(&s)));
    assert_eq!(written(|w| super::write_status_command(w, &s, &json)), doc);
    assert_eq!(written(|w| super::write_why_command(w, &s, &json)), doc);
}

/// `fleet` as text, quiet and JSON (the JSON parsed back: one command or
/// null per node, one reason and its words per stale node).
fn fleet_text_quiet_json(f: &crate::model::Fleet) -> (String, String, String) {
    let text = written(|w| write_fleet(w, f, &Printer::default()));
    let quiet = written(|w| write_fleet(w, f, &PrinterBuilder::new().quiet(true).build()));
    let doc = written(|w| write_json(w, &FleetDoc::new(f)));
    let json = PrinterBuilder::new().json(true).build();
    assert_eq!(written(|w| write_fleet_command(w, f, &json)), doc);
    let back: serde_json::Value = serde_json::from_str(&doc).expect("fleet --json parses back");
    assert_eq!(back["nodes"].as_array().map(Vec::len), Some(f.nodes.len()));
    for s in back["stale"].as_array().expect("stale is a list") {
        assert!(s["reason"].is_string() && s["why"].is_string(), "{s}");
    }
    (text, quiet, doc)
}

/// A busy node (a leftover held since before the history, a Slurm job),
/// nodes with a GPU whose verdict is unknown (one with no safe ssh host),
/// and a stale node of each reason.
#[test]
fn fleet_view_text_quiet_and_json() {
    let (text, quiet, doc) = fleet_text_quiet_json(&fleet());
    insta::assert_snapshot!("fleet", text);
    insta::assert_snapshot!("fleet_quiet", quiet);
    insta::assert_snapshot!("fleet_json", doc);
}

/// Hostile node labels, users, comms and owners: escaped and cut in
/// text, whole in JSON; no ssh command for a host that is no safe word.
#[test]
fn evil_names_fleet() {
    let (text, quiet, doc) = fleet_text_quiet_json(&evil_fleet());
    insta::assert_snapshot!("evil_fleet", folded(&text));
    insta::assert_snapshot!("evil_fleet_quiet", folded(&quiet));
    insta::assert_snapshot!("evil_fleet_json", folded(&doc));
}

/// The verdict's JSON: `reasons` and `caveats` in words, `causes` and
/// `caveat_causes` typed, and the snapshot reads back with them.
#[test]
fn verdict_json_has_words_beside_causes_and_reads_back_typed() {
    use super::words::verdict::{caveats, reasons};
    let mut seen_caveat = false;
    let mut cases = blind_cases();
    let mut hidden = cases[0].1.clone();
    hidden.verdict.caveats = vec![crate::model::Caveat::Hidepid { accounted: true }];
    cases.push(("a caveat", hidden));
    for (name, s) in cases.into_iter().chain(unaccounted_cases()) {
        let mut json = Vec::new();
        write_json(&mut json, &SnapshotDoc::new(&s)).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let v = &doc["verdict"];
        assert_eq!(
            v["reasons"],
            serde_json::json!(reasons(&s.verdict.reasons)),
            "{name}"
        );
        let words = caveats(&s.verdict.caveats);
        seen_caveat |= !words.is_empty();
        if !words.is_empty() {
            assert_eq!(v["caveats"], serde_json::json!(words), "{name}");
        }
        for (g, d) in s.gpus.iter().zip(doc["gpus"].as_array().unwrap()) {
            assert_eq!(
                d["verdict"]["reasons"],
                serde_json::json!(reasons(&g.verdict.reasons))
            );
        }
        let back: Snapshot = serde_json::from_slice(&json).unwrap();
        assert_eq!(back.verdict, s.verdict, "{name}");
        let gpus: Vec<_> = back.gpus.iter().map(|g| &g.verdict).collect();
        assert_eq!(
            gpus,
            s.gpus.iter().map(|g| &g.verdict).collect::<Vec<_>>(),
            "{name}"
        );
    }
    assert!(seen_caveat, "a case with a caveat");
}

#[test]
fn gpu_lists_read_as_ranges() {
    use super::words::gpu_list;
    assert_eq!(gpu_list(&[3, 1, 2, 0]), "0-3");
    assert_eq!(gpu_list(&[0, 2]), "0, 2");
    assert_eq!(gpu_list(&[5]), "5");
}
