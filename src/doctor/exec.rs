//! The checks of one `Exec*=` line: variables the unit does not set,
//! specifiers systemd would expand inside shell code, and gpufree commands
//! that would block or fail there.

use super::{Problem, COMMAND_VARS, FORMAT_COMMANDS, SHELL_VARS, SPECIFIERS, SYSTEMD_VARS};
use crate::doctor::words::{
    base, format_context, shell_assigned, shell_code, specifiers, split_words, var_uses, VarUse,
};
use std::collections::BTreeSet;

/// What the unit says about its environment.
#[derive(Debug, Default)]
pub(super) struct Env {
    /// Names set with `Environment=` (after any reset) or `PassEnvironment=`.
    set: BTreeSet<String>,
    /// An `EnvironmentFile=` is named: any variable may come from it.
    file: bool,
}

impl Env {
    pub(super) fn of(entries: &[(usize, String, String, String)]) -> Env {
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
pub(super) struct VarCheck<'a> {
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
        let (name, how) = match u {
            VarUse::Word(n) => (n, format!("${n}")),
            VarUse::Braced(n) => (n, format!("${{{n}}}")),
            _ => return self.not_substituted(word, u),
        };
        if let Some(p) = self.shell_variable(name, &how) {
            return Some(p);
        }
        self.unset(name, &how)
    }

    /// A `$` systemd does not substitute: the program gets it literally,
    /// which is a problem unless a shell expands it.
    fn not_substituted(&self, word: &str, u: &VarUse) -> Option<Problem> {
        match u {
            VarUse::Inside(n) if self.shell.is_none() => Some(self.problem(
                "warning",
                format!("systemd substitutes ${n} only as a word of its own: the program gets the literal text '{word}'"),
                format!("write ${{{n}}} inside a word"),
            )),
            VarUse::Extended(n) if self.shell.is_none() => Some(self.problem(
                "warning",
                format!("systemd does not expand ${{{n}:...}} on command lines: the program gets the literal text '{word}'"),
                format!("give {n} its value with Environment= and write ${{{n}}}"),
            )),
            VarUse::Dropped => Some(self.problem(
                "warning",
                format!("'{word}' is not a variable name: systemd drops this argument"),
                "write ${NAME} for a variable, $$ for a literal $".into(),
            )),
            // Left for the shell, which expands it itself.
            _ => None,
        }
    }

    /// When systemd's substitution happens: before the shell or the command.
    fn before(&self) -> &'static str {
        if self.shell.is_some() {
            "before the shell runs"
        } else {
            "before the command runs"
        }
    }

    /// A shell variable (the shell code's own, or one every shell sets)
    /// that systemd substitutes before the shell can.
    fn shell_variable(&self, name: &str, how: &str) -> Option<Problem> {
        let shell_vars = self.shell?;
        if !shell_vars.contains(name) && !SHELL_VARS.contains(&name) {
            return None;
        }
        let with = if self.env.set.contains(name) {
            "the unit's Environment= value"
        } else {
            "nothing"
        };
        Some(self.problem(
            "error",
            format!("systemd replaces {how} with {with} {}: {name} is the shell's variable, not the unit's", self.before()),
            format!("write {} so the shell sees {how}", how.replacen('$', "$$", 1)),
        ))
    }

    /// A variable the unit does not set here: set only for other lines,
    /// or not at all (unless an `EnvironmentFile=` may set it).
    fn unset(&self, name: &str, how: &str) -> Option<Problem> {
        let before = self.before();
        if self.env.set.contains(name) || SYSTEMD_VARS.contains(&name) {
            return None;
        }
        if let Some((_, keys, where_)) = COMMAND_VARS.iter().find(|(n, _, _)| *n == name) {
            if keys.contains(&self.key) {
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
pub(super) fn check_exec(line: usize, key: &str, value: &str, env: &Env, out: &mut Vec<Problem>) {
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
            check_specifiers(line, key, &texts, word, is_code, out);
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
            check_wait_loop(line, key, code, out);
        }
    }
}

/// The `%` specifiers of one word of a command (`texts`): unknown ones,
/// and those systemd expands where a format (`date +%s`, printf, shell
/// code) meant them literally.
fn check_specifiers(
    line: usize,
    key: &str,
    texts: &[&str],
    word: &str,
    is_code: bool,
    out: &mut Vec<Problem>,
) {
    for (at, spec) in specifiers(word) {
        if !SPECIFIERS.contains(spec) {
            out.push(Problem {
                line,
                severity: "error",
                message: format!("{key}: unknown specifier %{spec}: systemd refuses the line"),
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
}

/// An inline shell loop over nvidia-smi waiting for free GPUs: `gpufree
/// wait` does that job.
fn check_wait_loop(line: usize, key: &str, code: &str, out: &mut Vec<Problem>) {
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
