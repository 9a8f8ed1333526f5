//! The one rule of what `gpufree bundle` keeps of command lines and
//! environments ([`Keep`]): left out unless asked, in every document (the
//! snapshot, the audit records, a recording, unit files).

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
/// `argv`); `args` and `command_line` as SPEC.md promises.
const CMDLINE_KEYS: &[&str] = &["cmdline", "argv", "args", "command_line"];

/// The JSON keys whose values are environments; also the `value` of an
/// object whose `reason` is `preload` (a refusal of protection names the
/// variable's value).
const ENV_KEYS: &[&str] = &["environment", "env", "environ"];

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
/// the values of the command line keys and the environment keys (this
/// file's `CMDLINE_KEYS`, `ENV_KEYS`) that `keep` does not keep, at any
/// depth: an array becomes empty, an object empty, anything
/// else an empty string. The keys stay, so a reader sees what was there.
pub fn redact_json(v: &mut serde_json::Value, keep: Keep) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let preload = map.get("reason").and_then(Value::as_str) == Some("preload");
            for (key, value) in map.iter_mut() {
                let gone = (!keep.cmdlines && CMDLINE_KEYS.contains(&key.as_str()))
                    || (!keep.env && ENV_KEYS.contains(&key.as_str()))
                    || (!keep.env && preload && key == "value");
                if gone {
                    *value = match value {
                        Value::Array(_) => Value::Array(Vec::new()),
                        Value::Object(_) => Value::Object(serde_json::Map::new()),
                        _ => Value::String(String::new()),
                    };
                } else {
                    redact_json(value, keep);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| redact_json(i, keep)),
        _ => {}
    }
}

/// The unit file keys whose values are command lines (`ExecStart=` and
/// its kin) or environments (`Environment=`, `PassEnvironment=` names
/// only, kept; `EnvironmentFile=` is a path, kept).
fn unit_key_gone(key: &str, keep: Keep) -> bool {
    (!keep.cmdlines && key.starts_with("Exec")) || (!keep.env && key == "Environment")
}

/// A unit file's text without the values `keep` does not keep: each
/// `Exec*=` and `Environment=` line keeps its key, its value replaced by
/// `mark` (the words' `LEFT_OUT_MARK`); a line continued with a backslash
/// is removed with it.
pub fn redact_unit(text: &str, keep: Keep, mark: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut continued = false;
    for line in text.lines() {
        if continued {
            continued = line.trim_end().ends_with('\\');
            continue;
        }
        let key = line.split_once('=').map(|(k, _)| k.trim());
        match key.filter(|k| unit_key_gone(k, keep)) {
            Some(k) => {
                out.push_str(k);
                out.push('=');
                out.push_str(mark);
                out.push('\n');
                continued = line.trim_end().ends_with('\\');
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{redact_json, redact_unit, Keep};
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
    fn redact_unit_keeps_the_keys_and_drops_continued_lines() {
        let text = "[Service]\nExecStart=/bin/x \\\n  --key=S\nEnvironment=K=S\nRestart=always\n";
        let out = redact_unit(text, Keep::default(), "(left out)");
        assert_eq!(
            out,
            "[Service]\nExecStart=(left out)\nEnvironment=(left out)\nRestart=always\n"
        );
        let kept = Keep {
            cmdlines: true,
            env: true,
        };
        assert_eq!(redact_unit(text, kept, "(left out)"), text);
    }
}
