//! The one rule of what `gpufree bundle` keeps of command lines and
//! environments ([`Keep`]): left out unless asked, in every document (the
//! snapshot, the audit records, a recording; a unit file's in `redact_unit.rs`).

use super::Snapshot;
use serde::Serialize;

/// What a bundle keeps of what may hold secrets: each holder's command
/// line (`--api-key=...`) and environment. Both off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Keep {
    /// Command lines (`--with-cmdlines`).
    pub cmdlines: bool,
    /// Environments (`--with-env`).
    pub env: bool,
}

/// The JSON keys whose values are command lines, in every document the
/// bundle copies (a process's, a launcher's and another process's
/// `cmdline`, an audit target's `cmdline`, the audit record's invoker
/// `argv`); `args` and `command_line` as SPEC.md promises. Kept as they
/// are with `--with-cmdlines`.
const CMDLINE_KEYS: &[&str] = &["cmdline", "argv", "args", "command_line"];

/// The JSON keys whose values are environments. Kept as they are with
/// `--with-env`.
const ENV_KEYS: &[&str] = &["environment", "env", "environ", "sudo_user"];

/// The JSON keys whose string values are kept in a copied line (an audit
/// record, a recording's line) unless both command lines and
/// environments are kept: names, ids, uuids, paths of devices and
/// binaries, times and typed words (enums), none of which quotes a command
/// line or an environment (the bundle's own `status.json` keeps the same
/// values). Every other string, free text above all (a finding's
/// `details`, `message`, `next`, a verdict's `reasons`, an `error`), is
/// emptied; numbers, booleans and nulls are kept under any key.
const SAFE_STRING_KEYS: &[&str] = &[
    // A snapshot document's.
    "uuid",
    "name",
    "pci_bus_id",
    "vendor",
    "state",
    "kind",
    "comm",
    "exe",
    "user",
    "path",
    "via",
    "id",
    "cgroup",
    "source",
    "severity",
    "scan",
    "host",
    "dev_dir",
    "library",
    "driver_version",
    "wchan",
    "variable",
    // A recording's: its events, the fields a patch removed.
    "event",
    "removed",
    // An audit record's.
    "version",
    "time",
    "started",
    "command",
    "signal",
    "signals",
    "result",
    "outcome",
    "verdict",
    "tty",
];

/// The keys of a recording's patch and line that only wrap what is
/// below: a string under one of them is judged by the key above.
const WRAPPING_KEYS: &[&str] = &[
    "set", "object", "fields", "array", "items", "full", "change", "kill", "value",
];

impl Snapshot {
    /// Removes what `keep` does not keep: every process's, launcher's and
    /// other process's command line; every process's environment and the
    /// variable's value a refusal of protection read. The verdicts and
    /// findings are the caller's to make again (a finding made before
    /// carries the command line in its evidence).
    pub fn redact(&mut self, keep: Keep) {
        if !keep.cmdlines {
            for p in &mut self.processes {
                p.cmdline.clear();
            }
            for kin in self.parents.values_mut() {
                kin.cmdline.clear();
            }
            for other in &mut self.others {
                other.cmdline.clear();
            }
        }
        if !keep.env {
            for p in &mut self.processes {
                p.environment.clear();
                if let Some(super::NotProtected::Preload { value, .. }) = &mut p.not_protected {
                    value.clear();
                }
            }
        }
        self.findings.clear();
    }
}

/// Removes from a JSON document (an audit record, a line of a recording)
/// what `keep` does not keep, by an allowlist: a string is kept only
/// under a key of `SAFE_STRING_KEYS` (judged by the nearest key that is
/// not a number nor one of `WRAPPING_KEYS`, so a recording's patch of a
/// command line is judged as the command line), else emptied (an item of
/// an array removed); the values of `CMDLINE_KEYS` and `ENV_KEYS` are
/// emptied unless `keep` keeps them. With both kept the line stays as it
/// is (free text may quote either).
pub fn redact_json(v: &mut serde_json::Value, keep: Keep) {
    if !(keep.cmdlines && keep.env) {
        allow(v, "", keep);
    }
}

/// [`redact_json`] below the key `under`.
fn allow(v: &mut serde_json::Value, under: &str, keep: Keep) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                let k = key.as_str();
                let cmd = CMDLINE_KEYS.contains(&k);
                let env = ENV_KEYS.contains(&k);
                if (cmd && keep.cmdlines) || (env && keep.env) {
                    continue;
                }
                if cmd || env {
                    *value = empty(value);
                    continue;
                }
                let wraps = WRAPPING_KEYS.contains(&k) || k.bytes().all(|b| b.is_ascii_digit());
                allow(value, if wraps { under } else { k }, keep);
            }
        }
        Value::Array(items) => {
            let safe = SAFE_STRING_KEYS.contains(&under);
            items.retain(|i| safe || !i.is_string());
            items.iter_mut().for_each(|i| allow(i, under, keep));
        }
        Value::String(s) if !SAFE_STRING_KEYS.contains(&under) => s.clear(),
        _ => {}
    }
}

/// An empty value of `v`'s kind: an array empty, an object empty,
/// anything else an empty string.
fn empty(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Array(_) => Value::Array(Vec::new()),
        Value::Object(_) => Value::Object(serde_json::Map::new()),
        _ => Value::String(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::{redact_json, Keep};
    use crate::model::{Kin, Process, Snapshot};

    #[test]
    fn redact_clears_command_lines_and_environments_unless_kept() {
        let p = Process {
            cmdline: vec!["python".into(), "--api-key=SECRET".into()],
            environment: [("TORCHELASTIC_RUN_ID".to_string(), "S".to_string())].into(),
            ..Process::default()
        };
        let mut s = Snapshot {
            processes: vec![p.clone()],
            ..Snapshot::default()
        };
        s.parents.insert(
            1,
            Kin {
                cmdline: vec!["launcher".into()],
                ..Kin::default()
            },
        );
        let mut kept = s.clone();
        kept.redact(Keep {
            cmdlines: true,
            env: true,
        });
        assert_eq!(kept.processes[0], p);
        s.redact(Keep::default());
        assert!(s.processes[0].cmdline.is_empty());
        assert!(s.processes[0].environment.is_empty());
        assert!(s.parents[&1].cmdline.is_empty());
    }

    #[test]
    fn redact_json_empties_the_keys_at_any_depth() {
        let mut v = serde_json::json!({
            "invoker": {"argv": ["gpufree", "kill"]},
            "targets": [{"cmdline": ["x", "--key=S"], "comm": "w"}],
            "environment": {"A": "S"},
            "not_protected": {"reason": "preload", "variable": "LD_PRELOAD", "value": "/x.so"}
        });
        redact_json(&mut v, Keep::default());
        assert_eq!(v["invoker"]["argv"], serde_json::json!([]));
        assert_eq!(v["targets"][0]["cmdline"], serde_json::json!([]));
        assert_eq!(v["targets"][0]["comm"], "w");
        assert_eq!(v["environment"], serde_json::json!({}));
        assert_eq!(v["not_protected"]["value"], "");
        assert_eq!(v["not_protected"]["variable"], "LD_PRELOAD");
    }

    #[test]
    fn redact_json_keeps_only_allowed_strings_free_text_and_patches_included() {
        let mut v = serde_json::json!({
            "record": 1, "t": 5,
            "full": {"findings": [{"kind": "renamed-holders", "pids": [4242],
                "details": ["4242: cmdline 'x --api-key=S'"], "message": "S", "next": "S"}],
                "processes": [{"pid": 4242, "comm": "worker", "owner": {"name": "run-u1.service"}}]},
            "change": {"patch": {"object": {"fields": {
                "processes": {"array": {"items": [[0, {"object": {"fields": {
                    "cmdline": {"array": {"items": [[1, {"set": "--api-key=S"}]], "len": 2}},
                    "comm": {"set": "w2"}}}}]], "len": 1}},
                "findings": {"array": {"items": [[0, {"set": {"details": ["S"]}}]], "len": 1}}
            }}}}
        });
        redact_json(&mut v, Keep::default());
        let text = v.to_string();
        assert!(
            !text.contains("api-key") && !text.contains("\"S\""),
            "{text}"
        );
        assert_eq!(v["full"]["findings"][0]["kind"], "renamed-holders");
        assert_eq!(v["full"]["findings"][0]["pids"][0], 4242);
        assert_eq!(v["full"]["processes"][0]["owner"]["name"], "run-u1.service");
        assert!(text.contains("\"w2\""), "{text}");
        let mut kept = serde_json::json!({"details": ["x --api-key=S"]});
        let both = Keep {
            cmdlines: true,
            env: true,
        };
        redact_json(&mut kept, both);
        assert_eq!(kept["details"][0], "x --api-key=S");
    }
}
