//! The holders pane of the live view: its columns fitted to the pane's
//! width so that a PID and a memory figure are never cut (a cut PID is
//! another valid PID an operator may copy). OWNER, FLAGS, COMM and USER
//! narrow first (cut with `…`), then OWNER, FLAGS, AGE, COMM, SM%, GPUS
//! and USER are left out; where even PID and MEMORY do not fit, the pane
//! says so and shows no number.

use super::draw::{age, fg};
use super::{cell, App, Sort};
use crate::model::{Lookup, Process, Snapshot};
use crate::present::words::watch as words;
use crate::safe::{fit, width};
use crate::units::mib;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table};
use ratatui::Frame;

/// A column of the holders table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Col {
    Pid,
    User,
    Comm,
    Memory,
    Gpus,
    Sm,
    Age,
    Owner,
    Flags,
}

use Col::*;

/// Every column, in the order shown.
const ALL: [Col; 9] = [Pid, User, Comm, Memory, Gpus, Sm, Age, Owner, Flags];

impl Col {
    fn header(self) -> &'static str {
        match self {
            Pid => "PID",
            User => "USER",
            Comm => "COMM",
            Memory => "MEMORY",
            Gpus => "GPUS",
            Sm => "SM%",
            Age => "AGE",
            Owner => "OWNER",
            Flags => "FLAGS",
        }
    }

    /// The width it wants, and the narrowest it may be cut to (PID and
    /// MEMORY: their widest text, never cut).
    fn widths(self, pid: usize, memory: usize) -> (usize, usize) {
        match self {
            Pid => (pid.max(8), pid),
            User => (9, 4),
            Comm => (16, 6),
            Memory => (memory.max(12), memory),
            Gpus => (7, 7),
            Sm => (4, 4),
            Age => (7, 7),
            Owner => (24, 8),
            Flags => (18, 8),
        }
    }
}

/// The columns narrowed first, in order (PID and MEMORY: only to their
/// widest text).
const NARROWED: [Col; 6] = [Pid, Memory, Owner, Flags, Comm, User];
/// The columns left out next, in order.
const LEFT_OUT: [Col; 7] = [Owner, Flags, Age, Comm, Sm, Gpus, User];

/// The columns shown in `room` columns (one space between two) and their
/// widths, where the widest PID is `pid` columns and the widest memory
/// `memory`: each as wide as it wants where all fit; else narrowed, then
/// left out ([`NARROWED`], [`LEFT_OUT`]), the room left given back to the
/// narrowed ones and the rest to OWNER. Empty where PID and MEMORY alone
/// do not fit.
pub(super) fn layout(room: usize, pid: usize, memory: usize) -> Vec<(Col, usize)> {
    let mut cols: Vec<(Col, usize)> = ALL.iter().map(|&c| (c, c.widths(pid, memory).0)).collect();
    let total = |cols: &[(Col, usize)]| {
        cols.iter().map(|(_, w)| w).sum::<usize>() + cols.len().saturating_sub(1)
    };
    for narrowed in NARROWED {
        let over = total(&cols).saturating_sub(room);
        if let Some((c, w)) = cols.iter_mut().find(|(c, _)| *c == narrowed) {
            *w -= over.min(*w - c.widths(pid, memory).1);
        }
    }
    for left in LEFT_OUT {
        if total(&cols) > room {
            cols.retain(|(c, _)| *c != left);
        }
    }
    if total(&cols) > room {
        return Vec::new();
    }
    for narrowed in [Comm, User, Flags, Pid, Memory, Owner] {
        let spare = room - total(&cols);
        if let Some((c, w)) = cols.iter_mut().find(|(c, _)| *c == narrowed) {
            *w += spare.min(c.widths(pid, memory).0 - *w);
        }
    }
    let spare = room - total(&cols);
    if let Some((_, w)) = cols.iter_mut().find(|(c, _)| *c == Owner) {
        *w += spare;
    }
    cols
}

/// One holder's cells, by [`ALL`]'s order, escaped and whole.
fn texts(s: &Snapshot, lookup: &Lookup, p: &Process) -> [String; 9] {
    let mut gpus: Vec<u32> = p
        .gpu_memory
        .iter()
        .map(|m| m.gpu)
        .chain(p.devices.iter().filter_map(|d| d.gpu))
        .collect();
    gpus.sort_unstable();
    gpus.dedup();
    let gpus: Vec<String> = gpus.iter().map(u32::to_string).collect();
    [
        p.pid.to_string(),
        cell(&p.user),
        cell(&p.comm),
        if p.memory_bytes() > 0 {
            mib(p.memory_bytes())
        } else {
            "-".into()
        },
        gpus.join(","),
        lookup.sm_percent(p).map_or("-".into(), |v| format!("{v}%")),
        age(s, p),
        match p.owner.described() {
            o if o.is_empty() => "-".into(),
            o => cell(&o),
        },
        crate::present::flags(p),
    ]
}

/// The holders table, sorted and filtered as asked, keeping a selection
/// on a row that exists.
pub(super) fn draw_holders(f: &mut Frame<'_>, app: &mut App, s: &Snapshot, area: Rect) {
    let rows = app.rows_of(s);
    let lookup = Lookup::new(s);
    let texts: Vec<[String; 9]> = rows.iter().map(|p| texts(s, &lookup, p)).collect();
    let styles: Vec<Style> = rows
        .iter()
        .map(|p| match p.renamed || p.orphaned {
            true => fg(app.color, Color::Yellow),
            false => Style::new(),
        })
        .collect();
    let n_rows = rows.len();
    drop(rows);
    let widest = |i: usize, header: &str| {
        texts
            .iter()
            .map(|t| width(&t[i]))
            .fold(width(header), usize::max)
    };
    let room = usize::from(area.width.saturating_sub(2));
    let cols = layout(room, widest(0, "PID"), widest(3, "MEMORY"));
    let title = fit(
        &words::holders_title(sort_name(app.sort), &filter(app)),
        room,
    );
    let block = Block::default().borders(Borders::ALL).title(title);
    if cols.is_empty() {
        f.render_widget(
            Paragraph::new(fit(words::TOO_NARROW, room)).block(block),
            area,
        );
        return;
    }
    let table = table(&texts, styles, &cols, block);
    if app.table.selected().is_none() && n_rows > 0 {
        app.table.select(Some(0));
    }
    if app.table.selected().is_some_and(|i| i >= n_rows) {
        app.table.select(n_rows.checked_sub(1));
    }
    f.render_stateful_widget(table, area, &mut app.table);
}

/// The table of `texts` (each row's cells, styled by `styles`) in the
/// columns `cols`, each cell cut to its column with `…`.
fn table<'a>(
    texts: &[[String; 9]],
    styles: Vec<Style>,
    cols: &[(Col, usize)],
    block: Block<'a>,
) -> Table<'a> {
    let rows: Vec<Row<'_>> = texts
        .iter()
        .zip(styles)
        .map(|(t, style)| {
            let cells = cols
                .iter()
                .map(|&(c, w)| Cell::from(fit(&t[c as usize], w)));
            Row::new(cells).style(style)
        })
        .collect();
    Table::new(
        rows,
        cols.iter().map(|&(_, w)| Constraint::Length(w as u16)),
    )
    .header(
        Row::new(cols.iter().map(|&(c, w)| fit(c.header(), w)))
            .style(Style::new().add_modifier(Modifier::BOLD)),
    )
    .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    .block(block)
}

fn sort_name(sort: Sort) -> &'static str {
    match sort {
        Sort::Memory => "memory",
        Sort::Pid => "pid",
        Sort::Age => "age",
    }
}

/// The filters set (`gpu=0 user=ann`).
fn filter(app: &App) -> String {
    [
        app.gpu.map(|g| format!("gpu={g}")),
        app.user.as_ref().map(|u| format!("user={}", cell(u))),
        app.owner.as_ref().map(|o| format!("owner={}", cell(o))),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ")
}
