//! What a key does in the live view: moving, sorting, filtering, and the
//! kill (its plan in a popup, then the same safe path as `gpufree kill`,
//! run on its own thread).

use super::{cycle, App, Msg, Popup, Sort};
use crate::act::audit::Sinks;
use crate::act::kill::{self, Plan, Safety, Selectors};
use crate::model::{Process, Snapshot};
use crate::pipeline;
use crate::present::words::watch as words;
use crate::snapshot::{Collector, Config};
use crossterm::event::KeyCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;

/// Whether the view goes on after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    Go,
    Quit,
}

/// A key while a popup is open: `y` on a plan starts the kill; Esc, n or q
/// closes it (not while the kill runs).
pub(super) fn on_popup_key(
    app: &mut App,
    code: KeyCode,
    (cfg, audit): (&Config, &Sinks),
    tx: &Sender<Msg>,
) {
    let Some(popup) = &app.popup else {
        return;
    };
    match (popup, code) {
        (Popup::Plan(plan, sel), KeyCode::Char('y')) if !plan.targets.is_empty() => {
            let (plan, sel) = (plan.clone(), sel.clone());
            app.popup = Some(Popup::Busy(words::signalling(plan.targets.len())));
            let (cfg, audit, tx) = (cfg.clone(), audit.clone(), tx.clone());
            std::thread::spawn(move || {
                let _ = tx.send(Msg::KillDone(kill_now(cfg, plan, &sel, &audit)));
            });
        }
        (Popup::Busy(_), _) => {}
        (_, KeyCode::Esc | KeyCode::Char('n') | KeyCode::Char('q')) => app.popup = None,
        _ => {}
    }
}

/// Executes a confirmed plan from a fresh snapshot; its outcome in words.
/// The view's snapshot is older, and its pins belong to the collector
/// thread: the plan's targets are pinned again in the fresh one by PID and
/// start time, so one that is no longer the process the plan showed is
/// reported changed, never signalled. The kill's audit record is written
/// as `gpufree kill` writes it; one that could not be is said at the end.
fn kill_now(cfg: Config, plan: Plan, sel: &Selectors, audit: &Sinks) -> String {
    let c = match Collector::new(cfg, None) {
        Ok(c) => c,
        Err(e) => return e.to_string(),
    };
    // The same guard as `gpufree kill`'s, before anything is pinned.
    if let Err(why) = kill::may_signal(&c) {
        return words::not_signalled(why);
    }
    let snap = match pipeline::judged(&c) {
        Ok(snap) => snap,
        Err(e) => return e.to_string(),
    };
    let safety = Safety::current();
    let opts = kill::Options::default();
    let (r, _) = kill::execute(&c, &snap, plan, sel, &safety, &opts);
    let reasons = crate::present::words::verdict::reasons(&r.reasons);
    let words = crate::act::audit::Words {
        target: crate::present::words::target::target,
        left: crate::present::words::target::left,
        message: crate::present::words::front::audit_message,
    };
    let ctx = crate::act::audit::Context::now("watch", opts.signal, opts.no_wait, reasons, words);
    let audited = crate::act::audit::log(audit, &ctx, &r).err();
    words::outcome(&r, audited.as_ref().map(|e| e as &dyn std::fmt::Display))
}

/// A key without a popup.
pub(super) fn on_key(app: &mut App, code: KeyCode, rescan: &AtomicBool) -> Flow {
    let rows = app.rows().len();
    match code {
        KeyCode::Char('q') | KeyCode::Esc => return Flow::Quit,
        KeyCode::Down | KeyCode::Char('j') => app.table.select(Some(
            app.table
                .selected()
                .map_or(0, |i| (i + 1).min(rows.saturating_sub(1))),
        )),
        KeyCode::Up => app.table.select(Some(
            app.table.selected().map_or(0, |i| i.saturating_sub(1)),
        )),
        KeyCode::Enter => app.detail = !app.detail,
        KeyCode::Char('m') => app.sort = Sort::Memory,
        KeyCode::Char('p') => app.sort = Sort::Pid,
        KeyCode::Char('a') => app.sort = Sort::Age,
        KeyCode::Char('r') => rescan.store(true, Ordering::Relaxed),
        KeyCode::Char('g') => {
            let all: Vec<u32> = app
                .snap
                .as_ref()
                .map(|s| s.gpus.iter().map(|g| g.index).collect())
                .unwrap_or_default();
            app.gpu = cycle(&all, &app.gpu);
        }
        KeyCode::Char('u') => {
            let all = distinct(app.snap.as_ref(), |p| Some(p.user.clone()));
            app.user = cycle(&all, &app.user);
        }
        KeyCode::Char('o') => {
            let all = distinct(app.snap.as_ref(), |p| {
                Some(p.owner.name.clone()).filter(|n| !n.is_empty())
            });
            app.owner = cycle(&all, &app.owner);
        }
        KeyCode::Char('k') => {
            if let (Some(p), Some(s)) = (app.selected(), app.snap.as_ref()) {
                let sel = Selectors {
                    pids: vec![p.pid],
                    ..Selectors::default()
                };
                let plan = kill::plan(s, &sel, &Safety::current());
                app.popup = Some(Popup::Plan(plan, sel));
            }
        }
        _ => {}
    }
    Flow::Go
}

/// The distinct values of `key` over the processes of `snap`, sorted
/// (what a filter cycles through).
fn distinct(snap: Option<&Snapshot>, key: impl Fn(&Process) -> Option<String>) -> Vec<String> {
    let mut all: Vec<String> = snap
        .map(|s| s.processes.iter().filter_map(&key).collect())
        .unwrap_or_default();
    all.sort();
    all.dedup();
    all
}
