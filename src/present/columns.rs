//! Text that fits the printer's width: a command line cut with `…` that
//! keeps the program's file name, a paragraph wrapped at spaces, the
//! holder table's wide columns narrowed, and the executables that several
//! renamed holders share (said once); the room a finding's command lines
//! take in the words being made ([`with_room`], [`command_in`]).

use crate::model::Snapshot;
use crate::safe::{escape, fit, width};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// The columns a line of the words being made may take, for the command
/// lines in it.
#[derive(Debug, Clone, Copy)]
enum Room {
    /// `why`'s evidence at a width: a line's columns.
    Columns(usize),
    /// Words made for no width (JSON, `--wide`): whole, up to
    /// [`COMMAND_WHOLE`] columns.
    Whole,
}

/// A command line's columns where no width is set: whole but for a
/// hostile one, which must leave its line's end (within `safe::TEXT_MAX`)
/// readable.
const COMMAND_WHOLE: usize = 300;

thread_local! {
    static ROOM: Cell<Room> = const { Cell::new(Room::Whole) };
}

/// Runs `make` (which makes a finding's words) with its command lines cut
/// to lines of `room` columns (None: `--wide`, whole up to 300 columns).
pub(crate) fn with_room<T>(room: Option<usize>, make: impl FnOnce() -> T) -> T {
    let room = room.map_or(Room::Whole, Room::Columns);
    let before = ROOM.with(|r| r.replace(room));
    let made = make();
    ROOM.with(|r| r.set(before));
    made
}

/// `cmdline` as a finding's words show it, on a line where `used` columns
/// are taken by the rest: whole when it fits, else its program by its file
/// name (`/opt/venv/bin/python3 train.py` reads `python3 train.py`) and
/// cut with `…`, to the line's room ([`with_room`]; never under 20
/// columns).
pub(crate) fn command_in(cmdline: &str, used: usize) -> String {
    let max = match ROOM.with(Cell::get) {
        Room::Columns(room) => room.saturating_sub(used).max(20),
        Room::Whole => COMMAND_WHOLE,
    };
    cut(cmdline, max)
}

/// `cmdline` (not escaped) within `max` columns: whole, else named by its
/// program's file name and cut with `…`.
fn cut(cmdline: &str, max: usize) -> String {
    if width(cmdline) <= max {
        return cmdline.to_string();
    }
    let (program, args) = cmdline.split_once(' ').unwrap_or((cmdline, ""));
    let name = program
        .rsplit('/')
        .find(|n| !n.is_empty())
        .unwrap_or(program);
    if args.is_empty() {
        fit(name, max)
    } else {
        fit(&format!("{name} {args}"), max)
    }
}

/// `cmdline` escaped, within `max` columns: whole when it fits, else its
/// program named by its file name (`/usr/bin/python3 -m vllm` reads
/// `python3 -m vllm`) and the rest cut with `…`.
pub(crate) fn command(cmdline: &str, max: usize) -> String {
    let whole = escape(cmdline);
    if width(&whole) <= max {
        return whole.into_owned();
    }
    cut(cmdline, max)
}

/// `text` (already escaped) in lines of at most `first` columns, then
/// `rest`, broken at spaces; a word wider than its line is cut with `…`.
pub(crate) fn wrap(text: &str, first: usize, rest: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let room = if lines.is_empty() { first } else { rest };
        let wanted = width(&line) + usize::from(!line.is_empty()) + width(word);
        if !line.is_empty() && wanted > room {
            lines.push(std::mem::take(&mut line));
        }
        let room = if lines.is_empty() { first } else { rest };
        if !line.is_empty() {
            line.push(' ');
        }
        if line.is_empty() && width(word) > room {
            line.push_str(&fit(word, room));
        } else {
            line.push_str(word);
        }
    }
    lines.push(line);
    lines
}

/// The PIDs of the renamed holders of `s` by their executable.
pub(crate) fn exes(s: &Snapshot) -> BTreeMap<String, Vec<u32>> {
    let mut by: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for p in s.processes.iter().filter(|p| p.renamed) {
        let exe = p.exe.clone().unwrap_or_else(|| "?".into());
        by.entry(exe).or_default().push(p.pid);
    }
    for pids in by.values_mut() {
        pids.sort_unstable();
        pids.dedup();
    }
    by
}

/// Narrows the DEVICES and then the OWNER column (never under 12 and 8
/// columns) until a row of `widths` fits `limit` columns.
pub(crate) fn narrow(widths: &mut [usize; 7], limit: Option<usize>) {
    let Some(limit) = limit else { return };
    let total = 2 + widths.iter().sum::<usize>() + 2 * 6;
    let mut over = total.saturating_sub(limit);
    for (column, floor) in [(4, 12), (5, 8)] {
        let give = over.min(widths[column].saturating_sub(floor));
        widths[column] -= give;
        over -= give;
    }
}

/// `text` (a narration's line, which may begin with spaces) within the
/// printer's width: wrapped at spaces, its later lines indented by
/// `indent` columns, each painted by `paint`; whole under `--wide`.
pub(crate) fn write_lines<W: Write>(
    w: &mut W,
    text: &str,
    indent: usize,
    printer: &super::Printer,
    paint: impl Fn(&str) -> String,
) -> io::Result<()> {
    let body = text.trim_start_matches(' ');
    let lead = text.len() - body.len();
    let first = printer.room(lead, 20);
    let rest = printer.room(indent, 20);
    for (i, line) in wrap(body, first, rest).iter().enumerate() {
        let pad = if i == 0 { lead } else { indent };
        writeln!(w, "{:pad$}{}", "", paint(line))?;
    }
    Ok(())
}

/// `text` after `head` (which takes `cols` columns with its space),
/// wrapped to the printer's width under itself.
pub(crate) fn write_wrapped<W: Write>(
    w: &mut W,
    head: &str,
    cols: usize,
    text: &str,
    printer: &super::Printer,
) -> io::Result<()> {
    let room = printer.room(cols, 20);
    for (i, line) in wrap(text, room, room).iter().enumerate() {
        if i == 0 {
            writeln!(w, "{head} {line}")?;
        } else {
            writeln!(w, "{:cols$}{line}", "")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{command, command_in, with_room, wrap};

    #[test]
    fn a_command_line_keeps_its_program_name_and_is_cut_with_a_mark() {
        let cmd = "/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model x";
        assert_eq!(command(cmd, 200), cmd);
        assert_eq!(command(cmd, 20), "python3 -m vllm.ent…");
        assert_eq!(command("/opt/bin/serve", 8), "serve");
        assert_eq!(command("a\x1bb", 10), "a\\eb");
    }

    #[test]
    fn a_findings_command_line_takes_the_room_its_line_leaves() {
        let cmd = "/opt/conda/envs/train/bin/python3.11 /home/ana/project/train.py --epochs 90";
        assert_eq!(command_in(cmd, 10), cmd);
        assert_eq!(
            with_room(Some(40), || command_in(cmd, 10)),
            "python3.11 /home/ana/project/…"
        );
        assert_eq!(
            with_room(Some(30), || command_in(cmd, 25)),
            "python3.11 /home/an…"
        );
        assert_eq!(with_room(None, || command_in(cmd, 10)), cmd);
        assert_eq!(with_room(Some(200), || command_in(cmd, 10)), cmd);
    }

    #[test]
    fn paragraphs_wrap_at_spaces_within_their_columns() {
        assert_eq!(wrap("aa bb cc dd", 5, 5), ["aa bb", "cc dd"]);
        assert_eq!(wrap("aa bb cc", 2, 5), ["aa", "bb cc"]);
        assert_eq!(wrap("abcdefgh x", 4, 4), ["abc…", "x"]);
        assert_eq!(wrap("", 4, 4), [""]);
    }
}
