//! Output that fits the terminal (issue 32): the status table and `why`
//! of the seed incident at 80 and 100 columns, every line within them but
//! the `next:` commands (cut, they would not paste); `--wide` cuts nothing.
//! `why`'s evidence names a process by its command line cut to the line's
//! room (the interpreter's directory dropped first), and `why --pattern`'s
//! "misses" lines likewise.

use super::{incident, judged, written, Options, PrinterBuilder};
use crate::present::table::write_status;
use crate::present::why::write_why;
use crate::safe::width;

/// The status table and `why` of the incident, `columns` wide.
fn both(columns: Option<usize>) -> (String, String) {
    let printer = PrinterBuilder::new().width(columns).build();
    let s = judged(incident(), &Options::default());
    (
        written(|w| write_status(w, &s, &printer)),
        written(|w| write_why(w, &s, &printer)),
    )
}

/// Every line of `text` but a `next:` command is at most `columns` wide.
fn fits(text: &str, columns: usize) {
    for line in text.lines() {
        if !line.trim_start().starts_with("next:") {
            assert!(
                width(line) <= columns,
                "{} > {columns}: {line}",
                width(line)
            );
        }
    }
}

#[test]
fn seed_incident_at_80_and_100_columns() {
    for columns in [80, 100] {
        let (status, why) = both(Some(columns));
        fits(&status, columns);
        fits(&why, columns);
        insta::assert_snapshot!(format!("incident_status_{columns}"), status);
        insta::assert_snapshot!(format!("incident_why_{columns}"), why);
    }
}

#[test]
fn wide_cuts_nothing() {
    let (status, why) = both(None);
    assert!(!status.contains('…') && !why.contains('…'), "{status}{why}");
    let name = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition";
    assert!(status.contains(name));
    let cmd = "/opt/vllm/bin/python3 -c from multiprocessing.resource_tracker import main;main(25)";
    assert!(status.contains(&format!("cmdline: {cmd}\n")), "{status}");
    let printer = crate::present::Printer::default();
    let s = judged(incident(), &Options::default());
    assert_eq!(written(|w| write_status(w, &s, &printer)), status);
    assert_eq!(written(|w| write_why(w, &s, &printer)), why);
    let (narrow, _) = both(Some(80));
    assert!(
        narrow.contains("cmdline: python3 -c from multiprocessing"),
        "{narrow}"
    );
    assert!(narrow.contains("NVIDIA RTX PRO …"), "{narrow}");
}

/// `why` on `s`, `columns` wide.
fn why_at(s: &crate::model::Snapshot, columns: Option<usize>) -> String {
    let printer = PrinterBuilder::new().width(columns).build();
    written(|w| write_why(w, s, &printer))
}

#[test]
fn why_s_evidence_and_pattern_misses_at_80_and_100_columns() {
    let kernel = judged(
        super::incident::incident_with_idle_kernel(),
        &Options::default(),
    );
    let pattern = super::with_pattern(&incident(), "python3.*vllm");
    for columns in [80, 100] {
        let (kernel, pattern) = (
            why_at(&kernel, Some(columns)),
            why_at(&pattern, Some(columns)),
        );
        fits(&kernel, columns);
        fits(&pattern, columns);
        // The script part stays; the interpreter's directory goes first.
        assert!(
            kernel.contains("301200 python3 ('python3 -m ipykernel_launcher -f /home/alice/"),
            "{kernel}"
        );
        assert!(
            pattern.contains("misses 212437 python3: 'python3 -c from multiprocess"),
            "{pattern}"
        );
        insta::assert_snapshot!(format!("idle_kernel_why_{columns}"), kernel);
        insta::assert_snapshot!(format!("incident_why_pattern_{columns}"), pattern);
    }
    // --wide: whole.
    let wide = why_at(&kernel, None);
    assert!(
        wide.contains("('/home/alice/.venv/bin/python3 -m ipykernel_launcher -f /home/alice/.local/share/jupyter/runtime/kernel-4f1c.json')"),
        "{wide}"
    );
}
