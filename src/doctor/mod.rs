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

mod exec;
mod words;

use exec::{check_exec, Env};

use words::{split_words, var_uses, VarUse};

/// One problem in a unit file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line number.
    pub line: usize,
    /// `error` (the unit misbehaves) or `warning` (likely to).
    pub severity: &'static str,
    /// What is wrong, as a value; its message and fix in words are
    /// `present::words::doctor`'s.
    pub mistake: Mistake,
}

/// A variable as an Exec line names it: `$NAME` or `${NAME}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Var {
    /// Its name.
    pub name: String,
    /// Written `${NAME}`.
    pub braced: bool,
}

/// What is wrong with a line of a unit. `key` is the Exec line's key
/// (`ExecStartPre`), `word` the argument as systemd split it, `in_shell`
/// whether the word is shell code (systemd substitutes before the shell
/// runs, not before the command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mistake {
    /// `$NAME` inside a word, outside shell code: left as it is.
    Inside {
        /// The Exec key.
        key: String,
        /// The variable.
        name: String,
        /// The word it is in.
        word: String,
    },
    /// `${NAME:-x}` outside shell code: left as it is.
    Extended {
        /// The Exec key.
        key: String,
        /// The variable.
        name: String,
        /// The word it is in.
        word: String,
    },
    /// A `$` before no variable name: the argument is dropped.
    Dropped {
        /// The Exec key.
        key: String,
        /// The word.
        word: String,
    },
    /// A shell's own variable, which systemd substitutes first (with the
    /// unit's value where `unit_sets`, else nothing).
    ShellVariable {
        /// The Exec key.
        key: String,
        /// The variable as written.
        var: Var,
        /// The unit sets a variable of that name.
        unit_sets: bool,
    },
    /// A variable systemd sets only for the Exec keys `keys` (after the
    /// main process is known where `main_process`).
    OnlyFor {
        /// The Exec key.
        key: String,
        /// The variable as written.
        var: Var,
        /// The keys it is set for.
        keys: &'static [&'static str],
        /// Set once the main process is known.
        main_process: bool,
        /// The word is shell code.
        in_shell: bool,
    },
    /// A variable the unit does not set.
    Unset {
        /// The Exec key.
        key: String,
        /// The variable as written.
        var: Var,
        /// The word is shell code.
        in_shell: bool,
    },
    /// A quote is not closed: systemd refuses the line.
    Unclosed {
        /// The Exec key.
        key: String,
    },
    /// `%x` systemd does not know: it refuses the line.
    UnknownSpecifier {
        /// The Exec key.
        key: String,
        /// The letter after `%`.
        spec: char,
    },
    /// `%x` meant as a format (`date +%s`), which systemd expands first.
    FormatSpecifier {
        /// The Exec key.
        key: String,
        /// The letter after `%`.
        spec: char,
        /// The word is shell code.
        in_shell: bool,
    },
    /// An inline shell loop over nvidia-smi waiting for free GPUs.
    WaitLoop {
        /// The Exec key.
        key: String,
    },
    /// `Environment=NAME=$VAR`: not expanded there.
    EnvironmentLiteral {
        /// The name set.
        name: String,
        /// Its value as written.
        value: String,
        /// The variable the value names.
        var: String,
    },
    /// `KillMode=process`.
    KillModeProcess,
    /// `KillMode=none`.
    KillModeNone,
    /// `PrivateDevices=yes`.
    PrivateDevices,
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

/// Variables systemd sets only for some commands, with those commands,
/// and whether only once the main process is known.
const COMMAND_VARS: &[(&str, &[&str], bool)] = &[
    (
        "MAINPID",
        &["ExecStartPost", "ExecReload", "ExecStop", "ExecStopPost"],
        true,
    ),
    ("SERVICE_RESULT", &["ExecStop", "ExecStopPost"], false),
    ("EXIT_CODE", &["ExecStop", "ExecStopPost"], false),
    ("EXIT_STATUS", &["ExecStop", "ExecStopPost"], false),
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

/// The problems of the unit file text.
pub fn check(text: &str) -> Vec<Problem> {
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
                        mistake: Mistake::EnvironmentLiteral {
                            name: name.to_string(),
                            value: v.to_string(),
                            var: n.clone(),
                        },
                    });
                }
            }
        }
        match (key.as_str(), value.as_str()) {
            ("KillMode", "process") => out.push(Problem {
                line,
                severity: "warning",
                mistake: Mistake::KillModeProcess,
            }),
            ("KillMode", "none") => out.push(Problem {
                line,
                severity: "error",
                mistake: Mistake::KillModeNone,
            }),
            ("PrivateDevices", "yes" | "true" | "1" | "on") => out.push(Problem {
                line,
                severity: "error",
                mistake: Mistake::PrivateDevices,
            }),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests;
