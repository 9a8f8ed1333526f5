//! The pipeline runs one way: collection (`proc`, `snapshot`, `nvml`) →
//! diagnosis (`diagnose`, joined to collection by `pipeline`) → action
//! (`act`) → presentation (`present`).
//! This test reads every `crate::` path in the library's sources and fails
//! on an edge that runs the wrong way. Tests and the demo are outside it.

use std::path::{Path, PathBuf};

/// A room and the rooms (besides itself) it must never reach.
const FORBIDDEN: &[(&str, &[&str])] = &[
    // Presentation shows values; it neither collects nor acts.
    (
        "present",
        &["act", "proc", "nvml", "snapshot", "pipeline", "cli", "demo"],
    ),
    // The diagnosis is pure: the model and the leaf helpers only.
    (
        "diagnose",
        &[
            "act", "proc", "nvml", "snapshot", "pipeline", "present", "cli", "serve", "watch",
            "demo",
        ],
    ),
    // Collection never judges, acts, presents or runs commands: verdicts
    // and findings are made once, by the pipeline, after it.
    (
        "proc",
        &[
            "diagnose", "pipeline", "act", "present", "cli", "serve", "watch", "demo",
        ],
    ),
    (
        "snapshot",
        &[
            "diagnose", "pipeline", "act", "present", "cli", "serve", "watch", "demo",
        ],
    ),
    (
        "nvml",
        &[
            "diagnose", "pipeline", "act", "present", "cli", "serve", "watch", "demo", "proc",
            "snapshot",
        ],
    ),
    // The pipeline joins collection and diagnosis; it neither acts nor
    // presents.
    (
        "pipeline",
        &["act", "present", "cli", "serve", "watch", "demo"],
    ),
    // The model is plain values: it depends on no room.
    (
        "model",
        &[
            "act", "present", "cli", "serve", "watch", "demo", "proc", "snapshot", "nvml",
            "diagnose", "pipeline",
        ],
    ),
    // Action reports through values, never prints or runs commands.
    ("act", &["present", "cli", "serve", "watch", "demo"]),
];

/// The Rust files of `dir`, recursively, except test files.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(sources(&p));
        } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("tests.rs") {
            out.push(p);
        }
    }
    out
}

/// The room of a source file: its first path part under src/ (without .rs).
fn room(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The rooms named by `crate::ROOM` in `text`, outside `#[cfg(test)]`
/// modules and comments.
fn reached(text: &str) -> Vec<(usize, String)> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        let first = |s: &str| -> String {
            s.trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        };
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            match rest.strip_prefix('{') {
                // `crate::{a, b::c}`: each item's first segment.
                Some(group) => {
                    let group = group.split('}').next().unwrap_or("");
                    out.extend(group.split(',').map(|item| (n + 1, first(item))));
                }
                None => out.push((n + 1, first(rest))),
            }
        }
    }
    out
}

#[test]
fn the_pipeline_runs_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in sources(&src) {
        let from = room(&src, &file);
        let Some((_, banned)) = FORBIDDEN.iter().find(|(r, _)| *r == from) else {
            continue;
        };
        checked += 1;
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, to) in reached(&text) {
            if banned.contains(&to.as_str()) {
                wrong.push(format!(
                    "{}:{line}: {from} → {to}",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(checked > 20, "only {checked} files checked: is src/ there?");
    assert!(wrong.is_empty(), "wrong-way edges:\n{}", wrong.join("\n"));
}

/// The checker itself sees an edge in a use line, a path and a brace
/// group, and none in a comment or a test module.
#[test]
fn the_checker_sees_edges_and_skips_comments_and_tests() {
    let text = "use crate::act::kill;\nfn f() { crate::proc::scan(); } // crate::cli\nuse crate::{model, nvml};\n#[cfg(test)]\nmod tests { use crate::demo; }\n";
    let names: Vec<String> = reached(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["act", "proc", "model", "nvml"]);
}
