//! The checks of one `Exec*=` line: variables the unit does not set,
//! specifiers systemd would expand inside shell code, and gpufree commands
//! that would block or fail there.

use super::{
    Mistake, Problem, Var, COMMAND_VARS, FORMAT_COMMANDS, SHELL_VARS, SPECIFIERS, SYSTEMD_VARS,
};
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
    fn problem(&self, severity: &'static str, mistake: Mistake) -> Problem {
        Problem {
            line: self.line,
            severity,
            mistake,
        }
    }

    fn check(&self, word: &str, u: &VarUse) -> Option<Problem> {
        let var = match u {
            VarUse::Word(n) => Var {
                name: n.clone(),
                braced: false,
            },
            VarUse::Braced(n) => Var {
                name: n.clone(),
                braced: true,
            },
            _ => return self.not_substituted(word, u),
        };
        if let Some(p) = self.shell_variable(&var) {
            return Some(p);
        }
        self.unset(var)
    }

    /// A `$` systemd does not substitute: the program gets it literally,
    /// which is a problem unless a shell expands it.
    fn not_substituted(&self, word: &str, u: &VarUse) -> Option<Problem> {
        let key = self.key.to_string();
        let word = word.to_string();
        match u {
            VarUse::Inside(n) if self.shell.is_none() => Some(self.problem(
                "warning",
                Mistake::Inside {
                    key,
                    name: n.clone(),
                    word,
                },
            )),
            VarUse::Extended(n) if self.shell.is_none() => Some(self.problem(
                "warning",
                Mistake::Extended {
                    key,
                    name: n.clone(),
                    word,
                },
            )),
            VarUse::Dropped => Some(self.problem("warning", Mistake::Dropped { key, word })),
            // Left for the shell, which expands it itself.
            _ => None,
        }
    }

    /// A shell variable (the shell code's own, or one every shell sets)
    /// that systemd substitutes before the shell can.
    fn shell_variable(&self, var: &Var) -> Option<Problem> {
        let shell_vars = self.shell?;
        let name = var.name.as_str();
        if !shell_vars.contains(name) && !SHELL_VARS.contains(&name) {
            return None;
        }
        Some(self.problem(
            "error",
            Mistake::ShellVariable {
                key: self.key.to_string(),
                var: var.clone(),
                unit_sets: self.env.set.contains(name),
            },
        ))
    }

    /// A variable the unit does not set here: set only for other lines,
    /// or not at all (unless an `EnvironmentFile=` may set it).
    fn unset(&self, var: Var) -> Option<Problem> {
        let name = var.name.as_str();
        if self.env.set.contains(name) || SYSTEMD_VARS.contains(&name) {
            return None;
        }
        let (key, in_shell) = (self.key.to_string(), self.shell.is_some());
        if let Some((_, keys, main_process)) = COMMAND_VARS.iter().find(|(n, _, _)| *n == name) {
            if keys.contains(&self.key) {
                return None;
            }
            return Some(self.problem(
                "warning",
                Mistake::OnlyFor {
                    key,
                    var,
                    keys,
                    main_process: *main_process,
                    in_shell,
                },
            ));
        }
        if self.env.file {
            // Set in the EnvironmentFile=, which cannot be read here.
            return None;
        }
        Some(self.problem("warning", Mistake::Unset { key, var, in_shell }))
    }
}

/// The problems of one Exec line's value.
pub(super) fn check_exec(line: usize, key: &str, value: &str, env: &Env, out: &mut Vec<Problem>) {
    let Some(words) = split_words(value) else {
        out.push(Problem {
            line,
            severity: "error",
            mistake: Mistake::Unclosed { key: key.into() },
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
                mistake: Mistake::UnknownSpecifier {
                    key: key.into(),
                    spec,
                },
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
                mistake: Mistake::FormatSpecifier {
                    key: key.into(),
                    spec,
                    in_shell: is_code,
                },
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
            mistake: Mistake::WaitLoop { key: key.into() },
        });
    }
}
