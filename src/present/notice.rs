//! The one-line notices a command writes on stderr beside its output:
//! what `-v` measured, where a user's answer came from or why it was not
//! asked, what `check` could not keep, where `serve` listens. Each is one
//! line, `gpufree: ` (or `gpufree serve: `) first.

use crate::model::Visibility;
use crate::safe::{escape, fit};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::Path;

/// `-v`: how many processes the snapshot read, in how long, and which
/// walk found the holders (and why).
pub fn write_scanned<W: Write>(w: &mut W, v: &Visibility, millis: f64) -> io::Result<()> {
    writeln!(
        w,
        "gpufree: snapshot of {} processes in {:.1} ms; holders found by the {} walk{}: {}",
        v.processes_scanned,
        millis,
        v.scan.name(),
        match v.scan_reread {
            0 => String::new(),
            n => format!(" ({n} read again through /proc)"),
        },
        fit(&v.scan_reason, 300)
    )
}

/// `fleet -v`: how many queries, in how long.
pub fn write_queried<W: Write>(w: &mut W, queries: usize, millis: f64) -> io::Result<()> {
    writeln!(
        w,
        "gpufree: {queries} queries to Prometheus in {millis:.1} ms"
    )
}

/// The view at `socket` was not asked (`why`): the command scans itself,
/// as `uid`.
pub fn write_view_unused<W: Write>(
    w: &mut W,
    socket: &Path,
    why: &str,
    uid: u32,
) -> io::Result<()> {
    let socket = escape(&socket.display().to_string()).into_owned();
    writeln!(
        w,
        "gpufree: the view at {socket} is not used ({why}); scanning as uid {uid}"
    )
}

/// Where a user's answer came from: the serve of `server` (its uid) at
/// `socket`, a snapshot `age` seconds old, shown to `uid`.
pub fn write_view_answered<W: Write>(
    w: &mut W,
    server: u32,
    socket: &Path,
    age: f64,
    uid: u32,
) -> io::Result<()> {
    let socket = escape(&socket.display().to_string()).into_owned();
    let whose = if server == 0 {
        "root's gpufree serve".to_string()
    } else {
        format!("gpufree serve (service user uid {server})")
    };
    writeln!(
        w,
        "gpufree: from {whose} at {socket}, a snapshot {age:.0} s old (as uid {uid}: other users' command lines, environments and executables hidden)"
    )
}

/// `check` could not keep its state at `path` (`why`): leaks count at
/// once.
pub fn write_state_not_kept<W: Write>(w: &mut W, path: &Path, why: &str) -> io::Result<()> {
    writeln!(
        w,
        "gpufree: check state {}: {why}; leaks count at once",
        path.display()
    )
}

/// `serve` is ready: where it serves metrics, and where it answers
/// users (`view`).
pub fn write_listening<W: Write>(
    w: &mut W,
    addr: SocketAddr,
    view: Option<&Path>,
) -> io::Result<()> {
    writeln!(w, "gpufree serve: listening on http://{addr}/metrics")?;
    if let Some(v) = view {
        let v = escape(&v.display().to_string()).into_owned();
        writeln!(w, "gpufree serve: answering users' status and why on {v}")?;
    }
    Ok(())
}
