//! The hostile names every output is tested against: terminal escapes,
//! line breaks, bidi overrides and isolates, quotes and shell syntax,
//! invalid UTF-8, DEL and C1, invisible characters, and a 64 KiB name.
//! Shared by the presenters' golden tests (src/present/tests/evil.rs) and
//! the integration tests (tests/it/evil.rs), through `#[path]`.

/// The corpus, as bytes.
pub fn corpus() -> Vec<Vec<u8>> {
    let mut c: Vec<Vec<u8>> = [
        &b"\x1b]0;pwned\x07title"[..],
        b"\x1b[2J\x1b[Hcleared",
        b"\x1b[31mred\x1b[0m",
        b"two\nlines\rback\ttab",
        "\u{202e}gnp.exe".as_bytes(),
        "\u{2066}iso\u{2069} \u{200f}rlm".as_bytes(),
        b"it's \"quoted\"",
        b"$(touch /tmp/gpufree-pwned)",
        b"`id` ; rm -rf ~ #",
        b"\xff\xfe not utf-8",
        b"\x7fdel \xc2\x85c1 \xc2\x9bcsi",
        "py\u{200b}thon\u{feff} \u{e0041}tag".as_bytes(),
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect();
    c.push(vec![b'A'; 64 * 1024]);
    c
}
