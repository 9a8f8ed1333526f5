//! Presenters: they read a [`crate::model::Snapshot`] and write text or
//! JSON into any writer; none touches /proc or NVML.

pub mod check;
mod drm;
pub mod fleet;
mod gpus;
pub mod json;
pub mod kill;
pub mod metrics;
mod mig;
pub mod next;
pub mod table;
pub mod why;
pub mod words;

#[cfg(test)]
mod tests;

use anstyle::{AnsiColor, Style};
use std::io::{self, Write};

/// Whether and how to colour text. Decided once by the caller from
/// `--no-color`, `NO_COLOR` and whether stdout is a terminal.
#[derive(Debug, Clone, Copy, Default)]
pub struct Paint {
    /// Emit ANSI colours.
    pub color: bool,
}

impl Paint {
    /// Colour for a terminal that wants it: not with `--no-color`, not when
    /// `NO_COLOR` is set and non-empty, not when stdout is not a terminal.
    pub fn for_stdout(no_color_flag: bool) -> Paint {
        use std::io::IsTerminal;
        let env_off = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Paint {
            color: !no_color_flag && !env_off && std::io::stdout().is_terminal(),
        }
    }

    fn paint(&self, style: Style, s: &str) -> String {
        if self.color {
            format!("{}{s}{}", style.render(), style.render_reset())
        } else {
            s.to_string()
        }
    }

    /// Headings.
    pub fn bold(&self, s: &str) -> String {
        self.paint(Style::new().bold(), s)
    }
    /// Secondary text.
    pub fn dim(&self, s: &str) -> String {
        self.paint(Style::new().dimmed(), s)
    }
    /// Things worth attention.
    pub fn warn(&self, s: &str) -> String {
        self.paint(AnsiColor::Yellow.on_default(), s)
    }
    /// Errors.
    pub fn error(&self, s: &str) -> String {
        self.paint(AnsiColor::Red.on_default().bold(), s)
    }
}

/// A holder's flags as the table and the live view show them:
/// `renamed,orphaned,protected` and the state when it matters.
pub fn flags(p: &crate::model::Process) -> String {
    let mut f = Vec::new();
    if p.renamed {
        f.push("renamed");
    }
    if p.orphaned {
        f.push("orphaned");
    }
    if p.protected {
        f.push("protected");
    }
    match p.state.as_str() {
        "Z" => f.push("zombie"),
        "D" => f.push("uninterruptible"),
        "T" | "t" => f.push("stopped"),
        _ => {}
    }
    f.join(",")
}

/// Writes `value` as one pretty JSON document and a newline; the
/// characters a terminal would obey are `\uXXXX` escapes ([`crate::safe`]).
pub fn write_json<W: Write, T: serde::Serialize>(w: &mut W, value: &T) -> io::Result<()> {
    let mut ser =
        serde_json::Serializer::with_formatter(&mut *w, crate::safe::JsonFormatter::default());
    // io::Error::from keeps a write error's kind (a closed pipe stays
    // BrokenPipe, which is success for the caller).
    value.serialize(&mut ser).map_err(io::Error::from)?;
    writeln!(w)
}

/// `gpufree status` as it prints: the JSON document, or the table (quiet:
/// without findings or footer). The command line's own scan and root's
/// serve answering a user's view both print through it.
pub fn write_status_command<W: Write>(
    w: &mut W,
    s: &crate::model::Snapshot,
    json: bool,
    quiet: bool,
    paint: &Paint,
) -> io::Result<()> {
    if json {
        return write_json(w, &json::SnapshotDoc::new(s));
    }
    if quiet {
        let mut s = s.clone();
        s.findings.clear();
        return table::write_status_with(w, &s, paint, false);
    }
    table::write_status_with(w, s, paint, true)
}

/// `gpufree why` as it prints: the JSON document, or the findings (quiet:
/// without details or next commands).
pub fn write_why_command<W: Write>(
    w: &mut W,
    s: &crate::model::Snapshot,
    json: bool,
    quiet: bool,
    paint: &Paint,
) -> io::Result<()> {
    if json {
        return write_json(w, &json::SnapshotDoc::new(s));
    }
    why::write_why_with(w, s, paint, !quiet)
}
