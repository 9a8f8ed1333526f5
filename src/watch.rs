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

use crate::act::identity::Target;
use crate::act::kill::{self, Plan, Safety, Selectors};
use crate::model::{Process, Severity, Snapshot};
use crate::snapshot::{refresh_memory, select, Collector, Config};
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

fn bar(width: usize, g: &crate::model::Gpu) -> Line<'static> {
    use crate::model::VerdictState;
    let m = g.memory;
    let color = match g.verdict.state {
        VerdictState::Free => Color::Green,
        VerdictState::Busy => Color::Red,
        VerdictState::Unknown => Color::Yellow,
    };
    let mut spans = vec![
        Span::styled(
            format!("GPU {:<2} ", g.index),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::styled(
            format!("{:<8}", g.verdict.state.as_str()),
            Style::new().fg(color),
        ),
    ];
    if !m.known || m.total_bytes == 0 {
        spans.push(Span::raw("memory unknown"));
        return Line::from(spans);
    }
    let cells = |b: u64| ((b as f64 / m.total_bytes as f64) * width as f64).round() as usize;
    let acc = cells(m.accounted_bytes).min(width);
    let unacc = cells(m.unaccounted_bytes).min(width - acc);
    spans.push(Span::styled("█".repeat(acc), Style::new().fg(Color::Green)));
    spans.push(Span::styled("█".repeat(unacc), Style::new().fg(Color::Red)));
    spans.push(Span::styled(
        "░".repeat(width - acc - unacc),
        Style::new().fg(Color::DarkGray),
    ));
    spans.push(Span::raw(format!(
        " {} / {}  accounted {}  unaccounted {}",
        mib(m.used_bytes),
        mib(m.total_bytes),
        mib(m.accounted_bytes),
        mib(m.unaccounted_bytes)
    )));
    Line::from(spans)
}

fn age(s: &Snapshot, p: &Process) -> String {
    match s.age_seconds(p) {
        Some(a) if a >= 86400 => format!("{}d{}h", a / 86400, a % 86400 / 3600),
        Some(a) if a >= 3600 => format!("{}h{}m", a / 3600, a % 3600 / 60),
        Some(a) if a >= 60 => format!("{}m{}s", a / 60, a % 60),
        Some(a) => format!("{a}s"),
        None => "?".into(),
    }
}

fn draw(f: &mut Frame<'_>, app: &mut App) {
    let area = f.area();
    let Some(s) = app.snap.take() else {
        let text = app
            .error
            .as_deref()
            .map(shown)
            .unwrap_or_else(|| "gpufree watch: taking the first snapshot...".into());
        f.render_widget(Paragraph::new(text), area);
        return;
    };
    draw_snapshot(f, app, &s, area);
    app.snap = Some(s);
}

fn draw_snapshot(f: &mut Frame<'_>, app: &mut App, s: &Snapshot, area: Rect) {
    let gpu_lines = s.gpus.len() as u16 + 2;
    let chunks = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(gpu_lines),
            Constraint::Min(5),
            Constraint::Length(3),
        ])
        .split(area);
    let width = (chunks[0].width as usize).saturating_sub(70).clamp(10, 60);
    let lines: Vec<Line<'_>> = s.gpus.iter().map(|g| bar(width, g)).collect();
    let title = format!(
        " gpufree watch: {} GPUs, {} holders, {} processes scanned{} ",
        s.gpus.len(),
        s.processes.len(),
        s.visibility.processes_scanned,
        app.updated
            .map(|u| format!(", updated {:.0}s ago", u.elapsed().as_secs_f64()))
            .unwrap_or_default()
    );
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
        chunks[0],
    );

    let (table_area, detail_area) = if app.detail {
        let h = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Percentage(55), Constraint::Percentage(45)])
            .split(chunks[1]);
        (h[0], Some(h[1]))
    } else {
        (chunks[1], None)
    };
    let rows = app.rows_of(s);
    let sort = match app.sort {
        Sort::Memory => "memory",
        Sort::Pid => "pid",
        Sort::Age => "age",
    };
    let filter = [
        app.gpu.map(|g| format!("gpu={g}")),
        app.user.as_ref().map(|u| format!("user={}", shown(u))),
        app.owner.as_ref().map(|o| format!("owner={}", shown(o))),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ");
    let table_rows: Vec<Row<'_>> = rows
        .iter()
        .map(|p| {
            let gpus: Vec<String> = {
                let mut g: Vec<u32> = p
                    .gpu_memory
                    .iter()
                    .map(|m| m.gpu)
                    .chain(p.devices.iter().filter_map(|d| d.gpu))
                    .collect();
                g.sort_unstable();
                g.dedup();
                g.iter().map(u32::to_string).collect()
            };
            let style = if p.renamed || p.orphaned {
                Style::new().fg(Color::Yellow)
            } else {
                Style::new()
            };
            Row::new(vec![
                Cell::from(p.pid.to_string()),
                Cell::from(shown(&p.user)),
                Cell::from(shown(&p.comm)),
                Cell::from(if p.memory_bytes() > 0 {
                    mib(p.memory_bytes())
                } else {
                    "-".into()
                }),
                Cell::from(gpus.join(",")),
                Cell::from(age(s, p)),
                Cell::from(if p.owner.name.is_empty() {
                    "-".into()
                } else {
                    shown(&p.owner.name)
                }),
                Cell::from(crate::present::flags(p)),
            ])
            .style(style)
        })
        .collect();
    let table = Table::new(
        table_rows,
        [
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(16),
            Constraint::Length(12),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Min(10),
            Constraint::Length(18),
        ],
    )
    .header(
        Row::new([
            "PID", "USER", "COMM", "MEMORY", "GPUS", "AGE", "OWNER", "FLAGS",
        ])
        .style(Style::new().add_modifier(Modifier::BOLD)),
    )
    .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(format!(" holders, sorted by {sort} {filter} ")),
    );
    let n_rows = rows.len();
    drop(rows);
    if app.table.selected().is_none() && n_rows > 0 {
        app.table.select(Some(0));
    }
    if app.table.selected().is_some_and(|i| i >= n_rows) {
        app.table.select(n_rows.checked_sub(1));
    }
    f.render_stateful_widget(table, table_area, &mut app.table);

    let selected = app
        .table
        .selected()
        .and_then(|i| app.rows_of(s).get(i).copied());
    if let (Some(area), Some(p)) = (detail_area, selected) {
        let mut text = vec![
            Line::from(format!(
                "PID {}  parent {}  user {} ({})  state {}  threads {}",
                p.pid,
                p.ppid,
                shown(&p.user),
                p.uid,
                shown(&p.state),
                p.threads
            )),
            Line::from(format!("comm:    {}", shown(&p.comm))),
            Line::from(format!("cmdline: {}", shown(&p.cmdline_joined()))),
            Line::from(format!(
                "exe:     {}",
                shown(p.exe.as_deref().unwrap_or("?"))
            )),
            Line::from(format!(
                "owner:   {} {}",
                p.owner.kind.as_str(),
                shown(&p.owner.name)
            )),
            Line::from(format!("cgroup:  {}", shown(&p.cgroup))),
        ];
        if p.nspid.len() > 1 {
            text.push(Line::from(format!("NSpid:   {:?}", p.nspid)));
        }
        for m in &p.gpu_memory {
            text.push(Line::from(format!(
                "GPU {}: {}",
                m.gpu,
                m.used_bytes.map_or("n/a".into(), mib)
            )));
        }
        for d in &p.devices {
            let via: Vec<String> = d
                .via
                .iter()
                .map(|v| format!("{v:?}").to_lowercase())
                .collect();
            text.push(Line::from(format!(
                "{} via {}",
                shown(&d.path),
                via.join("+")
            )));
        }
        if let Some(w) = &p.wchan {
            text.push(Line::from(format!("waiting in {}", shown(w))));
        }
        f.render_widget(
            Paragraph::new(text)
                .wrap(Wrap { trim: false })
                .block(Block::default().borders(Borders::ALL).title(" detail ")),
            area,
        );
    }

    let top = s.findings.first();
    let finding = top.map_or(String::new(), |f| {
        let sev = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warn",
            Severity::Info => "info",
        };
        format!("{sev}: {}", shown(&f.message))
    });
    let help = "q quit  ↑/↓ select  Enter detail  m/p/a sort  g/u/o filter  k kill  r rescan";
    let color = match top.map(|f| f.severity) {
        Some(Severity::Error) => Color::Red,
        Some(Severity::Warning) => Color::Yellow,
        _ => Color::Green,
    };
    f.render_widget(
        Paragraph::new(vec![
            Line::styled(finding, Style::new().fg(color)),
            Line::styled(help, Style::new().fg(Color::DarkGray)),
        ])
        .block(Block::default().borders(Borders::TOP)),
        chunks[2],
    );

    if let Some(popup) = &app.popup {
        let (title, body) = match popup {
            Popup::Plan(plan, _) => {
                let mut lines: Vec<String> = plan
                    .targets
                    .iter()
                    .map(|e| format!("{}  {}", e.pid, shown(&e.reason)))
                    .collect();
                lines.extend(
                    plan.skipped
                        .iter()
                        .map(|k| format!("{}  left out: {}", k.pid, shown(&k.reason))),
                );
                if plan.targets.is_empty() {
                    lines.push("nothing to signal".into());
                    lines.push("Esc: close".into());
                } else {
                    lines.push(String::new());
                    lines.push(format!("y: signal {} (TERM, KILL after 10s) and wait for the memory   n/Esc: cancel", plan.targets.len()));
                }
                (" kill: plan ", lines.join("\n"))
            }
            Popup::Busy(m) => (" kill ", shown(m)),
            Popup::Done(m) => (" kill: done ", format!("{}\n\nEsc: close", shown(m))),
        };
        let w = area.width.saturating_sub(10).min(100);
        let h = (body.lines().count() as u16 + 2).min(area.height);
        let r = Rect {
            x: area.x + (area.width - w) / 2,
            y: area.y + (area.height.saturating_sub(h)) / 2,
            width: w,
            height: h,
        };
        f.render_widget(Clear, r);
        f.render_widget(
            Paragraph::new(body)
                .wrap(Wrap { trim: false })
                .block(Block::default().borders(Borders::ALL).title(title)),
            r,
        );
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
