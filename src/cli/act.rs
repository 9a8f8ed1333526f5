//! `kill` and `wait`: the plan, the prompt, the execution and the
//! outcomes; what they print is written in `present` (`kill`, `wait`).

use super::spinner::Spinner;
use super::{collector, shown, snapshot_error, verdict_outcome};
use crate::act::kill::{self, Plan, Selectors};
use crate::cli::args::{KillArgs, WaitArgs};
use crate::cli::config::Settings;
use crate::cli::error::{Error, Outcome};
use crate::model::VerdictState;
use crate::model::{Selection, Snapshot};
use crate::present::kill::{write_kill_command, write_plan_json, write_question, Killed};
use crate::present::wait::{write_wait_command, Waited};
use crate::present::Printer;
use crate::snapshot::Config;
use crate::{pipeline, snapshot};
use std::io::Write;

/// `gpufree kill`: select, plan, show the plan, confirm, signal, wait for
/// the memory, report.
pub(super) fn run_kill(s: &Settings, args: &KillArgs, printer: &Printer) -> Result<Outcome, Error> {
    let c = collector(s, s.collect.clone(), None)?;
    kill::may_signal(&c).map_err(Error::KillRefused)?;
    let snap = pipeline::judged(&c).map_err(|e| snapshot_error(s, e))?;
    let (sel, indexes) = selectors(s, args, &snap)?;
    let safety = kill::Safety {
        force_protected: args.force_protected,
        include_shared: args.include_shared,
        ..kill::Safety::current()
    };
    let plan = kill::plan(&snap, &sel, &safety);
    let mut out = printer.guard(std::io::stdout().lock());
    // Not locked: the progress bar draws on stderr from its own thread.
    let mut err = printer.guard(std::io::stderr());
    let plan_shown = show_plan(args, &snap, &plan, printer, &mut out, &mut err);
    // Nothing will be signalled: the plan is the answer. Where only
    // protected daemons (nvidia-persistenced on every node) hold the
    // selected GPUs, within their slack, the GPUs are free: done, not
    // refused (a Slurm epilog after a clean job must not drain the node).
    let refused = plan.targets.is_empty() && plan.skipped.iter().any(|k| k.refused);
    let free = refused && kill::nothing_to_free(&snap, &sel, &plan, &indexes);
    if args.dry_run || refused {
        let mut written = plan_shown.and_then(|()| {
            if printer.json() {
                write_plan_json(&mut out, &snap, &plan).and_then(|()| out.flush())
            } else {
                Ok(())
            }
        });
        if free && !printer.quiet() && !printer.json() {
            let which = crate::present::why::selected(&indexes);
            written = written.and_then(|()| {
                crate::present::kill::write_only_protected(&mut out, &which, indexes.count() != 1)
            });
        }
        let outcome = if args.dry_run || free {
            Outcome::Done
        } else {
            Outcome::Refused
        };
        return shown(written, outcome);
    }
    // Never signal what the operator could not be shown.
    plan_shown.map_err(Error::PlanNotShown)?;
    if !plan.targets.is_empty() && !args.yes {
        confirm(plan.targets.len(), &mut err)?;
    }
    let (report, written) = execute(
        args,
        printer,
        &c,
        Planned {
            snap,
            plan,
            sel,
            indexes,
            safety,
        },
        &mut out,
    );
    audit(s, args, &report);
    let outcome = kill_outcome(&report, args.no_wait)?;
    shown(written.and_then(|()| out.flush()), outcome)
}

/// Writes the kill's audit record (when it signalled anything); a record
/// that could not be written is one line on stderr, and changes nothing
/// else. A host with neither a journal nor a syslog socket says so only
/// with `-v`: that is the host's state, the same on every kill.
fn audit(s: &Settings, args: &KillArgs, report: &kill::Report) {
    use crate::act::audit;
    let reasons = crate::present::words::verdict::reasons(&report.reasons);
    let words = audit::Words {
        target: crate::present::words::target::target,
        left: crate::present::words::target::left,
        message: crate::present::words::front::audit_message,
    };
    let ctx = audit::Context::now("kill", args.signal, args.no_wait, reasons, words);
    if let Err(e) = audit::log(&s.audit, &ctx, report) {
        if e.no_logger_here() && s.common.verbose == 0 {
            return;
        }
        let _ = crate::present::notice::write_error(&mut std::io::stderr(), &e.to_string());
    }
}

/// What a kill acts on: the judged snapshot, its plan, the selectors and
/// the selected GPUs, and the safety context the plan was made under.
struct Planned {
    snap: Snapshot,
    plan: Plan,
    sel: Selectors,
    indexes: Selection,
    safety: kill::Safety,
}

/// Signals the plan's targets and waits for the memory (a spinner on a
/// terminal meanwhile), then writes the report: the kill's JSON document
/// or its text.
fn execute(
    args: &KillArgs,
    printer: &Printer,
    c: &snapshot::Collector,
    planned: Planned,
    out: &mut impl Write,
) -> (kill::Report, std::io::Result<()>) {
    let Planned {
        snap,
        plan,
        sel,
        indexes,
        safety,
    } = planned;
    let mut spinner = Spinner::new(
        !printer.quiet() && !printer.json() && std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
    let (report, end) = kill::execute_reporting(
        c,
        &snap,
        plan.clone(),
        &sel,
        &safety,
        &kill_options(args),
        &mut |e| spinner.on(e),
    );
    // The snapshot the verdict was made from (with --no-wait, the plan's).
    let after = end.map_or(snap, |s| pipeline::select(s, &indexes));
    let killed = Killed {
        after: &after,
        plan: &plan,
        report: &report,
        waited: !args.no_wait,
    };
    let written = write_kill_command(out, &killed, printer);
    (report, written)
}

/// The selectors of `kill`'s flags (`--match` and `--user` resolved by
/// the settings), checked against the snapshot (`--gpu`, `--unit`), and
/// the selected GPUs and MIG devices.
fn selectors(
    s: &Settings,
    args: &KillArgs,
    snap: &Snapshot,
) -> Result<(Selectors, Selection), Error> {
    let common = &s.common;
    let indexes = snapshot::resolve(&snap.gpus, &common.gpu).map_err(Error::Selector)?;
    if let Some(unit) = &args.unit {
        kill::check_unit(snap, unit).map_err(Error::Unit)?;
    }
    let nothing_else = args.pid.is_empty()
        && args.matcher.is_none()
        && args.user.is_none()
        && args.unit.is_none()
        && args.tree.is_none();
    let sel = Selectors {
        gpus: (!common.gpu.is_empty() || nothing_else).then(|| indexes.clone()),
        pids: args.pid.clone(),
        matcher: s.matcher.clone(),
        user: s.user.clone(),
        unit: args.unit.clone(),
        tree: args.tree,
    };
    Ok((sel, indexes))
}

/// Shows the plan (unless quiet, and always for `--dry-run`): on stdout,
/// or on stderr when stdout carries JSON.
fn show_plan<'w>(
    args: &KillArgs,
    snap: &Snapshot,
    plan: &Plan,
    printer: &Printer,
    out: &'w mut dyn Write,
    err: &'w mut dyn Write,
) -> std::io::Result<()> {
    if printer.quiet() && !args.dry_run {
        return Ok(());
    }
    let w = if printer.json() { err } else { out };
    let grace = args.grace.min(args.timeout).as_secs_f64();
    crate::present::kill::write_plan(
        w,
        snap,
        plan,
        kill::signal_name(args.signal),
        grace,
        printer,
    )?;
    w.flush()
}

/// Asks on the terminal before signalling `n` processes; without a
/// terminal, or without a yes, refuses.
fn confirm(n: usize, err: &mut impl Write) -> Result<(), Error> {
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        return Err(Error::NoConfirmation);
    }
    write_question(err, n)?;
    err.flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(Error::NotConfirmed)
    }
}

/// How to signal and how long to wait, from `kill`'s flags.
fn kill_options(args: &KillArgs) -> kill::Options {
    kill::Options {
        signal: args.signal,
        grace: args.grace,
        timeout: args.timeout,
        no_wait: args.no_wait,
        holders_only: args.holders_only,
        settle: args.settle,
    }
}

/// The outcome of a kill: survivors, or (unless `--no-wait`) the
/// release's verdict; a release that cannot be told is an error naming why.
fn kill_outcome(report: &kill::Report, no_wait: bool) -> Result<Outcome, Error> {
    if !report.survivors.is_empty() {
        return Ok(Outcome::Survivors);
    }
    if no_wait {
        return Ok(Outcome::Done);
    }
    match report.verdict {
        VerdictState::Free => Ok(Outcome::Done),
        VerdictState::Busy => Ok(Outcome::Survivors),
        VerdictState::Unknown => Err(Error::ReleaseUnknown(report.reasons.clone())),
    }
}

/// `gpufree wait`: look until the selected GPUs are free or the timeout
/// passes; the outcome is the last verdict's.
pub(super) fn run_wait(s: &Settings, args: &WaitArgs, printer: &Printer) -> Result<Outcome, Error> {
    use crate::act::wait::LAST_LOOK;
    let common = &s.common;
    let started = std::time::Instant::now();
    let deadline = started + args.timeout;
    let cfg = Config {
        long_lived: true,
        ..s.collect.clone()
    };
    let c = collector(s, cfg, Some(deadline + LAST_LOOK))?;
    let first =
        pipeline::judged_until(&c, Some(deadline + LAST_LOOK)).map_err(|e| snapshot_error(s, e))?;
    let gpus = snapshot::resolve(&first.gpus, &common.gpu).map_err(Error::Selector)?;
    let opts = crate::act::wait::Options {
        gpus: gpus.clone(),
        policy: crate::diagnose::verdict::Policy {
            max_used: args.max_used,
            holders_only: args.holders_only,
        },
        started,
        deadline,
        interval: args.interval,
    };
    let outcome = crate::act::wait::wait(&c, &opts, first).map_err(|e| snapshot_error(s, e))?;
    let state = outcome.verdict.state;
    let mut out = printer.guard(std::io::stdout().lock());
    let which = crate::present::why::selected(&gpus);
    let last = Snapshot {
        verdict: outcome.verdict.clone(),
        ..outcome.last
    };
    let waited = Waited {
        which: &which,
        last: &last,
        seconds: outcome.seconds,
        snapshots: outcome.snapshots,
    };
    let written = write_wait_command(&mut out, &waited, printer);
    if state == VerdictState::Unknown {
        return Err(Error::WaitUnknown {
            which,
            several: gpus.count() != 1,
            reasons: outcome.verdict.reasons.clone(),
        });
    }
    shown(written.and_then(|()| out.flush()), verdict_outcome(state))
}
