//! `gpufree watch`: the live terminal view (ratatui + crossterm).
//!
//! Collection runs on its own thread and sends snapshots over a channel, so
//! a /proc read that blocks on a D-state process never freezes the UI. To
//! stay cheap on a busy host it takes a full snapshot (the holder scan) only
//! at start, when a known holder exits (pidfd), when NVML's process lists
//! change, on `r`, and every `--scan-every`; each tick in between it reads
//! NVML alone and folds the memory into the last snapshot.
//!
//! The UI shows per-GPU memory bars (accounted, unaccounted, free in distinct
//! colours), the holders table (sortable by memory, PID or age; filterable
//! by GPU, user and owner), the top finding of `why`, a detail pane, and a
//! kill through the same safe path as `gpufree kill` (plan, confirmation,
//! release). q or Esc quits and restores the terminal, also on a panic.

mod draw;

use draw::draw;

use crate::act::identity::Target;
use crate::act::kill::{self, Plan, Safety, Selectors};
use crate::model::{Process, Severity, Snapshot};
use crate::pipeline::{refresh_memory, select, Look};
use crate::snapshot::{Collector, Config};
use crate::units::mib;
use crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A string from a process, a cgroup or the driver, made safe for a cell.
fn shown(s: &str) -> String {
    crate::safe::fit(s, crate::safe::TEXT_MAX)
}

/// Options of `gpufree watch`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Screen and NVML refresh.
    pub interval: Duration,
    /// Full holder scan at least this often.
    pub scan_every: Duration,
    /// The GPUs shown (empty: all).
    pub gpus: Vec<u32>,
}

enum Msg {
    Snapshot(Box<Snapshot>),
    Error(String),
    KillDone(String),
}

/// The collector thread's loop.
fn collect(c: Collector, opts: Options, tx: Sender<Msg>, rescan: Arc<AtomicBool>) {
    loop {
        let mut snap = match c.snapshot() {
            Ok(s) if opts.gpus.is_empty() => s,
            Ok(s) => select(s, &opts.gpus),
            Err(e) => {
                if tx.send(Msg::Error(e.to_string())).is_err() {
                    return;
                }
                std::thread::sleep(opts.interval);
                continue;
            }
        };
        if tx.send(Msg::Snapshot(Box::new(snap.clone()))).is_err() {
            return;
        }
        let full_at = Instant::now() + opts.scan_every;
        let pinned = Target::pin_all(&snap);
        loop {
            std::thread::sleep(opts.interval);
            if rescan.swap(false, Ordering::Relaxed)
                || Instant::now() >= full_at
                || pinned.iter().any(Target::exited)
            {
                break;
            }
            let (gpus_before, findings_before) = (snap.gpus.clone(), snap.findings.clone());
            if !refresh_memory(&mut snap, &c.nvml()) {
                break;
            }
            if (snap.gpus != gpus_before || snap.findings != findings_before)
                && tx.send(Msg::Snapshot(Box::new(snap.clone()))).is_err()
            {
                return;
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    Memory,
    Pid,
    Age,
}

enum Popup {
    Plan(Plan, Selectors),
    Busy(String),
    Done(String),
}

struct App {
    snap: Option<Snapshot>,
    error: Option<String>,
    table: TableState,
    sort: Sort,
    gpu: Option<u32>,
    user: Option<String>,
    owner: Option<String>,
    detail: bool,
    popup: Option<Popup>,
    updated: Option<Instant>,
}

/// The next value after `cur` in `all`, then back to none (cycling filters).
fn cycle<T: Clone + PartialEq>(all: &[T], cur: &Option<T>) -> Option<T> {
    match cur {
        None => all.first().cloned(),
        Some(c) => all
            .iter()
            .position(|x| x == c)
            .and_then(|i| all.get(i + 1))
            .cloned(),
    }
}

impl App {
    fn rows(&self) -> Vec<&Process> {
        match &self.snap {
            Some(s) => self.rows_of(s),
            None => Vec::new(),
        }
    }

    fn rows_of<'a>(&self, s: &'a Snapshot) -> Vec<&'a Process> {
        let mut rows: Vec<&Process> = s
            .processes
            .iter()
            .filter(|p| self.gpu.is_none_or(|g| p.touches_gpu(g)))
            .filter(|p| self.user.as_ref().is_none_or(|u| &p.user == u))
            .filter(|p| self.owner.as_ref().is_none_or(|o| &p.owner.name == o))
            .collect();
        match self.sort {
            Sort::Memory => rows.sort_by_key(|p| (std::cmp::Reverse(p.memory_bytes()), p.pid)),
            Sort::Pid => rows.sort_by_key(|p| p.pid),
            Sort::Age => rows.sort_by_key(|p| (p.start_time_ticks, p.pid)),
        }
        rows
    }

    fn selected(&self) -> Option<&Process> {
        let rows = self.rows();
        self.table.selected().and_then(|i| rows.get(i).copied())
    }
}

/// Runs the live view until q or Esc.
pub fn run(cfg: Config, opts: Options) -> anyhow::Result<()> {
    let c = Collector::new(cfg.clone(), None)?;
    let (tx, rx): (Sender<Msg>, Receiver<Msg>) = mpsc::channel();
    let rescan = Arc::new(AtomicBool::new(false));
    {
        let tx = tx.clone();
        let rescan = Arc::clone(&rescan);
        let opts = opts.clone();
        std::thread::spawn(move || collect(c, opts, tx, rescan));
    }
    // try_init: a terminal that cannot be set up is an error, not a panic.
    let mut terminal =
        ratatui::try_init().map_err(|e| anyhow::anyhow!("watch: the terminal: {e}"))?;
    let result = ui(&mut terminal, &cfg, &rx, &tx, &rescan);
    ratatui::restore();
    result
}

fn ui(
    terminal: &mut ratatui::DefaultTerminal,
    cfg: &Config,
    rx: &Receiver<Msg>,
    tx: &Sender<Msg>,
    rescan: &Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let mut app = App {
        snap: None,
        error: None,
        table: TableState::default(),
        sort: Sort::Memory,
        gpu: None,
        user: None,
        owner: None,
        detail: false,
        popup: None,
        updated: None,
    };
    let mut dirty = true;
    let mut drawn = Instant::now();
    loop {
        while let Ok(msg) = rx.try_recv() {
            dirty = true;
            match msg {
                Msg::Snapshot(s) => {
                    app.snap = Some(*s);
                    app.updated = Some(Instant::now());
                    app.error = None;
                }
                Msg::Error(e) => app.error = Some(e),
                Msg::KillDone(m) => {
                    app.popup = Some(Popup::Done(m));
                    rescan.store(true, Ordering::Relaxed);
                }
            }
        }
        if dirty || drawn.elapsed() >= Duration::from_secs(1) {
            terminal.draw(|f| draw(f, &mut app))?;
            drawn = Instant::now();
            dirty = false;
        }
        if !event::poll(Duration::from_millis(500))? {
            continue;
        }
        dirty = true;
        let Event::Key(key) = event::read()? else {
            continue;
        };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        if let Some(popup) = &app.popup {
            match (popup, key.code) {
                (Popup::Plan(plan, sel), KeyCode::Char('y')) if !plan.targets.is_empty() => {
                    let (plan, sel) = (plan.clone(), sel.clone());
                    app.popup = Some(Popup::Busy(format!(
                        "signalling {} and waiting for the memory...",
                        plan.targets.len()
                    )));
                    let (cfg, tx) = (cfg.clone(), tx.clone());
                    std::thread::spawn(move || {
                        let msg = match Collector::new(cfg, None) {
                            Ok(c) => match c.snapshot() {
                                Ok(snap) => {
                                    let safety = Safety::current();
                                    let (r, _) = kill::execute(
                                        &c,
                                        &snap,
                                        plan,
                                        &sel,
                                        &safety,
                                        &kill::Options::default(),
                                    );
                                    format!(
                                        "signalled {:?}; survivors {:?}; {}",
                                        r.targets,
                                        r.survivors,
                                        if r.released {
                                            format!(
                                                "memory released after {:.2} s",
                                                r.seconds_to_release
                                            )
                                        } else {
                                            format!(
                                                "memory not released ({}): {}",
                                                r.verdict.as_str(),
                                                r.reasons.join("; ")
                                            )
                                        }
                                    )
                                }
                                Err(e) => e.to_string(),
                            },
                            Err(e) => e.to_string(),
                        };
                        let _ = tx.send(Msg::KillDone(msg));
                    });
                }
                (Popup::Busy(_), _) => {}
                (_, KeyCode::Esc | KeyCode::Char('n') | KeyCode::Char('q')) => app.popup = None,
                _ => {}
            }
            continue;
        }
        let rows = app.rows().len();
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
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
                let mut all: Vec<String> = app
                    .snap
                    .as_ref()
                    .map(|s| s.processes.iter().map(|p| p.user.clone()).collect())
                    .unwrap_or_default();
                all.sort();
                all.dedup();
                app.user = cycle(&all, &app.user);
            }
            KeyCode::Char('o') => {
                let mut all: Vec<String> = app
                    .snap
                    .as_ref()
                    .map(|s| {
                        s.processes
                            .iter()
                            .map(|p| p.owner.name.clone())
                            .filter(|n| !n.is_empty())
                            .collect()
                    })
                    .unwrap_or_default();
                all.sort();
                all.dedup();
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
    }
}
