//! `kill` and `wait`: the plan, the prompt, the execution and the report,
//! with their JSON documents and exit codes.

use super::*;

/// The document `kill --json` prints: the status after, the plan, the outcome.
#[derive(serde::Serialize)]
pub(super) struct KillDoc<'a> {
    #[serde(flatten)]
    snapshot: &'a crate::model::Snapshot,
    plan: &'a crate::act::kill::Plan,
    kill: &'a crate::act::kill::Report,
}

pub(super) fn run_kill(common: &Common, args: &KillArgs, paint: &Paint) -> Result<i32, Failure> {
    use crate::act::kill::{self, Selectors, UserSel};
    if common
        .proc_root
        .as_ref()
        .is_some_and(|p| p != std::path::Path::new("/proc"))
    {
        return Err(Failure::new(
            exit::USAGE,
            "--proc-root: kill signals only processes of this PID namespace's /proc",
        ));
    }
    let matcher = match &args.matcher {
        Some(m) => Some(regex_flag("--match", m)?),
        None => None,
    };
    let c = collector(common, false, None)?;
    let snap = c.snapshot().map_err(|e| snapshot_failure(common, e))?;
    let indexes =
        snapshot::resolve(&snap.gpus, &common.gpu).map_err(|e| Failure::new(exit::USAGE, e))?;
    if let Some(unit) = &args.unit {
        kill::check_unit(&snap, unit).map_err(|e| Failure::new(exit::USAGE, e))?;
    }
    let user = match &args.user {
        None => None,
        Some(u) => Some(match u.parse() {
            Ok(uid) => UserSel::Uid(uid),
            Err(_) if uzers::get_user_by_name(u).is_none() => {
                return Err(Failure::new(
                    exit::USAGE,
                    format!("--user {u}: no such user (give a name of this host or a UID)"),
                ))
            }
            Err(_) => UserSel::Name(u.clone()),
        }),
    };
    let nothing_else = args.pid.is_empty()
        && args.matcher.is_none()
        && args.user.is_none()
        && args.unit.is_none()
        && args.tree.is_none();
    let sel = Selectors {
        gpus: (!common.gpu.is_empty() || nothing_else).then(|| indexes.clone()),
        pids: args.pid.clone(),
        matcher,
        user,
        unit: args.unit.clone(),
        tree: args.tree,
    };
    let safety = kill::Safety {
        force_protected: args.force_protected,
        include_shared: args.include_shared,
        ..kill::Safety::current()
    };
    let plan = kill::plan(&snap, &sel, &safety);
    let mut out = Guard::new(std::io::stdout().lock(), paint.color);
    // Not locked: the progress bar draws on stderr from its own thread.
    let mut err = Guard::new(std::io::stderr(), paint.color);
    // The plan goes to stdout, or to stderr when stdout carries JSON.
    let mut plan_shown = Ok(());
    {
        let w: &mut dyn Write = if common.json { &mut err } else { &mut out };
        if !common.quiet || args.dry_run {
            plan_shown = crate::present::kill::write_plan(
                w,
                &snap,
                &plan,
                &args.signal.0,
                args.grace.min(args.timeout).as_secs_f64(),
                paint,
            )
            .and_then(|()| w.flush());
        }
    }
    // Nothing will be signalled: the plan is the answer.
    let refused = plan.targets.is_empty() && plan.skipped.iter().any(|k| k.refused);
    if args.dry_run || refused {
        let shown = plan_shown.and_then(|()| {
            if !common.json {
                return Ok(());
            }
            let report = kill::Report {
                skipped: plan.skipped.clone(),
                ..kill::Report::default()
            };
            write_json(
                &mut out,
                &KillDoc {
                    snapshot: &snap,
                    plan: &plan,
                    kill: &report,
                },
            )
            .and_then(|()| out.flush())
        });
        let code = if args.dry_run {
            exit::OK
        } else {
            exit::REFUSED
        };
        return with_outcome(shown, code);
    }
    // Never signal what the operator could not be shown.
    plan_shown.map_err(|e| {
        Failure::new(
            exit::ENVIRONMENT,
            format!("kill: the plan could not be written ({e}); nothing signalled"),
        )
    })?;
    if !plan.targets.is_empty() && !args.yes {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return Err(Failure::new(
                exit::REFUSED,
                "refusing to signal without --yes: no terminal to confirm on",
            ));
        }
        write!(err, "Signal these {} processes? [y/N] ", plan.targets.len())?;
        err.flush()?;
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(Failure::new(
                exit::REFUSED,
                "not confirmed; nothing signalled",
            ));
        }
    }
    let opts = kill::Options {
        signal: args.signal.1,
        grace: args.grace,
        timeout: args.timeout,
        no_wait: args.no_wait,
        holders_only: args.holders_only,
        settle: args.settle,
    };
    let mut spinner = Spinner::new(
        !common.quiet && !common.json && std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
    let (report, end) =
        kill::execute_reporting(&c, &snap, plan.clone(), &sel, &safety, &opts, &mut |e| {
            spinner.on(e)
        });
    let shown = if common.json {
        // The snapshot the verdict was made from (with --no-wait, the plan's).
        let after = end.map_or(snap, |s| snapshot::select(s, &indexes));
        write_json(
            &mut out,
            &KillDoc {
                snapshot: &after,
                plan: &plan,
                kill: &report,
            },
        )
    } else if !common.quiet {
        crate::present::kill::write_report(&mut out, &report, !args.no_wait, paint)
    } else {
        Ok(())
    };
    let code = if !report.survivors.is_empty() {
        exit::SURVIVORS
    } else if args.no_wait {
        exit::OK
    } else {
        match report.verdict {
            VerdictState::Free => exit::OK,
            VerdictState::Busy => exit::SURVIVORS,
            VerdictState::Unknown => exit::ENVIRONMENT,
        }
    };
    if code == exit::ENVIRONMENT {
        return Err(Failure::new(
            code,
            format!(
                "kill: the release is unknown: {}",
                report.reasons.join("; ")
            ),
        ));
    }
    with_outcome(shown.and_then(|()| out.flush()), code)
}

/// A kill's progress on stderr: a spinner while the memory is awaited,
/// drawn only where `show` (a terminal, neither `-q` nor `--json`).
struct Spinner {
    show: bool,
    bar: Option<indicatif::ProgressBar>,
}

impl Spinner {
    fn new(show: bool) -> Spinner {
        Spinner { show, bar: None }
    }

    fn on(&mut self, event: crate::act::progress::Event) {
        use crate::act::progress::Event;
        match event {
            Event::ReleaseWaitStarted if self.show => {
                let b = indicatif::ProgressBar::new_spinner();
                b.set_message("waiting for the GPU memory to come back");
                b.enable_steady_tick(std::time::Duration::from_millis(120));
                self.bar = Some(b);
            }
            Event::MemoryHeld { held, .. } => {
                if let Some(b) = &self.bar {
                    b.set_message(format!(
                        "waiting for the GPU memory: {}",
                        crate::safe::fit(&held.join("; "), 160)
                    ));
                }
            }
            Event::ReleaseWaitEnded => {
                if let Some(b) = self.bar.take() {
                    b.finish_and_clear();
                }
            }
            _ => {}
        }
    }
}

/// The document `wait --json` prints.
#[derive(serde::Serialize)]
pub(super) struct WaitDoc<'a> {
    #[serde(flatten)]
    snapshot: &'a crate::model::Snapshot,
    wait: WaitResult,
}

#[derive(serde::Serialize)]
pub(super) struct WaitResult {
    free: bool,
    verdict: VerdictState,
    seconds: f64,
    snapshots: u32,
}

pub(super) fn run_wait(common: &Common, args: &WaitArgs, paint: &Paint) -> Result<i32, Failure> {
    use crate::act::wait::LAST_LOOK;
    let deadline = std::time::Instant::now() + args.timeout;
    let c = collector(common, false, Some(deadline + LAST_LOOK))?;
    let first = c
        .snapshot_until(Some(deadline + LAST_LOOK))
        .map_err(|e| snapshot_failure(common, e))?;
    let gpus =
        snapshot::resolve(&first.gpus, &common.gpu).map_err(|e| Failure::new(exit::USAGE, e))?;
    let opts = crate::act::wait::Options {
        gpus: gpus.clone(),
        policy: crate::diagnose::verdict::Policy {
            max_used: args.max_used,
            holders_only: args.holders_only,
        },
        deadline,
        interval: args.interval,
    };
    let outcome =
        crate::act::wait::wait(&c, &opts, first).map_err(|e| snapshot_failure(common, e))?;
    let state = outcome.verdict.state;
    let mut out = Guard::new(std::io::stdout().lock(), paint.color);
    let which = format!(
        "GPU{} {}",
        if gpus.len() == 1 { "" } else { "s" },
        crate::diagnose::gpu_list(&gpus)
    );
    let shown = if common.json {
        let mut last = outcome.last.clone();
        last.verdict = outcome.verdict.clone();
        let doc = WaitDoc {
            snapshot: &last,
            wait: WaitResult {
                free: state == VerdictState::Free,
                verdict: state,
                seconds: outcome.seconds,
                snapshots: outcome.snapshots,
            },
        };
        write_json(&mut out, &doc)
    } else if !common.quiet {
        (|| -> std::io::Result<()> {
            match state {
                VerdictState::Free => {
                    writeln!(out, "{which} free after {:.2} s", outcome.seconds)?;
                    for c in &outcome.verdict.caveats {
                        writeln!(
                            out,
                            "  {} {}",
                            paint.warn("caveat:"),
                            fit(c, crate::safe::MESSAGE_MAX)
                        )?;
                    }
                }
                VerdictState::Busy => writeln!(
                    out,
                    "{} {which} not free after {:.1} s: {}",
                    paint.error("timeout:"),
                    outcome.seconds,
                    fit(
                        &outcome.verdict.reasons.join("; "),
                        crate::safe::MESSAGE_MAX
                    )
                )?,
                VerdictState::Unknown => {}
            }
            Ok(())
        })()
    } else {
        Ok(())
    };
    if state == VerdictState::Unknown {
        return Err(Failure::new(
            exit::ENVIRONMENT,
            format!(
                "wait: cannot tell whether {which} {} free: {}",
                if gpus.len() == 1 { "is" } else { "are" },
                outcome.verdict.reasons.join("; ")
            ),
        ));
    }
    with_outcome(shown.and_then(|()| out.flush()), verdict_exit(state))
}
