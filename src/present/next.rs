//! The small words of findings: the next command as a line a shell runs,
//! a process as a finding names it, memory and nodes, counts and GPU
//! lists.

use super::words::gpu_list;
use crate::diagnose::supervisors::{stop_unit, wait_for};
use crate::model::{DeviceUse, FleetNode, Next, NotProtected, Who};
use crate::safe::{shell_command, shell_word, width};
use crate::units::mib;

/// The next command as a line to paste (empty for none).
pub fn next_line(n: &Next) -> String {
    match n {
        Next::Nothing => String::new(),
        Next::Kill(pids) => kill_command(pids),
        Next::KillTree(pid) => format!("gpufree kill --tree {pid}"),
        Next::KillUnit(unit) => kill_by("--unit", unit),
        Next::KillMatch(pattern) => kill_by("--match", pattern),
        Next::KillProtected(pid) => format!("gpufree kill --force-protected --pid {pid}"),
        // The diagnosis names only what prints safely: an empty line
        // never stands for a command here.
        Next::StopUnit { unit, gpus } => stop_unit(unit, gpus).unwrap_or_default(),
        Next::StopService(service) => format!("systemctl stop {service}"),
        Next::QuitMps => "echo quit | nvidia-cuda-mps-control".into(),
        Next::FindPod(uid) => format!(
            "kubectl get pods --all-namespaces -o custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,UID:.metadata.uid,OWNER:.metadata.ownerReferences[0].kind/.metadata.ownerReferences[0].name | grep {uid}"
        ),
        Next::PodOwner { namespace, name } => shell_command(&[
            "kubectl",
            "-n",
            namespace,
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.metadata.ownerReferences[*].kind}/{.metadata.ownerReferences[*].name}",
        ])
        .unwrap_or_default(),
        Next::ScaleDeployment {
            namespace,
            deployment,
            gpus,
        } => shell_command(&[
            "kubectl",
            "-n",
            namespace,
            "scale",
            &format!("deployment/{deployment}"),
            "--replicas",
            "0",
        ])
        .map(|stop| format!("{stop} && {}", wait_for(gpus)))
        .unwrap_or_default(),
        Next::StopAgent { pid, gpus } => format!("kill -s TERM {pid} && {}", wait_for(gpus)),
        Next::Reap(parent) => format!("kill -s CHLD {parent}"),
        Next::WaitKernel(gpus) => format!("{} --timeout 300s", wait_for(gpus)),
        Next::SeeVisibility => "gpufree why --json  # see visibility and unavailable".into(),
        Next::AsRoot => "sudo gpufree why".into(),
        Next::OnHost => "nsenter --target 1 --pid --mount -- gpufree why".into(),
        Next::Why(gpus) => format!(
            "gpufree {}",
            [vec!["why".to_string()], gpus.args()].concat().join(" ")
        ),
        Next::Reset(gpu) => format!("nvidia-smi --gpu-reset -i {gpu}"),
        Next::Reboot => "systemctl reboot".into(),
    }
}

/// `gpufree fleet`'s next step on a node: `ssh HOST gpufree why --gpu
/// N...`, where HOST is a plain host name ([`plain_host`]); None
/// otherwise (see [`fleet_by_hand`]).
pub fn fleet_command(n: &FleetNode) -> Option<String> {
    if !plain_host(&n.host) {
        return None;
    }
    let mut argv = vec!["ssh", n.host.as_str(), "gpufree", "why"];
    let gpus: Vec<String> = n.gpus.iter().map(|g| g.gpu.to_string()).collect();
    for g in &gpus {
        argv.extend(["--gpu", g.as_str()]);
    }
    shell_command(&argv)
}

/// Whether `host` is one ssh takes for a host name and nothing else, and
/// that no `ProxyCommand` or `Match exec` expanding `%h` can run: letters,
/// digits, `.`, `-`, `_`, `:` and `[]` (an IPv6 literal) only, not
/// starting with `-`, at most 253 bytes (no `user@`, no `ssh://`, no
/// shell's characters, no look-alike letters).
pub fn plain_host(host: &str) -> bool {
    let plain =
        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']');
    !host.is_empty() && host.len() <= 253 && !host.starts_with('-') && host.bytes().all(plain)
}

/// What to run on a node whose host is no safe ssh host, and where.
pub fn fleet_by_hand(n: &FleetNode, name_max: usize) -> String {
    let gpus: Vec<String> = n.gpus.iter().map(|g| g.gpu.to_string()).collect();
    format!(
        "gpufree why --gpu {} on {} (its name is not a safe ssh host)",
        gpus.join(" --gpu "),
        crate::safe::fit(&n.node, name_max)
    )
}

/// The `gpufree kill` command that targets exactly these PIDs (empty for
/// none).
pub fn kill_command(pids: &[u32]) -> String {
    if pids.is_empty() {
        return String::new();
    }
    let mut cmd = String::from("gpufree kill");
    for p in pids {
        cmd.push_str(&format!(" --pid {p}"));
    }
    cmd
}

/// `gpufree kill FLAG VALUE` for a value from outside, or `FLAG=VALUE`
/// when the value starts with `-` (so that it is never read as a flag).
fn kill_by(flag: &str, value: &str) -> String {
    let mut argv = vec!["gpufree".to_string(), "kill".to_string()];
    if value.starts_with('-') {
        argv.push(format!("{flag}={value}"));
    } else {
        argv.extend([flag.to_string(), value.to_string()]);
    }
    shell_command(&argv).unwrap_or_default()
}

/// A process as a finding names it:
/// `9635 VLLM::Worker_TP ('VLLM::Worker_TP0') [vLLM worker]`.
pub fn who(w: &Who) -> String {
    let cmd = &w.cmdline;
    let mut s = if cmd.is_empty() || *cmd == w.comm {
        format!("{} {}", w.pid, w.comm)
    } else {
        let head = format!("{} {} ('", w.pid, w.comm);
        let cmd = super::columns::command_in(cmd, width(&head) + 2);
        format!("{head}{cmd}')")
    };
    if let Some(role) = w.role {
        s.push_str(&format!(" [{}]", super::words::role(role)));
    }
    if let Some(pid) = w.container_pid {
        s.push_str(&format!(" = PID {pid} in its container"));
    }
    if let Some(why) = &w.not_protected {
        s.push_str(&format!(" [not protected: {}]", not_protected(why)));
    }
    s
}

/// Why a process that runs (or is named like) a driver daemon or display
/// server is not protected, in words.
pub fn not_protected(why: &NotProtected) -> String {
    match why {
        NotProtected::UntrustedExe => {
            "its executable is not a file only root could have placed".into()
        }
        NotProtected::PersonsAccount => {
            "a system daemon's program run by a person's account".into()
        }
        NotProtected::Preload { variable, value } => {
            format!("{variable}={} in its environment", shorten(value, 60))
        }
        NotProtected::ForeignCode { path } => format!(
            "it runs code mapped from {}, outside the system's library directories",
            shorten(path, 60)
        ),
        NotProtected::UserNamespace => {
            "run by a person's account in a user namespace of its own".into()
        }
        NotProtected::InASession => "a system daemon's program run in a person's session".into(),
        NotProtected::Unverified { unread } => {
            format!("run by a person's account, and its {unread} could not be read")
        }
    }
}

/// `96,610 MiB on GPU 0, 2,048 MiB on GPU 1`.
pub(super) fn memory(m: &[(u32, Option<u64>)]) -> String {
    m.iter()
        .map(|(gpu, bytes)| format!("{} on GPU {gpu}", bytes.map_or("n/a".into(), mib)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `nvidia0 (fd+mmap), nvidiactl (fd)`.
pub(super) fn nodes(devices: &[DeviceUse]) -> String {
    devices
        .iter()
        .map(|d| {
            let name = d.path.rsplit('/').next().unwrap_or(&d.path);
            let via: Vec<String> = d
                .via
                .iter()
                .map(|v| format!("{v:?}").to_lowercase())
                .collect();
            format!("{name} ({})", via.join("+"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `GPU 3` or `GPUs 0-7`.
pub(super) fn gpus_phrase(gpus: &[u32]) -> String {
    let list = gpu_list(gpus);
    if list.contains([',', '-']) {
        format!("GPUs {list}")
    } else {
        format!("GPU {list}")
    }
}

/// `1 process`, `2 processes`.
pub(super) fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `one` for one, else `many`.
pub(super) fn one_or(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// At most `max` characters, then `...`.
pub(super) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(max).collect::<String>())
    }
}

/// `s` in single quotes for a message (not for pasting): shell-quoted
/// where it can be, else as it is (the writer escapes it).
pub(crate) fn quoted(s: &str) -> String {
    shell_word(s).unwrap_or_else(|| format!("'{s}'"))
}
