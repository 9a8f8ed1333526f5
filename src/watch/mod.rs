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
//!
//! `--replay FILE` shows a recording instead (`replay.rs`): the same frame
//! under a time bar, moved through by keys, with nothing live.

mod draw;
#[cfg(test)]
mod frame_tests;
mod holders;
mod keys;
mod replay;
#[cfg(test)]
mod tests;

use draw::draw;
use keys::{on_key, on_popup_key, Flow};
pub use replay::{replay, Recording, ReplayOptions};

use crate::act::identity::Target;
use crate::act::kill::{Plan, Selectors};
use crate::act::monitor::{self, Tick, Watch};
use crate::model::{Process, Selection, Snapshot};
use crate::pipeline::{self, refresh_memory, select};
use crate::snapshot::{Collector, Config};
use crossterm::event::{self, Event, KeyEventKind};
use ratatui::widgets::TableState;
use std::ops::ControlFlow;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A string from a process, a cgroup or the driver, made safe for a table
/// cell: escaped and cut to the longest text gpufree shows.
fn cell(s: &str) -> String {
    crate::safe::fit(s, crate::safe::TEXT_MAX)
}

/// Options of `gpufree watch`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Screen and NVML refresh.
    pub interval: Duration,
    /// Full holder scan at least this often.
    pub scan_every: Duration,
    /// The GPUs (or MIG devices) shown (None: all).
    pub gpus: Option<Selection>,
    /// Where the audit record of a kill goes.
    pub audit: crate::act::audit::Sinks,
    /// Whether the view is drawn in colour ([`crate::present::Printer::color`]:
    /// off under `--no-color` and `NO_COLOR`).
    pub color: bool,
}

enum Msg {
    Snapshot(Box<Snapshot>),
    Error(String),
    KillDone(String),
}

/// The collector thread's loop: a full snapshot first and when one is due,
/// NVML alone each interval in between; until the view is gone.
fn collect(c: Collector, opts: Options, tx: Sender<Msg>, rescan: Arc<AtomicBool>) {
    let interval = opts.interval;
    let mut refresh = Refresh {
        c,
        opts,
        tx,
        rescan,
        snap: None,
        full_at: Instant::now(),
        pinned: Vec::new(),
    };
    let _ = monitor::run(&mut refresh, interval);
}

/// The collector's watch: the last snapshot, and what makes the next full
/// one due.
struct Refresh {
    c: Collector,
    opts: Options,
    tx: Sender<Msg>,
    rescan: Arc<AtomicBool>,
    /// The last snapshot; None until one succeeds, and after one fails.
    snap: Option<Snapshot>,
    /// The next full snapshot is due by then.
    full_at: Instant,
    /// The holders of the last snapshot: one exiting makes it due.
    pinned: Vec<Target>,
}

/// The view is gone: the collector stops.
struct Gone;

impl Refresh {
    /// Whether a full snapshot is due: none yet (or the last failed), `r`
    /// was pressed, `--scan-every` passed, or a holder exited.
    fn full_due(&self) -> bool {
        self.snap.is_none()
            || self.rescan.swap(false, Ordering::Relaxed)
            || Instant::now() >= self.full_at
            || self.pinned.iter().any(Target::exited)
    }

    /// Takes a full snapshot and sends it (or its error).
    fn full(&mut self) -> Result<(), Gone> {
        let snap = match pipeline::judged(&self.c) {
            Ok(s) => match &self.opts.gpus {
                Some(sel) => select(s, sel),
                None => s,
            },
            Err(e) => {
                self.snap = None;
                // Nothing pinned to wake on: an exited holder's pidfd stays
                // readable and would end every nap at once.
                self.pinned.clear();
                return self.tx.send(Msg::Error(e.to_string())).map_err(|_| Gone);
            }
        };
        self.tx
            .send(Msg::Snapshot(Box::new(snap.clone())))
            .map_err(|_| Gone)?;
        self.full_at = Instant::now() + self.opts.scan_every;
        self.pinned = Target::pin_all(&snap);
        self.snap = Some(snap);
        Ok(())
    }

    /// Folds NVML's memory into the last snapshot and sends it if anything
    /// shown changed; a full snapshot at once when NVML's process lists
    /// changed.
    fn memory(&mut self) -> Result<(), Gone> {
        let Some(snap) = self.snap.as_mut() else {
            return self.full();
        };
        let (gpus_before, findings_before) = (snap.gpus.clone(), snap.findings.clone());
        if !refresh_memory(snap, &self.c.nvml()) {
            return self.full();
        }
        if snap.gpus != gpus_before || snap.findings != findings_before {
            self.tx
                .send(Msg::Snapshot(Box::new(snap.clone())))
                .map_err(|_| Gone)?;
        }
        Ok(())
    }
}

impl Watch for Refresh {
    type Out = ();

    fn look(&mut self, _: Tick) -> ControlFlow<()> {
        let sent = if self.full_due() {
            self.full()
        } else {
            self.memory()
        };
        match sent {
            Ok(()) => ControlFlow::Continue(()),
            Err(Gone) => ControlFlow::Break(()),
        }
    }

    fn deadline(&self) -> Option<Instant> {
        None
    }

    /// A holder's exit ends the nap: the next look is a full snapshot.
    fn wake_on(&self) -> Vec<BorrowedFd<'_>> {
        crate::act::identity::pidfds(&self.pinned)
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
    /// Colours on (the printer's choice).
    color: bool,
    /// Where a replay stands (None: the live view).
    replay: Option<crate::present::words::watch::ReplayAt>,
    /// What the last key could not do, said until the next key.
    notice: Option<&'static str>,
    /// The replay's moment is a kill's record: what it did, in one line.
    kill: Option<String>,
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
    fn new(color: bool) -> App {
        App {
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
            color,
            replay: None,
            notice: None,
            kill: None,
        }
    }

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

/// Why the live view could not run or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The first collection could not start (no GPU, no /proc).
    #[error(transparent)]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    /// The terminal could not be set up (the cause is the source, which
    /// the one-line message appends).
    #[error("watch: the terminal")]
    Terminal(#[source] std::io::Error),
    /// Drawing or reading a key failed.
    #[error("watch")]
    Io(#[from] std::io::Error),
}

/// Runs the live view until q or Esc.
pub fn run(cfg: Config, opts: Options) -> Result<(), Error> {
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
    let mut terminal = ratatui::try_init().map_err(Error::Terminal)?;
    let result = ui(&mut terminal, (&cfg, &opts), &rx, &tx, &rescan);
    ratatui::restore();
    result
}

fn ui(
    terminal: &mut ratatui::DefaultTerminal,
    (cfg, opts): (&Config, &Options),
    rx: &Receiver<Msg>,
    tx: &Sender<Msg>,
    rescan: &Arc<AtomicBool>,
) -> Result<(), Error> {
    let mut app = App::new(opts.color);
    let cfg = (cfg, &opts.audit);
    let mut dirty = true;
    let mut drawn = Instant::now();
    loop {
        dirty |= receive(&mut app, rx, rescan);
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
        if app.popup.is_some() {
            on_popup_key(&mut app, key.code, cfg, tx);
        } else if on_key(&mut app, key.code, rescan) == Flow::Quit {
            return Ok(());
        }
    }
}

/// Takes every message the collector and the kill sent; whether there was
/// one (the screen needs drawing).
fn receive(app: &mut App, rx: &Receiver<Msg>, rescan: &AtomicBool) -> bool {
    let mut any = false;
    while let Ok(msg) = rx.try_recv() {
        any = true;
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
    any
}
