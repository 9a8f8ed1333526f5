//! The view for users who are not root: with `--view-socket PATH`, root's
//! `gpufree serve` also answers on a local socket (mode 0666) that any
//! user may connect to. It knows its caller from the socket's peer
//! credentials (`SO_PEERCRED`, which the kernel fills in: no caller can
//! claim another's), and answers `status` or `why` from its cached
//! snapshot with other users' command lines, environments and
//! executables removed ([`Snapshot::hide_from`]) and the snapshot judged
//! again, rendered as the command line would print it. A user on a
//! shared server sees who holds a GPU and why without sudo; nothing on
//! the socket acts on the host.
//!
//! One request per connection: a line of JSON ([`ViewRequest`], at most
//! [`MAX_REQUEST`] bytes, within the header timeout); the answer is a line
//! of JSON ([`ViewAnswer`]: the exit code, or an error) and the output,
//! then the connection is closed. At most [`MAX_CONNECTIONS`] are open,
//! at most [`RENDERS`] answers are made at once, and an answer the client
//! does not take within the idle timeout is dropped.

use super::{lock, ServeError, Shared};
use crate::model::{Snapshot, VerdictState, ViewFrom};
use crate::present::Paint;
use crate::safe::Guard;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where the shipped service unit puts the socket (and where a user's
/// `gpufree status` looks for it).
pub const DEFAULT_SOCKET: &str = "/run/gpufree/view.sock";
/// The largest request read.
pub const MAX_REQUEST: usize = 4096;
/// At most this many connections are open at once; past it, a new one is
/// closed at once.
pub const MAX_CONNECTIONS: usize = 64;
/// At most this many answers are made at once (each judges a copy of the
/// snapshot).
pub const RENDERS: usize = 2;
/// The protocol's version.
pub const VERSION: u32 = 1;

/// What a user asks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ViewRequest {
    /// [`VERSION`].
    pub version: u32,
    /// `status` or `why`.
    pub command: ViewCommand,
    /// The `--gpu` selectors, as typed.
    #[serde(default)]
    pub gpu: Vec<String>,
    /// `--json`.
    #[serde(default)]
    pub json: bool,
    /// `--quiet`.
    #[serde(default)]
    pub quiet: bool,
    /// Colours (the caller's terminal wants them).
    #[serde(default)]
    pub color: bool,
}

/// The commands the view answers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ViewCommand {
    /// `gpufree status`.
    Status,
    /// `gpufree why`.
    Why,
}

/// The first line of an answer: the command's exit code, and its error
/// when it could not run (the output is then empty).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ViewAnswer {
    /// The exit code the command line would have ended with.
    pub code: u8,
    /// Why it could not run, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The answer to `req` from `uid`, from `snap` (judged, every GPU serve
/// reports): its first line and its output.
pub fn render(
    snap: &Snapshot,
    socket: &Path,
    uid: u32,
    req: &ViewRequest,
) -> (ViewAnswer, Vec<u8>) {
    let failed = |code: u8, why: String| {
        (
            ViewAnswer {
                code,
                error: Some(why),
            },
            Vec::new(),
        )
    };
    if req.version != VERSION {
        return failed(
            2,
            format!(
                "view protocol version {} not served (this serve speaks {VERSION})",
                req.version
            ),
        );
    }
    let mut gpus = Vec::new();
    for g in &req.gpu {
        match g.parse() {
            Ok(sel) => gpus.push(sel),
            Err(why) => return failed(2, format!("--gpu {g}: {why}")),
        }
    }
    let mut view = snap.clone();
    view.hide_from(uid);
    view.visibility.view = Some(ViewFrom::new(socket.display().to_string(), uid));
    crate::pipeline::judge_with(&mut view, &crate::diagnose::Options::default());
    let sel = match crate::snapshot::resolve(&view.gpus, &gpus) {
        Ok(sel) => sel,
        Err(why) => return failed(2, why),
    };
    let view = crate::pipeline::select(view, &sel);
    let paint = Paint { color: req.color };
    let mut body = Vec::new();
    let mut out = Guard::new(&mut body, req.color);
    let (written, code) = match req.command {
        ViewCommand::Status => (
            crate::present::write_status_command(&mut out, &view, req.json, req.quiet, &paint),
            0,
        ),
        ViewCommand::Why => (
            crate::present::write_why_command(&mut out, &view, req.json, req.quiet, &paint),
            match view.verdict.state {
                VerdictState::Free => 0,
                VerdictState::Busy => 1,
                VerdictState::Unknown => 3,
            },
        ),
    };
    let written = written.and_then(|()| out.flush());
    drop(out);
    match written {
        Ok(()) => (ViewAnswer { code, error: None }, body),
        Err(e) => failed(3, format!("the answer could not be written: {e}")),
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
            // A live server there keeps it; a stale one's socket goes.
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(failed("another server answers there".into()));
            }
            std::fs::remove_file(path).map_err(|e| failed(e.to_string()))?;
        }
        Ok(_) => {
            return Err(failed(
                "something other than this user's socket is there: not replaced".into(),
            ))
        }
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

/// Whether users may believe a view answering at `socket` from a server
/// of `peer` (its uid, from `SO_PEERCRED`): root's always; another user's
/// only where that user made the socket in a directory that only it or
/// root may write, below directories only root may write (`/run/gpufree`
/// of a service user: no one else could have put a socket there). A
/// symlink anywhere on the way, or a directory others may write (`/tmp`),
/// makes it untrusted. Err says why.
pub fn trusted_place(socket: &Path, peer: u32) -> Result<(), String> {
    if peer == 0 {
        return Ok(());
    }
    if !socket.is_absolute() {
        return Err(format!(
            "its server runs as uid {peer}, not root, and the socket's path is not absolute"
        ));
    }
    let meta = std::fs::symlink_metadata(socket).map_err(|e| e.to_string())?;
    if meta.uid() != peer {
        return Err(format!(
            "its server runs as uid {peer}, neither root nor the socket's owner"
        ));
    }
    let mut dir = socket.parent();
    let mut first = true;
    while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
        let m = std::fs::symlink_metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
        let owner_ok = m.uid() == 0 || (first && m.uid() == peer);
        if !m.is_dir() || !owner_ok || m.mode() & 0o022 != 0 {
            return Err(format!(
                "its server runs as uid {peer}, not root, and {} is not a directory only root{} may write",
                d.display(),
                if first { " or that user" } else { "" }
            ));
        }
        first = false;
        dir = d.parent();
    }
    Ok(())
}

/// Accepts view connections until the process is stopped.
pub(super) async fn accept(
    listener: tokio::net::UnixListener,
    shared: Arc<Shared>,
    socket: PathBuf,
) {
    let open = Arc::new(AtomicUsize::new(0));
    let renders = Arc::new(tokio::sync::Semaphore::new(RENDERS));
    let socket = Arc::new(socket);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, or a connection reset before it was
            // taken: the next may come.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (shared, open, renders, socket) = (
            Arc::clone(&shared),
            Arc::clone(&open),
            Arc::clone(&renders),
            Arc::clone(&socket),
        );
        tokio::spawn(async move {
            let _ = one(stream, &shared, &renders, &socket).await;
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// One connection: its request within the header timeout, the answer
/// taken within the idle timeout.
async fn one(
    mut stream: tokio::net::UnixStream,
    shared: &Shared,
    renders: &tokio::sync::Semaphore,
    socket: &Path,
) -> std::io::Result<()> {
    let uid = stream.peer_cred()?.uid();
    let request = tokio::time::timeout(shared.header_timeout, read_request(&mut stream)).await;
    let (answer, body) = match request {
        Err(_) => return Ok(()),
        Ok(Err(why)) => (
            ViewAnswer {
                code: 2,
                error: Some(why),
            },
            Vec::new(),
        ),
        Ok(Ok(req)) => {
            let snap = lock(&shared.cache).snapshot.clone();
            match snap {
                None => (
                    ViewAnswer {
                        code: 3,
                        error: Some("serve has no snapshot yet".into()),
                    },
                    Vec::new(),
                ),
                Some(snap) => {
                    let _permit = renders.acquire().await;
                    let socket = socket.to_path_buf();
                    tokio::task::spawn_blocking(move || render(&snap, &socket, uid, &req))
                        .await
                        .unwrap_or_else(|_| {
                            (
                                ViewAnswer {
                                    code: 3,
                                    error: Some("the answer failed".into()),
                                },
                                Vec::new(),
                            )
                        })
                }
            }
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

/// The request line: at most [`MAX_REQUEST`] bytes up to a newline (or
/// the end of the stream).
async fn read_request(stream: &mut tokio::net::UnixStream) -> Result<ViewRequest, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the request: {e}"))?;
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.iter().position(|&b| b == b'\n') {
            buf.truncate(end);
            break;
        }
        if n == 0 {
            break;
        }
        if buf.len() > MAX_REQUEST {
            return Err(format!("a request is at most {MAX_REQUEST} bytes"));
        }
    }
    serde_json::from_slice(&buf).map_err(|e| format!("not a view request: {e}"))
}
