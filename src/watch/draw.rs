//! One frame of the live view: a memory bar per GPU (and per MIG device
//! under it), the holders sorted
//! as asked, the findings and the popups, drawn from a snapshot.

use super::{cell, App, Popup, Sort};
use crate::model::{Process, Severity, Snapshot};
use crate::present::words::watch as words;
use crate::units::mib;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, Wrap};
use ratatui::Frame;

/// A foreground colour, or the terminal's own when `color` is off
/// (`--no-color`, `NO_COLOR`, as the printer decided).
fn fg(color: bool, c: Color) -> Style {
    if color {
        Style::new().fg(c)
    } else {
        Style::new()
    }
}

/// The bars of `g`: its own, then one per MIG device (`0:1`), indented;
/// coloured when `color`.
pub(super) fn bars(width: usize, g: &crate::model::Gpu, color: bool) -> Vec<Line<'static>> {
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

/// One memory bar: the label, the verdict, accounted and unaccounted
/// memory in a bar `width` cells wide, and the numbers.
fn bar(
    width: usize,
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
    let cells = |b: u64| ((b as f64 / m.total_bytes as f64) * width as f64).round() as usize;
    let acc = cells(m.accounted_bytes).min(width);
    let unacc = cells(m.unaccounted_bytes).min(width - acc);
    spans.push(Span::styled("█".repeat(acc), fg(color, Color::Green)));
    spans.push(Span::styled("█".repeat(unacc), fg(color, Color::Red)));
    spans.push(Span::styled(
        "░".repeat(width - acc - unacc),
        fg(color, Color::DarkGray),
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

pub(super) fn age(s: &Snapshot, p: &Process) -> String {
    s.age_seconds(p)
        .map_or("?".into(), |a| crate::units::span(a as f64))
}

pub(super) fn draw(f: &mut Frame<'_>, app: &mut App) {
    let mut area = f.area();
    if let Some(at) = &app.replay {
        let split = Layout::default()
            .direction(Direction::Vertical)
            .constraints([Constraint::Length(2), Constraint::Min(0)])
            .split(area);
        let bar = Line::styled(
            words::replay_bar(at),
            Style::new().add_modifier(Modifier::REVERSED),
        );
        let notice = Line::styled(app.notice.unwrap_or(""), fg(app.color, Color::Yellow));
        f.render_widget(Paragraph::new(vec![bar, notice]), split[0]);
        area = split[1];
    }
    let Some(s) = app.snap.take() else {
        let text = app
            .error
            .as_deref()
            .map(cell)
            .unwrap_or_else(|| "gpufree watch: taking the first snapshot...".into());
        f.render_widget(Paragraph::new(text), area);
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
    let width = (area.width as usize).saturating_sub(70).clamp(10, 60);
    let lines: Vec<Line<'_>> = s
        .gpus
        .iter()
        .flat_map(|g| bars(width, g, app.color))
        .collect();
    let title = words::gpus_title(
        s.gpus.len(),
        s.processes.len(),
        s.visibility.processes_scanned,
        app.updated.map(|u| u.elapsed().as_secs_f64()),
    );
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
        area,
    );
}

/// The holders table, sorted and filtered as asked, keeping a selection
/// on a row that exists.
fn draw_holders(f: &mut Frame<'_>, app: &mut App, s: &Snapshot, area: Rect) {
    let rows = app.rows_of(s);
    let sort = match app.sort {
        Sort::Memory => "memory",
        Sort::Pid => "pid",
        Sort::Age => "age",
    };
    let filter = [
        app.gpu.map(|g| format!("gpu={g}")),
        app.user.as_ref().map(|u| format!("user={}", cell(u))),
        app.owner.as_ref().map(|o| format!("owner={}", cell(o))),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ");
    let lookup = crate::model::Lookup::new(s);
    let table = holders_table(
        rows.iter()
            .map(|p| holder_row(s, &lookup, p, app.color))
            .collect(),
        words::holders_title(sort, &filter),
    );
    let n_rows = rows.len();
    drop(rows);
    if app.table.selected().is_none() && n_rows > 0 {
        app.table.select(Some(0));
    }
    if app.table.selected().is_some_and(|i| i >= n_rows) {
        app.table.select(n_rows.checked_sub(1));
    }
    f.render_stateful_widget(table, area, &mut app.table);
}

/// One holder's row: renamed or orphaned ones in yellow (when `color`).
fn holder_row<'a>(
    s: &Snapshot,
    lookup: &crate::model::Lookup,
    p: &Process,
    color: bool,
) -> Row<'a> {
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
        fg(color, Color::Yellow)
    } else {
        Style::new()
    };
    Row::new(vec![
        Cell::from(p.pid.to_string()),
        Cell::from(cell(&p.user)),
        Cell::from(cell(&p.comm)),
        Cell::from(if p.memory_bytes() > 0 {
            mib(p.memory_bytes())
        } else {
            "-".into()
        }),
        Cell::from(gpus.join(",")),
        Cell::from(lookup.sm_percent(p).map_or("-".into(), |v| format!("{v}%"))),
        Cell::from(age(s, p)),
        Cell::from(match p.owner.described() {
            o if o.is_empty() => "-".into(),
            o => cell(&o),
        }),
        Cell::from(crate::present::flags(p)),
    ])
    .style(style)
}

/// The holders table around `rows`: its columns, header and title.
fn holders_table(rows: Vec<Row<'_>>, title: String) -> Table<'_> {
    Table::new(
        rows,
        [
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(16),
            Constraint::Length(12),
            Constraint::Length(7),
            Constraint::Length(4),
            Constraint::Length(7),
            Constraint::Min(10),
            Constraint::Length(18),
        ],
    )
    .header(
        Row::new([
            "PID", "USER", "COMM", "MEMORY", "GPUS", "SM%", "AGE", "OWNER", "FLAGS",
        ])
        .style(Style::new().add_modifier(Modifier::BOLD)),
    )
    .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    .block(Block::default().borders(Borders::ALL).title(title))
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
    let help = words::help(app.replay.is_some());
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
