//! The kernel log (`/dev/kmsg`, or a fixture file in its format): its
//! records read from the start of the ring without blocking, and the
//! NVIDIA driver's Xid reports in them.
//!
//! A record is `pri,seq,ts_usec,flags[,...];message\n`, followed by
//! continuation lines that start with a space (`" SUBSYSTEM=pci"`). The
//! driver's Xid lines read `NVRM: Xid (PCI:0000:01:00): 79, pid=1234,
//! name=python3, GPU has fallen off the bus.` (also without pid and name,
//! with `pid='<unknown>'` or `pid='N/A'`, and under MIG with
//! `(PCI:0000:01:00 GPU-I:05)`). A name in such a line is the process's
//! own comm, chosen by it: it is kept raw and never trusted.
//!
//! Reading: `O_NONBLOCK`, stop at EAGAIN (the ring's end) or end of file
//! (a fixture); EPIPE means records were overwritten while read: they are
//! counted as lost and the read goes on. A byte and a time limit bound
//! it. A log that cannot be opened or read (EPERM without CAP_SYSLOG
//! under `dmesg_restrict`) is a [`KmsgError`], never "no Xid".

use crate::model::XidReport;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

/// The kernel log's usual place.
pub const DEFAULT_KMSG: &str = "/dev/kmsg";

/// At most this many bytes of the log are read.
pub const MAX_BYTES: usize = 16 << 20;

/// Reads of the log by this process so far: see [`reads`].
static READS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many times this process has read the kernel log (tests prove
/// that a one-shot command reads it once).
pub fn reads() -> usize {
    READS.load(std::sync::atomic::Ordering::Relaxed)
}

/// One record of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Sequence number.
    pub seq: u64,
    /// Microseconds since boot.
    pub ts_usec: u64,
    /// The message, raw (the kernel escapes unprintable bytes as `\xNN`).
    pub message: String,
}

/// Why the log could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read the kernel log {path}: {why}")]
pub struct KmsgError {
    /// The path tried.
    pub path: String,
    /// Why (EPERM: no CAP_SYSLOG under `dmesg_restrict`).
    pub why: String,
}

/// What one read of the log gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KmsgRead {
    /// The records, in order.
    pub records: Vec<Record>,
    /// Records overwritten while they were read (EPIPE).
    pub lost: u64,
    /// Stopped by the byte or time limit before the ring's end.
    pub truncated: bool,
}

/// The records of `bytes` (whole lines; continuation lines and lines that
/// are not records are skipped).
pub fn parse_records(bytes: &[u8]) -> Vec<Record> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && l[0] != b' ')
        .filter_map(parse_record)
        .collect()
}

/// One record line: `pri,seq,ts_usec,flags[,...];message`.
pub fn parse_record(line: &[u8]) -> Option<Record> {
    let semi = line.iter().position(|&b| b == b';')?;
    let head = std::str::from_utf8(&line[..semi]).ok()?;
    let mut fields = head.split(',');
    let _pri: u32 = fields.next()?.parse().ok()?;
    let seq = fields.next()?.parse().ok()?;
    let ts_usec = fields.next()?.parse().ok()?;
    Some(Record {
        seq,
        ts_usec,
        message: String::from_utf8_lossy(&line[semi + 1..]).into_owned(),
    })
}

/// The Xid report in one record's message, if it is one. `btime`: the
/// boot time in seconds since the epoch, when known.
pub fn parse_xid(r: &Record, btime: Option<u64>) -> Option<XidReport> {
    let at = r.message.find("NVRM: Xid (")?;
    let rest = &r.message[at + "NVRM: Xid (".len()..];
    let close = rest.find(')')?;
    let (pci, gpu_instance) = location(&rest[..close])?;
    let rest = rest[close + 1..].strip_prefix(':')?.trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let xid: u32 = rest[..digits].parse().ok()?;
    let mut rest = rest[digits..].strip_prefix(',').unwrap_or(&rest[digits..]);
    rest = rest.trim_start();
    let mut pid = None;
    if let Some(after) = rest.strip_prefix("pid=") {
        let (value, tail) = field(after);
        pid = value.parse().ok();
        rest = tail;
    }
    let mut comm = None;
    if let Some(after) = rest.strip_prefix("name=") {
        let (value, tail) = field(after);
        comm = Some(value.to_string());
        rest = tail;
    }
    Some(XidReport {
        xid,
        pci,
        gpu: None,
        gpu_instance,
        pid,
        comm,
        text: rest.to_string(),
        since_boot_us: r.ts_usec,
        at_unix_ms: btime.map(|b| b.saturating_mul(1000).saturating_add(r.ts_usec / 1000)),
    })
}

/// `PCI:0000:01:00`, `0000:01:00` or `PCI:0000:01:00 GPU-I:05`.
fn location(s: &str) -> Option<(String, Option<u32>)> {
    let mut words = s.split_whitespace();
    let addr = words.next()?;
    let addr = addr.strip_prefix("PCI:").unwrap_or(addr);
    if addr.is_empty()
        || !addr
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
    {
        return None;
    }
    let instance = words
        .find_map(|w| w.strip_prefix("GPU-I:"))
        .and_then(|n| n.parse().ok());
    Some((addr.to_string(), instance))
}

/// A `key=value, ` field's value (quotes around it dropped) and what
/// follows it.
fn field(s: &str) -> (&str, &str) {
    let (value, tail) = match s.find(", ") {
        Some(i) => (&s[..i], &s[i + 2..]),
        None => (s.trim_end_matches(','), ""),
    };
    (value.trim_matches('\''), tail)
}

/// `btime` of `<proc root>/stat`: the boot time, seconds since the epoch.
pub fn parse_btime(stat: &[u8]) -> Option<u64> {
    String::from_utf8_lossy(stat)
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Reads the log at `path` from the start of its ring, without blocking,
/// until its end, `MAX_BYTES` or `deadline`.
pub fn read(path: &Path, deadline: Instant) -> Result<KmsgRead, KmsgError> {
    READS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let fail = |e: std::io::Error| KmsgError {
        path: path.display().to_string(),
        why: describe(&e),
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(fail)?;
    let mut out = KmsgRead::default();
    let mut bytes = Vec::new();
    // /dev/kmsg answers one record a read, and refuses a buffer too
    // small for it (EINVAL): room for the largest.
    let mut buf = vec![0u8; 16 << 10];
    loop {
        if bytes.len() >= MAX_BYTES || Instant::now() >= deadline {
            out.truncated = true;
            break;
        }
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => out.lost += 1,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if bytes.is_empty() && out.lost == 0 => return Err(fail(e)),
            Err(_) => {
                out.truncated = true;
                break;
            }
        }
    }
    out.records = parse_records(&bytes);
    Ok(out)
}

fn describe(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            format!("{e} (reading the kernel log needs CAP_SYSLOG where dmesg_restrict is set)")
        }
        _ => e.to_string(),
    }
}

/// Every Xid report of a read, oldest first.
pub fn xids(read: &KmsgRead, btime: Option<u64>) -> Vec<XidReport> {
    read.records
        .iter()
        .filter_map(|r| parse_xid(r, btime))
        .collect()
}

#[cfg(test)]
mod tests;
