//! The environment every gpufree a test starts gets, kept once for both
//! test binaries (tests/it and tests/docs include this file): the build's
//! own BPF cache, no walk a host's `gpufree prepare` pinned, no kernel log
//! of the machine's, and no process root or read timeout from the caller.
//! So no test's gpufree writes the machine's /run, takes its pins or shows
//! its Xids.

use std::process::Command;

/// The directory where the gpufree the tests run keep this boot's
/// relocation of the in-kernel walk (`GPUFREE_BPF_CACHE`): in the build's
/// own scratch directory, never the machine's /run.
pub const BPF_CACHE: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/bpf-cache");

/// Each variable and its value; `None` removes it.
pub const TEST_ENV: &[(&str, Option<&str>)] = &[
    ("GPUFREE_BPF_CACHE", Some(BPF_CACHE)),
    // Not a walk the machine's gpufree prepare pinned: a test names its own.
    ("GPUFREE_BPF_PIN", Some("off")),
    // Not the machine's kernel log: a test names its fixture.
    ("GPUFREE_KMSG", Some("off")),
    ("GPUFREE_PROC_ROOT", None),
    ("GPUFREE_READ_TIMEOUT", None),
];

/// Gives `cmd` (gpufree itself, or anything that starts it: a shell, tmux,
/// setpriv, a daemon running a hook) [`TEST_ENV`]. The test process's own
/// environment is never changed; what the caller sets after this wins.
pub fn scratch(cmd: &mut Command) -> &mut Command {
    for (key, value) in TEST_ENV {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    cmd
}
