//! The view for users who are not root: with `--view-socket PATH`,
//! `gpufree serve` (root's, or the shipped unit's service user's with the
//! capabilities to see what root sees) also answers on a local socket
//! (mode 0666) that any user may connect to. It knows its caller from the
//! socket's peer credentials (`SO_PEERCRED`, which the kernel fills in:
//! no caller can claim another's), and answers `status` or `why` from its
//! cached snapshot with what only root may read of other users' processes
//! removed ([`Snapshot::hide_from`]) and the snapshot judged again,
//! rendered as the command line would print it. A user on a shared server
//! sees who holds a GPU and why without sudo; nothing on the socket acts
//! on the host.
//!
//! One request per connection: a line of JSON (`model::ViewRequest`, at
//! most [`MAX_REQUEST`] bytes, within the header timeout); the answer is a
//! line of JSON (`model::ViewAnswer`: the verdict shown, or why not) and
//! the output, then the connection is closed. At most [`MAX_CONNECTIONS`]
//! are open ([`MAX_PER_USER`] of one user's), at most [`RENDERS`] answers
//! are made at once, an answer the
//! client does not take within the idle timeout is dropped, and a stale
//! snapshot (the one `/healthz` calls stale) is not answered from.

use super::{lock, ServeError, Shared};
use crate::model::{
    Snapshot, ViewAnswer, ViewCommand, ViewError, ViewErrorKind, ViewFrom, ViewRequest,
    VIEW_VERSION,
};
use crate::present::words::front as words;
use crate::present::PrinterBuilder;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest request read.
pub const MAX_REQUEST: usize = 4096;
/// At most this many connections are open at once; past it, a new one is
/// closed at once.
pub const MAX_CONNECTIONS: usize = 64;
/// At most this many of them are one user's: one user's idle connections
/// deny the view to no one else.
pub const MAX_PER_USER: usize = 8;
/// At most this many answers are made at once (each judges a copy of the
/// snapshot).
pub const RENDERS: usize = 2;

/// An answer that could not be made, and why.
fn failed(kind: ViewErrorKind, message: String) -> (ViewAnswer, Vec<u8>) {
    (
        ViewAnswer {
            verdict: None,
            age_seconds: None,
            error: Some(ViewError { kind, message }),
        },
        Vec::new(),
    )
}

/// The answer to `req` from `uid`, from `snap` (judged, every GPU serve
/// reports): its first line and its output.
pub fn render(
    (snap, age): (&Snapshot, std::time::Duration),
    socket: &Path,
    uid: u32,
    req: &ViewRequest,
) -> (ViewAnswer, Vec<u8>) {
    use ViewErrorKind::Usage;
    if req.version != VIEW_VERSION {
        return failed(Usage, words::view_version(req.version, VIEW_VERSION));
    }
    let mut gpus = Vec::new();
    for g in &req.gpu {
        match g.parse() {
            Ok(sel) => gpus.push(sel),
            Err(why) => return failed(Usage, format!("--gpu {g}: {why}")),
        }
    }
    let mut view = snap.clone();
    view.hide_from(uid);
    view.visibility.view = Some(ViewFrom {
        socket: socket.display().to_string(),
        uid,
        server_uid: rustix::process::geteuid().as_raw(),
        age_seconds: age.as_secs_f64(),
    });
    crate::pipeline::judge_with(&mut view, &crate::diagnose::Options::default());
    let sel = match crate::snapshot::resolve(&view.gpus, &gpus) {
        Ok(sel) => sel,
        Err(why) => return failed(Usage, crate::present::words::selector::gpu_miss(&why)),
    };
    let view = crate::pipeline::select(view, &sel);
    // The user's printer, as their command line built it.
    let printer = PrinterBuilder::new()
        .color(req.color)
        .quiet(req.quiet)
        .json(req.json)
        .build();
    let mut body = Vec::new();
    let mut out = printer.guard(&mut body);
    let written = match req.command {
        ViewCommand::Status => crate::present::write_status_command(&mut out, &view, &printer),
        ViewCommand::Why => crate::present::write_why_command(&mut out, &view, &printer),
    };
    let written = written.and_then(|()| out.flush());
    drop(out);
    match written {
        Ok(()) => (
            ViewAnswer {
                verdict: Some(view.verdict.state),
                age_seconds: Some(age.as_secs_f64()),
                error: None,
            },
            body,
        ),
        Err(e) => failed(ViewErrorKind::Unavailable, words::answer_not_written(&e)),
    }
}

/// Binds the view's socket at `path`: its directory made (0755) where
/// missing, a stale socket of this user's there replaced, anything else
/// there refused; the socket is 0666 (any user may ask; the answer depends
/// on who asks). Root's serve, or a service user's given the capabilities
/// to see what root sees (the shipped unit: `DynamicUser=` with
/// `AmbientCapabilities=`), whose socket users believe only in a directory
/// no one else may write ([`trusted_place`]).
pub(super) fn bind(path: &Path) -> Result<std::os::unix::net::UnixListener, ServeError> {
    let failed = |why: String| ServeError::ViewSocket {
        path: path.to_path_buf(),
        why,
    };
    let me = rustix::process::geteuid().as_raw();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| failed(e.to_string()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| failed(e.to_string()))?;
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() && m.uid() == me => {
            // Stale only when the kernel says nothing listens there: a
            // live server (of any socket type: a datagram socket answers a
            // stream's connect with EPROTOTYPE) keeps it.
            match std::os::unix::net::UnixStream::connect(path) {
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
                Ok(_) => return Err(failed(words::SOCKET_ANSWERED.into())),
                Err(e) => return Err(failed(words::socket_in_use(&e))),
            }
            std::fs::remove_file(path).map_err(|e| failed(e.to_string()))?;
        }
        Ok(_) => return Err(failed(words::SOCKET_NOT_MINE.into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e.to_string())),
    }
    let listener =
        std::os::unix::net::UnixListener::bind(path).map_err(|e| failed(e.to_string()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| failed(e.to_string()))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| failed(e.to_string()))?;
    Ok(listener)
}

/// The view's listener on `runtime`, bound at `path` ([`bind`]).
pub(super) fn listen(
    runtime: &tokio::runtime::Runtime,
    path: &Path,
) -> Result<tokio::net::UnixListener, ServeError> {
    let listener = bind(path)?;
    let _entered = runtime.enter();
    tokio::net::UnixListener::from_std(listener).map_err(|e| ServeError::ViewSocket {
        path: path.to_path_buf(),
        why: e.to_string(),
    })
}

/// The view's open connections: how many each user has, and those still
/// waiting for their request, oldest first (the ones a newcomer displaces
/// when all are taken: a client that means to ask asks at once, so only
/// idle connections wait long).
#[derive(Default)]
struct Open {
    per_user: std::collections::HashMap<u32, usize>,
    waiting: std::collections::VecDeque<(u64, Arc<tokio::sync::Notify>)>,
    total: usize,
}

impl Open {
    /// Takes in a connection of `uid` as `id`, displacing the connection
    /// that has waited longest for its request when all are taken; None
    /// when `uid` has its share already, or nothing can be displaced.
    fn admit(&mut self, uid: u32, id: u64) -> Option<Arc<tokio::sync::Notify>> {
        if self.per_user.get(&uid).copied().unwrap_or(0) >= MAX_PER_USER {
            return None;
        }
        if self.total >= MAX_CONNECTIONS {
            let (_, oldest) = self.waiting.pop_front()?;
            oldest.notify_one();
        }
        *self.per_user.entry(uid).or_default() += 1;
        self.total += 1;
        let closed = Arc::new(tokio::sync::Notify::new());
        self.waiting.push_back((id, Arc::clone(&closed)));
        Some(closed)
    }

    /// Connection `id` has its request: no longer one to displace.
    fn asked(&mut self, id: u64) {
        self.waiting.retain(|(w, _)| *w != id);
    }

    /// Connection `id` of `uid` is closed.
    fn closed(&mut self, uid: u32, id: u64) {
        self.asked(id);
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.per_user.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.per_user.remove(&uid);
            }
        }
    }
}

/// Accepts view connections until the process is stopped.
pub(super) async fn accept(
    listener: tokio::net::UnixListener,
    shared: Arc<Shared>,
    socket: PathBuf,
) {
    let open: Arc<std::sync::Mutex<Open>> = Arc::default();
    let renders = Arc::new(tokio::sync::Semaphore::new(RENDERS));
    let socket = Arc::new(socket);
    let mut next: u64 = 0;
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, or a connection reset before it was
            // taken: the next may come.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let Ok(uid) = stream.peer_cred().map(|c| c.uid()) else {
            continue;
        };
        next = next.wrapping_add(1);
        let id = next;
        let Some(displaced) = lock(&open).admit(uid, id) else {
            continue;
        };
        let (shared, open, renders, socket) = (
            Arc::clone(&shared),
            Arc::clone(&open),
            Arc::clone(&renders),
            Arc::clone(&socket),
        );
        tokio::spawn(async move {
            let asked = || lock(&open).asked(id);
            tokio::select! {
                _ = one(stream, uid, (&shared, &renders, &socket), asked) => {}
                () = displaced.notified() => {}
            }
            lock(&open).closed(uid, id);
        });
    }
}

/// One connection: its request within the header timeout, the answer
/// taken within the idle timeout.
async fn one(
    mut stream: tokio::net::UnixStream,
    uid: u32,
    (shared, renders, socket): (&Shared, &tokio::sync::Semaphore, &Path),
    asked: impl FnOnce(),
) -> std::io::Result<()> {
    let Ok(request) = tokio::time::timeout(shared.header_timeout, read_request(&mut stream)).await
    else {
        return Ok(());
    };
    asked();
    let (answer, body) = match (request, fresh_snapshot(shared)) {
        (Err(why), _) => failed(ViewErrorKind::Usage, why),
        (Ok(_), Err(why)) => failed(ViewErrorKind::Unavailable, why),
        (Ok(req), Ok(snap)) => {
            let _permit = renders.acquire().await;
            let socket = socket.to_path_buf();
            tokio::task::spawn_blocking(move || render((&snap.0, snap.1), &socket, uid, &req))
                .await
                .unwrap_or_else(|_| failed(ViewErrorKind::Unavailable, words::ANSWER_FAILED.into()))
        }
    };
    let mut head = serde_json::to_vec(&answer).unwrap_or_default();
    head.push(b'\n');
    let send = async {
        stream.write_all(&head).await?;
        stream.write_all(&body).await?;
        stream.shutdown().await
    };
    tokio::time::timeout(shared.idle_timeout, send)
        .await
        .unwrap_or(Ok(()))
}

/// The cached snapshot, unless there is none yet or it is stale (as
/// `/healthz` judges it): a view of an old host would mislead.
fn fresh_snapshot(shared: &Shared) -> Result<(Arc<Snapshot>, std::time::Duration), String> {
    let cache = lock(&shared.cache);
    match (&cache.snapshot, cache.taken) {
        (Some(snap), Some(taken)) if taken.elapsed() <= shared.stale_after => {
            Ok((Arc::clone(snap), taken.elapsed()))
        }
        (Some(_), _) => Err(words::SNAPSHOT_STALE.into()),
        (None, _) => Err(words::NO_SNAPSHOT.into()),
    }
}

/// The request line: at most [`MAX_REQUEST`] bytes up to a newline (or
/// the end of the stream).
async fn read_request(stream: &mut tokio::net::UnixStream) -> Result<ViewRequest, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        // Never more than one byte past the limit is read.
        let room = (MAX_REQUEST + 1 - buf.len()).min(chunk.len());
        let n = stream
            .read(&mut chunk[..room])
            .await
            .map_err(|e| words::request_unread(&e))?;
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.iter().position(|&b| b == b'\n') {
            buf.truncate(end);
            break;
        }
        if buf.len() > MAX_REQUEST {
            return Err(words::request_too_long(MAX_REQUEST));
        }
        if n == 0 {
            break;
        }
    }
    serde_json::from_slice(&buf).map_err(|e| words::not_a_request(&e))
}

#[cfg(test)]
mod tests;
