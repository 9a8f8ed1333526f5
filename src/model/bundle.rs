//! `gpufree bundle`'s values: what goes into the archive for a bug report
//! or an incident review ([`Member`]), what was left out and why
//! ([`LeftOut`]), and the one rule of what a bundle keeps of command
//! lines and environments ([`Keep`]): left out unless asked, in every
//! document (the snapshot, the audit records, a recording, unit files).

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

/// What a file in the archive is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Content {
    /// The listing of the archive.
    Manifest,
    /// `status --json` (and `why --json`: the same document) of the
    /// collection.
    StatusJson,
    /// `why --json` of the collection (the same document as status's).
    WhyJson,
    /// `status` as a person reads it.
    StatusText,
    /// `why` as a person reads it.
    WhyText,
    /// gpufree's, the driver's and the kernel's versions.
    Versions,
    /// A file of the host as read (`/proc/version`,
    /// `/proc/driver/nvidia/version`).
    HostFile {
        /// Where it was read.
        source: String,
    },
    /// A holder's systemd unit file or drop-in.
    Unit {
        /// The unit.
        unit: String,
        /// Where it was read.
        source: String,
    },
    /// `gpufree doctor` of each unit file copied (as copied).
    Doctor,
    /// The audit records of the `--audit-log` file (its last lines).
    Audit {
        /// The file.
        source: String,
    },
    /// A recording's tail (`--recording`).
    Recording {
        /// The file.
        source: String,
    },
}

/// A version file of the host, under the proc root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionFile {
    /// The kernel's (`version`).
    Kernel,
    /// The NVIDIA driver's (`driver/nvidia/version`).
    NvidiaDriver,
}

impl VersionFile {
    /// Both, the kernel's first.
    pub const ALL: [VersionFile; 2] = [VersionFile::Kernel, VersionFile::NvidiaDriver];

    /// Its path below the proc root.
    pub fn rel(self) -> &'static str {
        match self {
            VersionFile::Kernel => "version",
            VersionFile::NvidiaDriver => "driver/nvidia/version",
        }
    }

    /// Its member's name in the archive.
    pub fn member(self) -> &'static str {
        match self {
            VersionFile::Kernel => "proc-version.txt",
            VersionFile::NvidiaDriver => "nvidia-driver-version.txt",
        }
    }
}

/// A file in the archive: its name under the archive's directory, what it
/// is, its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its path below the archive's directory.
    pub name: String,
    /// What it is.
    pub content: Content,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// What was cut from it: only its last `kept` bytes of `of` are here.
    pub cut: Option<Cut>,
}

/// A file of which only the tail was kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cut {
    /// The bytes kept.
    pub kept: u64,
    /// The file's size.
    pub of: u64,
}

/// Something a bundle does not contain, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    /// What it is.
    pub what: LeftItem,
    /// Why.
    pub why: LeftWhy,
}

/// What a bundle left out: a file, a unit, or a kind of value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "name", rename_all = "kebab-case")]
pub enum LeftItem {
    /// A file, by its path.
    Path(String),
    /// A unit, by its name.
    Unit(String),
    /// The command lines, in every document.
    Cmdlines,
    /// The environments, in every document.
    Environments,
    /// The audit records in the journal (or syslog).
    JournalRecords,
    /// The holders' unit files.
    UnitFiles,
    /// The records of an audit log file.
    AuditLog,
    /// A recording.
    Recording,
}

/// Why something is not in the bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum LeftWhy {
    /// Not asked for: command lines without `--with-cmdlines`,
    /// environments without `--with-env`, an audit log or a recording
    /// whose flag was not given.
    NotAsked,
    /// There is no such file.
    Missing,
    /// A symlink, not followed out of its directory.
    Symlink {
        /// Where it leads (as read, escaped when shown).
        target: String,
    },
    /// Not a regular file.
    NotRegular,
    /// Larger than a bundle takes of it.
    TooLarge {
        /// The most it takes.
        max: u64,
    },
    /// It could not be read.
    Unreadable {
        /// The error.
        error: String,
    },
    /// A line that is not JSON, which cannot be redacted.
    NotJson {
        /// How many lines.
        lines: u64,
    },
    /// Not read in secure mode (setuid, file capabilities).
    Secure,
    /// Not a unit name systemd accepts.
    BadUnitName,
    /// What a bundle never reads (the journal's records).
    NotRead,
    /// More units than a bundle reads.
    TooMany {
        /// The most it reads.
        max: usize,
    },
}

/// The listing's name in the archive.
pub const MANIFEST: &str = "MANIFEST";

/// A bundle: its members and what it left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bundle {
    /// The files, in the archive's order (the manifest first once
    /// [`Bundle::with_manifest`] put it there).
    pub members: Vec<Member>,
    /// What it does not contain.
    pub left_out: Vec<LeftOut>,
}

impl Bundle {
    /// Adds a file.
    pub fn add(&mut self, name: impl Into<String>, content: Content, bytes: Vec<u8>) {
        self.add_tail(name, content, bytes, None);
    }

    /// Adds a file of which only the tail may have been kept (`cut`).
    pub fn add_tail(
        &mut self,
        name: impl Into<String>,
        content: Content,
        bytes: Vec<u8>,
        cut: Option<Cut>,
    ) {
        self.members.push(Member {
            name: name.into(),
            content,
            bytes,
            cut,
        });
    }

    /// The bundle with its listing (`bytes`, made from the members
    /// before) first, as [`MANIFEST`].
    pub fn with_manifest(mut self, bytes: Vec<u8>) -> Bundle {
        let manifest = Member {
            name: MANIFEST.into(),
            content: Content::Manifest,
            bytes,
            cut: None,
        };
        self.members.insert(0, manifest);
        self
    }

    /// Says what was left out.
    pub fn leave(&mut self, what: LeftItem, why: LeftWhy) {
        self.left_out.push(LeftOut { what, why });
    }
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
