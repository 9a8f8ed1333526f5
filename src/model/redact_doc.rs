//! [`crate::model::Snapshot::redact`] on a snapshot document as JSON, and on a
//! recording's patch of one, by the paths of the fields it clears: a
//! bundle's copy of a recording is redacted line by line, in time linear in
//! its bytes, and still replays. A test keeps the paths and the method in
//! step.

use super::patch::Patch;
use super::redact::Keep;
use serde_json::Value;

/// One step of a path into a snapshot document.
#[derive(Debug, Clone, Copy)]
enum Step<'a> {
    /// A field.
    Key(&'a str),
    /// An item of an array, or an entry of a map keyed by PID.
    Item,
}

/// What a path holds, where it holds something `keep` may leave out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// A command line.
    Cmdline,
    /// An environment, or a variable's value a refusal of protection read.
    Env,
}

/// The fields [`crate::model::Snapshot::redact`] clears, by their path in the document.
fn held(path: &[Step<'_>]) -> Option<Held> {
    use Step::{Item, Key};
    match path {
        [Key("processes" | "others"), Item, Key("cmdline")] => Some(Held::Cmdline),
        [Key("parents"), Item, Key("cmdline")] => Some(Held::Cmdline),
        [Key("processes"), Item, Key("environment")] => Some(Held::Env),
        [Key("processes"), Item, Key("not_protected"), Key("value")] => Some(Held::Env),
        _ => None,
    }
}

/// Whether `keep` leaves out what `path` holds.
fn left_out(path: &[Step<'_>], keep: Keep) -> bool {
    match held(path) {
        Some(Held::Cmdline) => !keep.cmdlines,
        Some(Held::Env) => !keep.env,
        None => false,
    }
}

/// An empty value of `v`'s kind.
fn emptied(v: &Value) -> Value {
    match v {
        Value::Array(_) => Value::Array(Vec::new()),
        Value::Object(_) => Value::Object(serde_json::Map::new()),
        _ => Value::String(String::new()),
    }
}

/// A snapshot document (`status --json`'s, a recording's full snapshot)
/// with what `keep` does not keep cleared, as [`crate::model::Snapshot::redact`] clears
/// it (its findings aside: a recording's document has none).
pub fn redact_document(doc: &mut Value, keep: Keep) {
    value(doc, &mut Vec::new(), keep);
}

/// A recording's patch of a snapshot document with what `keep` does not
/// keep cleared, wherever it sets or changes it.
pub fn redact_patch(p: &mut Patch, keep: Keep) {
    patch(p, &mut Vec::new(), keep);
}

/// The step to the entry `k` of the object at `path`: the entries of
/// `parents` are keyed by PID (an item each), every other object's by
/// field name.
fn field<'a>(path: &[Step<'a>], k: &'a str) -> Step<'a> {
    if matches!(path, [Step::Key("parents")]) {
        Step::Item
    } else {
        Step::Key(k)
    }
}

fn value<'a>(v: &'a mut Value, path: &mut Vec<Step<'a>>, keep: Keep) {
    if left_out(path, keep) {
        *v = emptied(v);
        return;
    }
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                path.push(field(path, k));
                value(child, path, keep);
                path.pop();
            }
        }
        Value::Array(items) => {
            for child in items {
                path.push(Step::Item);
                value(child, path, keep);
                path.pop();
            }
        }
        _ => {}
    }
}

fn patch<'a>(p: &'a mut Patch, path: &mut Vec<Step<'a>>, keep: Keep) {
    if left_out(path, keep) {
        *p = match p {
            Patch::Set(v) => Patch::Set(emptied(v)),
            // A change inside the field: the field is set empty instead.
            Patch::Array { .. } => Patch::Set(Value::Array(Vec::new())),
            Patch::Object { .. } => Patch::Set(Value::Object(serde_json::Map::new())),
        };
        return;
    }
    match p {
        Patch::Set(v) => value(v, path, keep),
        Patch::Object { fields, .. } => {
            for (k, child) in fields.iter_mut() {
                path.push(field(path, k));
                patch(child, path, keep);
                path.pop();
            }
        }
        Patch::Array { items, .. } => {
            for (_, child) in items {
                path.push(Step::Item);
                patch(child, path, keep);
                path.pop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{redact_document, redact_patch};
    use crate::model::{diff_json, Keep, Kin, NotProtected, Process, Snapshot};

    /// A snapshot with every field `Snapshot::redact` clears set.
    fn secret_snapshot() -> Snapshot {
        let p = Process {
            pid: 7,
            ppid: 1,
            cmdline: vec!["python".into(), "--api-key=SECRET".into()],
            environment: [("TOKEN".to_string(), "SECRET".to_string())].into(),
            not_protected: Some(NotProtected::Preload {
                variable: "LD_PRELOAD".into(),
                value: "/tmp/SECRET.so".into(),
            }),
            ..Process::default()
        };
        let mut s = Snapshot {
            processes: vec![p],
            others: vec![crate::model::Brief {
                pid: 9,
                cmdline: vec!["other".into(), "SECRET".into()],
                ..Default::default()
            }],
            ..Snapshot::default()
        };
        s.parents.insert(
            1,
            Kin {
                cmdline: vec!["launcher".into(), "SECRET".into()],
                ..Kin::default()
            },
        );
        s
    }

    fn doc(s: &Snapshot) -> serde_json::Value {
        crate::present::from::recorded_document(s).unwrap()
    }

    /// What a reader makes of document `d`, as JSON again.
    fn back(d: &serde_json::Value) -> serde_json::Value {
        let s: Snapshot = serde_json::from_value(d.clone()).unwrap();
        doc(&s)
    }

    /// The paths clear what the method clears, for each choice of keep:
    /// the document redacted as JSON is the document of the snapshot
    /// redacted, and a patch that sets every field redacts the same.
    #[test]
    fn the_paths_clear_what_snapshot_redact_clears() {
        for (cmdlines, env) in [(false, false), (true, false), (false, true), (true, true)] {
            let keep = Keep { cmdlines, env };
            let s = secret_snapshot();
            let mut by_method = s.clone();
            by_method.redact(keep);
            let mut by_path = doc(&s);
            redact_document(&mut by_path, keep);
            // Read back alike (an environment emptied is written as none).
            assert_eq!(back(&by_path), back(&doc(&by_method)), "{keep:?}");
            assert!(by_path.to_string().contains("launcher") == cmdlines);
            // A patch from a document without them to one with them.
            let mut p = diff_json(&doc(&Snapshot::default()), &doc(&s)).unwrap();
            redact_patch(&mut p, keep);
            let mut applied = doc(&Snapshot::default());
            crate::model::apply_patch(&mut applied, &p).unwrap();
            assert_eq!(back(&applied), back(&doc(&by_method)), "{keep:?}");
            let leaks = !cmdlines && !env && applied.to_string().contains("SECRET");
            assert!(!leaks, "{applied}");
        }
    }

    /// A patch that changes a command line item by item is set empty.
    #[test]
    fn a_command_line_changed_inside_is_set_empty() {
        let mut was = secret_snapshot();
        was.processes[0].cmdline = vec!["python".into(), "a".into()];
        let now = secret_snapshot();
        let mut p = diff_json(&doc(&was), &doc(&now)).unwrap();
        redact_patch(&mut p, Keep::default());
        assert!(!serde_json::to_string(&p).unwrap().contains("SECRET"));
        let mut applied = doc(&was);
        crate::model::apply_patch(&mut applied, &p).unwrap();
        assert_eq!(applied["processes"][0]["cmdline"], serde_json::json!([]));
    }
}
