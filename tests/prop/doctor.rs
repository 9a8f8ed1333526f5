//! `gpufree doctor --unit`: the corpus of inference-server units in
//! tests/units/ gives exactly what each file's first line expects, through
//! the binary; and no unit text at all makes the checker panic, with the
//! properties systemd's rules imply.

use crate::{cases, hostile_bytes, mutate, re, PARSER_CASES};
use gpufree::present::doctor::{worded, ProblemDoc as Problem};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

/// The problems of `text` in words, as `doctor` prints them.
fn check(text: &str) -> Vec<Problem> {
    worded(&gpufree::doctor::check(text))
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/units")
}

/// Every unit of the corpus: (file name, text).
fn corpus() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "service"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// What a corpus file's first line says doctor must find.
#[derive(Debug)]
enum Expect {
    Clean,
    One {
        line: usize,
        severity: String,
        text: String,
    },
}

fn expectation(name: &str, text: &str) -> Expect {
    let first = text.lines().next().unwrap_or_default();
    let rest = first
        .strip_prefix("# expect: ")
        .unwrap_or_else(|| panic!("{name}: no '# expect:' first line"));
    if rest == "clean" {
        return Expect::Clean;
    }
    let mut parts = rest.splitn(3, ' ');
    Expect::One {
        line: parts.next().unwrap().parse().unwrap(),
        severity: parts.next().unwrap().to_string(),
        text: parts.next().unwrap().to_string(),
    }
}

#[test]
fn inference_server_units_give_exactly_what_they_expect() {
    let files = corpus();
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for project in ["vllm", "tgi", "triton", "ollama"] {
        assert!(
            names
                .iter()
                .any(|n| n.starts_with(project) && !n.contains("planted")),
            "a clean {project} unit: {names:?}"
        );
        assert!(
            names
                .iter()
                .any(|n| n.starts_with(project) && n.contains("planted")),
            "a planted {project} unit: {names:?}"
        );
    }
    assert!(names.iter().any(|n| n.contains("@.service")), "a template");
    for (name, text) in &files {
        let path = corpus_dir().join(name);
        let out = crate::cmd::Gpufree::new(["doctor", "--json", "--unit"])
            .arg(&path)
            .run();
        let doc = out.json();
        let problems = doc["problems"].as_array().unwrap();
        assert_eq!(
            serde_json::to_value(check(text)).unwrap(),
            doc["problems"],
            "{name}: the binary and the library agree"
        );
        match expectation(name, text) {
            Expect::Clean => {
                assert!(problems.is_empty(), "{name}: {problems:#?}");
                out.assert_exit_with(0, name);
            }
            Expect::One {
                line,
                severity,
                text,
            } => {
                assert_eq!(problems.len(), 1, "{name}: {problems:#?}");
                let p = &problems[0];
                assert_eq!(p["line"], line, "{name}: {p:#?}");
                assert_eq!(p["severity"], severity.as_str(), "{name}: {p:#?}");
                let message = p["message"].as_str().unwrap();
                assert!(message.contains(&text), "{name}: {message}");
                out.assert_exit_with(1, name);
            }
        }
    }
}

/// Pieces of Exec lines and values that reach every rule: variables in
/// every form, specifiers, quotes, escapes, separators, shell code, format
/// commands, shell assignments, odd whitespace.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(vec![
            "/bin/sh",
            "-c",
            "-ec",
            "bash",
            "/usr/bin/env",
            "$X",
            "${X}",
            "${X:-y}",
            "${X:+y}",
            "$MAINPID",
            "${EXIT_STATUS}",
            "$SERVICE_RESULT",
            "${HOME}",
            "${RANDOM}",
            "$$",
            "$${x}",
            "$",
            "${",
            "}",
            "%i",
            "%n",
            "%s",
            "%d",
            "%k",
            "%%",
            "%",
            "date",
            "+%s",
            "printf",
            "\"%d\"",
            "'",
            "\"",
            "\\",
            ";",
            "\\;",
            "for",
            "x",
            "in",
            "do",
            "done",
            "x=1",
            "${x}",
            "read",
            "-r",
            "nvidia-smi",
            "while",
            "sleep",
            "$(",
            ")",
            "|",
            "&&",
            "\t",
            "\u{2003}",
            "\u{202e}",
            "\\n",
            "\\x1b",
            "\\u202e",
            "\\777",
            "--a=$X",
            "$X/y",
            "=",
            "#",
            "[Service]",
        ])
        .prop_map(str::to_string),
        re("'[ -~]{0,30}'"),
        re("\"[ -~]{0,30}\""),
        re("[$%{}:=a-zA-Z_ ]{0,12}"),
        hostile_bytes(6).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            re("(-|@|:|\\+|!|!!|\\|)?"),
            proptest::sample::select(vec![
                "ExecStart",
                "ExecStartPre",
                "ExecStartPost",
                "ExecReload",
                "ExecStop",
                "ExecStopPost",
                "ExecCondition",
            ])
        )
            .prop_map(|(prefix, k)| format!("{k}={prefix}")),
        proptest::sample::select(vec![
            "Environment=",
            "EnvironmentFile=",
            "PassEnvironment=",
            "KillMode=",
            "PrivateDevices=",
            "Description=",
            " ExecStart =",
            "",
        ])
        .prop_map(str::to_string),
    ]
}

fn unit_line() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            key(),
            proptest::collection::vec(word(), 0..6),
            any::<bool>()
        )
            .prop_map(|(k, ws, continued)| {
                let mut l = format!("{k}{}", ws.join(" "));
                if continued {
                    l.push_str(" \\");
                }
                l
            }),
        proptest::sample::select(vec![
            "[Service]",
            "[Unit]",
            "[",
            "]",
            "# comment $X %k",
            "; comment",
            "",
            "KillMode=process",
            "KillMode=none",
            "PrivateDevices=yes",
        ])
        .prop_map(str::to_string),
    ]
}

/// Unit text: built from lines, arbitrary text, or a corpus unit damaged.
fn unit_text() -> impl Strategy<Value = String> {
    let corpus: Vec<Vec<u8>> = corpus().into_iter().map(|(_, t)| t.into_bytes()).collect();
    let built = crate::pool(
        proptest::collection::vec(unit_line(), 0..8).prop_map(|ls| ls.join("\n").into_bytes()),
        4096,
    );
    prop_oneof![
        2 => built.clone(),
        2 => built.prop_flat_map(mutate),
        1 => hostile_bytes(80),
        1 => proptest::sample::select(corpus).prop_flat_map(mutate),
    ]
    .prop_map(|b: Vec<u8>| String::from_utf8_lossy(&b).into_owned())
}

fn is_variable_problem(p: &Problem) -> bool {
    [
        "replaces",
        "substitutes",
        "does not expand",
        "drops this argument",
        "sets $",
    ]
    .iter()
    .any(|w| p.message.contains(w))
}

proptest! {
    #![proptest_config(cases(PARSER_CASES))]

    /// 100,000 unit texts: no panic; every problem names a line of the
    /// file, a known severity, and is one line without control characters
    /// (messages quote the unit's own words).
    #[test]
    fn unit_files_never_panic(text in unit_text()) {
        let lines = text.lines().count();
        for p in check(&text) {
            prop_assert!(p.line >= 1 && p.line <= lines, "{p:?} of {lines} lines");
            prop_assert!(matches!(p.severity, "error" | "warning"), "{p:?}");
            prop_assert!(!p.message.chars().any(char::is_control), "{p:?}");
            prop_assert!(!p.fix.chars().any(char::is_control), "{p:?}");
        }
    }
}

/// Cases of the escaping property (each checks a unit twice).
const ESCAPING_CASES: u32 = 10_000;

proptest! {
    #![proptest_config(cases(ESCAPING_CASES))]

    /// `$$` is a literal `$` to systemd and `%%` a literal `%`: a unit
    /// with every `$` doubled has no variable problem, and one with every
    /// `%` doubled no specifier problem.
    #[test]
    fn escaped_dollars_and_percents_are_never_problems(text in unit_text()) {
        // A `$` or `%` written as an escape (`\x24`, `\045`) is one all the
        // same: systemd unescapes before it substitutes.
        let numeric_escape = text
            .as_bytes()
            .windows(2)
            .any(|w| w[0] == b'\\' && matches!(w[1], b'x' | b'u' | b'U' | b'0'..=b'7'));
        if numeric_escape {
            return Ok(());
        }
        let dollars = text.replace('$', "$$");
        for p in check(&dollars) {
            prop_assert!(!is_variable_problem(&p), "{p:?}\n{dollars}");
        }
        let percents = text.replace('%', "%%");
        for p in check(&percents) {
            prop_assert!(!p.message.contains("specifier"), "{p:?}\n{percents}");
        }
    }
}
