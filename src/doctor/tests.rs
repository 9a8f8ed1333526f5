//! Tests of `doctor`.

use super::*;
use crate::present::doctor::{worded, ProblemDoc};

/// The problems of `text` in words, as `doctor` prints them.
fn check(text: &str) -> Vec<ProblemDoc> {
    worded(&super::check(text))
}

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
    // "$free" inside the shell code is one word with it: systemd leaves
    // a braceless $NAME inside a word alone, and the shell expands it.
    assert!(!p.iter().any(|x| x.message.contains("$free ")), "{p:#?}");
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
    assert_eq!(p.len(), 3, "{p:#?}");
}

#[test]
fn escaped_dollars_and_plain_commands_are_fine() {
    let fixed = INCIDENT
        .replace("${free}", "$${free}")
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

/// What systemd sets itself, what the unit sets, and the instance
/// specifiers are legal, in shell code too (each of these was called a
/// mistake before).
#[test]
fn legal_variables_and_specifiers_are_silent() {
    for unit in [
        "[Service]\nExecReload=/bin/kill -HUP $MAINPID\n",
        "[Service]\nExecStop=/bin/kill -s TERM ${MAINPID}\n",
        "[Service]\nExecStopPost=/usr/bin/logger \"stopped: ${SERVICE_RESULT} ${EXIT_CODE} ${EXIT_STATUS}\"\n",
        "[Service]\nExecStopPost=/bin/sh -c 'echo $SERVICE_RESULT ${EXIT_STATUS} >> /var/log/x'\n",
        "[Service]\nEnvironment=MODEL=/m PORT=8000\nExecStart=/bin/sh -c 'exec vllm serve ${MODEL} --port ${PORT}'\n",
        "[Service]\nEnvironmentFile=/etc/vllm/%i.env\nExecStart=/bin/bash -c 'exec vllm serve ${MODEL}'\n",
        "[Service]\nEnvironment=\"OPTS=--a 1\" 'B=x y'\nExecStart=/usr/bin/x $OPTS ${B}\n",
        "[Service]\nPassEnvironment=HF_TOKEN\nExecStart=/usr/bin/x --token ${HF_TOKEN}\n",
        "[Service]\nExecStartPre=/bin/sh -c 'mkdir -p /var/cache/vllm/%i && chown vllm /var/cache/vllm/%i'\n",
        "[Service]\nExecStart=/bin/sh -c 'exec /opt/bin/serve --name %n --instance %I --state %S/%p'\n",
        "[Service]\nExecStart=/bin/sh -c 'echo ${X:-default} $HOME ${HOME}'\n",
        "[Service]\nExecStart=:/bin/echo ${NOT_EXPANDED} $ALSO_NOT\n",
        "[Service]\nExecStartPre=/bin/sh -c 'echo $$PATH $${x} $$(hostname)'\n",
    ] {
        assert_eq!(check(unit), vec![], "{unit}");
    }
}

#[test]
fn real_mistakes_with_variables() {
    let one = |unit: &str| {
        let p = check(unit);
        assert_eq!(p.len(), 1, "{unit}: {p:#?}");
        p.into_iter().next().unwrap()
    };
    let p = one("[Service]\nExecStart=/usr/bin/x --pid $MAINPID\n");
    assert!(p.message.contains("only for ExecStartPost="), "{p:?}");
    let p = one("[Service]\nExecStart=/usr/bin/x --result ${SERVICE_RESULT}\n");
    assert!(p.message.contains("ExecStop= and ExecStopPost="), "{p:?}");
    let p = one("[Service]\nEnvironment=PORT=8000\nExecStart=/usr/bin/x --port=$PORT\n");
    assert!(p.message.contains("literal text '--port=$PORT'"), "{p:?}");
    assert_eq!(p.fix, "write ${PORT} inside a word");
    let p = one("[Service]\nExecStart=/usr/bin/x --model ${MODEL:-llama}\n");
    assert!(p.message.contains("does not expand ${MODEL:...}"), "{p:?}");
    let p = one("[Service]\nEnvironmentFile=/etc/x.env\nExecStart=/bin/sh -c 'for f in a b; do echo ${f}; done'\n");
    assert_eq!(p.severity, "error", "{p:?}");
    assert!(p.message.contains("f is the shell's variable"), "{p:?}");
    let p = one("[Service]\nExecStart=/bin/sh -c 'echo ${RANDOM}'\n");
    assert_eq!(p.severity, "error");
    let p = one("[Service]\nExecStart=/usr/bin/x $FOO/bar\n");
    assert!(p.message.contains("drops this argument"), "{p:?}");
    let p = one("[Service]\nEnvironment=\"PATH=$PATH\"\nExecStart=/usr/bin/x\n");
    assert!(p.message.contains("literal text '$PATH'"), "{p:?}");
    let p = one("[Service]\nExecStart=/bin/sh -c 'echo \"unclosed'\"\n");
    assert!(p.message.contains("quote is not closed"), "{p:?}");
    let p = one("[Service]\nExecStart=/usr/bin/date +%s\n");
    assert!(p.message.contains("the format '%s'"), "{p:?}");
    let p = one("[Service]\nExecStart=/bin/sh -c 'printf \"%d\\n\" 5'\n");
    assert!(p.message.contains("inside the shell code"), "{p:?}");
    // The redirection after $(date +%s) belongs to echo: %i there is meant.
    let p = one("[Service]\nExecStart=/bin/sh -c 'echo \"%i $$(date +%s)\" >> /var/log/%i.log'\n");
    assert!(p.message.contains("specifier %s"), "{p:?}");
}

#[test]
fn messages_are_one_line_whatever_the_unit_holds() {
    // The same escapes as every other string gpufree prints (safe::escape),
    // the zero-width space included.
    let p = check("[Service]\nExecStart=/usr/bin/x \"--a=$B\\n\\x1b[2J\\u202e\\u200b\"\n");
    assert_eq!(p.len(), 1, "{p:#?}");
    assert!(
        p[0].message.contains("--a=$B\\n\\e[2J\\u{202e}\\u{200b}"),
        "{p:#?}"
    );
    assert!(!p[0].message.chars().any(char::is_control), "{p:#?}");
}

#[test]
fn words_as_systemd_splits_them() {
    let w = |s: &str| -> Vec<String> {
        split_words(s)
            .unwrap()
            .into_iter()
            .map(|w| w.text)
            .collect()
    };
    assert_eq!(
        w(r#"/bin/sh -c 'a "b" c' x"#),
        ["/bin/sh", "-c", "a \"b\" c", "x"]
    );
    assert_eq!(w(r#""A=1 2" B=3 a"b c"d"#), ["A=1 2", "B=3", "ab cd"]);
    assert_eq!(w(r"a\ b \; ;"), ["a b", ";", ";"]);
    let s = split_words(r"x \; ;").unwrap();
    assert!(!s[1].separator && s[2].separator);
    assert!(split_words("a 'b").is_none());
    assert_eq!(
        var_uses("${A}x$B${C:-d}$$E$"),
        [
            VarUse::Braced("A".into()),
            VarUse::Inside("B".into()),
            VarUse::Extended("C".into())
        ]
    );
}
