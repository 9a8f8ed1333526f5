//! The words of `doctor`'s problems: what is wrong with a unit's line
//! and what to write instead, from the typed [`Mistake`]. Unescaped: the
//! caller escapes the unit's own words (`present::doctor`).

use crate::doctor::{Mistake, Var};

/// `$NAME` or `${NAME}`, as the unit wrote it.
fn written(v: &Var) -> String {
    if v.braced {
        format!("${{{}}}", v.name)
    } else {
        format!("${}", v.name)
    }
}

/// `$$NAME` or `$${NAME}`: the same, left for the shell.
fn for_the_shell(v: &Var) -> String {
    format!("${}", written(v))
}

/// When systemd substitutes.
fn before(in_shell: bool) -> &'static str {
    if in_shell {
        "before the shell runs"
    } else {
        "before the command runs"
    }
}

/// `ExecStop= and ExecStopPost=`: keys as a list.
fn keys_list(keys: &[&str]) -> String {
    let named: Vec<String> = keys.iter().map(|k| format!("{k}=")).collect();
    match named.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

/// What is wrong, in one line (the unit's words unescaped).
pub fn message(m: &Mistake) -> String {
    variable_message(m).unwrap_or_else(|| line_message(m))
}

/// The message of a mistake with a variable; None for the others.
fn variable_message(m: &Mistake) -> Option<String> {
    let said = match m {
        Mistake::Inside { key, name, word } => format!(
            "{key}: systemd substitutes ${name} only as a word of its own: the program gets the literal text '{word}'"
        ),
        Mistake::Extended { key, name, word } => format!(
            "{key}: systemd does not expand ${{{name}:...}} on command lines: the program gets the literal text '{word}'"
        ),
        Mistake::Dropped { key, word } => {
            format!("{key}: '{word}' is not a variable name: systemd drops this argument")
        }
        Mistake::ShellVariable {
            key,
            var,
            unit_sets,
        } => {
            let with = if *unit_sets {
                "the unit's Environment= value"
            } else {
                "nothing"
            };
            format!(
                "{key}: systemd replaces {} with {with} {}: {} is the shell's variable, not the unit's",
                written(var),
                before(true),
                var.name
            )
        }
        Mistake::OnlyFor {
            key,
            var,
            keys,
            main_process,
            in_shell,
        } => format!(
            "{key}: systemd sets ${} only for {}{}: here it replaces {} with nothing {}",
            var.name,
            keys_list(keys),
            if *main_process {
                " (once the main process is known)"
            } else {
                ""
            },
            written(var),
            before(*in_shell)
        ),
        Mistake::Unset { key, var, in_shell } => format!(
            "{key}: systemd replaces {} with nothing (it is not set in the unit) {}",
            written(var),
            before(*in_shell)
        ),
        _ => return None,
    };
    Some(said)
}

/// The message of a mistake that is not a variable's ([`variable_message`]
/// words those).
fn line_message(m: &Mistake) -> String {
    match m {
        Mistake::Unclosed { key } => format!("{key}: a quote is not closed: systemd refuses the line"),
        Mistake::UnknownSpecifier { key, spec } => {
            format!("{key}: unknown specifier %{spec}: systemd refuses the line")
        }
        Mistake::FormatSpecifier {
            key,
            spec,
            in_shell,
        } => format!(
            "{key}: systemd expands the specifier %{spec} {} before {} runs: the format '%{spec}' never reaches it",
            if *in_shell { "inside the shell code" } else { "in the command line" },
            if *in_shell { "the shell" } else { "the command" },
        ),
        Mistake::WaitLoop { key } => format!("{key}: an inline shell loop over nvidia-smi to wait for free GPUs is fragile (quoting, $ and % substitution, no timeout, no reason when it fails)"),
        Mistake::EnvironmentLiteral { name, value, var } => format!("Environment={name}={value}: systemd does not expand variables here: {name} is set to the literal text '{value}', not the value of ${var}"),
        Mistake::KillModeProcess => "KillMode=process: a stop signals only the main process; workers (renamed ones too) survive and keep the GPU memory".into(),
        Mistake::KillModeNone => "KillMode=none: a stop kills nothing; every GPU process outlives the unit".into(),
        Mistake::PrivateDevices => "PrivateDevices=yes hides /dev/nvidia* from the service: CUDA finds no GPU".into(),
        Mistake::Inside { .. }
        | Mistake::Extended { .. }
        | Mistake::Dropped { .. }
        | Mistake::ShellVariable { .. }
        | Mistake::OnlyFor { .. }
        | Mistake::Unset { .. } => String::new(),
    }
}

/// What to write instead (the unit's words unescaped).
pub fn fix(m: &Mistake) -> String {
    match m {
        Mistake::Inside { name, .. } => format!("write ${{{name}}} inside a word"),
        Mistake::Extended { name, .. } => {
            format!("give {name} its value with Environment= and write ${{{name}}}")
        }
        Mistake::Dropped { .. } => "write ${NAME} for a variable, $$ for a literal $".into(),
        Mistake::ShellVariable { var, .. } => format!(
            "write {} so the shell sees {}",
            for_the_shell(var),
            written(var)
        ),
        Mistake::OnlyFor { var, .. } => format!(
            "use ${} in one of those, or write {} if the shell is to expand it",
            var.name,
            for_the_shell(var)
        ),
        Mistake::Unset {
            var,
            in_shell: true,
            ..
        } => format!(
            "set it with Environment={}=..., or write {} if the shell is to expand it",
            var.name,
            for_the_shell(var)
        ),
        Mistake::Unset { var, .. } => {
            format!(
                "set it with Environment={}=... or EnvironmentFile=",
                var.name
            )
        }
        Mistake::Unclosed { .. } => "close the quote, or escape it with \\".into(),
        Mistake::UnknownSpecifier { spec, .. } => {
            format!("write %%{spec} for a literal percent sign")
        }
        Mistake::FormatSpecifier { spec, .. } => format!("write %%{spec}"),
        Mistake::WaitLoop { .. } => {
            "ExecStartPre=/usr/bin/gpufree wait --gpu all --timeout 120s".into()
        }
        Mistake::EnvironmentLiteral { name, .. } => {
            format!("write the value itself, e.g. Environment={name}=...")
        }
        Mistake::KillModeProcess => "KillMode=control-group (the default), or mixed".into(),
        Mistake::KillModeNone => "KillMode=control-group".into(),
        Mistake::PrivateDevices => {
            "PrivateDevices=no, or DeviceAllow=/dev/nvidia* rw with DevicePolicy=closed".into()
        }
    }
}
