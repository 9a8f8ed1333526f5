//! The connections: admission under the cap (the idle longest is
//! displaced), the sweep that closes idle and stalled ones, and the
//! reading of the bytes that arrive, which tells when a request head
//! ends and the next one starts (also within one read: a pipelining
//! client's next head, begun in the packet of the request before it, is
//! timed as a head, not as an idle connection).

use super::{lock, Shared, SWEEP_EVERY};
use crate::serve::answer::answer;
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub(super) fn is_out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

pub(super) fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || matches!(e.raw_os_error(), Some(libc::EPROTO | libc::EPERM))
}

/// Takes a new connection in, displacing the longest idle one at the cap;
/// refuses it (503, closed) when every connection is answering a request.
pub(super) fn admit(
    http: &hyper::server::conn::http1::Builder,
    shared: &Arc<Shared>,
    stream: TcpStream,
    id: u64,
) {
    let conn = Arc::new(Conn::new());
    {
        let mut conns = lock(&shared.conns);
        if conns.map.len() >= shared.cap && !conns.evict_one() {
            drop(conns);
            // Best effort: the client learns why; unread bytes may turn the
            // close into a reset that hides it.
            let _ = stream.try_write(
                b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n",
            );
            return;
        }
        conns.map.insert(id, Arc::clone(&conn));
    }
    let _ = stream.set_nodelay(true);
    let io = hyper_util::rt::TokioIo::new(Tracked {
        io: stream,
        conn: Arc::clone(&conn),
        heads: Heads::default(),
    });
    let service = {
        let (shared, conn) = (Arc::clone(shared), Arc::clone(&conn));
        hyper::service::service_fn(move |req| {
            let reply = answer(&shared, &conn, &req);
            async move { Ok::<_, Infallible>(reply) }
        })
    };
    let connection = http.serve_connection(io, service);
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        tokio::select! {
            _ = connection => {}
            () = conn.closed.notified() => {}
        }
        lock(&shared.conns).map.remove(&id);
    });
}

/// Closes the connections whose deadline passed, every [`SWEEP_EVERY`].
pub(super) async fn sweep(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        lock(&shared.conns).map.retain(|_, c| {
            let (phase, since) = c.phase();
            let limit = match phase {
                Phase::Head => shared.header_timeout,
                Phase::Busy | Phase::Idle => shared.idle_timeout,
            };
            let expired = now.saturating_duration_since(since) > limit;
            if expired {
                c.closed.notify_one();
            }
            !expired
        });
    }
}

/// The open connections.
#[derive(Default)]
pub(super) struct Registry {
    pub(super) map: HashMap<u64, Arc<Conn>>,
}

impl Registry {
    /// Closes the connection that has waited longest without a request in
    /// progress (for its first request, a request head, or the next
    /// request); false when every connection is answering one.
    pub(super) fn evict_one(&mut self) -> bool {
        let oldest = self
            .map
            .iter()
            .filter_map(|(id, c)| {
                let (phase, since) = c.phase();
                (phase != Phase::Busy).then_some((since, *id))
            })
            .min();
        match oldest.and_then(|(_, id)| self.map.remove(&id)) {
            Some(c) => {
                c.closed.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Where a connection is in its request cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Waiting for a request head (since the connection started, or since
    /// the first byte of a later request).
    Head,
    /// A request is being answered (since its head arrived).
    Busy,
    /// Kept alive between requests (since the last response was handed to
    /// the connection).
    Idle,
}

/// One connection's state, shared by its I/O, its service and the sweeper.
pub(super) struct Conn {
    clock: Mutex<Clock>,
    /// Notified to close the connection.
    pub(super) closed: tokio::sync::Notify,
}

/// Where a connection is, since when, and since when a later request's
/// head has been arriving.
struct Clock {
    phase: Phase,
    since: Instant,
    /// When the first byte after the last whole request head arrived
    /// (None: none since).
    next_head: Option<Instant>,
}

impl Conn {
    pub(super) fn new() -> Conn {
        Conn {
            clock: Mutex::new(Clock {
                phase: Phase::Head,
                since: Instant::now(),
                next_head: None,
            }),
            closed: tokio::sync::Notify::new(),
        }
    }

    /// The phase and since when.
    pub(super) fn phase(&self) -> (Phase, Instant) {
        let c = lock(&self.clock);
        (c.phase, c.since)
    }

    /// A request's head arrived: it is being answered.
    pub(super) fn busy(&self) {
        let mut c = lock(&self.clock);
        (c.phase, c.since) = (Phase::Busy, Instant::now());
    }

    /// A response was handed over (or dropped): idle, or, where bytes of
    /// the next request's head have arrived (with the request before it,
    /// or while it was answered), in that head since its first byte.
    pub(super) fn answered(&self) {
        let mut c = lock(&self.clock);
        (c.phase, c.since) = match c.next_head {
            Some(first) => (Phase::Head, first),
            None => (Phase::Idle, Instant::now()),
        };
    }

    /// Bytes arrived; `next_head`: since when a head that has not ended
    /// has been arriving. An idle connection starts a request head.
    fn on_bytes(&self, next_head: Option<Instant>) {
        let mut c = lock(&self.clock);
        c.next_head = next_head;
        if c.phase == Phase::Idle {
            (c.phase, c.since) = (Phase::Head, Instant::now());
        }
    }
}

/// Where the bytes read so far stand against the ends of request heads
/// (an empty line: `\r\n\r\n`, or bare `\n` as hyper's parser allows).
/// No request has a body that is read (one with a body is answered and
/// closed), so every byte after a head's end starts the next head.
#[derive(Debug, Default)]
pub(super) struct Heads {
    /// The current line holds more than `\r`.
    line_has_text: bool,
    /// The current head has a line with text (its request line): leading
    /// empty lines end no head.
    head_has_line: bool,
    /// When the first byte of the head that has not ended arrived.
    started: Option<Instant>,
}

impl Heads {
    /// Reads `bytes`, arrived at `now`; returns since when a head that has
    /// not ended has been arriving (None: the last byte ended one).
    pub(super) fn feed(&mut self, bytes: &[u8], now: Instant) -> Option<Instant> {
        for &b in bytes {
            self.started.get_or_insert(now);
            match b {
                b'\n' if self.line_has_text => {
                    self.line_has_text = false;
                    self.head_has_line = true;
                }
                b'\n' if self.head_has_line => {
                    self.head_has_line = false;
                    self.started = None;
                }
                b'\n' | b'\r' => {}
                _ => self.line_has_text = true,
            }
        }
        self.started
    }
}

/// The TCP stream, telling its connection when bytes arrive and whether
/// they end a request head.
pub(super) struct Tracked {
    pub(super) io: TcpStream,
    pub(super) conn: Arc<Conn>,
    pub(super) heads: Heads,
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) {
            if let Some(new) = buf.filled().get(before..).filter(|b| !b.is_empty()) {
                let next_head = this.heads.feed(new, Instant::now());
                this.conn.on_bytes(next_head);
            }
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_head_ends_at_its_empty_line_and_the_next_starts_with_its_first_byte() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(1);
        let mut h = Heads::default();
        assert_eq!(
            h.feed(b"GET /metrics HTTP/1.1\r\nHost: x\r\n", t0),
            Some(t0)
        );
        assert_eq!(h.feed(b"\r\n", t1), None, "ended");
        // A whole request and the start of the next in one read.
        let mut h = Heads::default();
        let both = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /met";
        assert_eq!(h.feed(both, t0), Some(t0));
        assert_eq!(
            h.feed(b"rics HTTP/1.1\n\n", t1),
            None,
            "bare LF ends it too"
        );
        // Two whole requests: none pending; empty lines before a request
        // line end no head.
        let mut h = Heads::default();
        assert_eq!(
            h.feed(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n", t0),
            None
        );
        assert_eq!(h.feed(b"\r\n\r\n", t1), Some(t1));
        assert_eq!(h.feed(b"GET / HTTP/1.1\r\n\r\n", t0), None);
    }
}
