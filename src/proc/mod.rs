//! Collection from /proc and the device directory: pure parsers
//! ([`parse`], [`owner`]), device-node discovery ([`nodes`]), the holder
//! scan ([`scan`]), where a task in D waits ([`wait`]), and the
//! heuristics that read a process's identity ([`looks_renamed`]).
//!
//! The roots (`/proc`, `/dev`) are values, so tests point them at temporary
//! trees as well as at the live system.

pub mod bpf;
pub mod caps;
pub mod drm;
pub mod me;
pub mod mounts;
pub mod nodes;
pub mod owner;
pub mod parse;
pub mod restart;
pub mod scan;
pub mod wait;

/// Whether `st` is owned by root and writable by no one else.
pub(crate) fn root_only(st: &rustix::fs::Stat) -> bool {
    st.st_uid == 0 && st.st_mode & 0o022 == 0
}

/// The file name of a path, without a trailing " (deleted)".
fn base(path: &str) -> &str {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether `name` (a comm or an `argv[0]` base name) plausibly names the
/// program `exe_base`: equal, a prefix either way (`python3` runs
/// `python3.11`; comm is cut at 15 bytes), or a login shell's `-bash`.
fn names_program(name: &str, exe_base: &str) -> bool {
    let name = name.strip_prefix('-').unwrap_or(name);
    !name.is_empty() && (exe_base.starts_with(name) || name.starts_with(exe_base))
}

/// Whether `comm` plausibly names the program at `exe` (a process that
/// started that program again and has not renamed itself yet).
pub fn names_exe(comm: &str, exe: Option<&str>) -> bool {
    exe.is_some_and(|e| names_program(comm, base(e)))
}

/// Whether a process has renamed itself (setproctitle, `prctl(PR_SET_NAME)`):
/// its `argv[0]` no longer names its executable, or its comm names neither
/// the executable nor its first two arguments (a script run by an
/// interpreter has comm = the script's name). Kernel threads and processes
/// whose exe cannot be read are never called renamed: there is nothing to
/// compare.
pub fn looks_renamed(comm: &str, cmdline: &[String], exe: Option<&str>) -> bool {
    let Some(exe) = exe.filter(|e| !e.is_empty()) else {
        return false;
    };
    let exe_base = base(exe);
    let Some(argv0) = cmdline.first() else {
        return false; // zombies and kernel threads have no cmdline
    };
    let argv0_base = base(argv0.split(' ').next().unwrap_or(argv0));
    if !names_program(argv0_base, exe_base) {
        return true;
    }
    let comm_ok = names_program(comm, exe_base)
        || cmdline.iter().take(2).any(|a| {
            let b = base(a);
            b.starts_with(comm) || (comm.len() >= 15 && b.as_bytes().starts_with(comm.as_bytes()))
        });
    !comm_ok
}

/// Processes that are never part of a kill by default: NVIDIA's driver
/// daemons (persistence, fabric manager, DCGM host engine, MPS) and display
/// servers. A GPU reset fails while they hold the GPU. (gpufree itself
/// never opens a GPU node; the kill path protects its own PID and ancestors.)
pub const PROTECTED: &[&str] = &[
    "nvidia-persistenced",
    "nv-fabricmanager",
    "nv-hostengine",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-powerd",
    "dcgm-exporter",
    "Xorg",
    "X",
    "Xwayland",
    "gnome-shell",
    "kwin_wayland",
];

/// Lowest UID of a person's account (login.defs UID_MIN); daemons run
/// below it.
const UID_MIN: u32 = 1000;

/// Protected programs that people run under their own accounts: a desktop
/// session, a user's MPS daemon. The others are system daemons: run by a
/// person's account (the real binary with LD_PRELOAD, say), they are that
/// person's code, not the daemon.
const RUN_BY_USERS: &[&str] = &[
    "Xorg",
    "X",
    "Xwayland",
    "gnome-shell",
    "kwin_wayland",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
];

/// Whether a process is protected: its exe's file name is a driver daemon's
/// or display server's and the file is one only root could have put there
/// (`exe_trusted`), so that a user's copy of python named
/// `nvidia-persistenced` is not one. When the exe cannot be read (another
/// user's process, for a gpufree that is not root), comm decides, and only
/// for a system account. comm is cut at 15 bytes, so names are compared on
/// their first 15 bytes there.
pub fn is_protected(comm: &str, exe: Option<&str>, exe_trusted: bool, uid: u32) -> bool {
    match exe.filter(|e| !e.is_empty()) {
        Some(exe) => {
            let name = base(exe);
            exe_trusted
                && PROTECTED.contains(&name)
                && (uid < UID_MIN || RUN_BY_USERS.contains(&name))
        }
        None => {
            uid < UID_MIN
                && PROTECTED
                    .iter()
                    .any(|p| *p == comm || (comm.len() == 15 && p.starts_with(comm)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{is_protected, looks_renamed};

    #[test]
    fn protected_daemons_by_exe_or_comm() {
        let exe = Some("/usr/bin/nvidia-persistenced");
        assert!(is_protected("nvidia-persiste", exe, true, 998));
        // A user's own copy of the daemon is not one, nor the real binary
        // run by a person's account.
        assert!(!is_protected("nvidia-persiste", exe, false, 1000));
        assert!(!is_protected("nvidia-persiste", exe, true, 1000));
        assert!(is_protected(
            "Xwayland",
            Some("/usr/bin/Xwayland"),
            true,
            1000
        ));
        assert!(is_protected("nvidia-persiste", None, false, 998));
        assert!(!is_protected("nvidia-persiste", None, false, 1000));
        assert!(is_protected("Xorg", Some("/usr/lib/xorg/Xorg"), true, 0));
        assert!(!is_protected(
            "python3",
            Some("/usr/bin/python3.12"),
            true,
            0
        ));
        // A renamed worker cannot make itself protected: the exe decides.
        assert!(!is_protected("Xorg", Some("/usr/bin/python3.12"), true, 0));
    }

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn setproctitle_workers_are_renamed() {
        assert!(looks_renamed(
            "VLLM::Worker_TP",
            &argv(&["VLLM::Worker_TP0"]),
            Some("/usr/bin/python3.12")
        ));
        assert!(looks_renamed(
            "pt_data_worker",
            &argv(&["python3", "train.py"]),
            Some("/usr/bin/python3.11")
        ));
    }

    #[test]
    fn ordinary_programs_are_not() {
        let py = Some("/usr/bin/python3.11");
        assert!(!looks_renamed(
            "python3",
            &argv(&["python3", "train.py"]),
            py
        ));
        assert!(!looks_renamed(
            "python",
            &argv(&["/opt/conda/bin/python", "-m", "x"]),
            py
        ));
        // A script run through its shebang: comm is the script's name.
        assert!(!looks_renamed(
            "vllm",
            &argv(&["/usr/bin/python3", "/usr/local/bin/vllm", "serve"]),
            py
        ));
        assert!(!looks_renamed(
            "bash",
            &argv(&["-bash"]),
            Some("/usr/bin/bash")
        ));
        assert!(!looks_renamed(
            "Xorg",
            &argv(&["/usr/lib/xorg/Xorg", ":0"]),
            Some("/usr/lib/xorg/Xorg")
        ));
        assert!(!looks_renamed(
            "nvidia-persiste",
            &argv(&["/usr/bin/nvidia-persistenced"]),
            Some("/usr/bin/nvidia-persistenced")
        ));
        assert!(!looks_renamed(
            "gpu",
            &argv(&["/tmp/gpu"]),
            Some("/tmp/gpu (deleted)")
        ));
    }

    #[test]
    fn unknown_exe_or_empty_cmdline_is_not_renamed() {
        assert!(!looks_renamed("kworker/0:1", &[], None));
        assert!(!looks_renamed("x", &[], Some("/bin/x")));
        assert!(!looks_renamed("x", &argv(&["y"]), None));
    }
}
