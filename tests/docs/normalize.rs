//! What may differ between the page and this run, made the same on both
//! sides before they are compared: PIDs, temporary paths, durations,
//! column widths and where a cut name ends.

use regex::Regex;
use std::sync::LazyLock;

/// The demo's directory, `mktemp -d`'s, and the session's own.
static TEMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"/tmp/(gpufree-demo-\d+-\d+|tmp\.[A-Za-z0-9]+|\.tmp[A-Za-z0-9]+)").unwrap()
});
/// A duration in seconds as gpufree prints it (`2.18 s`, `1.1 s`).
static SECONDS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b\d+(\.\d+)? s\b").unwrap());
/// A name cut to the column's width (`NVIDIA RTX PRO 6000 Blackwell Works…`).
static CUT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\S*…").unwrap());
/// A finding's number: findings that depend on the host (a process it
/// could not read) come and go before it.
static NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^(\s*)\d+\. (error|warn|info) ").unwrap());
/// How many processes the host runs.
static SCANNED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"scanned \d+ processes").unwrap());
/// A line the page cut short with `...` at its end (after what it shows,
/// or in the middle of a word gpufree cut the same way).
static SHORTENED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(^|\s)\S*\.\.\.$").unwrap());
/// Runs of blanks: column widths follow the widest value.
static BLANKS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[ \t]+").unwrap());

/// `text` with what varies from run to run replaced by placeholders, each
/// line's blanks collapsed and trimmed.
pub fn normalize(text: &str) -> String {
    let text = TEMP.replace_all(text, "<tmp>");
    let text = SECONDS.replace_all(&text, "<t> s");
    let text = CUT.replace_all(&text, "…");
    let text = SCANNED.replace_all(&text, "scanned <n> processes");
    let text = NUMBER.replace_all(&text, "${1}<n>. ${2} ");
    let text = pids(&text);
    let mut out = String::new();
    for line in text.lines() {
        out.push_str(BLANKS.replace_all(line, " ").trim());
        out.push('\n');
    }
    out
}

/// Every run of 3 to 7 digits that is a number of its own (not part of
/// `96,610`, `94.3` or `nvidia0`) becomes `<pid>`: PIDs differ from run
/// to run, and so does how many digits they have. A short size, a port
/// or a year of its own (`512 MiB`) is made `<pid>` too; a size grouped
/// with commas is kept.
fn pids(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && chars[i].is_ascii_digit() {
            i += 1;
        }
        let before = start.checked_sub(1).map(|j| chars[j]);
        let before2 = start.checked_sub(2).map(|j| chars[j]);
        let after = chars.get(i).copied();
        let after2 = chars.get(i + 1).copied();
        let joined_before = before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            || (matches!(before, Some(',' | '.')) && before2.is_some_and(|c| c.is_ascii_digit()));
        let joined_after = after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            || (matches!(after, Some(',' | '.')) && after2.is_some_and(|c| c.is_ascii_digit()));
        let len = i - start;
        if (3..=7).contains(&len) && !joined_before && !joined_after {
            out.push_str("<pid>");
        } else {
            out.extend(&chars[start..i]);
        }
    }
    out
}

/// The page's side: as `normalize`, and a line it shortened with `...`
/// at its end matches any rest of the line (snapbox's `[..]`).
pub fn expected(text: &str) -> String {
    let text = normalize(text);
    let mut out = String::new();
    for line in text.lines() {
        if line == "..." {
            out.push_str(line);
        } else {
            out.push_str(&SHORTENED.replace(line, "${1}[..]"));
        }
        out.push('\n');
    }
    out
}

#[test]
fn pids_widths_and_times_are_redacted_and_comma_grouped_sizes_kept() {
    let a = "  31195  root  VLLM::Worker_TP  96,610 MiB on GPU 3 after 2.18 s, pids 13078..13085";
    let b = "  915 root VLLM::Worker_TP 96,610 MiB on GPU 3 after 0.5 s, pids 1..13085";
    assert_eq!(
        normalize(a),
        "<pid> root VLLM::Worker_TP 96,610 MiB on GPU 3 after <t> s, pids <pid>..<pid>\n"
    );
    assert_ne!(normalize(a), normalize(b), "a 1-digit PID stays");
    assert_eq!(
        expected("GPU 0: 3 leftover (PID 31185 VLLM::EngineCor, 3118..."),
        "GPU 0: 3 leftover (PID <pid> VLLM::EngineCor, [..]\n"
    );
    assert_eq!(normalize(" 5. info  a\n"), "<n>. info a\n");
    assert_eq!(
        normalize("nvidia0 gpu0_used=101302927360B main(25)"),
        "nvidia0 gpu0_used=101302927360B main(25)\n"
    );
}
