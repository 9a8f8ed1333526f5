//! `status` and `why` for a user who is not root, through root's view:
//! where root's `gpufree serve --view-socket` answers (the settings'
//! [`Settings::view`]), the command asks it instead of scanning what this
//! user may read, and says so on stderr. The socket's peer (`SO_PEERCRED`)
//! must be root, or the service user that made it in a directory no one
//! else may write (`serve::view::trusted_place`): a socket someone else
//! made answers nothing. Where no view answers, the command scans as this
//! user does, as before.

use super::*;
use crate::serve::view::{ViewAnswer, ViewCommand, ViewRequest, MAX_REQUEST, VERSION};
use std::io::{BufRead, Read};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The largest answer read (a JSON document of many holders).
const MAX_ANSWER: u64 = 64 << 20;

/// How long the whole exchange may take: serve answers from its cache.
const EXCHANGE: Duration = Duration::from_secs(10);

/// The outcome of `command` from root's view, or None where there is no
/// view to ask (not a user's command, no socket, a socket that is not
/// root's, a serve that did not answer): the caller scans itself.
pub(super) fn ask(
    s: &Settings,
    command: ViewCommand,
    paint: &Paint,
) -> Option<Result<Outcome, Error>> {
    let socket = s.view.as_ref()?;
    if !socket.exists() {
        return None;
    }
    let req = ViewRequest {
        version: VERSION,
        command,
        gpu: s.common.gpu.iter().map(ToString::to_string).collect(),
        json: s.common.json,
        quiet: s.common.quiet,
        color: paint.color,
    };
    let (answer, body) = match exchange(socket, &req) {
        Ok(a) => a,
        Err(why) => {
            eprintln!(
                "gpufree: the view at {} did not answer ({why}); scanning as uid {}",
                crate::safe::escape(&socket.display().to_string()),
                s.privilege.uid
            );
            return None;
        }
    };
    if let Some(why) = answer.error {
        return Some(Err(Error::View {
            code: answer.code,
            why,
        }));
    }
    if !s.common.quiet {
        eprintln!(
            "gpufree: from root's gpufree serve at {} (as uid {}: other users' command lines, environments and executables hidden)",
            crate::safe::escape(&socket.display().to_string()),
            s.privilege.uid
        );
    }
    let mut out = Guard::new(std::io::stdout().lock(), paint.color);
    let written = out.write_all(&body).and_then(|()| out.flush());
    Some(shown(written, outcome_of(answer.code)))
}

/// The outcome of an exit code the view sent.
fn outcome_of(code: u8) -> Outcome {
    match code {
        0 => Outcome::Done,
        1 => Outcome::NotReached,
        3 => Outcome::Unknown,
        c => Outcome::Code(c),
    }
}

/// One request and its answer: connected without waiting (a full backlog
/// is no answer), the peer checked to be root, everything within
/// [`EXCHANGE`].
fn exchange(socket: &Path, req: &ViewRequest) -> Result<(ViewAnswer, Vec<u8>), String> {
    let stream = connect(socket)?;
    let peer = rustix::net::sockopt::socket_peercred(&stream).map_err(|e| e.to_string())?;
    crate::serve::view::trusted_place(socket, peer.uid.as_raw())?;
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
    let answer: ViewAnswer =
        serde_json::from_slice(&head).map_err(|e| format!("not a view's answer: {e}"))?;
    let mut body = Vec::new();
    reader.read_to_end(&mut body).map_err(|e| e.to_string())?;
    Ok((answer, body))
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
