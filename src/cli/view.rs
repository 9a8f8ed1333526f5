//! `status` and `why` for a user who is not root, through the view:
//! where `gpufree serve --view-socket` answers (the settings'
//! [`Settings::view`]), the command asks it instead of scanning what this
//! user may read, and says so on stderr. The answer is believed only from
//! a server that is root, or the service user that made the socket in its
//! own directory under `/run` ([`trusted_place`]): a socket anyone else
//! made answers nothing. Where no view answers, the command scans as this
//! user does, as before.

use super::{shown, verdict_outcome};
use crate::cli::config::Settings;
use crate::cli::error::{Error, Outcome};
use crate::model::{ViewAnswer, ViewCommand, ViewRequest, VIEW_VERSION};
use crate::present::notice::{write_view_answered, write_view_unused};
use crate::present::words::front::{not_an_answer, untrusted_view};
use crate::present::Printer;
use crate::serve::view::MAX_REQUEST;
use std::io::Write;
use std::io::{BufRead, Read};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Where the shipped service unit answers (its `RuntimeDirectory=`), and
/// where a user's `status` and `why` ask by default.
pub const DEFAULT_VIEW_SOCKET: &str = "/run/gpufree-view/view.sock";

/// The largest answer read (a JSON document of many holders).
const MAX_ANSWER: u64 = 64 << 20;

/// How long the whole exchange may take: serve answers from its cache.
const EXCHANGE: Duration = Duration::from_secs(10);

/// The outcome of `command` from the view, or None where there is no view
/// to ask (not a user's command, no socket, a socket not to believe, a
/// serve that did not answer): the caller scans itself.
pub(super) fn ask(
    s: &Settings,
    command: ViewCommand,
    printer: &Printer,
) -> Option<Result<Outcome, Error>> {
    let socket = s.view.as_ref()?;
    if !socket.exists() {
        return None;
    }
    let req = ViewRequest {
        version: VIEW_VERSION,
        command,
        gpu: s.common.gpu.iter().map(ToString::to_string).collect(),
        json: printer.json(),
        quiet: printer.quiet(),
        color: printer.color(),
    };
    let uid = s.privilege.uid;
    let (answer, body, server) = match exchange(socket, &req) {
        Ok(a) => a,
        Err(why) => {
            let _ = write_view_unused(&mut std::io::stderr(), socket, &why, uid);
            return None;
        }
    };
    if let Some(e) = answer.error {
        return Some(Err(Error::View(e.kind, e.message)));
    }
    if !printer.quiet() {
        let age = answer.age_seconds.unwrap_or(0.0);
        let _ = write_view_answered(&mut std::io::stderr(), server, socket, age, uid);
    }
    let mut out = printer.guard(std::io::stdout().lock());
    let written = out.write_all(&body).and_then(|()| out.flush());
    let outcome = match (command, answer.verdict) {
        (ViewCommand::Status, _) => Outcome::Done,
        (ViewCommand::Why, Some(v)) => verdict_outcome(v),
        (ViewCommand::Why, None) => Outcome::Unknown,
    };
    Some(shown(written, outcome))
}

/// One request and its answer, and the server's uid: connected without
/// waiting (a full backlog is no answer), the server believed
/// ([`trusted_place`]), everything within [`EXCHANGE`].
fn exchange(socket: &Path, req: &ViewRequest) -> Result<(ViewAnswer, Vec<u8>, u32), String> {
    let stream = connect(socket)?;
    let peer = rustix::net::sockopt::socket_peercred(&stream).map_err(|e| e.to_string())?;
    let server = peer.uid.as_raw();
    trusted_place(socket, server)?;
    stream
        .set_read_timeout(Some(EXCHANGE))
        .and_then(|()| stream.set_write_timeout(Some(EXCHANGE)))
        .map_err(|e| e.to_string())?;
    let mut line = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    line.push(b'\n');
    (&stream).write_all(&line).map_err(|e| e.to_string())?;
    let mut reader = std::io::BufReader::new((&stream).take(MAX_ANSWER));
    let mut head = Vec::new();
    reader
        .by_ref()
        .take(MAX_REQUEST as u64)
        .read_until(b'\n', &mut head)
        .map_err(|e| e.to_string())?;
    let answer: ViewAnswer = serde_json::from_slice(&head).map_err(|e| not_an_answer(&e))?;
    let mut body = Vec::new();
    reader.read_to_end(&mut body).map_err(|e| e.to_string())?;
    Ok((answer, body, server))
}

/// A stream connected to `socket`, or why not: a non-blocking connect (a
/// server whose backlog is full answers EAGAIN at once), then blocking.
fn connect(socket: &Path) -> Result<UnixStream, String> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(|e| e.to_string())?;
    let addr = SocketAddrUnix::new(socket).map_err(|e| e.to_string())?;
    rustix::net::connect(&fd, &addr).map_err(|e| e.to_string())?;
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    Ok(stream)
}

/// Whether to believe a view answering at `socket` from a server of uid
/// `server` (from `SO_PEERCRED`): root's, always; another user's only as
/// systemd runs the shipped unit — the socket that user's, in a directory
/// of that user's (`RuntimeDirectory=`) writable by no one else, directly
/// under `/run`, which only root (and systemd for its services) may
/// create in. No one else could have put a socket there. Err says why.
pub(super) fn trusted_place(socket: &Path, server: u32) -> Result<(), String> {
    if server == 0 {
        return Ok(());
    }
    let not = |dir: Option<&Path>| Err(untrusted_view(server, dir));
    let Some(dir) = socket
        .parent()
        .filter(|d| d.parent() == Some(Path::new("/run")))
    else {
        return not(None);
    };
    let owned_by = |p: &Path, uid: u32| {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.uid() == uid && m.mode() & 0o022 == 0)
    };
    let socket_ok = std::fs::symlink_metadata(socket).is_ok_and(|m| m.uid() == server);
    let dir_ok = std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) && owned_by(dir, server);
    if !socket_ok || !dir_ok || !owned_by(Path::new("/run"), 0) {
        return not(Some(dir));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_root_server_is_believed_only_in_its_own_directory_under_run() {
        // Root's is believed anywhere (only the peer's uid counts).
        assert!(trusted_place(Path::new("/tmp/x/view.sock"), 0).is_ok());
        // Anyone else's: only directly in its own directory under /run.
        for path in [
            "/tmp/x/view.sock",
            "/home/mallory/view.sock",
            "/run/view.sock",
            "/run/a/b/view.sock",
            "relative/view.sock",
        ] {
            let e = trusted_place(Path::new(path), 4242).unwrap_err();
            assert!(
                e.starts_with("its server runs as uid 4242, not root"),
                "{path}: {e}"
            );
        }
        // A directory under /run that is not that user's (root's /run/lock).
        let e = trusted_place(Path::new("/run/lock/view.sock"), 4242).unwrap_err();
        assert!(e.contains("not that user's own directory"), "{e}");
    }
}
