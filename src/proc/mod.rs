//! Collection from /proc and the device directory: pure parsers
//! ([`parse`], [`owner`]), device-node discovery ([`nodes`]), the holder
//! scan ([`scan`]), where a task in D waits ([`wchan`]), and the
//! heuristics that read a process's identity ([`looks_renamed`];
//! [`protect`]: whether it is a driver daemon or display server no kill
//! includes by default).
//!
//! The roots (`/proc`, `/dev`) are values, so tests point them at temporary
//! trees as well as at the live system.

pub mod bpf;
pub mod bundle;
pub mod caps;
pub mod drm;
pub mod kmsg;
pub mod me;
pub mod mounts;
pub mod nodes;
pub mod owner;
pub mod parse;
pub mod protect;
pub mod restart;
pub mod scan;
pub mod wchan;

use crate::model::{base, names_program};

/// Whether `st` is owned by root and writable by no one else.
pub(crate) fn root_only(st: &rustix::fs::Stat) -> bool {
    st.st_uid == 0 && st.st_mode & 0o022 == 0
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
    crate::model::rename_of(comm, cmdline, exe).is_some()
}

#[cfg(test)]
mod tests {
    use super::looks_renamed;

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
