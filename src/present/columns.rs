//! Text that fits the printer's width: a command line cut with `…` that
//! keeps the program's file name, and a paragraph wrapped at spaces.

use crate::safe::{escape, fit, width};

/// `cmdline` escaped, within `max` columns: whole when it fits, else its
/// program named by its file name (`/usr/bin/python3 -m vllm` reads
/// `python3 -m vllm`) and the rest cut with `…`.
pub(crate) fn command(cmdline: &str, max: usize) -> String {
    let whole = escape(cmdline);
    if width(&whole) <= max {
        return whole.into_owned();
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

#[cfg(test)]
mod tests {
    use super::{command, wrap};

    #[test]
    fn a_command_line_keeps_its_program_name_and_is_cut_with_a_mark() {
        let cmd = "/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model x";
        assert_eq!(command(cmd, 200), cmd);
        assert_eq!(command(cmd, 20), "python3 -m vllm.ent…");
        assert_eq!(command("/opt/bin/serve", 8), "serve");
        assert_eq!(command("a\x1bb", 10), "a\\eb");
    }

    #[test]
    fn paragraphs_wrap_at_spaces_within_their_columns() {
        assert_eq!(wrap("aa bb cc dd", 5, 5), ["aa bb", "cc dd"]);
        assert_eq!(wrap("aa bb cc", 2, 5), ["aa", "bb cc"]);
        assert_eq!(wrap("abcdefgh x", 4, 4), ["abc…", "x"]);
        assert_eq!(wrap("", 4, 4), [""]);
    }
}
