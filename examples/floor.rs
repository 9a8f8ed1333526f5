//! The benchmark's floor: the minimal complete single-threaded holder scan
//! (SPEC.md, "Performance targets"): for every process, one directory fd on
//! /proc/PID, one `fstatat` per fd, maps read in 256 KiB reads and matched on
//! (device, inode). No details, no NVML, no output beyond a count.
//!
//! Usage: `floor DEVDIR` prints the number of holder processes found.

use rustix::fs::{AtFlags, Dir, Mode, OFlags};
use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;

/// (device, inode) of each node by `stat`, and (major, minor, inode) as
/// /proc/PID/maps shows them.
type Nodes = (HashSet<(u64, u64)>, HashSet<(u32, u32, u64)>);

fn main() {
    let Some(dev) = std::env::args_os().nth(1) else {
        eprintln!("usage: floor DEVDIR");
        std::process::exit(2);
    };
    let (ident, maps_ident) = nodes(&dev);
    let dirflags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let proc_fd = rustix::fs::open("/proc", dirflags, Mode::empty()).expect("/proc");
    let mut buf = vec![0u8; 256 * 1024];
    let mut holders = 0;
    for entry in Dir::read_from(&proc_fd).expect("list /proc").flatten() {
        let Ok(pid) = std::str::from_utf8(entry.file_name().to_bytes())
            .unwrap_or("")
            .parse::<u32>()
        else {
            continue;
        };
        let Ok(pdir) = rustix::fs::openat(&proc_fd, pid.to_string(), dirflags, Mode::empty())
        else {
            continue;
        };
        let holds = fds_hold(&pdir, &ident) | maps_hold(&pdir, &maps_ident, &mut buf);
        holders += usize::from(holds);
    }
    println!("{holders}");
}

fn nodes(dev: &std::ffi::OsStr) -> Nodes {
    let mut ident = HashSet::new();
    let mut maps_ident = HashSet::new();
    for e in std::fs::read_dir(dev).expect("device dir").flatten() {
        let m = e.metadata().expect("stat node");
        ident.insert((m.dev(), m.ino()));
        maps_ident.insert((
            rustix::fs::major(m.dev()),
            rustix::fs::minor(m.dev()),
            m.ino(),
        ));
    }
    (ident, maps_ident)
}

/// Whether one of the process's fds is a node: one `fstatat` per fd.
fn fds_hold(pdir: &OwnedFd, ident: &HashSet<(u64, u64)>) -> bool {
    let dirflags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut holds = false;
    if let Ok(fd_dir) = rustix::fs::openat(pdir, "fd", dirflags, Mode::empty()) {
        if let Ok(d) = Dir::read_from(&fd_dir) {
            for fd in d.flatten() {
                if fd.file_name().to_bytes().starts_with(b".") {
                    continue;
                }
                if let Ok(st) = rustix::fs::statat(&fd_dir, fd.file_name(), AtFlags::empty()) {
                    holds |= ident.contains(&(st.st_dev, st.st_ino));
                }
            }
        }
    }
    holds
}

/// Whether one of the process's mappings is a node: maps read in 256 KiB
/// reads, each whole line matched on (major, minor, inode).
fn maps_hold(pdir: &OwnedFd, maps_ident: &HashSet<(u32, u32, u64)>, buf: &mut [u8]) -> bool {
    let Ok(maps) = rustix::fs::openat(
        pdir,
        "maps",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let mut holds = false;
    let mut carry = 0;
    while let Ok(n) = rustix::io::read(&maps, &mut buf[carry..]) {
        let end = carry + n;
        let cut = if n == 0 {
            end
        } else {
            buf[..end]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1)
        };
        holds |= buf[..cut]
            .split(|&b| b == b'\n')
            .any(|line| maps_line_holds(line, maps_ident));
        if n == 0 {
            break;
        }
        buf.copy_within(cut..end, 0);
        carry = end - cut;
    }
    holds
}

/// Whether one maps line maps a node.
fn maps_line_holds(line: &[u8], maps_ident: &HashSet<(u32, u32, u64)>) -> bool {
    let mut f = line.split(|&b| b == b' ').filter(|x| !x.is_empty()).skip(3);
    let (Some(devf), Some(ino)) = (f.next(), f.next()) else {
        return false;
    };
    let ino: u64 = std::str::from_utf8(ino)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if ino == 0 {
        return false;
    }
    let mut mm = devf.split(|&b| b == b':');
    let hex = |b: Option<&[u8]>| {
        u32::from_str_radix(std::str::from_utf8(b.unwrap_or(b"")).unwrap_or(""), 16).ok()
    };
    match (hex(mm.next()), hex(mm.next())) {
        (Some(ma), Some(mi)) => maps_ident.contains(&(ma, mi, ino)),
        _ => false,
    }
}
