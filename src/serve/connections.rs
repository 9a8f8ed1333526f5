//! The connections: admission under the cap (the idle longest is
//! displaced), the sweep that closes idle and stalled ones, and the byte
//! counting that tells a stalled client from a slow one.

use super::*;

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
            let (phase, since) = *lock(&c.phase);
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
                let (phase, since) = *lock(&c.phase);
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
    pub(super) phase: Mutex<(Phase, Instant)>,
    /// Notified to close the connection.
    pub(super) closed: tokio::sync::Notify,
}

impl Conn {
    pub(super) fn new() -> Conn {
        Conn {
            phase: Mutex::new((Phase::Head, Instant::now())),
            closed: tokio::sync::Notify::new(),
        }
    }

    pub(super) fn enter(&self, phase: Phase) {
        *lock(&self.phase) = (phase, Instant::now());
    }

    /// Bytes arrived: an idle connection starts a request head.
    pub(super) fn on_bytes(&self) {
        let mut p = lock(&self.phase);
        if p.0 == Phase::Idle {
            *p = (Phase::Head, Instant::now());
        }
    }
}

/// The TCP stream, telling its connection when bytes arrive.
pub(super) struct Tracked {
    pub(super) io: TcpStream,
    pub(super) conn: Arc<Conn>,
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
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.conn.on_bytes();
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
