//! `gpufree doctor --unit FILE`: reads a systemd unit and reports the seed
//! incident's mistakes and their cousins (notes/cluster.md), as systemd
//! itself reads the file (systemd.service(5) "Command lines", and
//! `replace_env_argv()` in systemd's env-util.c):
//!
//! - Exec lines are split into words (quotes and backslashes as systemd
//!   takes them); a word that is `$NAME` is replaced by the variable's
//!   value split at whitespace, `${NAME}` anywhere in a word by its value,
//!   an unset variable by nothing; `$NAME` inside a word and `${NAME:-x}`
//!   are left as they are, and `$$` is a literal `$`.
//! - So in shell code (`sh -c '...'`), `${free}` for the shell's own
//!   variable is replaced by nothing before the shell runs: write
//!   `$${free}`. A variable the unit sets (`Environment=`, `PassEnvironment=`,
//!   or one systemd sets for that command, such as `$MAINPID` in
//!   `ExecReload=` or `$EXIT_STATUS` in `ExecStopPost=`) is substituted
//!   with its value, as the shell would: not a mistake. Variables of an
//!   `EnvironmentFile=` cannot be read here; they are assumed set.
//! - `%x` specifiers are expanded everywhere, shell code included: `%i`,
//!   `%n` and their kin are meant; `%s` in `date +%s` or a `printf` format
//!   is not (write `%%`); an unknown specifier fails the line.
//! - `Environment=` values are not expanded: `PATH=$PATH` sets the text
//!   `$PATH`.
//! - inline shell GPU checks (nvidia-smi in a loop) that should be
//!   `gpufree wait`; `KillMode=process` (renamed workers survive a stop),
//!   `KillMode=none`; `PrivateDevices=yes`, which hides /dev/nvidia*.
//!
//! A pure function of the file's text: tested on literal units and on a
//! corpus of inference-server units (tests/units/).

use serde::Serialize;
use std::collections::BTreeSet;

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
    "ExecCondition",
    "ExecStartPre",
    "ExecStart",
    "ExecStartPost",
    "ExecReload",
    "ExecStop",
    "ExecStopPost",
];

/// Specifiers systemd knows (systemd.unit(5)); `%%` is a literal `%`.
const SPECIFIERS: &str = "aAbBCdDEfgGhHiIjJlLmMnNopPqsStTuUvVwWyY%";

/// Variables systemd sets for every command it runs (systemd.exec(5),
/// "Environment Variables in Spawned Processes"), some only with the
/// setting that asks for them; a unit may use any of them.
const SYSTEMD_VARS: &[&str] = &[
    "PATH",
    "LANG",
    "USER",
    "LOGNAME",
    "HOME",
    "SHELL",
    "INVOCATION_ID",
    "XDG_RUNTIME_DIR",
    "RUNTIME_DIRECTORY",
    "STATE_DIRECTORY",
    "CACHE_DIRECTORY",
    "LOGS_DIRECTORY",
    "CONFIGURATION_DIRECTORY",
    "CREDENTIALS_DIRECTORY",
    "MANAGERPID",
    "SYSTEMD_EXEC_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "NOTIFY_SOCKET",
    "WATCHDOG_PID",
    "WATCHDOG_USEC",
    "TERM",
    "JOURNAL_STREAM",
    "LOG_NAMESPACE",
    "PIDFILE",
    "FDSTORE",
    "MEMORY_PRESSURE_WATCH",
    "MEMORY_PRESSURE_WRITE",
    "REMOTE_ADDR",
    "REMOTE_PORT",
    "TRIGGER_UNIT",
    "TRIGGER_PATH",
    "TRIGGER_TIMER_REALTIME_USEC",
    "TRIGGER_TIMER_MONOTONIC_USEC",
    "MONITOR_SERVICE_RESULT",
    "MONITOR_EXIT_CODE",
    "MONITOR_EXIT_STATUS",
    "MONITOR_INVOCATION_ID",
    "MONITOR_UNIT",
    "DEBUG_INVOCATION",
];

/// Variables systemd sets only for some commands, with those commands.
const COMMAND_VARS: &[(&str, &[&str], &str)] = &[
    (
        "MAINPID",
        &["ExecStartPost", "ExecReload", "ExecStop", "ExecStopPost"],
        "ExecStartPost=, ExecReload=, ExecStop= and ExecStopPost= (once the main process is known)",
    ),
    (
        "SERVICE_RESULT",
        &["ExecStop", "ExecStopPost"],
        "ExecStop= and ExecStopPost=",
    ),
    (
        "EXIT_CODE",
        &["ExecStop", "ExecStopPost"],
        "ExecStop= and ExecStopPost=",
    ),
    (
        "EXIT_STATUS",
        &["ExecStop", "ExecStopPost"],
        "ExecStop= and ExecStopPost=",
    ),
];

/// Variables a shell sets itself: never the unit's.
const SHELL_VARS: &[&str] = &[
    "RANDOM",
    "PWD",
    "OLDPWD",
    "PPID",
    "UID",
    "EUID",
    "SECONDS",
    "LINENO",
    "HOSTNAME",
    "BASHPID",
    "IFS",
    "REPLY",
    "OPTARG",
    "OPTIND",
    "PIPESTATUS",
];

/// Commands whose arguments are `%` formats (`date +%s`, `printf '%d'`).
const FORMAT_COMMANDS: &[&str] = &[
    "date", "printf", "awk", "gawk", "mawk", "nawk", "stat", "find", "seq", "strftime",
];

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
                if let Some(name) = t.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                    section = name.to_string();
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

/// One word of a command line after systemd's unquoting.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Word {
    text: String,
    /// An unquoted lone `;`: the end of one command and the start of the next.
    separator: bool,
}

/// Splits a value into words as systemd does (`extract_first_word()` with
/// unquoting and C escapes): whitespace separates, `"..."` and `'...'`
/// group, a backslash escapes. None when a quote is not closed (systemd
/// then refuses the line).
fn split_words(value: &str) -> Option<Vec<Word>> {
    let mut words = Vec::new();
    let mut chars = value.chars().peekable();
    loop {
        while chars.next_if(|c| is_space(*c)).is_some() {}
        if chars.peek().is_none() {
            return Some(words);
        }
        let mut text = String::new();
        let mut quoted = false;
        let mut quote: Option<char> = None;
        while let Some(c) = chars.next() {
            match (quote, c) {
                (None, c) if is_space(c) => break,
                (None, '"' | '\'') => {
                    quote = Some(c);
                    quoted = true;
                }
                (Some(q), c) if c == q => quote = None,
                (Some('\''), c) => text.push(c),
                (_, '\\') => {
                    // An escaped `;` is an argument, not a separator.
                    quoted = true;
                    if let Some(e) = chars.next() {
                        text.push(unescape(e, &mut chars));
                    }
                }
                (_, c) => text.push(c),
            }
        }
        if quote.is_some() {
            return None;
        }
        let separator = !quoted && text == ";";
        words.push(Word { text, separator });
    }
}

/// The character a backslash and `e` stand for (systemd's `cunescape()`:
/// `\n`, `\t`, `\xNN`, `\uNNNN`, `\UNNNNNNNN`, `\NNN` octal...); the
/// digits are taken from `rest`. Anything else stands for itself.
fn unescape(e: char, rest: &mut std::iter::Peekable<std::str::Chars<'_>>) -> char {
    let mut number = |digits: usize, radix: u32, first: Option<char>| {
        let mut v = first.and_then(|c| c.to_digit(radix)).unwrap_or(0);
        let mut taken = usize::from(first.is_some());
        while taken < digits {
            match rest.peek().and_then(|c| c.to_digit(radix)) {
                Some(d) => {
                    v = v.saturating_mul(radix).saturating_add(d);
                    rest.next();
                    taken += 1;
                }
                None => break,
            }
        }
        char::from_u32(v).unwrap_or(char::REPLACEMENT_CHARACTER)
    };
    match e {
        'a' => '\u{7}',
        'b' => '\u{8}',
        'f' => '\u{c}',
        'n' => '\n',
        'r' => '\r',
        't' => '\t',
        'v' => '\u{b}',
        's' => ' ',
        'x' => number(2, 16, None),
        'u' => number(4, 16, None),
        'U' => number(8, 16, None),
        '0'..='7' => number(3, 8, Some(e)),
        e => e,
    }
}

/// Whitespace as systemd splits on it.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Whether `name` is a valid environment variable name.
fn valid_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// How a word refers to a variable.
#[derive(Debug, Clone, PartialEq, Eq)]
enum VarUse {
    /// The word is `$NAME`: replaced by the value split at whitespace.
    Word(String),
    /// `${NAME}` in a word: replaced by the value.
    Braced(String),
    /// `${NAME:-x}` or `${NAME:+x}`: not expanded on command lines.
    Extended(String),
    /// `$NAME` inside a word: left as it is.
    Inside(String),
    /// A word `$...` that is no variable name (`$FOO/bar`): dropped.
    Dropped,
}

/// The variable references of one word, as systemd reads them.
fn var_uses(word: &str) -> Vec<VarUse> {
    let b = word.as_bytes();
    if b.first() == Some(&b'$') && !matches!(b.get(1), Some(b'{' | b'$')) {
        let name = &word[1..];
        return vec![if valid_name(name) {
            VarUse::Word(name.to_string())
        } else {
            VarUse::Dropped
        }];
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b'$') => i += 2,
            Some(b'{') => {
                let rest = &word[i + 2..];
                match rest.find(['}', ':']) {
                    Some(end) if rest.as_bytes()[end] == b'}' => {
                        out.push(VarUse::Braced(rest[..end].to_string()));
                        i += end + 3;
                    }
                    Some(colon) => {
                        out.push(VarUse::Extended(rest[..colon].to_string()));
                        i += colon + 2;
                    }
                    None => i += 2,
                }
            }
            _ => {
                let name: String = word[i + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if valid_name(&name) {
                    i += 1 + name.len();
                    out.push(VarUse::Inside(name));
                } else {
                    i += 1;
                }
            }
        }
    }
    out
}

/// `%x` specifiers of a word (not `%%`), with their byte offsets.
fn specifiers(s: &str) -> Vec<(usize, char)> {
    let mut out = Vec::new();
    let mut chars = s.char_indices();
    while let Some((at, c)) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some((_, '%')) => {}
                Some((_, x)) => out.push((at, x)),
                None => out.push((at, ' ')),
            }
        }
    }
    out
}

/// The file name of a program path.
fn base(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// The shell code of a command (`sh -c CODE`, `bash -ec CODE`,
/// `env bash -c CODE`), if it runs one.
fn shell_code(words: &[&str]) -> Option<usize> {
    let mut i = 0;
    if base(words.first()?) == "env" {
        i += 1;
        while words
            .get(i)
            .is_some_and(|w| w.starts_with('-') || w.contains('='))
        {
            i += 1;
        }
    }
    if !matches!(base(words.get(i)?), "sh" | "bash" | "dash" | "zsh" | "ksh") {
        return None;
    }
    for (j, w) in words.iter().enumerate().skip(i + 1) {
        if w.starts_with("--") || !w.starts_with('-') {
            return None;
        }
        if w.contains('c') {
            return (j + 1 < words.len()).then_some(j + 1);
        }
    }
    None
}

/// Names the shell code assigns or declares itself (`free=...`,
/// `for x in`, `read -r a b`, `local x`): the shell's variables.
fn shell_assigned(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let tokens: Vec<&str> = code
        .split(|c: char| c.is_whitespace() || matches!(c, ';' | '|' | '&' | '(' | ')' | '`'))
        .filter(|t| !t.is_empty())
        .collect();
    let mut after: Option<&str> = None;
    for t in tokens {
        if let Some((name, _)) = t.split_once('=') {
            if valid_name(name) {
                out.insert(name.to_string());
            }
        }
        match after {
            Some("for") if valid_name(t) => {
                out.insert(t.to_string());
            }
            Some("read" | "local" | "export" | "declare" | "typeset" | "readonly")
                if valid_name(t) =>
            {
                out.insert(t.to_string());
                continue; // `read a b c`: all of them
            }
            Some("read" | "local" | "export" | "declare" | "typeset" | "readonly")
                if t.starts_with('-') =>
            {
                continue;
            }
            _ => {}
        }
        after = Some(t);
    }
    out
}

/// Whether the `%` at byte `at` of the shell code (or of a command's
/// word) is a format meant for the program, not a specifier: in a `date
/// +FORMAT` word, or in a command such as `printf` or `awk`.
fn format_context(code: &str, at: usize) -> bool {
    let before = &code[..at];
    let token_start = before.rfind(is_space).map_or(0, |p| p + 1);
    let token = code[token_start..].trim_start_matches(['"', '\'']);
    if token.starts_with('+') {
        return true;
    }
    // Where the simple command around `at` starts: after the last `;`,
    // `|`, `&`, newline or backquote, and a `$(...)` or `{...}` already
    // closed before `at` belongs to the command around it.
    let mut starts = vec![0];
    for (i, c) in before.char_indices() {
        match c {
            '(' | '{' => starts.push(i + 1),
            ')' | '}' if starts.len() > 1 => {
                starts.pop();
            }
            ';' | '|' | '&' | '\n' | '`' => {
                if let Some(s) = starts.last_mut() {
                    *s = i + 1;
                }
            }
            _ => {}
        }
    }
    let cmd_start = starts.last().copied().unwrap_or(0);
    let command = code[cmd_start..at]
        .split_whitespace()
        .find(|w| {
            !(w.contains('=')
                || matches!(
                    *w,
                    "then" | "do" | "else" | "if" | "while" | "until" | "exec" | "command" | "!"
                ))
        })
        .map(|w| base(w.trim_matches(['"', '\''])));
    command.is_some_and(|c| FORMAT_COMMANDS.contains(&c))
}

/// What the unit says about its environment.
#[derive(Debug, Default)]
struct Env {
    /// Names set with `Environment=` (after any reset) or `PassEnvironment=`.
    set: BTreeSet<String>,
    /// An `EnvironmentFile=` is named: any variable may come from it.
    file: bool,
}

impl Env {
    fn of(entries: &[(usize, String, String, String)]) -> Env {
        let mut env = Env::default();
        for (_, _, key, value) in entries {
            match key.as_str() {
                "Environment" if value.is_empty() => env.set.clear(),
                "Environment" => {
                    for w in split_words(value).unwrap_or_default() {
                        if let Some((name, _)) = w.text.split_once('=') {
                            env.set.insert(name.to_string());
                        }
                    }
                }
                "PassEnvironment" => {
                    env.set.extend(value.split_whitespace().map(str::to_string));
                }
                "EnvironmentFile" if !value.is_empty() => env.file = true,
                _ => {}
            }
        }
        env
    }
}

/// Checks one variable reference of an Exec line.
struct VarCheck<'a> {
    line: usize,
    key: &'a str,
    env: &'a Env,
    /// The shell's own variables, when the word is shell code.
    shell: Option<&'a BTreeSet<String>>,
}

impl VarCheck<'_> {
    fn problem(&self, severity: &'static str, message: String, fix: String) -> Problem {
        Problem {
            line: self.line,
            severity,
            message: format!("{}: {message}", self.key),
            fix,
        }
    }

    fn check(&self, word: &str, u: &VarUse) -> Option<Problem> {
        let key = self.key;
        let (name, how) = match u {
            VarUse::Word(n) => (n, format!("${n}")),
            VarUse::Braced(n) => (n, format!("${{{n}}}")),
            VarUse::Inside(n) if self.shell.is_none() => {
                return Some(self.problem(
                    "warning",
                    format!("systemd substitutes ${n} only as a word of its own: the program gets the literal text '{word}'"),
                    format!("write ${{{n}}} inside a word"),
                ));
            }
            VarUse::Extended(n) if self.shell.is_none() => {
                return Some(self.problem(
                    "warning",
                    format!("systemd does not expand ${{{n}:...}} on command lines: the program gets the literal text '{word}'"),
                    format!("give {n} its value with Environment= and write ${{{n}}}"),
                ));
            }
            VarUse::Dropped => {
                return Some(self.problem(
                    "warning",
                    format!("'{word}' is not a variable name: systemd drops this argument"),
                    "write ${NAME} for a variable, $$ for a literal $".into(),
                ));
            }
            // Left for the shell, which expands it itself.
            VarUse::Inside(_) | VarUse::Extended(_) => return None,
        };
        let before = if self.shell.is_some() {
            "before the shell runs"
        } else {
            "before the command runs"
        };
        let unit_sets = self.env.set.contains(name);
        if let Some(shell_vars) = self.shell {
            if shell_vars.contains(name) || SHELL_VARS.contains(&name.as_str()) {
                let with = if unit_sets {
                    "the unit's Environment= value"
                } else {
                    "nothing"
                };
                return Some(self.problem(
                    "error",
                    format!("systemd replaces {how} with {with} {before}: {name} is the shell's variable, not the unit's"),
                    format!("write {} so the shell sees {how}", how.replacen('$', "$$", 1)),
                ));
            }
        }
        if unit_sets || SYSTEMD_VARS.contains(&name.as_str()) {
            return None;
        }
        if let Some((_, keys, where_)) = COMMAND_VARS.iter().find(|(n, _, _)| n == name) {
            if keys.contains(&key) {
                return None;
            }
            return Some(self.problem(
                "warning",
                format!("systemd sets ${name} only for {where_}: here it replaces {how} with nothing {before}"),
                format!("use ${name} in one of those, or write {} if the shell is to expand it", how.replacen('$', "$$", 1)),
            ));
        }
        if self.env.file {
            // Set in the EnvironmentFile=, which cannot be read here.
            return None;
        }
        let fix = if self.shell.is_some() {
            format!(
                "set it with Environment={name}=..., or write {} if the shell is to expand it",
                how.replacen('$', "$$", 1)
            )
        } else {
            format!("set it with Environment={name}=... or EnvironmentFile=")
        };
        Some(self.problem(
            "warning",
            format!("systemd replaces {how} with nothing (it is not set in the unit) {before}"),
            fix,
        ))
    }
}

/// The problems of one Exec line's value.
fn check_exec(line: usize, key: &str, value: &str, env: &Env, out: &mut Vec<Problem>) {
    let Some(words) = split_words(value) else {
        out.push(Problem {
            line,
            severity: "error",
            message: format!("{key}: a quote is not closed: systemd refuses the line"),
            fix: "close the quote, or escape it with \\".into(),
        });
        return;
    };
    for command in words.split(|w| w.separator) {
        let mut texts: Vec<&str> = command.iter().map(|w| w.text.as_str()).collect();
        let Some(first) = texts.first_mut() else {
            continue;
        };
        // Prefixes: - @ : + ! !! | ; ':' turns variable substitution off.
        let prefix_len = first.len()
            - first
                .trim_start_matches(['-', '@', ':', '+', '!', '|'])
                .len();
        let substitutes = !first[..prefix_len].contains(':');
        *first = &first[prefix_len..];
        let shell = shell_code(&texts);
        let shell_vars = shell.map(|i| shell_assigned(texts[i]));
        for (i, word) in texts.iter().enumerate() {
            let is_code = shell == Some(i);
            for (at, spec) in specifiers(word) {
                if !SPECIFIERS.contains(spec) {
                    out.push(Problem {
                        line,
                        severity: "error",
                        message: format!(
                            "{key}: unknown specifier %{spec}: systemd refuses the line"
                        ),
                        fix: format!("write %%{spec} for a literal percent sign"),
                    });
                } else if spec != '%'
                    && (if is_code {
                        format_context(word, at)
                    } else {
                        word.starts_with('+')
                            || texts
                                .first()
                                .is_some_and(|p| FORMAT_COMMANDS.contains(&base(p)))
                    })
                {
                    out.push(Problem {
                        line,
                        severity: "error",
                        message: format!(
                            "{key}: systemd expands the specifier %{spec} {} before {} runs: the format '%{spec}' never reaches it",
                            if is_code { "inside the shell code" } else { "in the command line" },
                            if is_code { "the shell" } else { "the command" },
                        ),
                        fix: format!("write %%{spec}"),
                    });
                }
            }
            if !substitutes {
                continue;
            }
            let check = VarCheck {
                line,
                key,
                env,
                shell: if is_code { shell_vars.as_ref() } else { None },
            };
            out.extend(var_uses(word).iter().filter_map(|u| check.check(word, u)));
        }
        if let Some(code) = shell.map(|i| texts[i]) {
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
        }
    }
}

/// `s` with control characters (C0, DEL, C1) and bidi controls written as
/// escapes (`\n`, `\u{1b}`, `\u{202e}`): a message quotes the unit's own
/// text, and stays one line that cannot rewrite the terminal.
fn shown(s: &str) -> String {
    s.chars()
        .map(|c| {
            let bidi =
                ('\u{202a}'..='\u{202e}').contains(&c) || ('\u{2066}'..='\u{2069}').contains(&c);
            if c.is_control() || bidi {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The problems of the unit file text.
pub fn check(text: &str) -> Vec<Problem> {
    let mut out = problems(text);
    for p in &mut out {
        p.message = shown(&p.message);
        p.fix = shown(&p.fix);
    }
    out
}

fn problems(text: &str) -> Vec<Problem> {
    let mut out = Vec::new();
    let entries = entries(text);
    let env = Env::of(&entries);
    for (line, _section, key, value) in &entries {
        let line = *line;
        if EXEC_KEYS.contains(&key.as_str()) {
            check_exec(line, key, value, &env, &mut out);
        }
        if key == "Environment" {
            for w in split_words(value).unwrap_or_default() {
                let Some((name, v)) = w.text.split_once('=') else {
                    continue;
                };
                if let Some(VarUse::Word(n) | VarUse::Braced(n) | VarUse::Inside(n)) =
                    var_uses(v).first()
                {
                    out.push(Problem {
                        line,
                        severity: "warning",
                        message: format!("Environment={name}={v}: systemd does not expand variables here: {name} is set to the literal text '{v}', not the value of ${n}"),
                        fix: format!("write the value itself, e.g. Environment={name}=..."),
                    });
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
mod tests;
