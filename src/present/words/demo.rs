//! The demo's narration (`gpufree demo`): the story's lines as the
//! operator reads them, and what the demo says when it cannot set the
//! incident up. Product text: `tests/it/demo.rs` reads it.

use crate::model::Process;
use std::path::Path;

/// The story's title.
pub const TITLE: &str =
    "gpufree demo: the seed incident, replayed with real processes on simulated GPUs";

/// The host and the processes started: the launcher's, the tracker's and
/// the first and last worker's PIDs.
pub fn host(launcher: &str, tracker: &str, first: &str, last: &str) -> String {
    format!(
        "An 8-GPU vLLM host (8 x RTX PRO 6000 Blackwell, 97,887 MiB each). Started here:\n  \
         launcher VLLM::EngineCore (pid {launcher}), resource tracker (pid {tracker}),\n  \
         8 workers that renamed themselves VLLM::Worker_TP0..7 (pids {first}..{last}),\n  \
         each worker holding 96,610 MiB on its GPU."
    )
}

/// Where the incident's files are.
pub fn files(dev: &Path, state: &Path) -> String {
    format!(
        "device dir {}, simulator state {}",
        dev.display(),
        state.display()
    )
}

/// The operator's `pkill -f` with `pattern`, computed and never run.
pub fn pkill(pattern: &str) -> String {
    format!("$ pkill -9 -f \"{pattern}\"    (computed here, never run)")
}

/// How many of the GPU holders `pkill -f` would signal.
pub fn would_signal(hits: usize, holders: usize) -> String {
    format!("  would signal {hits} of the {holders} GPU holders")
}

/// A renamed holder `pkill -f` misses.
pub fn misses(p: &Process) -> String {
    format!(
        "  misses {:>7} {:<16} cmdline is now \"{}\", exe {}",
        p.pid,
        p.comm,
        p.cmdline_joined(),
        p.exe.as_deref().unwrap_or("?")
    )
}

/// The operator's `ps aux | grep`, computed over the holders.
pub const PS_GREP: &str = "$ ps aux | grep -E \"python|vllm\"    (computed over the holders)";

/// What `ps aux | grep` does not show.
pub const NOT_SHOWN: &str =
    "(the eight workers and the launcher do not show: they renamed themselves)";

/// `gpufree status` on the incident.
pub const STATUS: &str = "$ gpufree status";

/// The theory the incident's operator started from.
pub const FIRST_THEORY: &str = "The operator's first theory: \"CUDA memory stays pinned after process death in LXC containers; reset the GPUs.\"";

/// `gpufree why` on the incident.
pub const WHY: &str = "$ gpufree why";

/// The kill.
pub const KILL: &str = "$ gpufree kill --yes    (the demo signals only the processes it started)";

/// `gpufree status --quiet` after it.
pub const STATUS_QUIET: &str = "$ gpufree status --quiet";

/// The story's last line: the GPUs are free again, or not.
pub fn ending(free: bool) -> &'static str {
    if free {
        "All 8 GPUs are free again: no driver bug, no GPU reset; 10 processes by identity, and the release confirmed."
    } else {
        "The GPUs did not come back: see above."
    }
}

/// `demo --hold`: what to try on the incident (`me`, this gpufree as a
/// shell word), then how to end it.
pub fn hold(me: &str, state: &Path, dev: &Path) -> String {
    let (state, dev) = (state.display(), dev.display());
    format!(
        "\nThe incident keeps running. Try, in another terminal:\n  \
         {me} sim exec --state {state} -- {me} status --dev-dir {dev}\n  \
         {me} sim exec --state {state} -- nvitop -1\n\
         Press Enter to end it."
    )
}

/// The demo would signal a process it did not start.
pub fn stranger(pid: u32) -> String {
    format!("refusing to kill PID {pid}: the demo did not start it")
}

/// What the demo could not do setting the incident up.
pub const NO_TEMP_DIR: &str = "cannot create a temporary directory";

/// The demo could not find its own binary.
pub const NO_BINARY: &str = "cannot find the gpufree binary";

/// The demo could not link itself under a Python's name.
pub const NO_PYTHON_LINK: &str = "cannot link the gpufree binary as python3.12";

/// The demo could not start the incident's processes.
pub const NO_PROCESSES: &str = "cannot start the incident's processes";

/// The demo could not create `path`.
pub fn cannot_create(path: &Path) -> String {
    format!("cannot create {}", path.display())
}

/// The demo could not write `path`.
pub fn cannot_write(path: &Path) -> String {
    format!("cannot write {}", path.display())
}

/// A holder process (`argv0`) ended (`status`) before it said it was
/// ready.
pub fn holder_exited(argv0: &str, status: &dyn std::fmt::Display) -> String {
    format!("holder {argv0} exited before it was ready ({status})")
}
