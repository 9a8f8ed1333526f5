//! The one layer between hostile strings and a terminal.
//!
//! Every name gpufree prints comes from someone else: a process chooses its
//! own comm and command line, a unit its cgroup name, a driver its error
//! text. Text output shows each control character visibly (C0, DEL, C1 and
//! the bidirectional overrides and isolates, as `\e`, `\n`, `\x7f`,
//! `\u{202e}`), the way `ls -b` and systemd do, so that no string can move
//! the cursor, retitle the window, clear the screen or reorder a line; long
//! fields are cut to their column with `…`. JSON keeps every string
//! complete, with the same characters written as `\uXXXX` escapes.
//! Suggested commands are quoted here too, so that pasting one runs exactly
//! the argument vector it was built from.

use std::borrow::Cow;
use std::io::{self, Write};
use unicode_width::UnicodeWidthChar;

mod guard;
pub use guard::Guard;

/// Whether `c` must never reach a terminal as itself: C0 controls, DEL, C1
/// controls, the Unicode format characters that reorder or break a line
/// (bidi embeddings, overrides, isolates and marks; line and paragraph
/// separators), and the invisible ones a name could hide behind to pass
/// for another (zero-width spaces and joiners, word joiner, BOM, soft
/// hyphen, Hangul fillers, tags).
pub fn is_unsafe(c: char) -> bool {
    matches!(c,
        '\0'..='\x1f' | '\x7f'..='\u{9f}' | '\u{ad}' | '\u{34f}'
        | '\u{061c}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}' | '\u{180e}'
        | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}'
        | '\u{3164}' | '\u{feff}' | '\u{ffa0}' | '\u{fff9}'..='\u{fffb}'
        | '\u{e0000}'..='\u{e007f}')
}

/// Printable ASCII and line breaks only: nothing to escape. Every byte
/// is looked at, without a branch per byte (the compiler makes it a
/// vector loop): the guard sees all of a `status --json` of 10,000
/// holders, 13 MB.
fn plain(bytes: &[u8]) -> bool {
    bytes.iter().fold(true, |all, &b| {
        all & (b.wrapping_sub(b' ') < 0x5f || b == b'\n')
    })
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        '\x1b' => out.push_str("\\e"),
        '\x07' => out.push_str("\\a"),
        '\x08' => out.push_str("\\b"),
        '\x0b' => out.push_str("\\v"),
        '\x0c' => out.push_str("\\f"),
        c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
        c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
    }
}

/// `s` with every unsafe character written visibly; borrowed when there is
/// none.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Columns `s` takes on a terminal (after [`escape`], nothing in it is a
/// control character; wide characters count two).
pub fn width(s: &str) -> usize {
    s.chars().map(|c| c.width().unwrap_or(0)).sum()
}

/// `s` escaped and cut to at most `max` columns, the cut marked with `…`.
pub fn fit(s: &str, max: usize) -> String {
    let e = escape(s);
    if width(&e) <= max {
        return e.into_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in e.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > max {
            break;
        }
        used += w;
        out.push(c);
    }
    if max > 0 {
        out.push('…');
    }
    out
}

/// `s` (already safe) padded with spaces to `cols` columns.
pub fn pad(s: &str, cols: usize) -> String {
    let w = width(s);
    let mut out = s.to_string();
    out.extend(std::iter::repeat_n(' ', cols.saturating_sub(w)));
    out
}

/// `s` (already safe) padded on the left to `cols` columns.
pub fn pad_left(s: &str, cols: usize) -> String {
    let w = width(s);
    let mut out: String = std::iter::repeat_n(' ', cols.saturating_sub(w)).collect();
    out.push_str(s);
    out
}

/// Widest free-text field (a command line, an executable path, a message
/// that embeds names) in text output; `--json` has it whole.
pub const TEXT_MAX: usize = 400;

/// Widest finding message, reason list or error line in text output
/// (they embed names); `--json` has it whole.
pub const MESSAGE_MAX: usize = 1000;

/// One shell word that every POSIX shell (dash included) reads back as
/// exactly `s`, quoted by shlex; None when `s` holds a character
/// [`is_unsafe`] names. Such a word cannot be printed safely: raw, it would
/// reach the terminal; in bash's `$'…'` form, dash reads it as other words
/// (and runs what follows a quote). Callers then suggest a command that
/// does not need the word (the PIDs instead of the unit's name).
pub fn shell_word(s: &str) -> Option<String> {
    if s.chars().any(is_unsafe) {
        return None;
    }
    shlex::try_quote(s).ok().map(|q| q.into_owned())
}

/// A command line that every POSIX shell runs as exactly `argv`; None when
/// a word cannot be printed safely (see [`shell_word`]).
pub fn shell_command<S: AsRef<str>>(argv: &[S]) -> Option<String> {
    argv.iter()
        .map(|a| shell_word(a.as_ref()))
        .collect::<Option<Vec<_>>>()
        .map(|w| w.join(" "))
}

/// serde_json's pretty layout, with the characters [`is_unsafe`] names
/// (beyond those JSON itself escapes) written as `\uXXXX`: the same string
/// to a parser, nothing live for a terminal.
pub struct JsonFormatter(serde_json::ser::PrettyFormatter<'static>);

impl Default for JsonFormatter {
    fn default() -> Self {
        JsonFormatter(serde_json::ser::PrettyFormatter::new())
    }
}

/// A JSON string's fragment with the characters [`is_unsafe`] names
/// written as `\uXXXX` (what [`JsonFormatter`] writes; compact JSON lines
/// use it too).
pub fn json_fragment<W: ?Sized + Write>(w: &mut W, fragment: &str) -> io::Result<()> {
    // Printable ASCII, as most fragments are, holds none of them (and no
    // line break: serde_json escapes those before a fragment is written).
    if plain(fragment.as_bytes()) {
        return w.write_all(fragment.as_bytes());
    }
    let mut start = 0;
    for (i, c) in fragment.char_indices() {
        if is_unsafe(c) {
            w.write_all(&fragment.as_bytes()[start..i])?;
            // UTF-16 units: a surrogate pair above U+FFFF, as JSON
            // spells such characters.
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                write!(w, "\\u{u:04x}")?;
            }
            start = i + c.len_utf8();
        }
    }
    w.write_all(&fragment.as_bytes()[start..])
}

impl serde_json::ser::Formatter for JsonFormatter {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        json_fragment(w, fragment)
    }
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_value(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_are_shown_not_obeyed() {
        assert_eq!(escape("plain name"), "plain name");
        assert_eq!(escape("a\x1b]0;t\x07b"), "a\\e]0;t\\ab");
        assert_eq!(escape("x\ny\r\t"), "x\\ny\\r\\t");
        assert_eq!(escape("\u{202e}gnp.exe"), "\\u{202e}gnp.exe");
        assert_eq!(escape("\u{85}\x7f\x01"), "\\u{85}\\x7f\\x01");
        assert_eq!(escape("é 日本"), "é 日本");
        assert_eq!(escape("python3\u{200b}"), "python3\\u{200b}");
        assert_eq!(escape("\u{feff}x\u{3164}"), "\\u{feff}x\\u{3164}");
    }

    #[test]
    fn fit_cuts_by_columns_and_marks_the_cut() {
        assert_eq!(fit("short", 10), "short");
        assert_eq!(fit("abcdefghij", 5), "abcd…");
        assert_eq!(fit("日本語テキスト", 5), "日本…");
        assert_eq!(width(&fit(&"x".repeat(70_000), 16)), 16);
        assert_eq!(fit("\x1b[2J", 3), "\\e…");
    }

    #[test]
    fn shell_words_read_back_as_one_word() {
        assert_eq!(shell_word("vllm.service").as_deref(), Some("vllm.service"));
        assert_eq!(shell_word("$(reboot)").as_deref(), Some("'$(reboot)'"));
        assert_eq!(shell_word("").as_deref(), Some("''"));
        for s in ["a\x1bb'", "\u{202e}x", "x\ny", "\u{85}"] {
            assert_eq!(shell_word(s), None, "{s:?}");
        }
        assert_eq!(shell_command(&["kill", "--unit", "a\tb"]), None);
    }

    #[test]
    fn json_escapes_what_a_terminal_would_obey() {
        let v = serde_json::json!({"comm": "a\u{202e}b\x7f\u{85}\x1b\u{e0041}"});
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, JsonFormatter::default());
        serde::Serialize::serialize(&v, &mut ser).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(r"a\u202eb\u007f\u0085\u001b\udb40\udc41"),
            "{text}"
        );
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
    }
}
