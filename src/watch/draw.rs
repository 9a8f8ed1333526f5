//! One frame of the live view: a memory bar per GPU (and per MIG device
//! under it), the holders sorted
//! as asked, the findings and the popups, drawn from a snapshot.

use super::holders::draw_holders;
use super::{cell, App, Popup};
use crate::model::{Process, Severity, Snapshot};
use crate::present::words::watch as words;
use crate::safe::{fit, width};
use crate::units::mib;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

/// A foreground colour, or the terminal's own when `color` is off
/// (`--no-color`, `NO_COLOR`, as the printer decided).
pub(super) fn fg(color: bool, c: Color) -> Style {
    if color {
        Style::new().fg(c)
    } else {
        Style::new()
    }
}

/// The bars of `g`: its own, then one per MIG device (`0:1`), indented;
/// coloured when `color`.
pub(super) fn bars(width: Bar, g: &crate::model::Gpu, color: bool) -> Vec<Line<'static>> {
    let bar = |label, m, state| bar(width, label, m, state, color);
    let mut lines = vec![bar(
        format!("GPU {:<2} ", g.index),
        &g.memory,
        g.verdict.state,
    )];
    for m in &g.mig_devices {
        let label = format!("  {:<4} ", m.label(g.index));
        lines.push(bar(label, &m.memory, m.verdict.state));
    }
    lines
}

/// How a GPU's memory line is drawn: a bar this many cells wide (0: none)
/// and the numbers whole or short (no `accounted`, which is used less
/// unaccounted): a figure is never cut, so the bar goes first.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bar {
    /// Cells of the bar.
    pub cells: usize,
    /// The short numbers.
    pub short: bool,
}

impl Bar {
    /// The widest bar (10 to 60 cells, else none) beside numbers at
    /// most `whole` columns wide in `room` columns after the label and
    /// verdict (15); the short numbers where even those do not fit.
    pub(super) fn within(room: usize, whole: usize) -> Bar {
        let left = room.saturating_sub(15 + whole);
        Bar {
            cells: if left >= 10 { left.min(60) } else { 0 },
            short: room < 15 + whole,
        }
    }
}

/// One memory bar: the label, the verdict, accounted and unaccounted
/// memory in a bar of `shape`, and the numbers.
fn bar(
    shape: Bar,
    label: String,
    m: &crate::model::Memory,
    state: crate::model::VerdictState,
    color: bool,
) -> Line<'static> {
    use crate::model::VerdictState;
    let m = *m;
    let state_color = match state {
        VerdictState::Free => Color::Green,
        VerdictState::Busy => Color::Red,
        VerdictState::Unknown => Color::Yellow,
    };
    let mut spans = vec![
        Span::styled(label, Style::new().add_modifier(Modifier::BOLD)),
        Span::styled(format!("{:<8}", state.as_str()), fg(color, state_color)),
    ];
    if !m.known || m.total_bytes == 0 {
        spans.push(Span::raw("memory unknown"));
        return Line::from(spans);
    }
    let width = shape.cells;
    let cells = |b: u64| ((b as f64 / m.total_bytes as f64) * width as f64).round() as usize;
    let acc = cells(m.accounted_bytes).min(width);
    let unacc = cells(m.unaccounted_bytes).min(width - acc);
    spans.push(Span::styled("█".repeat(acc), fg(color, Color::Green)));
    spans.push(Span::styled("█".repeat(unacc), fg(color, Color::Red)));
    spans.push(Span::styled(
        "░".repeat(width - acc - unacc),
        fg(color, Color::DarkGray),
    ));
    spans.push(Span::raw(numbers(&m, shape.short)));
    Line::from(spans)
}

/// A bar's numbers: used of total, accounted and unaccounted.
fn numbers(m: &crate::model::Memory, short: bool) -> String {
    if short {
        return format!(
            " {} / {}  unaccounted {}",
            mib(m.used_bytes),
            mib(m.total_bytes),
            mib(m.unaccounted_bytes)
        );
    }
    format!(
        " {} / {}  accounted {}  unaccounted {}",
        mib(m.used_bytes),
        mib(m.total_bytes),
        mib(m.accounted_bytes),
        mib(m.unaccounted_bytes)
    )
}

/// `line` within `room` columns: whole where it fits, else cut with `…`
/// (by [`fit`], as the CLI's tables cut), each span keeping its style.
pub(super) fn fit_line(line: Line<'static>, room: usize) -> Line<'static> {
    if line.width() <= room {
        return line;
    }
    let mut left = room;
    let mut spans = Vec::new();
    for span in line.spans {
        let w = width(&span.content);
        if w < left {
            left -= w;
            spans.push(span);
            continue;
        }
        // More follows: a span that ends at the edge is cut too.
        let cut = fit(&format!("{}…", span.content), left);
        spans.push(Span::styled(cut, span.style));
        break;
    }
    Line::from(spans).style(line.style)
}

pub(super) fn age(s: &Snapshot, p: &Process) -> String {
    s.age_seconds(p)
        .map_or("?".into(), |a| crate::units::span(a as f64))
}

pub(super) fn draw(f: &mut Frame<'_>, app: &mut App) {
    let mut area = f.area();
    if let Some(at) = &app.replay {
        let room = usize::from(area.width);
        let mut lines = vec![Line::styled(
            fit(&words::replay_bar(at), room),
            Style::new().add_modifier(Modifier::REVERSED),
        )];
        if let Some(kill) = &app.kill {
            let bold = Style::new().add_modifier(Modifier::BOLD);
            lines.push(Line::styled(fit(kill, room), bold));
        }
        lines.push(Line::styled(
            fit(app.notice.unwrap_or(""), room),
            fg(app.color, Color::Yellow),
        ));
        let split = Layout::default()
            .direction(Direction::Vertical)
            .constraints([Constraint::Length(lines.len() as u16), Constraint::Min(0)])
            .split(area);
        f.render_widget(Paragraph::new(lines), split[0]);
        area = split[1];
    }
    let Some(s) = app.snap.take() else {
        let text = app
            .error
            .as_deref()
            .map(cell)
            .unwrap_or_else(|| "gpufree watch: taking the first snapshot...".into());
        f.render_widget(Paragraph::new(text).wrap(Wrap { trim: false }), area);
        return;
    };
    draw_snapshot(f, app, &s, area);
    app.snap = Some(s);
}

pub(super) fn draw_snapshot(f: &mut Frame<'_>, app: &mut App, s: &Snapshot, area: Rect) {
    let rows: usize = s.gpus.iter().map(|g| 1 + g.mig_devices.len()).sum();
    let gpu_lines = u16::try_from(rows).unwrap_or(u16::MAX).saturating_add(2);
    let chunks = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(gpu_lines),
            Constraint::Min(5),
            Constraint::Length(3),
        ])
        .split(area);
    draw_gpus(f, app, s, chunks[0]);
    let (table_area, detail_area) = if app.detail {
        let h = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Percentage(55), Constraint::Percentage(45)])
            .split(chunks[1]);
        (h[0], Some(h[1]))
    } else {
        (chunks[1], None)
    };
    draw_holders(f, app, s, table_area);
    let selected = app
        .table
        .selected()
        .and_then(|i| app.rows_of(s).get(i).copied());
    if let (Some(area), Some(p)) = (detail_area, selected) {
        f.render_widget(
            Paragraph::new(detail(p))
                .wrap(Wrap { trim: false })
                .block(Block::default().borders(Borders::ALL).title(" detail ")),
            area,
        );
    }
    draw_footer(f, s, chunks[2], app);
    if let Some(popup) = &app.popup {
        draw_popup(f, popup, area);
    }
}

/// The memory bar of every GPU, under a title that counts what is shown.
fn draw_gpus(f: &mut Frame<'_>, app: &App, s: &Snapshot, area: Rect) {
    let room = usize::from(area.width.saturating_sub(2));
    let widest = |short| {
        let memories = s.gpus.iter().flat_map(|g| {
            std::iter::once(&g.memory).chain(g.mig_devices.iter().map(|m| &m.memory))
        });
        memories
            .map(|m| width(&numbers(m, short)))
            .max()
            .unwrap_or(0)
    };
    let bar = Bar::within(room, widest(false));
    let lines: Vec<Line<'_>> = s
        .gpus
        .iter()
        .flat_map(|g| bars(bar, g, app.color))
        .map(|l| fit_line(l, room))
        .collect();
    let title = words::gpus_title(
        s.gpus.len(),
        s.processes.len(),
        s.visibility.processes_scanned,
        app.updated.map(|u| u.elapsed().as_secs_f64()),
    );
    let title = fit(&title, room);
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
        area,
    );
}

/// The detail pane's lines for one process.
fn detail(p: &Process) -> Vec<Line<'static>> {
    words::detail(p).into_iter().map(Line::from).collect()
}

/// The top finding, coloured by its severity (when `color`), and the keys.
fn draw_footer(f: &mut Frame<'_>, s: &Snapshot, area: Rect, app: &App) {
    let color = app.color;
    let top = s.findings.first();
    let finding = top.map_or(String::new(), |f| {
        let sev = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warn",
            Severity::Info => "info",
        };
        format!("{sev}: {}", cell(&crate::present::words::words(f).message))
    });
    let room = usize::from(area.width);
    let finding = fit(&finding, room);
    let help = words::help(app.replay.is_some(), room);
    let severity = match top.map(|f| f.severity) {
        Some(Severity::Error) => Color::Red,
        Some(Severity::Warning) => Color::Yellow,
        _ => Color::Green,
    };
    f.render_widget(
        Paragraph::new(vec![
            Line::styled(finding, fg(color, severity)),
            Line::styled(help, fg(color, Color::DarkGray)),
        ])
        .block(Block::default().borders(Borders::TOP)),
        area,
    );
}

/// A popup centred in `area`.
fn draw_popup(f: &mut Frame<'_>, popup: &Popup, area: Rect) {
    let (title, body) = popup_text(popup);
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

/// A popup's title and text: the kill's plan, its progress, its outcome.
fn popup_text(popup: &Popup) -> (&'static str, String) {
    match popup {
        Popup::Plan(plan, _) => (" kill: plan ", words::plan(plan)),
        Popup::Busy(m) => (" kill ", cell(m)),
        Popup::Done(m) => (" kill: done ", format!("{}\n\nEsc: close", cell(m))),
    }
}
