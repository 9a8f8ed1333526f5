//! The words of why a process is a kill's target (`model::Target`): the
//! plan's `reason`, the audit record's, and what MPS processes are to the
//! plan (`model::MpsPart`).

use super::verdict::holds;
use crate::model::{Held, Left, MpsPart, NotOurProc, Target, UsersOwn, With};
use crate::units::mib;

/// Why a process is a target, in one line: `holds 1,024 MiB on GPU 0;
/// started with the memory holders`.
pub fn target(t: &Target) -> String {
    let mut out = format!("holds {}", holds(&t.holds));
    if let Some(w) = &t.with {
        out = format!("{out}; {}", with(w));
    }
    if let Some(u) = &t.users_own {
        out = format!("{out}; {}", users_own(u));
    }
    if let Some(m) = &t.mps {
        out = format!("{out}; {}", mps_part(m));
    }
    out
}

/// Why a process is left out of a kill, in one line.
pub fn left(l: &Left) -> String {
    match l {
        Left::Init => "PID 1 (init) is never signalled".into(),
        Left::Itself => "gpufree itself".into(),
        Left::Ancestor => "an ancestor of gpufree (its shell or service)".into(),
        Left::KernelThread => "a kernel thread".into(),
        Left::Protected { comm } => format!(
            "protected ({comm}): a driver daemon or display server; --force-protected to include it"
        ),
        Left::NotYours { user, uid, runs_for } => {
            format!("owned by {user} (uid {uid}), gpufree runs for uid {runs_for}: run as root (sudo gpufree kill, the same arguments)")
        }
        Left::Zombie { parent } => {
            format!("a zombie: it has exited already; parent {parent} must reap it")
        }
        Left::ListedNotHolder => "listed by NVML, but the process with this PID holds no GPU device node: not the memory's owner, never a target".into(),
        Left::NoHolder => "holds no GPU memory and no GPU device node: never a target".into(),
        Left::Mps { part } => mps_part(part),
        Left::ProcNotOurs { root } => not_ours(*root).into(),
        Left::Said { text } => text.clone(),
    }
}

/// Why nothing is signalled through another namespace's /proc.
pub const FOREIGN_PROC: &str =
    "/proc is not this PID namespace's proc file system: its PIDs may name other processes here, so nothing is signalled";

/// Why a kill signals nothing through this proc root.
pub fn not_ours(root: NotOurProc) -> &'static str {
    match root {
        NotOurProc::OtherRoot => {
            "--proc-root: kill signals only processes of this PID namespace's /proc"
        }
        NotOurProc::Foreign => FOREIGN_PROC,
    }
}

/// How a target came in beside the selectors' match.
fn with(w: &With) -> String {
    match w {
        With::StartedWithHolders => "started with the memory holders".into(),
        With::IncludeShared => "--include-shared".into(),
        With::ForkedBy { target } => format!("forked by target {target}"),
        With::OrphanOf { target } => {
            format!("forked in target {target}'s process group and left as an orphan")
        }
        With::StartedAgainBy { owner } => format!("started again by {owner}"),
    }
}

/// A person's own protected daemon.
fn users_own(u: &UsersOwn) -> String {
    let what = if u.mps {
        "MPS daemon"
    } else {
        "display server"
    };
    format!(
        "{}'s own {what}: protected only in {}'s kills",
        u.user, u.user
    )
}

/// What a process of the plan is to MPS.
pub fn mps_part(m: &MpsPart) -> String {
    let list = |pids: &[u32]| {
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match m {
        MpsPart::Client { servers } if servers.is_empty() => {
            "an MPS client: its memory is freed when it exits".into()
        }
        MpsPart::Client { servers } => format!(
            "an MPS client of server {}: its memory is freed when it exits",
            list(servers)
        ),
        MpsPart::Server { clients: 0, target, .. } => format!(
            "the MPS server, with no client{}",
            if *target {
                ""
            } else {
                "; protected, left running; stop MPS with `echo quit | nvidia-cuda-mps-control`"
            }
        ),
        MpsPart::Server {
            spared,
            target: true,
            ..
        } if spared.is_empty() => "the MPS server: its clients are targets too".into(),
        MpsPart::Server {
            spared,
            target: true,
            ..
        } => format!(
            "the MPS server: killing it ends the CUDA contexts of its clients {}, which fail and lose their GPU state",
            list(spared)
        ),
        MpsPart::Server { spared, .. } => format!(
            "the MPS server: protected, left running; it holds its clients' memory, which each client's exit frees; once no client is left, stop MPS with `echo quit | nvidia-cuda-mps-control` (killing the server while clients run ends their CUDA contexts){}",
            if spared.is_empty() { String::new() } else { format!("; clients not targeted: {}", list(spared)) }
        ),
        MpsPart::Control => "the MPS control daemon: protected, left running; once no client is left, `echo quit | nvidia-cuda-mps-control` stops it and its servers".into(),
    }
}

/// Why a GPU's memory does not count as back: `GPU 0: 900 MiB used
/// (expected at most 12 MiB), NVML still lists [41]`.
pub fn held(h: &Held) -> String {
    match h {
        Held::NotReported { gpu } => format!("GPU {gpu}: NVML did not report it"),
        Held::Unreadable { gpu } => format!("GPU {gpu}: its memory could not be read"),
        Held::Over {
            gpu,
            used,
            limit,
            listed,
        } => {
            let mut out = format!(
                "GPU {gpu}: {} used (expected at most {})",
                mib(*used),
                mib(*limit)
            );
            if !listed.is_empty() {
                out = format!("{out}, NVML still lists {listed:?}");
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{held, left, target};
    use crate::model::{Held, Holds, Left, MpsPart, NotOurProc, OnGpu, Target, UsersOwn, With};

    #[test]
    fn a_target_reads_holds_then_how_then_whose_then_mps() {
        let t = Target {
            holds: Holds::Memory {
                on: vec![
                    OnGpu {
                        gpu: 0,
                        bytes: Some(1 << 30),
                    },
                    OnGpu {
                        gpu: 1,
                        bytes: None,
                    },
                ],
            },
            with: Some(With::ForkedBy { target: 41 }),
            users_own: Some(UsersOwn {
                user: "alice".into(),
                mps: true,
            }),
            mps: Some(MpsPart::Server {
                clients: 2,
                spared: Vec::new(),
                target: true,
            }),
        };
        assert_eq!(
            target(&t),
            "holds 1,024 MiB on GPU 0, n/a on GPU 1; forked by target 41; alice's own MPS daemon: protected only in alice's kills; the MPS server: its clients are targets too"
        );
    }

    #[test]
    fn what_is_left_out_and_what_still_holds_read_as_before() {
        let not_yours = Left::NotYours {
            user: "bob".into(),
            uid: 1001,
            runs_for: 1000,
        };
        assert_eq!(
            left(&not_yours),
            "owned by bob (uid 1001), gpufree runs for uid 1000: run as root (sudo gpufree kill, the same arguments)"
        );
        assert_eq!(
            left(&Left::ProcNotOurs {
                root: NotOurProc::OtherRoot
            }),
            "--proc-root: kill signals only processes of this PID namespace's /proc"
        );
        let over = Held::Over {
            gpu: 0,
            used: 900 << 20,
            limit: 12 << 20,
            listed: vec![41],
        };
        assert_eq!(
            held(&over),
            "GPU 0: 900 MiB used (expected at most 12 MiB), NVML still lists [41]"
        );
    }
}
