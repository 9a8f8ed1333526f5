//! gpufree itself as /proc shows it: its ancestors (never a kill's
//! targets) and the clock ticks since boot (comparable with start times).

use super::parse::parse_stat;

/// The PIDs of the running process's ancestors, parent first, up to init
/// (at most 256: a loop in a damaged /proc ends there).
pub fn ancestors() -> Vec<u32> {
    let mut ancestors = Vec::new();
    let mut pid = std::process::id();
    for _ in 0..256 {
        let Some(ppid) = std::fs::read(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|b| parse_stat(&b).ok())
            .map(|s| s.ppid)
        else {
            break;
        };
        if ppid == 0 {
            break;
        }
        ancestors.push(ppid);
        pid = ppid;
    }
    ancestors
}

/// The clock ticks since boot now, comparable with start times; None when
/// /proc/uptime cannot be read.
pub fn uptime_ticks() -> Option<u64> {
    let tps = rustix::param::clock_ticks_per_second();
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
        .map(|up| (up * tps as f64) as u64)
}
