//! How every writer prints: one [`Printer`], built once per command (the
//! command line's flags, `NO_COLOR`, whether stdout is a terminal) with a
//! [`PrinterBuilder`] and passed to each writer, as ripgrep's printer is
//! one value built from its `StandardBuilder`. Whether to colour is
//! decided once, where the command builds its printer (`cli::run`); the
//! printer alone applies it: it paints the writers' strings and makes the
//! [`Guard`] that lets exactly those colours through.

use crate::safe::Guard;
use anstyle::{AnsiColor, Style};
use std::io::Write;

/// What every writer is told: colours or not, quiet or not, JSON or text,
/// and how many columns a line may take. `Printer::default()` is plain,
/// full text with no limit on a line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Printer {
    color: bool,
    quiet: bool,
    json: bool,
    width: Option<usize>,
}

/// Builds a [`Printer`]; each setting defaults to off.
#[derive(Debug, Clone, Default)]
pub struct PrinterBuilder {
    config: Printer,
}

impl PrinterBuilder {
    /// A builder of a plain, full, text printer.
    pub fn new() -> PrinterBuilder {
        PrinterBuilder::default()
    }

    /// ANSI colours (the caller has weighed `--no-color`, `NO_COLOR` and
    /// the terminal).
    pub fn color(&mut self, yes: bool) -> &mut PrinterBuilder {
        self.config.color = yes;
        self
    }

    /// `--quiet`: each writer leaves out what it calls detail (the status
    /// table its findings and footer, `why` the evidence and next
    /// commands, `doctor` the fixes, the fleet view its headings).
    pub fn quiet(&mut self, yes: bool) -> &mut PrinterBuilder {
        self.config.quiet = yes;
        self
    }

    /// `--json`: the command's JSON document instead of its text.
    pub fn json(&mut self, yes: bool) -> &mut PrinterBuilder {
        self.config.json = yes;
        self
    }

    /// The columns a text line may take (the terminal's, `COLUMNS` or
    /// 100, as `cli` decides); None (`--wide`): no limit. JSON is never cut.
    pub fn width(&mut self, columns: Option<usize>) -> &mut PrinterBuilder {
        self.config.width = columns;
        self
    }

    /// The printer.
    pub fn build(&self) -> Printer {
        self.config
    }
}

impl Printer {
    /// Whether ANSI colours are written.
    pub fn color(&self) -> bool {
        self.color
    }

    /// Whether detail is left out (`--quiet`).
    pub fn quiet(&self) -> bool {
        self.quiet
    }

    /// Whether the command writes its JSON document (`--json`).
    pub fn json(&self) -> bool {
        self.json
    }

    /// The columns a text line may take; None: no limit (`--wide`).
    pub fn width(&self) -> Option<usize> {
        self.width
    }

    /// The columns left for a field after `used` columns of its line;
    /// `usize::MAX` without a limit, and never under `floor`, so that a
    /// narrow terminal still shows a few columns of each field.
    pub fn room(&self, used: usize, floor: usize) -> usize {
        self.width
            .map_or(usize::MAX, |w| w.saturating_sub(used).max(floor))
    }

    /// This printer without colours: for the formats other programs read
    /// (`check`'s), whatever the terminal.
    pub fn plain(self) -> Printer {
        Printer {
            color: false,
            ..self
        }
    }

    /// This printer with every detail (the demo shows whole outputs).
    pub fn full(self) -> Printer {
        Printer {
            quiet: false,
            ..self
        }
    }

    /// `inner` guarded ([`Guard`]): no unsafe character reaches it, and
    /// this printer's colours do when it writes them.
    pub fn guard<W: Write>(&self, inner: W) -> Guard<W> {
        Guard::new(inner, self.color)
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

#[cfg(test)]
mod tests {
    use super::PrinterBuilder;
    use std::io::Write;

    /// What `text` becomes through the guard of `printer`.
    fn guarded(printer: &super::Printer, text: &str) -> String {
        let mut out = Vec::new();
        let mut g = printer.guard(&mut out);
        g.write_all(text.as_bytes()).unwrap();
        drop(g);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_guard_passes_the_colours_of_its_own_printer_only() {
        let colour = PrinterBuilder::new().color(true).quiet(true).build();
        let text = format!("{} {}\n", colour.bold("b"), colour.error("e"));
        assert!(text.contains('\x1b'));
        assert_eq!(guarded(&colour, &text), text);
        let plain = colour.plain();
        assert!(!plain.color() && plain.quiet());
        assert!(!guarded(&plain, &text).contains('\x1b'));
        assert_eq!(plain.bold("b"), "b");
        assert!(!plain.full().quiet());
    }
}
