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
        &[
            "act", "proc", "nvml", "kubelet", "snapshot", "pipeline", "cli", "demo", "fleet",
            "record",
        ],
    ),
    // The diagnosis is pure: the model and the leaf helpers only.
    (
        "diagnose",
        &[
            "act", "proc", "nvml", "kubelet", "snapshot", "pipeline", "present", "cli", "serve",
            "watch", "demo", "record",
        ],
    ),
    // Collection never judges, acts, presents or runs commands: verdicts
    // and findings are made once, by the pipeline, after it.
    // The /proc scan stands alone: the snapshot joins it to NVML, not it.
    (
        "proc",
        &[
            "diagnose", "pipeline", "act", "present", "cli", "serve", "watch", "demo", "snapshot",
            "nvml", "record",
        ],
    ),
    (
        "snapshot",
        &[
            "diagnose", "pipeline", "act", "present", "cli", "serve", "watch", "demo", "record",
        ],
    ),
    (
        "nvml",
        &[
            "diagnose", "pipeline", "act", "present", "cli", "serve", "watch", "demo", "proc",
            "snapshot", "record",
        ],
    ),
    (
        "sysfs",
        &[
            "diagnose", "pipeline", "act", "present", "cli", "serve", "watch", "demo", "proc",
            "nvml", "snapshot", "record",
        ],
    ),
    (
        "kubelet",
        &[
            "diagnose", "pipeline", "act", "present", "cli", "serve", "watch", "demo", "proc",
            "nvml", "sysfs", "snapshot", "record",
        ],
    ),
    // The fleet view reads Prometheus, not this host: it neither collects,
    // judges a snapshot, acts nor presents.
    (
        "fleet",
        &[
            "diagnose", "pipeline", "act", "present", "cli", "serve", "watch", "demo", "proc",
            "nvml", "sysfs", "kubelet", "snapshot", "record",
        ],
    ),
    // The pipeline joins collection and diagnosis; it neither acts nor
    // presents.
    (
        "pipeline",
        &["act", "present", "cli", "serve", "watch", "demo", "record"],
    ),
    // The model is plain values: it depends on no room.
    (
        "model",
        &[
            "act", "present", "cli", "serve", "watch", "demo", "proc", "snapshot", "nvml", "sysfs",
            "kubelet", "diagnose", "pipeline", "fleet", "record",
        ],
    ),
    // Action reports through values, never prints or runs commands.
    (
        "act",
        &["present", "cli", "serve", "watch", "demo", "record"],
    ),
    // The live views (watch's terminal UI, serve's metrics endpoint) are
    // started by the command line, never reach back into it or the demo.
    ("watch", &["cli", "demo", "record", "serve"]),
    ("serve", &["cli", "demo", "record", "watch"]),
    // So is the recorder.
    ("record", &["cli", "demo", "serve", "watch"]),
    // The doctor reads a systemd unit file: it needs no snapshot, no
    // pipeline, no action, no presenter and no live view.
    (
        "doctor",
        &[
            "act", "present", "snapshot", "pipeline", "watch", "serve", "demo", "record",
        ],
    ),
];

/// The Rust files under `root`, recursively, except test code: files named
/// `tests.rs` and everything under a `tests/` directory inside `root`.
pub fn sources(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            if !p.ends_with("tests") {
                out.extend(sources(&p));
            }
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

/// What a byte of Rust source is part of.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Code,
    /// `// ...` to the end of the line (doc comments too), or `/* ... */`.
    Comment,
    /// A string, raw string or char literal, quotes included.
    Literal,
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Where the literal or comment starting at `b[i]` ends (one past it), or
/// `None` when `b[i]` starts neither.
fn skip(text: &str, i: usize) -> Option<(usize, Kind)> {
    let b = text.as_bytes();
    let at = |k: usize| b.get(k).copied();
    let find = |from: usize, what: &[u8]| {
        (from..b.len())
            .find(|&k| b[k..].starts_with(what))
            .map_or(b.len(), |k| k + what.len())
    };
    match b[i] {
        b'/' if at(i + 1) == Some(b'/') => {
            let end = b[i..].iter().position(|&c| c == b'\n');
            Some((end.map_or(b.len(), |k| i + k), Kind::Comment))
        }
        b'/' if at(i + 1) == Some(b'*') => {
            let (mut depth, mut k) = (0, i);
            while k < b.len() {
                if b[k..].starts_with(b"/*") {
                    depth += 1;
                    k += 2;
                } else if b[k..].starts_with(b"*/") {
                    depth -= 1;
                    k += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    k += 1;
                }
            }
            Some((k.min(b.len()), Kind::Comment))
        }
        b'"' => {
            let mut k = i + 1;
            while k < b.len() && b[k] != b'"' {
                k += if b[k] == b'\\' { 2 } else { 1 };
            }
            Some(((k + 1).min(b.len()), Kind::Literal))
        }
        // r"...", r#"..."#, br"...", cr"...": not the end of an identifier.
        b'r' => {
            let word = b[..i].iter().rev().take_while(|&&c| is_ident(c)).count();
            if !(word == 0 || (word == 1 && matches!(b[i - 1], b'b' | b'c'))) {
                return None;
            }
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if at(i + 1 + hashes) != Some(b'"') {
                return None;
            }
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            Some((find(i + 2 + hashes, &close), Kind::Literal))
        }
        // '\n', '\'', '\u{..}', 'x' are literals; 'a in `&'a T` is a lifetime.
        b'\'' if at(i + 1) == Some(b'\\') => Some((find(i + 3, b"'"), Kind::Literal)),
        b'\'' => {
            let c = text[i + 1..].chars().next()?;
            let end = i + 1 + c.len_utf8();
            (at(end) == Some(b'\'')).then_some((end + 1, Kind::Literal))
        }
        _ => None,
    }
}

/// The kind of every byte of `text`.
fn kinds(text: &str) -> Vec<Kind> {
    let b = text.as_bytes();
    let mut out = vec![Kind::Code; b.len()];
    let mut i = 0;
    while i < b.len() {
        match skip(text, i) {
            Some((end, kind)) => {
                out[i..end].fill(kind);
                i = end;
            }
            None => i += 1,
        }
    }
    out
}

/// One past the end of the item that starts at `from`: its first `;` (outside
/// brackets) or the brace-balanced block of its first `{`, whichever comes
/// first. Only code bytes count.
fn item_end(b: &[u8], kind: &[Kind], from: usize) -> usize {
    let (mut brackets, mut braces) = (0usize, 0usize);
    for k in from..b.len() {
        if kind[k] != Kind::Code {
            continue;
        }
        match b[k] {
            b'(' | b'[' => brackets += 1,
            b')' | b']' => brackets = brackets.saturating_sub(1),
            b';' if brackets == 0 && braces == 0 => return k + 1,
            b'{' => braces += 1,
            b'}' if braces > 0 => {
                braces -= 1;
                if braces == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    b.len()
}

/// `text` with its comments and the items under `#[cfg(test)]` blanked
/// (newlines kept, so line numbers hold). String literals stay.
fn code_of(text: &str) -> String {
    const TEST: &str = "#[cfg(test)]";
    fn blank(b: &mut [u8], from: usize, to: usize) {
        for c in &mut b[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    }
    let kind = kinds(text);
    let mut b = text.as_bytes().to_vec();
    let mut from = 0;
    while let Some(i) = text[from..].find(TEST).map(|i| from + i) {
        from = i + TEST.len();
        if kind[i] == Kind::Code {
            let end = item_end(text.as_bytes(), &kind, from);
            blank(&mut b, i, end);
            from = end;
        }
    }
    for (i, k) in kind.iter().enumerate() {
        if *k == Kind::Comment {
            blank(&mut b, i, i + 1);
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// The top-level items of a `{a, b::{c, d}, e}` group, given what follows
/// its opening brace.
fn group_items(group: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

/// The rooms named by `crate::ROOM` in `text`, with their line numbers,
/// outside comments and the items marked `#[cfg(test)]`.
fn reached(text: &str) -> Vec<(usize, String)> {
    let code = code_of(text);
    let first = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find("crate::").map(|i| from + i) {
        from = i + "crate::".len();
        if code[..i].bytes().next_back().is_some_and(is_ident) {
            continue; // `my_crate::`, not ours.
        }
        let line = code[..i].matches('\n').count() + 1;
        let rest = &code[from..];
        let names = match rest.strip_prefix('{') {
            // `crate::{a, b::c}`: each item's first segment.
            Some(group) => group_items(group).into_iter().map(first).collect(),
            None => vec![first(rest)],
        };
        out.extend(
            names
                .into_iter()
                .filter(|n| !n.is_empty())
                .map(|n| (line, n)),
        );
    }
    out
}

/// The edges from a file of room `from` with this `text` that its row of
/// `FORBIDDEN` bans.
fn wrong_edges(from: &str, text: &str) -> Vec<(usize, String)> {
    let Some((_, banned)) = FORBIDDEN.iter().find(|(r, _)| *r == from) else {
        return Vec::new();
    };
    reached(text)
        .into_iter()
        .filter(|(_, to)| banned.contains(&to.as_str()))
        .collect()
}

#[test]
fn the_pipeline_runs_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in sources(&src) {
        let from = room(&src, &file);
        if !FORBIDDEN.iter().any(|(r, _)| *r == from) {
            continue;
        }
        checked += 1;
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, to) in wrong_edges(&from, &text) {
            wrong.push(format!(
                "{}:{line}: {from} → {to}",
                file.strip_prefix(&src).unwrap().display()
            ));
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

/// `#[cfg(test)]` hides only the item it marks: a `mod tests;` line or a
/// braced block. What follows either is checked, on its own line number.
#[test]
fn the_checker_skips_only_the_test_item() {
    let text = "#[cfg(test)]\nmod tests;\nuse crate::nvml::Nvml;\n";
    assert_eq!(reached(text), [(3, "nvml".to_string())]);

    let text = "use crate::model;\n#[cfg(test)]\nmod tests {\n    fn f() { if x { crate::demo::run(); } }\n    const S: &str = \"}\";\n}\nfn g() { crate::cli::main(); }\n";
    assert_eq!(
        reached(text),
        [(1, "model".to_string()), (7, "cli".to_string())]
    );

    // A test-only import or function; brackets hold no item end.
    let text = "#[cfg(test)]\nuse crate::demo;\n#[cfg(test)]\nfn f(a: [u8; 2]) { crate::cli::x(); }\ncrate::act::y();\n";
    assert_eq!(reached(text), [(5, "act".to_string())]);

    // The attribute in a comment or a string marks nothing.
    let text = "// #[cfg(test)]\nuse crate::proc;\nlet s = \"#[cfg(test)]\"; crate::watch::x();\n";
    let names: Vec<String> = reached(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["proc", "watch"]);
}

/// Only comments are cut: a `//` inside a string literal (a URL) or a
/// char literal holding a quote leaves the rest of the line checked.
#[test]
fn the_checker_cuts_comments_not_strings() {
    let text = "let u = \"http://localhost\"; crate::cli::run(); // crate::demo\n";
    assert_eq!(reached(text), [(1, "cli".to_string())]);

    let text = "if c == '\"' { crate::act::f() } // \"crate::demo\nlet r = r#\"a // \"b\"#; crate::proc::g(); /* crate::nvml */ crate::present::h();\nfn f<'a>(x: &'a str) { crate::snapshot::s(); } /// crate::demo\n";
    let names: Vec<String> = reached(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["act", "proc", "present", "snapshot"]);

    // A group written over several lines, nested groups, and an escaped
    // quote in a string.
    let text = "let s = \"\\\" // \"; use crate::{\n    model::{Gpu, Holder},\n    pipeline,\n};\nuse my_crate::demo;\n";
    assert_eq!(
        reached(text),
        [(1, "model".to_string()), (1, "pipeline".to_string())]
    );
}

/// The rows added for the live views, the doctor and the /proc scan catch
/// an edge the wrong way, and leave the allowed ones alone.
#[test]
fn the_new_rows_catch_wrong_way_edges() {
    let wrong = [
        ("proc", "snapshot"),
        ("proc", "nvml"),
        ("watch", "cli"),
        ("watch", "demo"),
        ("serve", "cli"),
        ("serve", "demo"),
        ("doctor", "act"),
        ("doctor", "present"),
        ("doctor", "snapshot"),
        ("doctor", "pipeline"),
        ("doctor", "watch"),
        ("doctor", "serve"),
        ("doctor", "demo"),
        ("fleet", "present"),
        ("fleet", "snapshot"),
        ("present", "fleet"),
    ];
    for (from, to) in wrong {
        let text = format!("use crate::model;\nuse crate::{to}::X;\n");
        assert_eq!(
            wrong_edges(from, &text),
            [(2, to.to_string())],
            "{from} → {to}"
        );
    }
    for (from, to) in [
        ("watch", "snapshot"),
        ("serve", "snapshot"),
        ("proc", "model"),
    ] {
        let text = format!("use crate::{to}::X;\n");
        assert_eq!(wrong_edges(from, &text), [], "{from} → {to} is allowed");
    }
}

/// Where each (non-test) line of `src/` that contains one of `needles`
/// is, as `path:line`, outside comments and the files `allowed` names.
fn lines_with(needles: &[&str], allowed: &[&str]) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in sources(&src) {
        let rel = file.strip_prefix(&src).unwrap().display().to_string();
        if allowed.iter().any(|a| rel.starts_with(a)) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        for (i, line) in code.lines().enumerate() {
            if needles.iter().any(|n| line.contains(n)) {
                found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    found
}

/// Colour is decided in one place: the command's `present::Printer`
/// paints and makes the guard on every output (`Printer::guard`); no
/// command makes a guard with a colour flag of its own.
#[test]
fn only_the_printer_makes_a_guard() {
    let found = lines_with(&["Guard::new"], &["safe/guard.rs", "present/printer.rs"]);
    assert!(
        found.is_empty(),
        "guards made outside the printer:\n{}",
        found.join("\n")
    );
}

/// The command line chooses and calls; the documents it prints are
/// written in `present/` (serde types and `write_json` there).
#[test]
fn the_command_line_writes_no_document_itself() {
    let needles = ["write_json", "Serialize", "serde_json::to_writer"];
    let in_cli: Vec<String> = lines_with(&needles, &[])
        .into_iter()
        .filter(|l| l.starts_with("cli/"))
        .collect();
    assert!(
        in_cli.is_empty(),
        "documents written in cli/:\n{}",
        in_cli.join("\n")
    );
}

/// Modules with children of their own, in `dir`: each `foo/mod.rs`, never a
/// `foo.rs` beside a `foo/` (one layout convention, so a module's children
/// are where its file is).
fn split_modules(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.with_extension("rs").is_file() {
                found.push(path.with_extension("rs").display().to_string());
            }
            found.extend(split_modules(&path));
        }
    }
    found.sort();
    found
}

#[test]
fn a_module_with_children_is_a_directory_with_its_mod_rs() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let split: Vec<String> = ["src", "sim/src", "tests"]
        .iter()
        .flat_map(|d| split_modules(&top.join(d)))
        .collect();
    assert!(
        split.is_empty(),
        "move each to its directory's mod.rs:\n{}",
        split.join("\n")
    );
}

#[test]
fn the_layout_check_finds_a_file_beside_its_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::create_dir_all(root.join("c")).unwrap();
    std::fs::write(root.join("a/b.rs"), "").unwrap();
    std::fs::write(root.join("c/mod.rs"), "").unwrap();
    let found = split_modules(root);
    assert_eq!(found, [root.join("a/b.rs").display().to_string()]);
}

/// The code map's rows (docs/ARCHITECTURE.md, "Code map"): the rooms each
/// row names in its first cell, and the rest of the row.
fn code_map(doc: &str) -> Vec<(Vec<String>, String)> {
    let tick = regex::Regex::new(r"`([^`]+)`").unwrap();
    let start = doc.find("## Code map").expect("a Code map section");
    doc[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| room"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            let rooms = tick
                .captures_iter(cells[1])
                .map(|c| c[1].to_string())
                .collect();
            (rooms, cells[2..].join("|"))
        })
        .collect()
}

/// What the code map gets wrong about `src`: an entry of `src` no row
/// names, a room no entry is, and a file or directory a row names
/// (`` `name.rs` ``, `` `dir/` ``) that is nowhere under `src`.
fn code_map_errors(doc: &str, src: &Path) -> Vec<String> {
    let rows = code_map(doc);
    let rooms: Vec<&String> = rows.iter().flat_map(|(r, _)| r).collect();
    let mut errors = Vec::new();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let room = if e.path().is_dir() {
            format!("{name}/")
        } else {
            name.clone()
        };
        if name != "lib.rs" && name != "main.rs" && !rooms.contains(&&room) {
            errors.push(format!("src/{room} is in no row of the code map"));
        }
    }
    for room in &rooms {
        if !src.join(room.trim_end_matches('/')).exists() {
            errors.push(format!("the code map's room {room} is not in src/"));
        }
    }
    let named = regex::Regex::new(r"`([a-z_/]+(?:\.rs|/))`").unwrap();
    let everything: Vec<String> = all_paths(src);
    for (_, rest) in &rows {
        for c in named.captures_iter(rest) {
            let path = c[1].trim_end_matches('/');
            if !everything.iter().any(|p| p.ends_with(&format!("/{path}"))) {
                errors.push(format!("the code map names {}, which src/ has not", &c[1]));
            }
        }
    }
    errors
}

/// Every file and directory under `dir`, as paths.
fn all_paths(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        out.push(p.display().to_string());
        if p.is_dir() {
            out.extend(all_paths(&p));
        }
    }
    out
}

#[test]
fn the_code_map_is_the_source_tree() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(top.join("docs/ARCHITECTURE.md")).unwrap();
    let errors = code_map_errors(&doc, &top.join("src"));
    assert!(
        errors.is_empty(),
        "docs/ARCHITECTURE.md:\n{}",
        errors.join("\n")
    );
}

#[test]
fn the_code_map_check_finds_what_is_missing_either_way() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path();
    std::fs::create_dir_all(src.join("model")).unwrap();
    std::fs::create_dir_all(src.join("extra")).unwrap();
    std::fs::write(src.join("model/gpu.rs"), "").unwrap();
    std::fs::write(src.join("lib.rs"), "").unwrap();
    let doc = "## Code map\n\n| room | its one job | must never reach |\n|---|---|---|\n\
               | `model/` | values (`gpu.rs`, `gone.rs`) | any |\n| `ghost/` | nothing | — |\n";
    assert_eq!(
        code_map_errors(doc, src),
        [
            "src/extra/ is in no row of the code map",
            "the code map's room ghost/ is not in src/",
            "the code map names gone.rs, which src/ has not",
        ]
    );
}

/// No source file outside tests begins its imports with `use super::*`:
/// each file names what it takes from its parent.
#[test]
fn no_source_file_imports_its_parent_whole() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found: Vec<String> = ["src", "sim/src"]
        .iter()
        .flat_map(|d| sources(&top.join(d)))
        .filter(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .any(|l| l == "use super::*;")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(found.is_empty(), "name the imports:\n{}", found.join("\n"));
}

/// A reason in the model is a value (`Reason`, `Target`, `Left`,
/// `Held`): its words are made in `present/words/`, so no model type
/// carries a `reason` or `reasons` in words. The audit record is the one
/// exception: it is the words a kill was logged with, filled by the
/// command that killed.
#[test]
fn the_model_keeps_reasons_as_values() {
    let needles = [
        "pub reason: String",
        "pub reasons: Vec<String>",
        "pub still_holding: Vec<String>",
    ];
    let in_model: Vec<String> = lines_with(&needles, &["model/audit.rs"])
        .into_iter()
        .filter(|l| l.starts_with("model/"))
        .collect();
    assert!(
        in_model.is_empty(),
        "reasons in words in model/:\n{}",
        in_model.join("\n")
    );
}

/// The `format!` calls of `code` whose literal is words for a person (two
/// lowercase words in a row, as a sentence has; not a path, a key or a
/// number's layout).
fn sentences(code: &str) -> usize {
    let call = regex::Regex::new(r#"format!\(\s*"((?:[^"\\]|\\.)*)""#).unwrap();
    let words = regex::Regex::new(r"[a-z]{2,} [a-z]{2,}").unwrap();
    call.captures_iter(code)
        .filter(|c| words.is_match(&c[1]))
        .count()
}

/// Text outside `present/` that the count takes for words but that is
/// no person's sentence, each with why: exactly these counts, so a new
/// sentence in one of these files still fails.
const NOT_WORDS: &[(&str, usize, &str)] = &[
    (
        "demo/mod.rs",
        1,
        "the demo's fake worker's command line, as vLLM's spawned workers show it in /proc",
    ),
    (
        "fleet/queries.rs",
        6,
        "PromQL the fleet view sends to Prometheus (`max by`, `min by`)",
    ),
    (
        "proc/owner/mod.rs",
        3,
        "owner names used as identity: kill --unit and watch's filter compare them, the audit record keeps them",
    ),
];

#[test]
fn sentences_are_made_in_present_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let made: Vec<String> = sources(&src)
        .iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&src).unwrap().display().to_string();
            let n = sentences(&code_of(&std::fs::read_to_string(f).unwrap()));
            (n > 0 && !rel.starts_with("present/")).then_some((rel, n))
        })
        .filter(|(f, n)| !NOT_WORDS.iter().any(|(e, m, _)| e == f && m == n))
        .map(|(f, n)| format!("{f}: {n}"))
        .collect();
    assert!(
        made.is_empty(),
        "sentences made outside present/: make the words in present/words/ \
         from a typed value (or, for text that is no person's sentence, \
         list it in NOT_WORDS with why):\n{}",
        made.join("\n")
    );
}

#[test]
fn the_sentence_count_sees_words_not_keys() {
    let code = "let a = format!(\"{} used that no process holds\", x);\n\
                let b = format!(\"{dir}/{name}\");\n\
                let c = format!(\n    \"GPU {g}: the driver has not released it\"\n);\n\
                let d = format!(\"gpufree_{}_bytes\", k);";
    assert_eq!(sentences(code), 2);
}
