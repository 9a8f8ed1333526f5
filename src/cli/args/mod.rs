//! The clap definitions: plain values, no system access; value parsers
//! that refuse what would only spin or never end.

use crate::model::{BadValue, Floor};
use crate::snapshot::GpuSelector;
use clap::{Args, Parser, Subcommand};
use help::{DO, LOOK, OUTPUT, TIMING, WHERE};
use std::path::PathBuf;

mod act;
mod bundle;
mod check;
mod fleet;
mod help;
mod record;
mod serve;
pub use act::{KillArgs, WaitArgs};
pub use bundle::BundleArgs;
pub use check::{CheckArgs, CheckFormat};
pub use fleet::FleetArgs;
pub use record::RecordArgs;
pub use serve::ServeArgs;

/// gpufree: who holds my GPU memory, why is it not free, and what exactly frees it.
#[derive(Debug, Parser)]
#[command(name = "gpufree", version, about, max_term_width = 100, after_help = help::STATUS, defer(help::all))]
pub struct Cli {
    /// Options every command takes.
    #[command(flatten)]
    pub common: Common,
    /// The command (default: status).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Options every command takes. Plain values: the paths among them are
/// read by the configuration step (`config.rs`) only, with the
/// environment, once gpufree knows whether its caller may steer it. Each
/// command's help shows those that apply to it (`help.rs`).
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// GPUs to look at: an index, a UUID or UUID prefix, a PCI bus id, or
    /// `all` (repeatable; default all).
    #[arg(long = "gpu", value_name = "SEL", global = true, help_heading = LOOK)]
    pub gpu: Vec<GpuSelector>,
    /// One JSON document on stdout, nothing else.
    #[arg(long, global = true, help_heading = OUTPUT)]
    pub json: bool,
    /// NVML library to load (default: the system's libnvidia-ml.so.1; env
    /// GPUFREE_NVML_LIB).
    ///
    /// Refused where gpufree runs with privileges its caller lacks (setuid, file capabilities),
    /// as are all path flags.
    #[arg(long, value_name = "PATH", global = true, help_heading = WHERE)]
    pub nvml_lib: Option<PathBuf>,
    /// Directory holding the GPU device nodes (default /dev; env
    /// GPUFREE_DEV_DIR).
    #[arg(long, value_name = "DIR", global = true, help_heading = WHERE)]
    pub dev_dir: Option<PathBuf>,
    /// The proc filesystem to scan (e.g. the host's /proc mounted at
    /// /host/proc; env GPUFREE_PROC_ROOT).
    #[arg(long, value_name = "DIR", global = true, help_heading = WHERE)]
    pub proc_root: Option<PathBuf>,
    /// The kubelet's pod-resources socket (env GPUFREE_KUBELET_SOCKET).
    ///
    /// Read when it exists, to join holders with the pods their GPUs are allocated to.
    #[arg(long, value_name = "PATH", global = true, help_heading = WHERE)]
    pub kubelet_socket: Option<PathBuf>,
    /// No colours (also: NO_COLOR, or stdout not a terminal).
    #[arg(long, global = true, help_heading = OUTPUT)]
    pub no_color: bool,
    /// Text lines as long as they are (default: the terminal's width, else
    /// COLUMNS, else 100 columns; --json is never cut).
    #[arg(long, global = true, help_heading = OUTPUT)]
    pub wide: bool,
    /// Print less; the exit code still says the outcome.
    ///
    /// Status prints no findings or footer, why no details or next commands, kill and wait no
    /// report; errors still go to stderr.
    #[arg(short, long, global = true, help_heading = OUTPUT)]
    pub quiet: bool,
    /// Print more to stderr (timings).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, help_heading = OUTPUT)]
    pub verbose: u8,
    /// How long one read may take (default 5s; env GPUFREE_READ_TIMEOUT).
    ///
    /// A read (a process's fds and maps, an NVML call) that takes longer counts as timed out,
    /// and the verdict as unknown.
    #[arg(long, value_name = "DUR", value_parser = read_timeout, global = true, help_heading = TIMING)]
    pub read_timeout: Option<std::time::Duration>,
    /// How far back to ask for per-process utilisation samples (default 5s).
    ///
    /// To tell idle holders: a look into the samples the driver keeps, not a wait.
    #[arg(long, value_name = "DUR", value_parser = idle_window, global = true, help_heading = TIMING)]
    pub idle_window: Option<std::time::Duration>,
    /// How holders are found: procfs, bpf or auto (default; env GPUFREE_SCAN).
    ///
    /// `procfs` reads every process's fds and maps through /proc; `bpf` walks them in the
    /// kernel with BPF iterators (needs root or CAP_BPF and CAP_PERFMON, and kernel BTF);
    /// `auto` takes the in-kernel walk for watch, serve and wait, and for one-shot commands
    /// where the host has enough open files to repay its load. Where the in-kernel walk cannot
    /// run, the /proc walk does, and the JSON's `visibility.scan_reason` says why.
    #[arg(long, value_name = "HOW", value_parser = scan_choice(), global = true, help_heading = WHERE)]
    pub scan: Option<crate::proc::scan::ScanChoice>,
    /// Read the snapshot from FILE (`-`: stdin) instead of this host.
    ///
    /// For status, why and check: a snapshot as `status --json` or `why --json` wrote it, on
    /// this host or another; they print what the live command printed when it was taken, marked
    /// as from FILE.
    #[arg(long, value_name = "FILE", global = true, help_heading = WHERE)]
    pub from: Option<PathBuf>,
    /// With --from a recording (`gpufree record`): the moment to show (default: its end).
    ///
    /// RFC 3339 (2026-12-05T20:43:40Z), Unix seconds, or a duration before the recording's end
    /// (-5m) or after its start (+30s).
    #[arg(long, value_name = "TIME", global = true, requires = "from", allow_hyphen_values = true, help_heading = WHERE)]
    pub at: Option<String>,
}

impl Common {
    /// The flags that name a path, library, socket or root on this host,
    /// each with whether it was given: refused where gpufree runs with
    /// privileges its caller lacks, and with `--from` (nothing is read
    /// from this host).
    pub fn host_paths(&self) -> [(bool, &'static str); 4] {
        [
            (self.nvml_lib.is_some(), "--nvml-lib"),
            (self.dev_dir.is_some(), "--dev-dir"),
            (self.proc_root.is_some(), "--proc-root"),
            (self.kubelet_socket.is_some(), "--kubelet-socket"),
        ]
    }
}

/// `--scan`: one of the choices, by name (clap lists them in the help and
/// in the error).
fn scan_choice() -> impl clap::builder::TypedValueParser<Value = crate::proc::scan::ScanChoice> {
    use crate::proc::scan::ScanChoice;
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(ScanChoice::ALL.map(ScanChoice::as_str))
        .map(|name| ScanChoice::named(&name).unwrap_or_default())
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per-GPU memory and every process holding GPU memory or a GPU device node.
    ///
    /// Run by a user who is not root, it asks the view of `gpufree serve
    /// --view-socket` where one answers (GPUFREE_VIEW_SOCKET, default
    /// /run/gpufree-view/view.sock; off: never), and says so.
    #[command(after_help = help::STATUS, defer(help::all))]
    Status,
    /// Why memory on the selected GPUs is not free, and the exact next command.
    ///
    /// Ordered findings, each with the exact next command. Exit 0 when
    /// free, 1 when something holds them, 3 when what could not be seen leaves it unknown. A user who is
    /// not root is answered by serve's view where one answers (as status).
    #[command(after_help = help::WHY, defer(help::all))]
    Why {
        /// Also say which holders `pkill -f REGEX` and `pkill REGEX` would hit
        /// and miss, and which other processes they would hit.
        #[arg(long, value_name = "REGEX", help_heading = LOOK)]
        pattern: Option<String>,
        /// text, or slurm: one line for `scontrol update ... reason=`.
        ///
        /// `gpufree: ` and the first finding, at most 100 bytes, as the Slurm prolog and epilog
        /// drain with.
        #[arg(long, value_enum, default_value = "text", help_heading = OUTPUT)]
        format: WhyFormat,
    },
    /// Free the selected GPUs (or PIDs) safely, and wait until the memory is back.
    ///
    /// Free the selected GPUs (or PIDs) safely, then wait until the memory is
    /// really released. Targets are always GPU holders; selectors narrow them.
    #[command(after_help = help::KILL, defer(help::live))]
    Kill(KillArgs),
    /// Block until the selected GPUs are free (systemd ExecStartPre=, Slurm prolog, CI).
    #[command(after_help = help::WAIT, defer(help::live))]
    Wait(WaitArgs),
    /// One verdict for monitors (node-problem-detector, Nagios, Slurm).
    ///
    /// For node-problem-detector, Nagios or Slurm's health check: leftover holders, memory unaccounted past a grace
    /// period, stuck or zombie holders, NVML failing, unknown verdicts.
    #[command(after_help = help::CHECK, defer(help::all))]
    Check(CheckArgs),
    /// The fleet's nodes whose GPUs are not free, from Prometheus.
    ///
    /// Most memory held first, with their holders and the command to run on
    /// each. Exit 0 when all are free, 1 when some are not, 3 when
    /// Prometheus cannot answer or a node's data is stale.
    #[command(defer(help::no_snapshot))]
    Fleet(FleetArgs),
    /// Live terminal view: GPU memory bars, the holders, the top finding; kill from the view.
    #[command(after_help = help::WATCH, defer(help::live))]
    Watch {
        /// Screen and memory refresh (at least 100ms).
        #[arg(long, value_name = "DUR", default_value = "1s", value_parser = refresh_interval, help_heading = TIMING)]
        interval: std::time::Duration,
        /// A full holder scan at least this often (at least 1s).
        ///
        /// Also on a holder's exit, a change of NVML's process lists, and the r key.
        #[arg(long, value_name = "DUR", default_value = "60s", value_parser = scan_interval, help_heading = TIMING)]
        scan_every: std::time::Duration,
        /// Also append the audit record of each kill (the k key) to FILE, as
        /// `gpufree kill --audit-log` does.
        #[arg(long, value_name = "FILE", help_heading = OUTPUT)]
        audit_log: Option<PathBuf>,
        /// Step through a recording (`gpufree record --out FILE`) instead of the live host.
        #[arg(long, value_name = "FILE", help_heading = LOOK)]
        replay: Option<PathBuf>,
    },
    /// Prometheus metrics over HTTP.
    ///
    /// Read-only; a cached snapshot of the
    /// --gpu selection, refreshed every --interval: GET /metrics, and
    /// GET /healthz (200 while the snapshot is fresh, else 503).
    #[command(after_help = help::SERVE, defer(help::live))]
    Serve(ServeArgs),
    /// Record a timeline of holders, memory, verdicts, findings and kills into FILE.
    ///
    /// A full snapshot at start and every --full-every, only what changed between; read it back
    /// with `why --from FILE --at TIME`. Stops on SIGINT or SIGTERM.
    #[command(defer(help::live))]
    Record(RecordArgs),
    /// The same metrics once, on stdout or atomically into FILE (node_exporter's
    /// textfile collector).
    #[command(defer(help::live))]
    Metrics {
        /// Write here instead of stdout, atomically.
        ///
        /// An exclusively created temporary file in FILE's directory, mode 0644 (0600 with
        /// --label-cmdline), renamed over FILE. FILE must be absent or a regular file: a
        /// symlink, device or FIFO there is refused (exit 2).
        #[arg(long, value_name = "FILE", help_heading = OUTPUT)]
        output: Option<PathBuf>,
        /// Add each holder's command line as a label (may hold secrets).
        #[arg(long, help_heading = OUTPUT)]
        label_cmdline: bool,
    },
    /// One archive for a bug report or an incident review: status and why, versions, audit
    /// records, the holders' unit files; command lines and environments left out unless asked.
    ///
    /// Prints the listing of what it holds and what it left out. Exit 0 written, 2 usage (an
    /// existing --out, a symlink), 3 not collected or not written.
    #[command(defer(help::live))]
    Bundle(BundleArgs),
    /// Prepare the in-kernel walk once per boot (root; gpufree-prepare.service).
    ///
    /// Relocate the in-kernel walk to this boot's kernel and keep it
    /// (GPUFREE_BPF_CACHE), so that no later command pays it; and keep the
    /// walk loaded and verified for the boot, pinned in a BPF file system
    /// (GPUFREE_BPF_PIN, default /sys/fs/bpf/gpufree: a program and four
    /// maps), so that a one-shot command run as root pays no load either.
    /// Where the pins cannot be made it says NOT pinned and why, and the
    /// exit stays the cache's. Removing that directory (or a reboot) undoes
    /// them; GPUFREE_BPF_PIN=off makes none. Root only, run at boot by
    /// gpufree-prepare.service. Exit 0 kept, 1 nothing to keep (the cache
    /// off, a kernel without the walk), 3 not kept, 5 not root.
    #[command(after_help = help::PREPARE, defer(help::no_snapshot))]
    Prepare,
    /// Check a systemd unit for the mistakes that keep GPUs busy or hidden.
    ///
    /// Looks for $ and % substitution in Exec lines, KillMode=process, PrivateDevices=yes,
    /// inline nvidia-smi wait loops). Exit 0 when clean, 1 with problems.
    #[command(defer(help::no_snapshot))]
    Doctor {
        /// The unit file (or drop-in) to read.
        #[arg(long, value_name = "FILE", help_heading = WHERE)]
        unit: PathBuf,
    },
    /// Print shell completions (generated from this command line's definition).
    #[command(defer(help::no_report))]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff, generated from this command line's
    /// definition), or write one page per command into a directory (--dir DIR).
    #[command(defer(help::no_report))]
    Man {
        /// Write gpufree.1 and one gpufree-COMMAND.1 per command here.
        #[arg(long, value_name = "DIR", help_heading = OUTPUT)]
        dir: Option<PathBuf>,
    },
    /// Replay the reference incident on the simulator, with real processes.
    #[command(defer(help::no_snapshot))]
    Demo {
        /// Keep the incident running until Enter, to try other tools on it.
        #[arg(long, help_heading = DO)]
        hold: bool,
    },
    /// The simulated NVML library.
    #[command(subcommand, defer(help::no_report))]
    Sim(SimCommand),
}

/// `why --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WhyFormat {
    /// For a person (`--json`: the JSON document).
    Text,
    /// A drain reason for Slurm.
    Slurm,
}

/// A duration of at least `min_ms` milliseconds; a shorter one is refused
/// with its `floor` (the floors below).
pub(super) fn duration_at_least(
    s: &str,
    min_ms: u64,
    floor: Floor,
) -> Result<std::time::Duration, BadValue> {
    let d = crate::units::parse_duration(s)?;
    if d < std::time::Duration::from_millis(min_ms) {
        return Err(BadValue::Below {
            text: s.into(),
            min_ms,
            floor,
        });
    }
    Ok(d)
}

/// `kill --timeout`: it must leave time to signal, wait and check.
pub(super) fn kill_timeout(s: &str) -> Result<std::time::Duration, BadValue> {
    duration_at_least(s, 100, Floor::Kill)
}

/// `--read-timeout`: a shorter one would call every read hung.
pub(super) fn read_timeout(s: &str) -> Result<std::time::Duration, BadValue> {
    duration_at_least(s, 10, Floor::Read)
}

/// `--idle-window`: at least one of the driver's sample periods (tens of
/// milliseconds to a few seconds by GPU).
pub(super) fn idle_window(s: &str) -> Result<std::time::Duration, BadValue> {
    duration_at_least(s, 100, Floor::Sample)
}

/// `serve`'s connection deadlines: no request could arrive in less.
pub(super) fn serve_timeout(s: &str) -> Result<std::time::Duration, BadValue> {
    duration_at_least(s, 100, Floor::Request)
}

/// `wait --interval`: how often to look.
pub(super) fn wait_interval(s: &str) -> Result<std::time::Duration, BadValue> {
    duration_at_least(s, 10, Floor::Spins)
}

/// `watch --interval` and `serve --interval`: a screen or a snapshot.
pub(super) fn refresh_interval(s: &str) -> Result<std::time::Duration, BadValue> {
    duration_at_least(s, 100, Floor::Spins)
}

/// `watch --scan-every`: a full holder scan.
pub(super) fn scan_interval(s: &str) -> Result<std::time::Duration, BadValue> {
    duration_at_least(s, 1000, Floor::Spins)
}

pub(super) fn parse_signal(s: &str) -> Result<rustix::process::Signal, BadValue> {
    use rustix::process::Signal;
    // `term`, `SIGTERM`, `sigterm`, `15`; "SIG" stripped once.
    let up = s.trim().to_ascii_uppercase();
    let name = up.strip_prefix("SIG").unwrap_or(&up);
    let sig = match name {
        "TERM" | "15" => Signal::TERM,
        "INT" | "2" => Signal::INT,
        "HUP" | "1" => Signal::HUP,
        "QUIT" | "3" => Signal::QUIT,
        "USR1" | "10" => Signal::USR1,
        "USR2" | "12" => Signal::USR2,
        "KILL" | "9" => Signal::KILL,
        _ => return Err(BadValue::Signal(s.into())),
    };
    Ok(sig)
}

/// `gpufree sim ...`.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Print the directory holding the simulated libnvidia-ml.so.1.
    Lib,
    /// Run a program (gpufree, pynvml, gpustat, nvitop...) against the simulated GPUs in FILE.
    Exec {
        /// The simulator's state file.
        #[arg(long, value_name = "FILE", help_heading = WHERE)]
        state: PathBuf,
        /// The command and its arguments.
        #[arg(last = true, required = true, value_name = "CMD")]
        cmd: Vec<String>,
    },
}

#[cfg(test)]
mod tests;
