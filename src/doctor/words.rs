//! How systemd reads an `Exec*=` line: its words (quotes and escapes),
//! the variables and specifiers in them, and the shell code a `sh -c`
//! word carries with what it assigns.

use super::FORMAT_COMMANDS;
use std::collections::BTreeSet;

/// One word of a command line after systemd's unquoting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Word {
    pub(super) text: String,
    /// An unquoted lone `;`: the end of one command and the start of the next.
    pub(super) separator: bool,
}

/// Splits a value into words as systemd does (`extract_first_word()` with
/// unquoting and C escapes): whitespace separates, `"..."` and `'...'`
/// group, a backslash escapes. None when a quote is not closed (systemd
/// then refuses the line).
pub(super) fn split_words(value: &str) -> Option<Vec<Word>> {
    let mut words = Vec::new();
    let mut chars = value.chars().peekable();
    loop {
        while chars.next_if(|c| is_space(*c)).is_some() {}
        if chars.peek().is_none() {
            return Some(words);
        }
        let mut text = String::new();
        let mut quoted = false;
        let mut quote: Option<char> = None;
        while let Some(c) = chars.next() {
            match (quote, c) {
                (None, c) if is_space(c) => break,
                (None, '"' | '\'') => {
                    quote = Some(c);
                    quoted = true;
                }
                (Some(q), c) if c == q => quote = None,
                (Some('\''), c) => text.push(c),
                (_, '\\') => {
                    // An escaped `;` is an argument, not a separator.
                    quoted = true;
                    if let Some(e) = chars.next() {
                        text.push(unescape(e, &mut chars));
                    }
                }
                (_, c) => text.push(c),
            }
        }
        if quote.is_some() {
            return None;
        }
        let separator = !quoted && text == ";";
        words.push(Word { text, separator });
    }
}

/// The character a backslash and `e` stand for (systemd's `cunescape()`:
/// `\n`, `\t`, `\xNN`, `\uNNNN`, `\UNNNNNNNN`, `\NNN` octal...); the
/// digits are taken from `rest`. Anything else stands for itself.
pub(super) fn unescape(e: char, rest: &mut std::iter::Peekable<std::str::Chars<'_>>) -> char {
    let mut number = |digits: usize, radix: u32, first: Option<char>| {
        let mut v = first.and_then(|c| c.to_digit(radix)).unwrap_or(0);
        let mut taken = usize::from(first.is_some());
        while taken < digits {
            match rest.peek().and_then(|c| c.to_digit(radix)) {
                Some(d) => {
                    v = v.saturating_mul(radix).saturating_add(d);
                    rest.next();
                    taken += 1;
                }
                None => break,
            }
        }
        char::from_u32(v).unwrap_or(char::REPLACEMENT_CHARACTER)
    };
    match e {
        'a' => '\u{7}',
        'b' => '\u{8}',
        'f' => '\u{c}',
        'n' => '\n',
        'r' => '\r',
        't' => '\t',
        'v' => '\u{b}',
        's' => ' ',
        'x' => number(2, 16, None),
        'u' => number(4, 16, None),
        'U' => number(8, 16, None),
        '0'..='7' => number(3, 8, Some(e)),
        e => e,
    }
}

/// Whitespace as systemd splits on it.
pub(super) fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Whether `name` is a valid environment variable name.
pub(super) fn valid_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// How a word refers to a variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum VarUse {
    /// The word is `$NAME`: replaced by the value split at whitespace.
    Word(String),
    /// `${NAME}` in a word: replaced by the value.
    Braced(String),
    /// `${NAME:-x}` or `${NAME:+x}`: not expanded on command lines.
    Extended(String),
    /// `$NAME` inside a word: left as it is.
    Inside(String),
    /// A word `$...` that is no variable name (`$FOO/bar`): dropped.
    Dropped,
}

/// The variable references of one word, as systemd reads them.
pub(super) fn var_uses(word: &str) -> Vec<VarUse> {
    let b = word.as_bytes();
    if b.first() == Some(&b'$') && !matches!(b.get(1), Some(b'{' | b'$')) {
        let name = &word[1..];
        return vec![if valid_name(name) {
            VarUse::Word(name.to_string())
        } else {
            VarUse::Dropped
        }];
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b'$') => i += 2,
            Some(b'{') => {
                let rest = &word[i + 2..];
                match rest.find(['}', ':']) {
                    Some(end) if rest.as_bytes()[end] == b'}' => {
                        out.push(VarUse::Braced(rest[..end].to_string()));
                        i += end + 3;
                    }
                    Some(colon) => {
                        out.push(VarUse::Extended(rest[..colon].to_string()));
                        i += colon + 2;
                    }
                    None => i += 2,
                }
            }
            _ => {
                let name: String = word[i + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if valid_name(&name) {
                    i += 1 + name.len();
                    out.push(VarUse::Inside(name));
                } else {
                    i += 1;
                }
            }
        }
    }
    out
}

/// `%x` specifiers of a word (not `%%`), with their byte offsets.
pub(super) fn specifiers(s: &str) -> Vec<(usize, char)> {
    let mut out = Vec::new();
    let mut chars = s.char_indices();
    while let Some((at, c)) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some((_, '%')) => {}
                Some((_, x)) => out.push((at, x)),
                None => out.push((at, ' ')),
            }
        }
    }
    out
}

/// The file name of a program path.
pub(super) fn base(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// The shell code of a command (`sh -c CODE`, `bash -ec CODE`,
/// `env bash -c CODE`), if it runs one.
pub(super) fn shell_code(words: &[&str]) -> Option<usize> {
    let mut i = 0;
    if base(words.first()?) == "env" {
        i += 1;
        while words
            .get(i)
            .is_some_and(|w| w.starts_with('-') || w.contains('='))
        {
            i += 1;
        }
    }
    if !matches!(base(words.get(i)?), "sh" | "bash" | "dash" | "zsh" | "ksh") {
        return None;
    }
    for (j, w) in words.iter().enumerate().skip(i + 1) {
        if w.starts_with("--") || !w.starts_with('-') {
            return None;
        }
        if w.contains('c') {
            return (j + 1 < words.len()).then_some(j + 1);
        }
    }
    None
}

/// Names the shell code assigns or declares itself (`free=...`,
/// `for x in`, `read -r a b`, `local x`): the shell's variables.
pub(super) fn shell_assigned(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let tokens: Vec<&str> = code
        .split(|c: char| c.is_whitespace() || matches!(c, ';' | '|' | '&' | '(' | ')' | '`'))
        .filter(|t| !t.is_empty())
        .collect();
    let mut after: Option<&str> = None;
    for t in tokens {
        if let Some((name, _)) = t.split_once('=') {
            if valid_name(name) {
                out.insert(name.to_string());
            }
        }
        match after {
            Some("for") if valid_name(t) => {
                out.insert(t.to_string());
            }
            Some("read" | "local" | "export" | "declare" | "typeset" | "readonly")
                if valid_name(t) =>
            {
                out.insert(t.to_string());
                continue; // `read a b c`: all of them
            }
            Some("read" | "local" | "export" | "declare" | "typeset" | "readonly")
                if t.starts_with('-') =>
            {
                continue;
            }
            _ => {}
        }
        after = Some(t);
    }
    out
}

/// Whether the `%` at byte `at` of the shell code (or of a command's
/// word) is a format meant for the program, not a specifier: in a `date
/// +FORMAT` word, or in a command such as `printf` or `awk`.
pub(super) fn format_context(code: &str, at: usize) -> bool {
    let before = &code[..at];
    let token_start = before.rfind(is_space).map_or(0, |p| p + 1);
    let token = code[token_start..].trim_start_matches(['"', '\'']);
    if token.starts_with('+') {
        return true;
    }
    // Where the simple command around `at` starts: after the last `;`,
    // `|`, `&`, newline or backquote, and a `$(...)` or `{...}` already
    // closed before `at` belongs to the command around it.
    let mut starts = vec![0];
    for (i, c) in before.char_indices() {
        match c {
            '(' | '{' => starts.push(i + 1),
            ')' | '}' if starts.len() > 1 => {
                starts.pop();
            }
            ';' | '|' | '&' | '\n' | '`' => {
                if let Some(s) = starts.last_mut() {
                    *s = i + 1;
                }
            }
            _ => {}
        }
    }
    let cmd_start = starts.last().copied().unwrap_or(0);
    let command = code[cmd_start..at]
        .split_whitespace()
        .find(|w| {
            !(w.contains('=')
                || matches!(
                    *w,
                    "then" | "do" | "else" | "if" | "while" | "until" | "exec" | "command" | "!"
                ))
        })
        .map(|w| base(w.trim_matches(['"', '\''])));
    command.is_some_and(|c| FORMAT_COMMANDS.contains(&c))
}
