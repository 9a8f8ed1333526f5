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
mod tests {
    use super::*;

    #[test]
    fn supervision_env_keeps_only_its_keys_escaped_and_cut() {
        let long = "x".repeat(300);
        let raw = [
            b"PATH=/bin".as_slice(),
            b"TORCHELASTIC_RESTART_COUNTX=no",
            b"NOEQUALS",
            b"TORCHELASTIC_RESTART_COUNT=\xff1",
            format!("TORCHELASTIC_MAX_RESTARTS={long}").as_bytes(),
        ]
        .join(&0u8);
        let env = supervision_env(&raw);
        assert_eq!(env.len(), 2, "{env:?}");
        assert_eq!(env["TORCHELASTIC_RESTART_COUNT"], "\\xff1");
        assert_eq!(env["TORCHELASTIC_MAX_RESTARTS"].len(), 256);
    }

    #[test]
    fn preload_env_finds_either_variable_among_any_bytes() {
        let env = |parts: &[&[u8]]| parts.join(&0u8);
        assert_eq!(preload_env(&env(&[b"PATH=/bin", b"HOME=/root"])), None);
        assert_eq!(
            preload_env(&env(&[b"A=\xff\xfe", b"LD_PRELOAD=/tmp/x.so", b""])),
            Some(("LD_PRELOAD".into(), "/tmp/x.so".into()))
        );
        assert_eq!(
            preload_env(&env(&[b"LD_AUDIT=/home/u/\xfe.so"])),
            Some(("LD_AUDIT".into(), "/home/u/\\xfe.so".into()))
        );
        // Empty, or only separators: nothing is loaded.
        assert_eq!(preload_env(&env(&[b"LD_PRELOAD=", b"LD_AUDIT= : "])), None);
        // A repeat that names a library counts, wherever it is.
        assert_eq!(
            preload_env(&env(&[b"LD_PRELOAD=", b"X=1", b"LD_PRELOAD=libm.so.6"])),
            Some(("LD_PRELOAD".into(), "libm.so.6".into()))
        );
        // Not the variable: a longer name, a value that mentions it, a
        // truncated entry without '='.
        assert_eq!(
            preload_env(&env(&[
                b"LD_PRELOAD_X=/a",
                b"X=LD_PRELOAD=/a",
                b"LD_PRELOAD"
            ])),
            None
        );
        let long = [b"LD_PRELOAD=".as_slice(), &[b'a'; 1000]].concat();
        assert_eq!(preload_env(&long).unwrap().1.len(), 256);
    }

    fn stat_line(comm: &str, state: char) -> Vec<u8> {
        // 52 fields as the kernel writes them; 22 = start time 777.
        let mut f: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        f[0] = state.to_string();
        f[1] = "1".into(); // ppid
        f[17] = "3".into(); // threads (field 20)
        f[19] = "777".into(); // start time (field 22)
        f[45] = "140000".into(); // arg_start (48)
        f[46] = "140020".into(); // arg_end (49)
        format!("4242 ({comm}) {}\n", f.join(" ")).into_bytes()
    }

    #[test]
    fn stat_with_spaces_and_parentheses_in_comm() {
        let s = parse_stat(&stat_line("a) S 1 (b", 'S')).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "a) S 1 (b");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.threads, 3);
        assert_eq!(s.start_time, 777);
        assert_eq!(s.arg_area, Some((140000, 140020)));
    }

    #[test]
    fn stat_of_a_renamed_vllm_worker() {
        let s = parse_stat(&stat_line("VLLM::Worker_TP", 'Z')).unwrap();
        assert_eq!(s.comm, "VLLM::Worker_TP");
        assert_eq!(s.state, 'Z');
    }

    #[test]
    fn stat_truncated_or_garbage_is_an_error_not_a_panic() {
        assert!(parse_stat(b"12 (x) S 1 2").is_err());
        assert!(parse_stat(b"").is_err());
        assert!(parse_stat(b"12 x) S (").is_err());
        assert!(parse_stat(b"abc (x) S 1").is_err());
        let full = stat_line("ok", 'R');
        for cut in 0..full.len() {
            let _ = parse_stat(&full[..cut]);
        }
    }

    #[test]
    fn stat_with_non_utf8_comm() {
        let mut line = stat_line("ab", 'S');
        line[7] = 0xff; // "4242 (ab)": byte 7 is the b
        let s = parse_stat(&line).unwrap();
        assert_eq!(s.comm, "a\\xff");
    }

    #[test]
    fn status_uid_and_nested_nspid() {
        let st = parse_status(
            b"Name:\tpython3\nTgid:\t5\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t212702\t17\t1\n",
        )
        .unwrap();
        assert_eq!(st.uid, 1000);
        assert_eq!(st.nspid, vec![212702, 17, 1]);
        assert!(parse_status(b"Name: x\n").is_err());
    }

    #[test]
    fn cmdline_setproctitle_padding_and_non_utf8() {
        assert_eq!(
            parse_cmdline(b"VLLM::Worker_TP0\0\0\0\0\0\0"),
            vec!["VLLM::Worker_TP0"]
        );
        assert_eq!(
            parse_cmdline(b"python3\0-m\0vllm.entrypoints.openai.api_server\0"),
            vec!["python3", "-m", "vllm.entrypoints.openai.api_server"]
        );
        assert_eq!(parse_cmdline(b"a\xffb\0c\0"), vec!["a\\xffb", "c"]);
        assert!(parse_cmdline(b"").is_empty());
        assert_eq!(parse_cmdline(b"a\0\0b\0"), vec!["a", "", "b"]);
    }

    #[test]
    fn maps_lines_with_spaces_deleted_and_non_utf8() {
        let l = b"7f1c2a000000-7f1c2a200000 rw-s 00000000 00:05 1042                       /dev/nvidia0";
        let e = parse_maps_line(l).unwrap();
        assert_eq!((e.major, e.minor, e.inode), (0, 5, 1042));
        assert_eq!(e.path, b"/dev/nvidia0");
        assert!(!e.exec);
        let l = b"7f00-7f01 r-xp 00001000 08:01 7 /usr/lib/x86_64-linux-gnu/libm.so.6";
        assert!(parse_maps_line(l).unwrap().exec);
        let l = b"7f00-7f01 r--s 00000000 fd:01 99 /tmp/my dev dir/nvidia-uvm (deleted)";
        let e = parse_maps_line(l).unwrap();
        assert_eq!((e.major, e.minor, e.inode), (0xfd, 1, 99));
        assert_eq!(e.path, b"/tmp/my dev dir/nvidia-uvm (deleted)");
        let l = b"7f00-7f01 r--s 00000000 103:02 5 /x/\xfe\xff";
        assert_eq!(parse_maps_line(l).unwrap().path, b"/x/\xfe\xff");
        let anon = b"7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ";
        assert_eq!(parse_maps_line(anon).unwrap().inode, 0);
        assert_eq!(maps_line_inode(l), Some(5));
        assert_eq!(maps_line_inode(anon), Some(0));
        assert!(parse_maps_line(b"7f00-7f01 r--s").is_none());
        assert!(parse_maps_line(b"7f00-7f01 r--s 0 zz:01 5 /x").is_none());
    }

    #[test]
    fn hidepid_from_mountinfo() {
        let mi = b"22 1 0:21 / /proc rw,nosuid - proc proc rw,hidepid=invisible\n\
                   23 1 0:22 / /sys rw - sysfs sysfs rw\n";
        assert!(mountinfo_hidepid(mi, b"/proc"));
        let mi = b"22 1 0:21 / /proc rw,nosuid - proc proc rw\n";
        assert!(!mountinfo_hidepid(mi, b"/proc"));
        let mi = b"22 1 0:21 / /proc rw - proc proc rw,hidepid=0\n";
        assert!(!mountinfo_hidepid(mi, b"/proc"));
    }
}
