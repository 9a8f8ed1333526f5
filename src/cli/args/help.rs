//! How the help reads: the headings every command's flags sit under, the
//! global flags each command hides because they do not apply to it, and
//! the examples and exit codes after the flags.

use clap::Command;

/// Which processes and GPUs, and what counts.
pub(super) const LOOK: &str = "What to look at";
/// What is done to them.
pub(super) const DO: &str = "What to do";
/// Durations: deadlines, intervals, look backs.
pub(super) const TIMING: &str = "Timing";
/// What is printed or written, and where.
pub(super) const OUTPUT: &str = "Output";
/// Where gpufree looks: roots, libraries, sockets, files.
pub(super) const WHERE: &str = "Where to look";

/// The headings, in the order every command's help lists them.
const HEADINGS: [&str; 5] = [LOOK, DO, TIMING, OUTPUT, WHERE];

/// Where a global flag's line goes under its heading: after the
/// command's own flags.
const AFTER_OWN: usize = 1000;

/// Hides the global flags for which `keep` says no (the flags stay
/// accepted: `gpufree --gpu 0 sim lib` parses as before) and lists the
/// others after the command's own. Run as a command's `defer`, once its
/// parent has handed it the global flags.
fn hide_globals(cmd: Command, keep: fn(&clap::Arg) -> bool) -> Command {
    in_heading_order(cmd).mut_args(|a| {
        if !a.is_global_set() {
            a
        } else if keep(&a) {
            let order = AFTER_OWN + a.get_display_order();
            a.display_order(order)
        } else {
            a.hide(true)
        }
    })
}

/// The command's flags moved into [`HEADINGS`]' order (clap lists the
/// headings in the order of their first flag; `mut_arg` moves a flag to
/// the end), so that every command's help reads in the same order.
fn in_heading_order(cmd: Command) -> Command {
    let ids: Vec<clap::Id> = HEADINGS
        .iter()
        .flat_map(|h| {
            cmd.get_arguments()
                .filter(|a| a.get_help_heading() == Some(*h))
                .map(|a| a.get_id().clone())
                .collect::<Vec<_>>()
        })
        .collect();
    ids.iter().fold(cmd, |cmd, id| cmd.mut_arg(id, |a| a))
}

/// A command that takes every global flag (status, why, check).
pub(super) fn all(cmd: Command) -> Command {
    hide_globals(cmd, |_| true)
}

/// A command that looks at this host now: everything but `--from`.
pub(super) fn live(cmd: Command) -> Command {
    hide_globals(cmd, |a| a.get_id() != "from" && a.get_id() != "at")
}

/// A command that takes no snapshot of this host: only the output flags.
pub(super) fn no_snapshot(cmd: Command) -> Command {
    hide_globals(cmd, |a| a.get_help_heading() == Some(OUTPUT))
}

/// A command that prints no report (a script, a page, a path, another
/// program): no global flag.
pub(super) fn no_report(cmd: Command) -> Command {
    hide_globals(cmd, |_| false)
}

/// `gpufree status` (and plain `gpufree`).
pub(super) const STATUS: &str = "\
Examples:
  gpufree                          every GPU and every holder
  gpufree status --gpu 0 --json    GPU 0 as one JSON document
  sudo gpufree status              also the processes of other users

Exit codes:
  0  shown
  2  usage error
  3  environment error (no NVML, no GPU node, /proc unreadable)";

/// `gpufree why`.
pub(super) const WHY: &str = "\
Examples:
  gpufree why --gpu 0                    why GPU 0 is not free, and what frees it
  gpufree why --pattern 'python train'   what `pkill -f 'python train'` would hit and miss
  gpufree why --format slurm             one line for scontrol's reason=
  gpufree why --from snapshot.json       judge a snapshot taken with --json

Exit codes:
  0  free
  1  something holds the selected GPUs
  2  usage error
  3  unknown: part of the state could not be seen (the message names what)";

/// `gpufree kill`.
pub(super) const KILL: &str = "\
Examples:
  gpufree kill --gpu 0 --dry-run         the plan for GPU 0, nothing signalled
  gpufree kill --gpu 0 --yes             free GPU 0 without asking
  gpufree kill --tree 4242 --grace 30s   a launcher and its workers, KILL after 30s
  ExecStopPost=gpufree kill --unit %n --yes   (a systemd unit's leftovers)

Exit codes:
  0  freed, the memory released (or nothing to free)
  2  usage error
  3  unknown: the release could not be seen (no NVML: --holders-only)
  4  some targets survived or the memory was not released
  5  refused for safety (a protected process, no confirmation)";

/// `gpufree wait`.
pub(super) const WAIT: &str = "\
Examples:
  gpufree wait --gpu 0 --timeout 2m      block until GPU 0 is free
  gpufree wait --max-used 512MiB         free enough: at most 512 MiB used
  gpufree wait --timeout 0               check once
  ExecStartPre=gpufree wait --gpu 0 --timeout 120s

Exit codes:
  0  free
  1  not free by --timeout
  2  usage error
  3  unknown: part of the state could not be seen (no NVML: --holders-only)";

/// `gpufree check`.
pub(super) const CHECK: &str = "\
Examples:
  gpufree check                          the verdict for a person
  gpufree check --format nagios          a Nagios or Icinga plugin
  gpufree check --format npd             node-problem-detector's custom plugin
  gpufree check --format slurm --ignore idle   Slurm's HealthCheckProgram

Exit codes (text and json; npd, nagios and slurm use their consumer's own):
  0  ok
  1  a warning or a critical problem
  2  usage error
  3  unknown";

/// `gpufree watch`.
pub(super) const WATCH: &str = "\
Examples:
  gpufree watch                          all GPUs, refreshed every second
  gpufree watch --gpu 0 --interval 500ms
  sudo gpufree watch --audit-log /var/log/gpufree.log   kill from the view (k)

Exit codes:
  0  quit
  2  usage error
  3  environment error (no terminal, no NVML, /proc unreadable)";

/// `gpufree serve`.
pub(super) const SERVE: &str = "\
Examples:
  gpufree serve                          http://127.0.0.1:9835/metrics
  gpufree serve --listen 0.0.0.0:9835 --interval 30s
  gpufree serve --view-socket /run/gpufree-view/view.sock   status for non-root users

Exit codes:
  0  stopped
  2  usage error (e.g. --label-cmdline without --expose-cmdlines-over-http)
  3  environment error (the address taken, no GPU)";

/// `gpufree prepare`.
pub(super) const PREPARE: &str = "\
Examples:
  sudo gpufree prepare                   once per boot (gpufree-prepare.service)
  sudo gpufree prepare --json

Exit codes:
  0  kept (made now, or already there)
  1  nothing to keep (GPUFREE_BPF_CACHE off, or a kernel without the walk)
  3  not kept (the walk does not load, the cache refused); stderr says why
  5  refused: not root";
