//! The options of `gpufree kill` and `gpufree wait`.

use super::help::{DO, LOOK, OUTPUT, TIMING};
use super::{kill_timeout, parse_signal, wait_interval};
use clap::Args;
use std::path::PathBuf;

/// `gpufree kill` flags.
#[derive(Debug, Args)]
pub struct KillArgs {
    /// A holder's PID (repeatable).
    #[arg(help_heading = LOOK, long, value_name = "PID")]
    pub pid: Vec<u32>,
    /// Holders whose comm, whole command line or exe path matches REGEX.
    #[arg(help_heading = LOOK, long = "match", value_name = "REGEX")]
    pub matcher: Option<String>,
    /// Holders of this user (name or UID).
    #[arg(help_heading = LOOK, long, value_name = "NAME|UID")]
    pub user: Option<String>,
    /// Holders of this systemd unit, container id, pod UID or Slurm job.
    #[arg(help_heading = LOOK, long, value_name = "NAME")]
    pub unit: Option<String>,
    /// Holders that are PID or descend from it (a launcher and its workers).
    ///
    /// Through parents that hold no GPU themselves.
    #[arg(help_heading = LOOK, long, value_name = "PID")]
    pub tree: Option<u32>,
    /// Print the plan and stop.
    #[arg(help_heading = DO, long)]
    pub dry_run: bool,
    /// Do not ask (without a terminal and without --yes, gpufree refuses).
    #[arg(help_heading = DO, long, short = 'y')]
    pub yes: bool,
    /// First signal: TERM, INT, HUP, QUIT, USR1, USR2 or KILL.
    #[arg(help_heading = DO, long, value_name = "SIG", default_value = "TERM", value_parser = parse_signal)]
    pub signal: rustix::process::Signal,
    /// How long to wait after the first signal before SIGKILL.
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "10s", value_parser = crate::units::parse_duration)]
    pub grace: std::time::Duration,
    /// The whole kill ends within DUR.
    ///
    /// Signals, grace and the wait for the memory, after confirmation; a grace longer than that
    /// is cut to it.
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "60s", value_parser = kill_timeout)]
    pub timeout: std::time::Duration,
    /// Do not wait for the memory.
    #[arg(help_heading = DO, long)]
    pub no_wait: bool,
    /// Watch DUR for a holder that a supervisor starts again (0: do not).
    ///
    /// Once the memory is back; up to 5s more while a process the targets' parent started
    /// meanwhile has not opened a GPU yet.
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "1s", value_parser = crate::units::parse_duration)]
    pub settle: std::time::Duration,
    /// Without NVML, call the memory released once no holder is left
    /// (otherwise the release is unknown: exit 3).
    #[arg(help_heading = DO, long)]
    pub holders_only: bool,
    /// Also signal protected daemons (nvidia-persistenced, DCGM, MPS, Xorg...). Never implied.
    #[arg(help_heading = DO, long)]
    pub force_protected: bool,
    /// Also signal holders of only shared nodes (nvidia-uvm, nvidiactl) that
    /// belong to no targeted group.
    #[arg(help_heading = DO, long)]
    pub include_shared: bool,
    /// Also append the kill's audit record to FILE.
    ///
    /// One JSON line per kill (created 0600; a symlink or non-regular file is refused). The
    /// record always goes to the journal (or syslog) too.
    #[arg(help_heading = OUTPUT, long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
}

/// `gpufree wait` flags.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Free means at most SIZE used (512MiB, 2GiB, 0). Default: no holder
    /// processes and used memory at the idle baseline.
    #[arg(help_heading = DO, long, value_name = "SIZE", value_parser = crate::units::parse_size)]
    pub max_used: Option<u64>,
    /// Give up after DUR (0 = check once).
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "300s", value_parser = crate::units::parse_duration)]
    pub timeout: std::time::Duration,
    /// How often to look (at least 10ms).
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "200ms", value_parser = wait_interval)]
    pub interval: std::time::Duration,
    /// Without NVML, call the GPUs free when no process holds them
    /// (otherwise the verdict is unknown: exit 3).
    #[arg(help_heading = DO, long)]
    pub holders_only: bool,
}
