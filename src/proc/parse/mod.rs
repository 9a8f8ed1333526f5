//! Pure parsers for /proc files: they take bytes, never files, so each is
//! tested on literal input (names with spaces and parentheses, truncated
//! lines, non-UTF-8 bytes).

use std::fmt::Write as _;

/// Why a /proc file could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {file}: {why}")]
pub struct ParseError {
    /// Which file (`stat`, `status`, `maps`...).
    pub file: &'static str,
    /// What was wrong.
    pub why: &'static str,
}

/// The fields of /proc/PID/stat that gpufree uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Field 1.
    pub pid: u32,
    /// Field 2, without the parentheses; may contain spaces and ')'.
    pub comm: String,
    /// Field 3.
    pub state: char,
    /// Field 4.
    pub ppid: u32,
    /// Field 5: the process group.
    pub pgid: u32,
    /// Field 6: the session.
    pub sid: u32,
    /// Field 20.
    pub threads: u32,
    /// Field 22, clock ticks since boot: with the PID, the process's identity.
    pub start_time: u64,
    /// Fields 48 and 49: where argv lives in the process's memory.
    pub arg_area: Option<(u64, u64)>,
}

/// Parses /proc/PID/stat. comm is everything between the first '(' and the
/// *last* ')', since a process may name itself `a) S 1 (b`.
pub fn parse_stat(bytes: &[u8]) -> Result<Stat, ParseError> {
    let err = |why| ParseError { file: "stat", why };
    let open = bytes.iter().position(|&b| b == b'(').ok_or(err("no '('"))?;
    let close = bytes
        .iter()
        .rposition(|&b| b == b')')
        .ok_or(err("no ')'"))?;
    if close < open {
        return Err(err("')' before '('"));
    }
    let pid = parse_num(bytes[..open].trim_ascii()).ok_or(err("bad pid"))?;
    let comm = escape_bytes(&bytes[open + 1..close]);
    let rest = bytes.get(close + 1..).unwrap_or_default();
    // Fields from 3 on, split on single spaces.
    let fields: Vec<&[u8]> = rest.trim_ascii().split(|&b| b == b' ').collect();
    let field = |n: usize| fields.get(n - 3).copied();
    let state = field(3)
        .and_then(|f| f.first())
        .map(|&b| b as char)
        .ok_or(err("no state"))?;
    let ppid = field(4).and_then(parse_num).ok_or(err("no ppid"))?;
    let pgid = field(5).and_then(parse_num).unwrap_or(0);
    let sid = field(6).and_then(parse_num).unwrap_or(0);
    let threads = field(20)
        .and_then(parse_num)
        .ok_or(err("no thread count"))?;
    let start_time = field(22).and_then(parse_num).ok_or(err("no start time"))?;
    let arg_area = field(48)
        .and_then(parse_num)
        .zip(field(49).and_then(parse_num));
    Ok(Stat {
        pid,
        comm,
        state,
        ppid,
        pgid,
        sid,
        threads,
        start_time,
        arg_area,
    })
}

fn parse_num<T: std::str::FromStr>(b: &[u8]) -> Option<T> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// The fields of /proc/PID/status that gpufree uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Real UID (first of `Uid:`).
    pub uid: u32,
    /// `NSpid:`, outermost namespace first.
    pub nspid: Vec<u32>,
}

/// Parses /proc/PID/status.
pub fn parse_status(bytes: &[u8]) -> Result<Status, ParseError> {
    let mut uid = None;
    let mut nspid = Vec::new();
    for line in bytes.split(|&b| b == b'\n') {
        if let Some(v) = line.strip_prefix(b"Uid:") {
            uid = v
                .split(|b| b.is_ascii_whitespace())
                .find(|f| !f.is_empty())
                .and_then(parse_num);
        } else if let Some(v) = line.strip_prefix(b"NSpid:") {
            nspid = v
                .split(|b| b.is_ascii_whitespace())
                .filter(|f| !f.is_empty())
                .filter_map(parse_num)
                .collect();
        }
    }
    Ok(Status {
        uid: uid.ok_or(ParseError {
            file: "status",
            why: "no Uid line",
        })?,
        nspid,
    })
}

/// Splits /proc/PID/cmdline at NULs. Trailing NUL padding (setproctitle pads
/// the argv area with NULs) yields no empty arguments at the end.
pub fn parse_cmdline(bytes: &[u8]) -> Vec<String> {
    let mut args: Vec<String> = bytes.split(|&b| b == 0).map(escape_bytes).collect();
    while args.last().is_some_and(|a| a.is_empty()) {
        args.pop();
    }
    args
}

/// The environment variables that tell who restarts a process: a torchrun
/// agent's restart budget.
pub const SUPERVISION_ENV: &[&str] = &["TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS"];

/// The [`SUPERVISION_ENV`] variables of a NUL-separated environment, each
/// value escaped and cut to 256 characters.
pub fn supervision_env(bytes: &[u8]) -> std::collections::BTreeMap<String, String> {
    bytes
        .split(|&b| b == 0)
        .filter_map(|kv| {
            let eq = kv.iter().position(|&b| b == b'=')?;
            let key = std::str::from_utf8(&kv[..eq]).ok()?;
            SUPERVISION_ENV.contains(&key).then(|| {
                let value: String = escape_bytes(&kv[eq + 1..]).chars().take(256).collect();
                (key.to_string(), value)
            })
        })
        .collect()
}

/// The environment variables with which the dynamic loader runs code
/// before the program's own: libraries to preload, auditing libraries.
pub const PRELOAD_ENV: &[&str] = &["LD_PRELOAD", "LD_AUDIT"];

/// The first [`PRELOAD_ENV`] variable of a NUL-separated environment that
/// names anything (a value of only the loader's separators, spaces and
/// colons, names nothing), with its value escaped and cut to 256
/// characters. The loader takes the last of repeated variables, a
/// program's `getenv` the first: any one that names a library counts.
pub fn preload_env(bytes: &[u8]) -> Option<(String, String)> {
    bytes.split(|&b| b == 0).find_map(|kv| {
        let eq = kv.iter().position(|&b| b == b'=')?;
        let key = std::str::from_utf8(&kv[..eq]).ok()?;
        let value = &kv[eq + 1..];
        (PRELOAD_ENV.contains(&key) && value.iter().any(|b| !matches!(b, b' ' | b':'))).then(|| {
            let value: String = escape_bytes(value).chars().take(256).collect();
            (key.to_string(), value)
        })
    })
}

/// Text for bytes that should be UTF-8: valid parts as they are, each
/// invalid byte as `\xNN`, so nothing is lost and the result is valid JSON.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// One line of /proc/PID/maps, reduced to what identifies the mapped file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapsEntry<'a> {
    /// Major number of the filesystem device holding the file.
    pub major: u32,
    /// Minor number of that device.
    pub minor: u32,
    /// Inode of the file; 0 for anonymous mappings.
    pub inode: u64,
    /// Mapped executable (`x` in the permissions).
    pub exec: bool,
    /// The path, possibly with spaces, " (deleted)" or non-UTF-8 bytes.
    pub path: &'a [u8],
}

/// Parses one maps line: `addr perms offset MAJ:MIN inode   path`.
/// Returns None for a malformed line (which the scanner skips).
pub fn parse_maps_line(line: &[u8]) -> Option<MapsEntry<'_>> {
    let mut rest = line;
    let mut next_field = || {
        let start = rest.iter().position(|&b| b != b' ')?;
        let tail = &rest[start..];
        let len = tail.iter().position(|&b| b == b' ').unwrap_or(tail.len());
        let (field, after) = tail.split_at(len);
        rest = after;
        Some(field)
    };
    let _addr = next_field()?;
    let perms = next_field()?;
    let _offset = next_field()?;
    let dev = next_field()?;
    let inode = next_field()?;
    let colon = dev.iter().position(|&b| b == b':')?;
    let hex = |b: &[u8]| u32::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok();
    let major = hex(&dev[..colon])?;
    let minor = hex(&dev[colon + 1..])?;
    let inode = parse_num(inode)?;
    let path_start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
    Some(MapsEntry {
        major,
        minor,
        inode,
        exec: perms.get(2) == Some(&b'x'),
        path: &rest[path_start..],
    })
}

/// The inode column of a maps line, found without parsing the rest: the
/// scanner's fast filter, since most mappings are anonymous (inode 0).
pub fn maps_line_inode(line: &[u8]) -> Option<u64> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let inode = fields.nth(4)?;
    parse_num(inode)
}

/// Whether the proc mount at `mount_point` hides other users' processes,
/// from /proc/self/mountinfo (`hidepid=1|2|invisible|noaccess`).
pub fn mountinfo_hidepid(mountinfo: &[u8], mount_point: &[u8]) -> bool {
    let mut hidden = false;
    for line in mountinfo.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == b"-") else {
            continue;
        };
        if fields.get(4) != Some(&mount_point) || fields.get(sep + 1) != Some(&&b"proc"[..]) {
            continue;
        }
        // The last mount at that point wins (later lines stack on earlier).
        hidden = fields.get(sep + 3).is_some_and(|opts| {
            opts.split(|&b| b == b',').any(|o| {
                o.strip_prefix(b"hidepid=")
                    .is_some_and(|v| !matches!(v, b"0" | b"off"))
            })
        });
    }
    hidden
}

#[cfg(test)]
mod tests;
