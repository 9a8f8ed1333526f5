//! [`Guard`]: the writer between gpufree's text and a terminal or a pipe.

use super::{is_unsafe, plain, push_escaped};
use std::io::{self, Write};

/// A writer for a terminal or a pipe that lets no unsafe character of the
/// text through, whatever a presenter forgot: line breaks pass, and with
/// colour the SGR sequences (`ESC [ digits ; m`) that
/// [`crate::present::Printer`] writes; every other unsafe character is
/// escaped as [`super::escape`] does. Text that follows held bytes is
/// passed on a line at a time (and on flush), so that a character or a
/// colour sequence split between two writes is seen whole; printable
/// ASCII with nothing held before it completes nothing and is passed on at
/// once. Commands get theirs from their printer
/// ([`crate::present::Printer::guard`]), which decides the colour.
pub struct Guard<W: Write> {
    inner: W,
    color: bool,
    pending: Vec<u8>,
}

impl<W: Write> Guard<W> {
    /// Guards `inner`; `color` lets SGR colour sequences through.
    pub(crate) fn new(inner: W, color: bool) -> Guard<W> {
        Guard {
            inner,
            color,
            pending: Vec::new(),
        }
    }

    /// Passes on the first `upto` held bytes, escaped.
    fn emit(&mut self, upto: usize) -> io::Result<()> {
        let Guard {
            inner,
            color,
            pending,
        } = self;
        let written = guarded(inner, *color, &pending[..upto]);
        pending.drain(..upto);
        written
    }
}

/// Writes `chunk` to `inner` with every unsafe character escaped, and with
/// `color` gpufree's own SGR sequences kept.
fn guarded<W: Write>(inner: &mut W, color: bool, chunk: &[u8]) -> io::Result<()> {
    // Most output is printable ASCII and line breaks: passed on whole.
    if plain(chunk) {
        return inner.write_all(chunk);
    }
    let text = String::from_utf8_lossy(chunk);
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_ref();
    while let Some(c) = rest.chars().next() {
        if c == '\x1b' && color {
            if let Some(n) = sgr_len(rest) {
                out.push_str(&rest[..n]);
                rest = &rest[n..];
                continue;
            }
        }
        if c != '\n' && is_unsafe(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    inner.write_all(out.as_bytes())
}

/// The SGR parameters [`crate::present::Printer`] writes: reset, bold, dim,
/// red, yellow. Any other (conceal, blink, another colour) is not gpufree's.
const OWN_SGR: [&[u8]; 6] = [b"", b"0", b"1", b"2", b"31", b"33"];

/// Length of one of gpufree's own SGR sequences (`ESC [ N m`, N in
/// [`OWN_SGR`]) at the start of `s`.
fn sgr_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.get(1) != Some(&b'[') {
        return None;
    }
    let params = b[2..]
        .iter()
        .take_while(|x| x.is_ascii_digit() || **x == b';')
        .count();
    (b.get(2 + params) == Some(&b'm') && OWN_SGR.contains(&&b[2..2 + params])).then_some(3 + params)
}

impl<W: Write> Write for Guard<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Printable ASCII with nothing held before it completes no
        // character or sequence: passed on at once (most of a JSON
        // document, written a key, a value, an indent at a time).
        if self.pending.is_empty() && plain(buf) {
            self.inner.write_all(buf)?;
            return Ok(buf.len());
        }
        // Only the new bytes are searched: a long line written in many
        // small pieces (serde_json writes one per escape) stays linear.
        let before = self.pending.len();
        self.pending.extend_from_slice(buf);
        if let Some(i) = buf.iter().rposition(|b| *b == b'\n') {
            self.emit(before + i + 1)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.emit(self.pending.len())?;
        self.inner.flush()
    }
}

impl<W: Write> Drop for Guard<W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_passes_colour_and_lines_but_nothing_else() {
        let mut g = Guard::new(Vec::new(), true);
        write!(
            g,
            "\x1b[1mbold\x1b[0m \x1b[2J\x1b]0;t\x07\x1b[8m\nnext\u{202e}"
        )
        .unwrap();
        g.flush().unwrap();
        let out = String::from_utf8(std::mem::take(&mut g.inner)).unwrap();
        assert_eq!(
            out,
            "\x1b[1mbold\x1b[0m \\e[2J\\e]0;t\\a\\e[8m\nnext\\u{202e}"
        );
        let mut g = Guard::new(Vec::new(), false);
        g.write_all(b"\x1b[1mx\n").unwrap();
        g.flush().unwrap();
        assert_eq!(g.inner, b"\\e[1mx\n");
    }

    #[test]
    fn guard_sees_characters_and_colours_split_between_writes() {
        let text = "a\u{202e}b \x1b[1mx\x1b[0m \x1b[2J\n";
        let mut g = Guard::new(Vec::new(), true);
        for b in text.as_bytes() {
            g.write_all(&[*b]).unwrap();
        }
        g.flush().unwrap();
        assert_eq!(
            String::from_utf8(std::mem::take(&mut g.inner)).unwrap(),
            "a\\u{202e}b \x1b[1mx\x1b[0m \\e[2J\n"
        );
    }

    #[test]
    fn guard_passes_every_colour_paint_writes() {
        let p = crate::present::PrinterBuilder::new().color(true).build();
        let text = [p.bold("b"), p.dim("d"), p.warn("w"), p.error("e")].join(" ");
        assert!(text.contains('\x1b'));
        let mut g = p.guard(Vec::new());
        g.write_all(text.as_bytes()).unwrap();
        g.flush().unwrap();
        assert_eq!(
            String::from_utf8(std::mem::take(&mut g.inner)).unwrap(),
            text
        );
    }

    #[test]
    fn guard_passes_plain_text_at_once_and_holds_a_cut_character() {
        let mut g = Guard::new(Vec::new(), false);
        g.write_all(b"plain, no line break").unwrap();
        assert_eq!(g.inner, b"plain, no line break", "nothing held");
        // A character cut between pieces of any size, then plain text.
        let text = "ab\u{202e}cd é\x1b[2J\nef\n";
        for size in 1..=7 {
            let mut g = Guard::new(Vec::new(), false);
            for piece in text.as_bytes().chunks(size) {
                g.write_all(piece).unwrap();
            }
            g.flush().unwrap();
            assert_eq!(
                String::from_utf8(std::mem::take(&mut g.inner)).unwrap(),
                "ab\\u{202e}cd é\\e[2J\nef\n",
                "pieces of {size}"
            );
        }
    }
}
