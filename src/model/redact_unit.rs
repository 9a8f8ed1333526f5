//! What `gpufree bundle` keeps of a unit file: the keys that explain how
//! a holder is started, stopped and restarted, by an allowlist; every
//! other key's value is left out, whatever it holds (`Description=` is
//! a transient unit's command line, `SetCredential=` a secret).

use super::Keep;

/// The keys whose values are copied as they are: how the unit is started,
/// stopped and restarted, whose it is, where it runs, what it may open.
/// None holds a command line, an environment or a secret.
const KEPT_KEYS: &[&str] = &[
    "Type",
    "Restart",
    "RestartSec",
    "RestartSteps",
    "RestartMaxDelaySec",
    "RestartPreventExitStatus",
    "RestartForceExitStatus",
    "SuccessExitStatus",
    "RemainAfterExit",
    "KillMode",
    "KillSignal",
    "RestartKillSignal",
    "FinalKillSignal",
    "SendSIGKILL",
    "SendSIGHUP",
    "WatchdogSignal",
    "TimeoutSec",
    "TimeoutStartSec",
    "TimeoutStopSec",
    "TimeoutAbortSec",
    "StartLimitIntervalSec",
    "StartLimitBurst",
    "StartLimitAction",
    "User",
    "Group",
    "DynamicUser",
    "Slice",
    "Delegate",
    "DeviceAllow",
    "DevicePolicy",
    "PrivateDevices",
    "PassEnvironment",
    "EnvironmentFile",
    "PIDFile",
    "NotifyAccess",
    "After",
    "Before",
    "Requires",
    "Wants",
    "BindsTo",
    "PartOf",
    "Conflicts",
    "WantedBy",
    "RequiredBy",
    "Also",
];

/// The keys whose values are command lines: kept with `--with-cmdlines`
/// (`Description=` is a transient unit's command line).
fn is_cmdline_key(key: &str) -> bool {
    key.starts_with("Exec") || key == "Description"
}

/// A unit file's text as a bundle copies it: its lines joined as systemd
/// joins them (a line ending with an unescaped backslash goes on with the
/// next; comment lines inside are skipped), comments left out, section
/// headers kept when they are only a name (`[Service]`, else written
/// `[mark]`), each `KEY=value` kept where `KEY` is on the allowlist and the
/// value is one line of plain words (`plain_value`; `Exec*=` and
/// `Description=` with `keep.cmdlines`, `Environment=` with `keep.env`, as
/// they are), else written `KEY=mark` (the words' `LEFT_OUT_MARK`; an
/// empty value, a reset, stays empty).
pub fn redact_unit(text: &str, keep: Keep, mark: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (line, continued) in logical_lines(text) {
        let t = line.trim();
        if t.is_empty() || t.starts_with('[') {
            if t.is_empty() || plain_header(t) {
                out.push_str(t);
            } else {
                out.push('[');
                out.push_str(mark);
                out.push(']');
            }
            out.push('\n');
            continue;
        }
        let Some((key, value)) = t.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        let asked = (keep.cmdlines && is_cmdline_key(key)) || (keep.env && key == "Environment");
        let allowed = KEPT_KEYS.contains(&key) && !continued && plain_value(value);
        out.push_str(key);
        out.push('=');
        out.push_str(if asked || allowed || value.is_empty() {
            value
        } else {
            mark
        });
        out.push('\n');
    }
    out
}

/// Whether a section header is only a name: `^\[[A-Za-z-]+\]$`.
fn plain_header(t: &str) -> bool {
    t.strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .is_some_and(|name| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphabetic() || c == '-')
        })
}

/// Whether a kept key's value is plain words (unit names, numbers, time
/// spans, signal names, paths): ASCII letters and digits, `@ . _ : + - , =
/// /`, and single spaces between them. Anything else (a `#` or `;` after a
/// blank, quotes, a backslash) is not copied.
fn plain_value(v: &str) -> bool {
    let safe = |c: char| c.is_ascii_alphanumeric() || "@._:+-,=/".contains(c);
    !v.contains("  ") && v.chars().all(|c| c == ' ' || safe(c))
}

/// Whether a comment (`#` or `;` after leading blanks).
fn is_comment(line: &str) -> bool {
    matches!(line.trim_start().chars().next(), Some('#' | ';'))
}

/// `line` without its continuation backslash, if it ends with one: an
/// odd number of backslashes at its end (`\\` is an escaped backslash,
/// as systemd reads it, and ends the line).
fn continues(line: &str) -> Option<&str> {
    let n = line.len() - line.trim_end_matches('\\').len();
    (n % 2 == 1).then(|| &line[..line.len() - 1])
}

/// The file's logical lines, as systemd.syntax(7) reads them, each with
/// whether it was joined from more than one line: a line ending with a
/// backslash ([`continues`]) is joined (the backslash a space) with the
/// next line that is not a comment; comment lines outside a continuation
/// are dropped.
fn logical_lines(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut open: Option<String> = None;
    for line in text.lines() {
        if is_comment(line) {
            continue;
        }
        let body = line.trim_end();
        let (part, goes_on) = match continues(body) {
            Some(head) => (head.trim_end(), true),
            None => (body, false),
        };
        let (mut joined, continued) = match open.take() {
            Some(mut o) => {
                o.push(' ');
                o.push_str(part.trim_start());
                (o, true)
            }
            None => (part.to_string(), false),
        };
        if goes_on {
            open = Some(std::mem::take(&mut joined));
        } else {
            out.push((joined, continued));
        }
    }
    out.extend(open.map(|o| (o, true)));
    out
}

#[cfg(test)]
mod tests {
    use super::redact_unit;
    use crate::model::Keep;

    const MARK: &str = "(left out)";

    #[test]
    fn only_allowed_keys_keep_their_values() {
        let text = "[Unit]\nDescription=/usr/bin/python3 --api-key=S1\n\n[Service]\n\
            ExecStart=/bin/x \\\n  --key=S2\nEnvironment=K=S3\nSetCredential=tok:S4\n\
            X-Secret=S5\nRestart=always\nKillMode=mixed\nExecStart=\n";
        let out = redact_unit(text, Keep::default(), MARK);
        assert_eq!(
            out,
            "[Unit]\nDescription=(left out)\n\n[Service]\nExecStart=(left out)\n\
             Environment=(left out)\nSetCredential=(left out)\nX-Secret=(left out)\n\
             Restart=always\nKillMode=mixed\nExecStart=\n"
        );
        let kept = Keep {
            cmdlines: true,
            env: true,
        };
        let out = redact_unit(text, kept, MARK);
        assert!(
            out.contains("Description=/usr/bin/python3 --api-key=S1\n"),
            "{out}"
        );
        assert!(out.contains("ExecStart=/bin/x --key=S2\n"), "{out}");
        assert!(out.contains("Environment=K=S3\n"), "{out}");
        assert!(!out.contains("S4") && !out.contains("S5"), "{out}");
    }

    #[test]
    fn a_comment_inside_a_continuation_does_not_end_it() {
        // systemd.syntax(7): the comment block is skipped and the line
        // goes on with what follows it.
        let text = "[Service]\nEnvironment=A=1 \\\n# the token\n  HF_TOKEN=LEAK1\n\
            ExecStart=/usr/bin/python3 -m vllm \\\n; api key below\n  --api-key=LEAK2\n\
            # a comment with LEAK3\nRestart=always\n";
        let out = redact_unit(text, Keep::default(), MARK);
        assert_eq!(
            out,
            "[Service]\nEnvironment=(left out)\nExecStart=(left out)\nRestart=always\n"
        );
        let cmd = Keep {
            cmdlines: true,
            env: false,
        };
        let out = redact_unit(text, cmd, MARK);
        assert!(out.contains("ExecStart=/usr/bin/python3 -m vllm --api-key=LEAK2\n"));
        assert!(!out.contains("LEAK1") && !out.contains("LEAK3"), "{out}");
    }

    #[test]
    fn odd_headers_and_values_with_comments_or_from_continuations_are_left_out() {
        // attack38 finding 6: what systemd ignores or rejects is not
        // copied word for word.
        let text = "[Service ; hunter2-hdr]\n[X-Ok]\n[Install]x\n\
            Restart=on-failure # hunter2-inline\nRestartSec=5 ;hunter2-semi\n\
            After=network.target \\\n hunter2-cont\nUser=\"quoted\"\nGroup=a  b\n\
            KillMode=mixed\nAfter=network.target nvidia-persistenced.service\n\
            TimeoutStopSec=1min 30s\nUser=svc@host_1\n";
        let out = redact_unit(text, Keep::default(), MARK);
        assert_eq!(
            out,
            "[(left out)]\n[X-Ok]\n[(left out)]\nRestart=(left out)\n\
             RestartSec=(left out)\nAfter=(left out)\nUser=(left out)\n\
             Group=(left out)\nKillMode=mixed\n\
             After=network.target nvidia-persistenced.service\n\
             TimeoutStopSec=1min 30s\nUser=svc@host_1\n"
        );
        assert!(!out.contains("hunter2"), "{out}");
    }

    #[test]
    fn an_escaped_backslash_at_the_end_does_not_swallow_the_next_line() {
        let text = "[Service]\nExecStart=/bin/x \\\\\nRestart=always\n\
            ExecStop=/bin/y \\\\\\\n  --z\nRestart=no\n";
        let out = redact_unit(text, Keep::default(), MARK);
        assert_eq!(
            out,
            "[Service]\nExecStart=(left out)\nRestart=always\n\
             ExecStop=(left out)\nRestart=no\n"
        );
        let cmd = Keep {
            cmdlines: true,
            env: false,
        };
        let out = redact_unit(text, cmd, MARK);
        assert!(
            out.contains("ExecStart=/bin/x \\\\\nRestart=always\n"),
            "{out}"
        );
        assert!(
            out.contains("ExecStop=/bin/y \\\\ --z\nRestart=no\n"),
            "{out}"
        );
    }
}
