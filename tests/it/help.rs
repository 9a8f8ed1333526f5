//! `--help` as a newcomer reads it: flags under the same headings in every
//! command, only the flags that apply to the command, examples and exit
//! codes after them; and every flag SPEC.md names still parses.

use crate::harness::Gpufree;
use clap::{CommandFactory, Parser};
use gpufree::cli::{Cli, Command};

/// The headings every command's flags sit under.
const HEADINGS: [&str; 5] = [
    "What to look at:",
    "What to do:",
    "Timing:",
    "Output:",
    "Where to look:",
];

/// `gpufree WORDS... --help` (or `-h`), which must succeed.
fn help(words: &[&str], flag: &str) -> String {
    let r = Gpufree::new(words).args([flag]).run();
    r.assert_exit(0);
    r.stdout
}

#[test]
fn commands_that_collect_nothing_show_no_collection_flags() {
    for words in [
        &["sim", "lib"][..],
        &["sim", "exec"],
        &["sim"],
        &["completions"],
        &["man"],
        &["doctor"],
        &["demo"],
        &["fleet"],
        &["prepare"],
    ] {
        for flag in ["--help", "-h"] {
            let text = help(words, flag);
            for hidden in [
                "--scan",
                "--gpu",
                "--dev-dir",
                "--idle-window",
                "--read-timeout",
                "--nvml-lib",
                "--from",
            ] {
                assert!(
                    !text.contains(hidden),
                    "gpufree {} {flag} shows {hidden}:\n{text}",
                    words.join(" ")
                );
            }
        }
    }
    // Nothing to print a report of: no output flags either.
    for words in [&["sim", "lib"][..], &["completions"], &["man"]] {
        let text = help(words, "--help");
        assert!(!text.contains("--json"), "{text}");
    }
    // The flags stay accepted where they were, before and after the command.
    Gpufree::new(["--gpu", "0", "--scan", "procfs", "sim", "lib"])
        .run()
        .assert_exit(0);
    Gpufree::new(["sim", "lib", "--scan", "procfs"])
        .run()
        .assert_exit(0);
}

#[test]
fn kill_help_groups_its_flags_and_ends_with_examples_and_exit_codes() {
    let long = help(&["kill"], "--help");
    let mut at = 0;
    for heading in HEADINGS {
        let found = long[at..].find(heading);
        assert!(
            found.is_some(),
            "{heading} missing or out of order:\n{long}"
        );
        at += found.unwrap();
    }
    let examples = long.find("Examples:").expect("examples");
    let codes = long.find("Exit codes:").expect("exit codes");
    assert!(at < examples && examples < codes, "{long}");
    assert!(long.contains("gpufree kill --gpu 0 --dry-run"), "{long}");
    assert!(long.contains("  5  refused for safety"), "{long}");
    // A flag sits under its heading: --signal under what to do, --grace
    // under timing, --dev-dir under where to look.
    let under = |flag: &str| {
        let pos = long.find(flag).unwrap();
        HEADINGS
            .iter()
            .rfind(|h| long.find(*h).unwrap() < pos)
            .copied()
    };
    assert_eq!(under("--pid <PID>"), Some("What to look at:"));
    assert_eq!(under("--signal <SIG>"), Some("What to do:"));
    assert_eq!(under("--grace <DUR>"), Some("Timing:"));
    assert_eq!(under("--audit-log <FILE>"), Some("Output:"));
    assert_eq!(under("--dev-dir <DIR>"), Some("Where to look:"));
    // No snapshot from a file for a kill.
    assert!(!long.contains("--from"), "{long}");
    // -h: one line per flag, the long explanations only in --help.
    let short = help(&["kill"], "-h");
    assert!(long.contains("BPF iterators"), "{long}");
    assert!(!short.contains("BPF iterators"), "{short}");
    assert!(short.contains("--scan <HOW>") && short.contains("Exit codes:"));
    assert!(short.lines().count() < long.lines().count() * 2 / 3);
}

#[test]
fn every_acting_or_looking_command_has_examples_and_exit_codes() {
    for command in [
        "kill", "wait", "why", "status", "check", "watch", "serve", "prepare",
    ] {
        let text = help(&[command], "--help");
        assert!(text.contains("Examples:\n  "), "{command}:\n{text}");
        assert!(text.contains("Exit codes"), "{command}:\n{text}");
        for line in text[text.find("Examples:").unwrap()..].lines().skip(1) {
            if line.is_empty() {
                break;
            }
            assert!(line.contains("gpufree"), "{command}: {line}");
        }
    }
    // The headings are the same words in every command.
    for command in ["status", "why", "wait", "check", "fleet", "serve", "watch"] {
        let text = help(&[command], "--help");
        for line in text
            .lines()
            .filter(|l| l.ends_with(':') && !l.starts_with(' '))
        {
            assert!(
                HEADINGS.contains(&line)
                    || ["Options:", "Examples:", "Arguments:", "Commands:"].contains(&line)
                    || line.starts_with("Exit codes"),
                "{command}: heading {line:?}"
            );
        }
    }
}

#[test]
fn the_man_page_of_kill_carries_the_headings_and_examples() {
    let d = tempfile::tempdir().unwrap();
    Gpufree::new(["man", "--dir", d.path().to_str().unwrap()])
        .run()
        .assert_exit(0);
    let page = std::fs::read_to_string(d.path().join("gpufree-kill.1")).unwrap();
    for section in ["WHAT TO LOOK AT", "WHAT TO DO", "TIMING", "WHERE TO LOOK"] {
        assert!(page.contains(section), "{section}:\n{page}");
    }
    assert!(page.contains("Exit codes:") && page.contains("Examples:"));
    let sim = std::fs::read_to_string(d.path().join("gpufree-sim-lib.1")).unwrap();
    assert!(!sim.contains("scan"), "{sim}");
}

/// Every flag SPEC.md names is a visible flag of some command; flags of
/// other programs it quotes are listed here.
#[test]
fn every_flag_the_spec_names_is_a_visible_flag() {
    let others = ["--gpu-reset", "--release"];
    let spec =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/SPEC.md")).unwrap();
    let mut cmd = Cli::command();
    cmd.build();
    let mut visible = std::collections::BTreeSet::new();
    let mut stack = vec![cmd];
    while let Some(c) = stack.pop() {
        for a in c.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = a.get_long() {
                visible.insert(format!("--{long}"));
            }
        }
        stack.extend(c.get_subcommands().cloned());
    }
    let flags = regex::Regex::new(r"--[a-z][a-z-]*[a-z]").unwrap();
    let mut checked = 0;
    for m in flags.find_iter(&spec) {
        if others.contains(&m.as_str()) {
            continue;
        }
        assert!(visible.contains(m.as_str()), "SPEC names {}", m.as_str());
        checked += 1;
    }
    assert!(checked > 100, "only {checked} flags checked");
}

/// The documented spellings parse: global flags before and after the
/// command, the command's own after it.
#[test]
fn documented_spellings_parse_before_and_after_the_command() {
    for words in [
        "gpufree --gpu 0 why",
        "gpufree why --gpu 0 --scan procfs --read-timeout 2s",
        "gpufree --json --scan bpf --dev-dir /dev status",
        "gpufree status --from - --gpu 0",
        "gpufree check --format nagios --idle-window 1s --ignore idle",
        "gpufree kill --gpu 0 --dry-run --proc-root /proc --kubelet-socket /k.sock",
        "gpufree --nvml-lib /x.so kill --pid 1 --yes --signal INT --grace 1s",
        "gpufree wait --gpu 0 --max-used 512MiB --timeout 0 --interval 10ms",
        "gpufree -q --no-color -v serve --listen 127.0.0.1:0",
        "gpufree --gpu 0 sim lib",
        "gpufree --json doctor --unit x.service",
    ] {
        let cli = Cli::try_parse_from(words.split(' '));
        assert!(cli.is_ok(), "{words}: {}", cli.unwrap_err());
    }
    let cli = Cli::try_parse_from(["gpufree", "--gpu", "0", "why", "--gpu", "1"]).unwrap();
    assert!(matches!(cli.command, Some(Command::Why { .. })));
}
