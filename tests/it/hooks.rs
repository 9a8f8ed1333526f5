//! The test hooks (src/test_hooks/) live in one feature-gated file, and
//! the binary under test has them: a test that sets a hook's variable asks
//! [`hook`] for its name, so that a binary built without the `test-hooks`
//! feature fails that test loudly instead of letting it pass on a run the
//! hook never steered.

use super::architecture::sources;
use super::cmd::{hook, hook_names as names, HOOKS_GATED as GATED, HOOK_PREFIX as PREFIX};
use std::path::Path;

/// `path: line` for each line of a non-test Rust file under `root` that
/// names a hook's variable, paths relative to `top`, outside `allowed`.
fn named_outside(top: &Path, root: &Path, allowed: &Path) -> Vec<String> {
    let mut found: Vec<String> = sources(root)
        .iter()
        .filter(|f| f.as_path() != allowed)
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let rel = f.strip_prefix(top).unwrap().display().to_string();
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.contains(PREFIX))
                .map(|(i, _)| format!("{rel}:{}", i + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    found.sort();
    found
}

/// No non-test source but the gated file names a hook's variable (code or
/// comment), and that file is a module only with the feature: a build
/// without it holds none of their names.
#[test]
fn only_the_feature_gated_module_names_the_test_hooks() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let gated = top.join(GATED);
    let mut outside = Vec::new();
    for dir in ["src", "sim/src"] {
        outside.extend(named_outside(top, &top.join(dir), &gated));
    }
    assert!(
        outside.is_empty(),
        "{PREFIX}* named outside {GATED} (which only a build with the \
         test-hooks feature compiles):\n{}",
        outside.join("\n")
    );
    assert!(std::fs::read_to_string(&gated).unwrap().contains(PREFIX));
    let facade = std::fs::read_to_string(top.join("src/test_hooks/mod.rs")).unwrap();
    assert!(
        facade.contains("#[cfg(feature = \"test-hooks\")]\nmod on;"),
        "src/test_hooks/mod.rs must build on.rs only with the feature"
    );
    let lib = std::fs::read_to_string(top.join("src/lib.rs")).unwrap();
    assert!(lib.contains("\npub mod test_hooks;\n"));
}

/// The check finds a name outside the gated file, in code or a comment,
/// and passes the gated file and test code.
#[test]
fn the_hook_check_flags_names_outside_the_gated_file() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("hooks")).unwrap();
    std::fs::create_dir_all(root.join("a/tests")).unwrap();
    let named = format!("const X: &str = \"{PREFIX}X\";\n");
    std::fs::write(root.join("hooks/on.rs"), &named).unwrap();
    std::fs::write(root.join("a/tests.rs"), &named).unwrap();
    std::fs::write(root.join("a/tests/cases.rs"), &named).unwrap();
    std::fs::write(root.join("code.rs"), format!("fn f() {{}}\n{named}")).unwrap();
    std::fs::write(root.join("a/doc.rs"), format!("// {PREFIX}Y\n")).unwrap();
    let found = named_outside(root, root, &root.join("hooks/on.rs"));
    assert_eq!(found, ["a/doc.rs:1", "code.rs:2"]);
}

/// The binary the tests run has every hook the gated file names: cargo
/// test built it with the feature.
#[test]
fn the_binary_under_test_has_the_test_hooks() {
    let names = names();
    assert_eq!(names.len(), 9, "{names:?}");
    for name in &names {
        hook(name);
    }
}
