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
//! Only the kernel writes an Xid: a record counts only when its facility
//! is the kernel's (0; userspace writes to `/dev/kmsg` are LOG_USER at
//! least, the kernel refuses facility 0 from them) and its message BEGINS
//! with `NVRM: Xid (PCI:` and a hexadecimal address. Other kernel lines
//! quote text a user chooses (a segfault line names the crashing file, a
//! USB line a device's product string, many begin with a comm of up to 15
//! bytes, exactly `NVRM: Xid (PCI:` at most): none of them is an Xid.
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

/// At most this many bytes of the log are scanned (only Xid records are
/// kept, so what is kept stays small); the kernel's ring is at most 32 MiB
/// unless booted with a larger `log_buf_len`.
pub const MAX_BYTES: usize = 64 << 20;

/// A `name=` longer than a kernel comm can be (15 bytes; 64 allows for
/// kernels with longer names) is no comm: not kept.
const MAX_COMM: usize = 64;

/// The kernel's syslog facility (`pri >> 3`); everything from userspace
/// has another.
const KERNEL_FACILITY: u32 = 0;

/// What an Xid record's message begins with.
const XID_PREFIX: &str = "NVRM: Xid (";

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
    /// Syslog facility (`pri >> 3`): 0 for the kernel's own records.
    pub facility: u32,
    /// Sequence number.
    pub seq: u64,
    /// Microseconds since boot.
    pub ts_usec: u64,
    /// The message, raw (the kernel escapes unprintable bytes as `\xNN`).
    pub message: String,
}

/// Why the log could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsgError {
    /// The path tried.
    pub path: String,
    /// The system's error.
    pub why: String,
    /// Refused (EPERM, EACCES): reading it needs CAP_SYSLOG where
    /// `dmesg_restrict` is set.
    pub denied: bool,
}

/// What one read of the log gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KmsgRead {
    /// The driver's Xid records, in order (every other record is scanned
    /// and dropped).
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
    let pri: u32 = fields.next()?.parse().ok()?;
    let seq = fields.next()?.parse().ok()?;
    let ts_usec = fields.next()?.parse().ok()?;
    Some(Record {
        facility: pri >> 3,
        seq,
        ts_usec,
        message: String::from_utf8_lossy(&line[semi + 1..]).into_owned(),
    })
}

/// Whether `r` may be an Xid report: the kernel's own record whose
/// message begins with the driver's prefix (see the module's doc).
fn from_the_driver(r: &Record) -> bool {
    r.facility == KERNEL_FACILITY && r.message.starts_with(XID_PREFIX)
}

/// The Xid report in one record's message, if it is one. `btime`: the
/// boot time in seconds since the epoch, when known.
pub fn parse_xid(r: &Record, btime: Option<u64>) -> Option<XidReport> {
    if !from_the_driver(r) {
        return None;
    }
    let rest = &r.message[XID_PREFIX.len()..];
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
        comm = (value != "<unknown>" && !value.is_empty() && value.len() <= MAX_COMM)
            .then(|| value.to_string());
        rest = tail;
    }
    Some(XidReport {
        xid,
        pci,
        gpu: None,
        gpu_instance,
        pid,
        pid_now: None,
        comm,
        text: rest.to_string(),
        since_boot_us: r.ts_usec,
        at_unix_ms: btime.map(|b| b.saturating_mul(1000).saturating_add(r.ts_usec / 1000)),
    })
}

/// `PCI:0000:01:00` or `PCI:0000:01:00 GPU-I:05`.
fn location(s: &str) -> Option<(String, Option<u32>)> {
    let mut words = s.split_whitespace();
    let addr = words.next()?.strip_prefix("PCI:")?;
    if !is_pci_address(addr) {
        return None;
    }
    let instance = words
        .find_map(|w| w.strip_prefix("GPU-I:"))
        .and_then(|n| n.parse().ok());
    Some((addr.to_string(), instance))
}

/// `DOMAIN:BUS:DEVICE` in hexadecimal (4 to 8, 2 and 2 digits), with an
/// optional `.FUNCTION`: the driver's form, and more than a 15-byte comm
/// that spells the prefix can carry after it.
fn is_pci_address(s: &str) -> bool {
    let s = s
        .split_once('.')
        .map_or(s, |(a, f)| if f.len() == 1 { a } else { "" });
    let parts: Vec<&str> = s.split(':').collect();
    let hex = |p: &str, lens: std::ops::RangeInclusive<usize>| {
        lens.contains(&p.len()) && p.bytes().all(|b| b.is_ascii_hexdigit())
    };
    parts.len() == 3 && hex(parts[0], 4..=8) && hex(parts[1], 2..=2) && hex(parts[2], 2..=2)
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
/// until its end, `MAX_BYTES` or `deadline`, keeping the driver's Xid
/// records only (so a long log's newest Xids are never the ones dropped
/// for room).
pub fn read(path: &Path, deadline: Instant) -> Result<KmsgRead, KmsgError> {
    READS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let fail = |e: std::io::Error| KmsgError {
        path: path.display().to_string(),
        why: e.to_string(),
        denied: denied(&e),
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(fail)?;
    let mut out = KmsgRead::default();
    // /dev/kmsg answers one whole record a read, and refuses a buffer too
    // small for it (EINVAL): room for the largest. A file (a fixture) may
    // end a read mid-line: the part after the last newline waits for the
    // next read.
    let mut buf = vec![0u8; 16 << 10];
    let (mut scanned, mut pending, mut skipping) = (0usize, Vec::new(), false);
    loop {
        if scanned >= MAX_BYTES || Instant::now() >= deadline {
            out.truncated = true;
            break;
        }
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                scanned += n;
                pending.extend_from_slice(&buf[..n]);
                keep_whole_lines(&mut pending, &mut out.records, buf.len(), &mut skipping);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => out.lost += 1,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if scanned == 0 && out.lost == 0 => return Err(fail(e)),
            Err(_) => {
                out.truncated = true;
                break;
            }
        }
    }
    pending.push(b'\n');
    keep_whole_lines(&mut pending, &mut out.records, 0, &mut skipping);
    Ok(out)
}

/// Moves the driver's records among the whole lines of `pending` into
/// `records`, leaving the unfinished last line; a line longer than `max`
/// bytes (no record is) is dropped whole (`skipping` until its end).
fn keep_whole_lines(
    pending: &mut Vec<u8>,
    records: &mut Vec<Record>,
    max: usize,
    skipping: &mut bool,
) {
    if let Some(end) = pending.iter().rposition(|&b| b == b'\n') {
        let rest = pending.split_off(end + 1);
        let mut lines = &pending[..];
        if *skipping {
            let first = lines.iter().position(|&b| b == b'\n').unwrap_or(0);
            lines = &lines[first + 1..];
            *skipping = false;
        }
        records.extend(parse_records(lines).into_iter().filter(from_the_driver));
        *pending = rest;
    }
    if max > 0 && pending.len() > max {
        pending.clear();
        *skipping = true;
    }
}

/// Whether `e` is the log's refusal (EPERM, EACCES): no CAP_SYSLOG where
/// `dmesg_restrict` is set.
fn denied(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
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
