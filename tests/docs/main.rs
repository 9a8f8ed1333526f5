//! The docs' examples, run: every ```console block of README.md and the
//! guide is typed, command by command, into a bash in the repository's
//! root, with the built gpufree first on its PATH, and what each command
//! prints is compared with what the page shows (snapbox: `...` on a line
//! of its own stands for any lines, `[..]` for the rest of a line; PIDs,
//! temporary paths, durations and column widths are made alike on both
//! sides by `normalize`). Pages shown against the demo's incident run with
//! `gpufree demo --hold` holding it, in the environment the `gpufree sim
//! exec` line it prints gives. A block that cannot run here says so above
//! itself (`<!-- not tested: reason -->`), and
//! `every_block_with_commands_is_run_or_marked` holds every page to it.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.

#[path = "../common/env.rs"]
mod env;
mod markdown;
mod normalize;
#[path = "../common/scene.rs"]
mod scene;
mod session;

use markdown::{blocks, steps, Block, Marker};
use normalize::normalize;
use scene::Scene;
use session::Session;
use std::path::{Path, PathBuf};

/// Pages whose console blocks run against the demo's incident, each group
/// in order in one session and one incident.
const README: &[&str] = &["README.md"];
/// The guide's chapters shown against the incident, read in order:
/// chapter 2 frees GPU 3, chapter 3 waits for it.
const GUIDE: &[&str] = &[
    "docs/guide/01-diagnosing.md",
    "docs/guide/02-freeing.md",
    "docs/guide/03-waiting.md",
    "docs/guide/04-fleet.md",
];
/// The troubleshooting page: its one command shows a machine with no GPU.
const TROUBLESHOOTING: &str = "docs/guide/08-troubleshooting.md";
/// The try-it page: the reader's own processes on a simulated GPU.
const TRY_IT: &str = "docs/guide/try-it.md";
/// Pages whose console blocks run without the incident, each in a session
/// of its own.
const ON_THEIR_OWN: &[&str] = &[TROUBLESHOOTING, TRY_IT];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(page: &str) -> String {
    std::fs::read_to_string(root().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"))
}

/// The console blocks of `page` that run.
fn runnable(page: &str) -> Vec<Block> {
    blocks(&read(page))
        .into_iter()
        .filter(|b| b.info == "console" && !matches!(b.marker, Marker::NotTested(_)))
        .collect()
}

/// Runs the pages' console blocks in order in `session`; every drift, with
/// its page, line and diff.
fn run_pages(session: &mut Session, pages: &[&str]) {
    let mut drifts = Vec::new();
    let mut ran = 0;
    for page in pages {
        for block in runnable(page) {
            for step in steps(&block) {
                let (actual, rc) = session.run(&step.command);
                ran += 1;
                let checked = snapbox::Assert::new()
                    .action(snapbox::assert::Action::Verify)
                    .try_eq(
                        Some(&"gpufree"),
                        normalize(&actual).into(),
                        normalize::expected(&step.expected).into(),
                    );
                if let Err(e) = checked {
                    drifts.push(format!(
                        "{page}:{}: `{}` (exit {rc}) printed something else:\n{e}\nits output, whole:\n{actual}",
                        step.line, step.command
                    ));
                }
            }
        }
    }
    assert!(ran > 0, "no command ran from {pages:?}");
    assert!(
        drifts.is_empty(),
        "{} of {ran} commands drifted from the docs:\n\n{}",
        drifts.len(),
        drifts.join("\n\n")
    );
}

#[test]
fn readme_shows_what_gpufree_prints() {
    let scene = Scene::start();
    let mut session = Session::start(&scene.env());
    run_pages(&mut session, README);
}

#[test]
fn guide_chapters_in_order_show_what_gpufree_prints() {
    let scene = Scene::start();
    let mut session = Session::start(&scene.env());
    run_pages(&mut session, GUIDE);
}

/// Its one command shows a machine with no GPU: on one with NVIDIA
/// device nodes or library it would print that machine (and open its
/// real nodes through NVML), so there it is skipped, said on stderr.
#[test]
fn troubleshooting_no_gpu_output_is_what_gpufree_prints() {
    let nodes = std::fs::read_dir("/dev")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("nvidia"))
        })
        .unwrap_or(false);
    let library = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libnvidia-ml.so.1"));
    if nodes || library {
        eprintln!("skipped: this machine has NVIDIA device nodes or libnvidia-ml.so.1");
        return;
    }
    run_pages(&mut Session::start(&[]), &[TROUBLESHOOTING]);
}

#[test]
fn try_it_page_commands_print_what_it_shows() {
    run_pages(&mut Session::start(&[]), &[TRY_IT]);
}

/// README.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    let mut dirs = vec![PathBuf::from("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(root().join(&dir)).expect("docs/") {
            let name = dir.join(entry.expect("an entry").file_name());
            if root().join(&name).is_dir() {
                dirs.push(name);
            } else if name.extension().is_some_and(|e| e == "md") {
                out.push(name);
            }
        }
    }
    out.sort();
    out
}

/// Every block that shows a `$ ` command is a ```console block of a page
/// these tests run, or says above itself why it is not run.
#[test]
fn every_block_with_commands_is_run_or_marked() {
    let run: Vec<&str> = [README, GUIDE, ON_THEIR_OWN].concat();
    let mut wrong = Vec::new();
    let (mut tested, mut marked) = (0, 0);
    for page in pages() {
        let name = page.display().to_string();
        for b in blocks(&read(&name)) {
            let console = b.info == "console";
            match &b.marker {
                Marker::NotTested(reason) if !reason.is_empty() => marked += 1,
                Marker::ExcerptOf(_) => marked += 1,
                _ if console && run.contains(&name.as_str()) => tested += 1,
                _ if console || b.shows_commands() => wrong.push(format!("{name}:{}", b.line)),
                _ => {}
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "blocks showing commands that no test runs; make them ```console on a page tests/docs runs, \
         or put `<!-- not tested: reason -->` above them: {wrong:?}"
    );
    assert!(tested >= 10, "{tested} console blocks run, {marked} marked");
}

/// The state file the try-it page shows is docs/examples/state.json, and
/// valid JSON (SPEC's example carries comments).
#[test]
fn try_it_shows_the_example_state_file_whole() {
    let file = read("docs/examples/state.json");
    serde_json::from_str::<serde_json::Value>(&file).expect("docs/examples/state.json is JSON");
    let page = blocks(&read(TRY_IT));
    let shown = page
        .iter()
        .find(|b| b.info == "json")
        .expect("try-it.md shows the state file");
    assert_eq!(shown.body.join("\n") + "\n", file);
}

/// A block marked as an excerpt of a shipped file (the systemd drop-in)
/// shows only lines that file has, comments aside.
#[test]
fn every_excerpt_is_lines_of_its_file() {
    let mut seen = 0;
    for page in pages() {
        let name = page.display().to_string();
        for b in blocks(&read(&name)) {
            let Marker::ExcerptOf(path) = &b.marker else {
                continue;
            };
            let file = read(path);
            let lines: Vec<&str> = file.lines().map(str::trim).collect();
            for l in b.body.iter().map(|l| l.trim()) {
                if !l.is_empty() && !l.starts_with('#') {
                    assert!(
                        lines.contains(&l),
                        "{name}:{}: `{l}` is not a line of {path}",
                        b.line
                    );
                }
            }
            seen += 1;
        }
    }
    assert!(seen > 0, "no excerpt checked");
}
