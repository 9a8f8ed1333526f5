//! `gpufree doctor --unit FILE`: reads a systemd unit and reports the seed
//! incident's mistakes and their cousins (notes/cluster.md):
//!
//! - `$NAME` / `${NAME}` in Exec lines, which systemd substitutes itself
//!   (to nothing when unset) before a shell sees them: write `$$NAME`;
//! - `%x` specifiers inside shell code (`date +%s` becomes the user's
//!   shell): write `%%`; unknown specifiers, which fail the unit;
//! - inline shell GPU checks (nvidia-smi in a loop) that should be
//!   `gpufree wait`;
//! - `KillMode=process` (renamed workers survive a stop), `KillMode=none`;
//! - `PrivateDevices=yes`, which hides /dev/nvidia*.
//!
//! A pure function of the file's text: tested on literal units.

use serde::Serialize;

/// One problem in a unit file.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line number.
    pub line: usize,
    /// `error` (the unit misbehaves) or `warning` (likely to).
    pub severity: &'static str,
    /// What is wrong.
    pub message: String,
    /// What to write instead.
    pub fix: String,
}

const EXEC_KEYS: &[&str] = &[
    "ExecStart",
    "ExecStartPre",
    "ExecStartPost",
    "ExecCondition",
    "ExecReload",
    "ExecStop",
    "ExecStopPost",
];

/// Specifiers systemd knows (systemd.unit(5)); `%%` is a literal `%`.
const SPECIFIERS: &str = "aAbBCdDEfgGhHiIjJlLmMnNopPqsStTuUvVwWyY%";

/// Logical lines of a unit: (first physical line number, section, key, value),
/// with `\` continuations joined and comments dropped.
fn entries(text: &str) -> Vec<(usize, String, String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim_end();
        let (start, mut acc) = match pending.take() {
            Some((start, acc)) => (start, acc),
            None => {
                let t = line.trim_start();
                if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
                    continue;
                }
                if t.starts_with('[') && t.ends_with(']') {
                    section = t[1..t.len() - 1].to_string();
                    continue;
                }
                (line_no, String::new())
            }
        };
        if let Some(body) = line.strip_suffix('\\') {
            acc.push_str(body);
            acc.push(' ');
            pending = Some((start, acc));
            continue;
        }
        acc.push_str(line);
        if let Some((k, v)) = acc.split_once('=') {
            out.push((
                start,
                section.clone(),
                k.trim().to_string(),
                v.trim().to_string(),
            ));
        }
    }
    out
}

/// Whether an Exec value runs shell code (`sh -c`, `bash -c`...): returns
/// the shell code when it does.
fn shell_code(value: &str) -> Option<&str> {
    let v = value.trim_start_matches(['-', '@', ':', '+', '!', '|']);
    let mut words = v.split_whitespace();
    let first = words.next()?;
    let prog = first.rsplit('/').next().unwrap_or(first);
    let prog = if prog == "env" { words.next()? } else { prog };
    let prog = prog.rsplit('/').next().unwrap_or(prog);
    if !matches!(prog, "sh" | "bash" | "dash" | "zsh" | "ksh") {
        return None;
    }
    let at = v.find(" -c")?;
    Some(v[at + 3..].trim())
}

/// `$NAME` and `${NAME}` that systemd substitutes (not `$$`), as (offset, name).
fn dollar_vars(s: &str) -> Vec<(usize, String, bool)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            if b.get(i + 1) == Some(&b'$') {
                i += 2;
                continue;
            }
            if b.get(i + 1) == Some(&b'{') {
                if let Some(end) = s[i + 2..].find('}') {
                    out.push((i, s[i + 2..i + 2 + end].to_string(), true));
                    i += end + 3;
                    continue;
                }
            }
            let name: String = s[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            {
                out.push((i, name.clone(), false));
                i += 1 + name.len();
                continue;
            }
        }
        i += 1;
    }
    out
}

/// `%x` specifiers (not `%%`), as the letters.
fn specifiers(s: &str) -> Vec<char> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some('%') => {}
                Some(x) => out.push(x),
                None => out.push(' '),
            }
        }
    }
    out
}

/// The problems of the unit file text.
pub fn check(text: &str) -> Vec<Problem> {
    let mut out = Vec::new();
    let env_defined: Vec<String> = entries(text)
        .iter()
        .filter(|(_, _, k, _)| k == "Environment")
        .flat_map(|(_, _, _, v)| {
            v.split_whitespace()
                .filter_map(|kv| {
                    kv.trim_matches('"')
                        .split_once('=')
                        .map(|(k, _)| k.to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    // Variables may also come from files gpufree cannot read here.
    let env_file = entries(text)
        .iter()
        .any(|(_, _, k, _)| k == "EnvironmentFile");
    for (line, _section, key, value) in entries(text) {
        if EXEC_KEYS.contains(&key.as_str()) {
            let shell = shell_code(&value);
            for (_, name, braced) in dollar_vars(&value) {
                let defined = env_defined.contains(&name);
                if shell.is_some() || !(defined || env_file) {
                    let how = if braced {
                        format!("${{{name}}}")
                    } else {
                        format!("${name}")
                    };
                    let what = if defined {
                        "with the unit's Environment= value"
                    } else {
                        "with nothing (it is not set in the unit)"
                    };
                    out.push(Problem {
                        line,
                        severity: if shell.is_some() { "error" } else { "warning" },
                        message: format!(
                            "{key}: systemd replaces {how} {what} before {} runs",
                            if shell.is_some() {
                                "the shell"
                            } else {
                                "the command"
                            }
                        ),
                        fix: format!(
                            "write {} so the shell sees {how}",
                            how.replacen('$', "$$", 1)
                        ),
                    });
                }
            }
            if let Some(code) = shell {
                for spec in specifiers(code) {
                    out.push(Problem {
                        line,
                        severity: "error",
                        message: format!("{key}: systemd expands the specifier %{spec} inside the shell code before the shell runs"),
                        fix: format!("write %%{spec}"),
                    });
                }
                if code.contains("nvidia-smi")
                    && ["while", "until", "for ", "sleep"]
                        .iter()
                        .any(|w| code.contains(w))
                {
                    out.push(Problem {
                        line,
                        severity: "warning",
                        message: format!("{key}: an inline shell loop over nvidia-smi to wait for free GPUs is fragile (quoting, $ and % substitution, no timeout, no reason when it fails)"),
                        fix: "ExecStartPre=/usr/local/bin/gpufree wait --gpu all --timeout 120s".into(),
                    });
                }
            } else {
                for spec in specifiers(&value) {
                    if !SPECIFIERS.contains(spec) {
                        out.push(Problem {
                            line,
                            severity: "error",
                            message: format!(
                                "{key}: unknown specifier %{spec}: systemd refuses the line"
                            ),
                            fix: format!("write %%{spec} for a literal percent sign"),
                        });
                    }
                }
            }
        }
        match (key.as_str(), value.as_str()) {
            ("KillMode", "process") => out.push(Problem {
                line,
                severity: "warning",
                message: "KillMode=process: a stop signals only the main process; workers (renamed ones too) survive and keep the GPU memory".into(),
                fix: "KillMode=control-group (the default), or mixed".into(),
            }),
            ("KillMode", "none") => out.push(Problem {
                line,
                severity: "error",
                message: "KillMode=none: a stop kills nothing; every GPU process outlives the unit".into(),
                fix: "KillMode=control-group".into(),
            }),
            ("PrivateDevices", "yes" | "true" | "1" | "on") => out.push(Problem {
                line,
                severity: "error",
                message: "PrivateDevices=yes hides /dev/nvidia* from the service: CUDA finds no GPU".into(),
                fix: "PrivateDevices=no, or DeviceAllow=/dev/nvidia* rw with DevicePolicy=closed".into(),
            }),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INCIDENT: &str = r#"[Unit]
Description=vLLM Kimi-K2

[Service]
ExecStartPre=/bin/bash -c 'while true; do free=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | sort -n | tail -1); echo "max used: ${free} MiB"; [ "$free" -lt 1000 ] && break; sleep 5; done'
ExecStart=/opt/vllm/bin/vllm serve /models/kimi-k2 \
    --tensor-parallel-size 8
KillMode=process
"#;

    #[test]
    fn the_incident_unit_is_diagnosed() {
        let p = check(INCIDENT);
        assert!(
            p.iter().any(|x| x.line == 5
                && x.severity == "error"
                && x.message.contains("${free}")
                && x.fix.contains("$${free}")),
            "{p:#?}"
        );
        assert!(p.iter().any(|x| x.line == 5 && x.message.contains("$free")));
        assert!(p
            .iter()
            .any(|x| x.line == 5 && x.fix.contains("gpufree wait")));
        assert!(p
            .iter()
            .any(|x| x.line == 8 && x.message.starts_with("KillMode=process")));
        assert!(
            !p.iter().any(|x| x.line == 6),
            "the continued ExecStart is fine: {p:#?}"
        );
    }

    #[test]
    fn escaped_dollars_and_plain_commands_are_fine() {
        let fixed = INCIDENT
            .replace("${free}", "$${free}")
            .replace("\"$free\"", "\"$$free\"")
            .replace("KillMode=process", "KillMode=control-group");
        let p = check(&fixed);
        assert!(p.iter().all(|x| !x.message.contains("replaces")), "{p:#?}");
        assert_eq!(p.len(), 1, "only the loop remains: {p:#?}");
        let good = "[Service]\nEnvironment=MODEL=/m\nExecStartPre=/usr/local/bin/gpufree wait --timeout 120s\nExecStart=/usr/bin/vllm serve $MODEL\nExecStopPost=/usr/local/bin/gpufree kill --unit %n --yes\n";
        assert_eq!(check(good), vec![]);
        let from_file =
            "[Service]\nEnvironmentFile=/etc/vllm.env\nExecStart=/usr/bin/vllm serve $MODEL\n";
        assert_eq!(check(from_file), vec![], "EnvironmentFile= may set it");
        let missing = "[Service]\nExecStart=/usr/bin/vllm serve $MODEL\n";
        assert_eq!(check(missing)[0].severity, "warning");
    }

    #[test]
    fn specifiers_in_shell_code_and_unknown_ones() {
        let p = check("[Service]\nExecStartPre=/bin/sh -c 'echo $$(date +%s) > /run/x'\nExecStart=/usr/bin/x --id %k\n");
        assert!(
            p.iter().any(|x| x.line == 2 && x.message.contains("%s")),
            "{p:#?}"
        );
        assert!(p
            .iter()
            .any(|x| x.line == 3 && x.message.contains("unknown specifier %k")));
        assert!(check("[Service]\nExecStart=/usr/bin/x --name %n --pct 50%%\n").is_empty());
    }

    #[test]
    fn private_devices_and_kill_mode_none() {
        let p = check("[Service]\nPrivateDevices=yes\nKillMode=none\n");
        assert_eq!(p.len(), 2);
        assert!(p[0].message.contains("/dev/nvidia"));
        assert!(p[1].message.starts_with("KillMode=none"));
    }
}
