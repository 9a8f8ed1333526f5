//! No source file over 400 lines: past that a file holds more than one job
//! (STYLE.md 1). Test code is exempt: files named `tests.rs` and everything
//! under a `tests/` directory inside a crate's src.

use super::architecture::sources;
use std::path::Path;

const MAX_LINES: usize = 400;

/// `path: N lines` for each non-test Rust file under `root` longer than
/// `MAX_LINES`, paths relative to `root`, sorted; and how many files were
/// looked at.
fn too_long(root: &Path) -> (Vec<String>, usize) {
    let files = sources(root);
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            let rel = f.strip_prefix(root).unwrap().display();
            (n > MAX_LINES).then(|| format!("{rel}: {n} lines"))
        })
        .collect();
    long.sort();
    (long, files.len())
}

#[test]
fn no_source_file_is_over_400_lines() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    for dir in ["src", "sim/src"] {
        let (found, checked) = too_long(&top.join(dir));
        assert!(
            checked > 5,
            "only {checked} files under {dir}: is it there?"
        );
        long.extend(found.into_iter().map(|f| format!("{dir}/{f}")));
    }
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines (split by job; tests.rs and tests/ are exempt):\n{}",
        long.join("\n")
    );
}

/// The check flags a file of 401 lines, passes one of 400, and exempts
/// `tests.rs` and files under a `tests/` directory, however long.
#[test]
fn the_size_check_flags_long_files_and_exempts_tests() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let lines = |n: usize| "x\n".repeat(n);
    std::fs::create_dir_all(root.join("a/tests")).unwrap();
    std::fs::write(root.join("ok.rs"), lines(MAX_LINES)).unwrap();
    std::fs::write(root.join("long.rs"), lines(MAX_LINES + 1)).unwrap();
    std::fs::write(root.join("a/deep.rs"), lines(900)).unwrap();
    std::fs::write(root.join("a/tests.rs"), lines(900)).unwrap();
    std::fs::write(root.join("a/tests/cases.rs"), lines(900)).unwrap();
    std::fs::write(root.join("notes.md"), lines(900)).unwrap();
    let (long, checked) = too_long(root);
    assert_eq!(long, ["a/deep.rs: 900 lines", "long.rs: 401 lines"]);
    assert_eq!(checked, 3, "ok.rs, long.rs and a/deep.rs");
}
