//! `gpufree serve`: Prometheus metrics over HTTP, read-only.
//!
//! One collector thread takes a snapshot every interval (so at most one scan
//! runs at a time, whatever the scrape rate: concurrent scrapes share one
//! collection), narrows it to `--gpu` and renders it once; scrapes answer
//! from that cache, with its age as a metric, so a slow scan never delays a
//! scrape and a failing NVML call never takes the exporter down.
//!
//! HTTP is hyper's HTTP/1.1 on a single-threaded tokio runtime (one thread
//! for every connection, not one thread each), with limits against abuse:
//! a request head of at most 16 KiB (431, then closed), no request bodies
//! (413), a connection cap past which a new connection displaces the one
//! that has waited longest without a request in progress (or, when every
//! connection is answering one, is refused with 503), deadlines for a
//! request head, an idle kept-alive connection and a response, and an
//! `accept` that runs out of file descriptors backs off and goes on. Only
//! `GET` (and `HEAD`) of `/metrics` and `/healthz` are served: no endpoint
//! acts on the host.

mod answer;
mod connections;
pub mod view;

use connections::{admit, is_out_of_resources, is_transient, sweep, Registry};

use crate::act::monitor::{self, Tick, Watch};
use crate::pipeline;
use crate::present::metrics::{render_snapshot_part, Extra};
use crate::snapshot::{self, Collector, GpuSelector};
use hyper::body::Bytes;
use std::convert::Infallible;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The largest request head (request line and headers) read.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The connection cap when none is given (lowered to fit the open-file
/// limit). Each connection may hold a 16 KiB head and hyper's buffers,
/// about 25 KiB in all (measured: 4,096 connections with 16,000-byte
/// unfinished heads took serve to 100.6 MiB), so 1,024 of them stay well
/// inside the DaemonSet's 64 MiB; past the cap a new connection displaces
/// the longest idle one, so idle floods do not lock scrapers out.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// How often running out of descriptors is logged at most.
const LOG_EVERY: Duration = Duration::from_secs(60);
/// How long `accept` waits after running out of file descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How often the deadlines of the connections are checked.
const SWEEP_EVERY: Duration = Duration::from_millis(250);
/// File descriptors kept free for the scan when the connection cap is
/// derived from the open-file limit.
const FD_RESERVE: u64 = 256;

/// Options of `gpufree serve`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to listen on.
    pub listen: String,
    /// How often to take a snapshot.
    pub interval: Duration,
    /// Add command lines as labels.
    pub label_cmdline: bool,
    /// The GPUs to report (`--gpu`; empty for all), resolved on every
    /// snapshot.
    pub gpus: Vec<GpuSelector>,
    /// At most this many connections; None for [`DEFAULT_MAX_CONNECTIONS`]
    /// lowered to fit the open-file limit.
    pub max_connections: Option<usize>,
    /// A request head must arrive within this long (from the connection's
    /// start, or from the first byte of a later request).
    pub header_timeout: Duration,
    /// A kept-alive connection without a request is closed after this
    /// long, and so is one whose response the client does not take.
    pub idle_timeout: Duration,
    /// Also answer users' `status` and `why` on this local socket
    /// ([`view`]; root only).
    pub view_socket: Option<std::path::PathBuf>,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// `--listen` is not an address (a usage error).
    #[error("--listen {addr}: {why}")]
    Address {
        /// The address.
        addr: String,
        /// Why.
        why: String,
    },
    /// The address could not be bound (in use, not ours, no permission).
    #[error("--listen {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// `--gpu` names no GPU of the first snapshot (a usage error).
    #[error("{}", crate::present::words::selector::gpu_miss(.0))]
    Gpu(crate::model::GpuMiss),
    /// The HTTP runtime could not start.
    #[error("serve: cannot start the HTTP runtime: {0}")]
    Runtime(io::Error),
    /// The view's socket could not be made.
    #[error("--view-socket {}: {why}", path.display())]
    ViewSocket {
        /// The socket's path.
        path: std::path::PathBuf,
        /// Why.
        why: String,
    },
}

/// The last good snapshot, rendered.
#[derive(Default)]
struct Cache {
    /// Its metrics without the end-of-text line (shared by every scrape).
    body: Option<Bytes>,
    /// The snapshot itself, judged, without its pins (the view answers
    /// from it; nothing is ever signalled from it).
    snapshot: Option<Arc<crate::model::Snapshot>>,
    /// When it was taken.
    taken: Option<Instant>,
    /// Collections that failed since start.
    errors: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One collection: a snapshot narrowed to `gpus`, rendered.
fn collect(
    c: &Collector,
    gpus: &[GpuSelector],
    label_cmdline: bool,
) -> Result<(Bytes, crate::model::Snapshot), CollectError> {
    let started = Instant::now();
    let taken = crate::units::unix_now();
    let snap = pipeline::judged(c).map_err(|e| CollectError::Snapshot(e.to_string()))?;
    let indexes = snapshot::resolve(&snap.gpus, gpus).map_err(CollectError::Gpu)?;
    let snap = pipeline::select(snap, &indexes);
    let extra = Extra {
        label_cmdline,
        snapshot_duration_seconds: Some(started.elapsed().as_secs_f64()),
        snapshot_timestamp_seconds: Some(taken),
        ..Extra::default()
    };
    let body = Bytes::from(render_snapshot_part(&snap, &extra));
    let mut snap = snap;
    snap.pins = crate::model::Pins::default();
    Ok((body, snap))
}

enum CollectError {
    Snapshot(String),
    Gpu(crate::model::GpuMiss),
}

impl CollectError {
    fn message(&self) -> String {
        match self {
            CollectError::Snapshot(m) => m.clone(),
            CollectError::Gpu(m) => crate::present::words::selector::gpu_miss(m),
        }
    }
}

fn store(cache: &Mutex<Cache>, result: Result<(Bytes, crate::model::Snapshot), CollectError>) {
    let mut cache = lock(cache);
    match result {
        Ok((body, snap)) => {
            cache.body = Some(body);
            cache.snapshot = Some(Arc::new(snap));
            cache.taken = Some(Instant::now());
        }
        Err(e) => {
            cache.errors += 1;
            let _ =
                crate::present::notice::write_serving_last(&mut std::io::stderr(), &e.message());
        }
    }
}

/// The collector thread's watch: a collection into the cache after each
/// interval (the first was taken before the socket was bound).
struct Collecting {
    collector: Collector,
    shared: Arc<Shared>,
    gpus: Vec<GpuSelector>,
    label_cmdline: bool,
}

impl Watch for Collecting {
    type Out = Infallible;

    fn look(&mut self, tick: Tick) -> ControlFlow<Infallible> {
        if !tick.first() {
            let result = collect(&self.collector, &self.gpus, self.label_cmdline);
            store(&self.shared.cache, result);
        }
        ControlFlow::Continue(())
    }

    fn deadline(&self) -> Option<Instant> {
        None
    }
}

/// What every connection shares.
struct Shared {
    cache: Mutex<Cache>,
    /// A snapshot older than this is stale (`/healthz` answers 503).
    stale_after: Duration,
    conns: Mutex<Registry>,
    cap: usize,
    header_timeout: Duration,
    idle_timeout: Duration,
}

/// Serves until the process is stopped. The first snapshot is taken before
/// the socket is bound (a `--gpu` that names no GPU is an error then);
/// `on_ready` gets the bound address (useful with port 0).
pub fn serve(
    collector: Collector,
    opts: &Options,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    snapshot::raise_fd_limit();
    let addrs: Vec<SocketAddr> = opts
        .listen
        .to_socket_addrs()
        .map_err(|e| ServeError::Address {
            addr: opts.listen.clone(),
            why: e.to_string(),
        })?
        .collect();
    let first = collect(&collector, &opts.gpus, opts.label_cmdline);
    if let Err(CollectError::Gpu(e)) = &first {
        return Err(ServeError::Gpu(e.clone()));
    }
    let read_timeout = collector.config().read_timeout;
    let shared = Arc::new(Shared {
        cache: Mutex::new(Cache::default()),
        stale_after: opts.interval.saturating_mul(3) + read_timeout.saturating_mul(4),
        conns: Mutex::new(Registry::default()),
        cap: connection_cap(opts.max_connections),
        header_timeout: opts.header_timeout,
        idle_timeout: opts.idle_timeout,
    });
    store(&shared.cache, first);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(ServeError::Runtime)?;
    let listener = runtime.block_on(bind(&opts.listen, &addrs))?;
    let view = match &opts.view_socket {
        Some(path) => Some((view::listen(&runtime, path)?, path.clone())),
        None => None,
    };
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: opts.listen.clone(),
        source,
    })?;
    {
        let mut collecting = Collecting {
            collector,
            shared: Arc::clone(&shared),
            gpus: opts.gpus.clone(),
            label_cmdline: opts.label_cmdline,
        };
        let interval = opts.interval;
        std::thread::Builder::new()
            .name("collector".into())
            .spawn(move || {
                let _ = monitor::run(&mut collecting, interval);
            })
            .map_err(ServeError::Runtime)?;
    }
    on_ready(addr);
    runtime.block_on(run(listener, shared, view));
    Ok(())
}

/// The connection cap: `max` as given, or the default lowered so that the
/// connections leave [`FD_RESERVE`] descriptors (or half of a small limit)
/// to the scan.
fn connection_cap(max: Option<usize>) -> usize {
    if let Some(max) = max {
        return max.max(1);
    }
    let max = DEFAULT_MAX_CONNECTIONS;
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let room = limit.saturating_sub(FD_RESERVE).max(limit / 2).max(1);
    max.clamp(1, usize::try_from(room).unwrap_or(usize::MAX))
}

async fn bind(listen: &str, addrs: &[SocketAddr]) -> Result<tokio::net::TcpListener, ServeError> {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "names no address");
    for a in addrs {
        let socket = match a {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        };
        let bound = socket.and_then(|s| {
            s.set_reuseaddr(true)?;
            s.bind(*a)?;
            s.listen(1024)
        });
        match bound {
            Ok(l) => return Ok(l),
            Err(e) => last = e,
        }
    }
    Err(ServeError::Bind {
        addr: listen.to_string(),
        source: last,
    })
}

/// Accepts until the process is stopped; never returns.
async fn run(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    view: Option<(tokio::net::UnixListener, std::path::PathBuf)>,
) {
    tokio::spawn(sweep(Arc::clone(&shared)));
    if let Some((l, path)) = view {
        tokio::spawn(view::accept(l, Arc::clone(&shared), path));
    }
    let mut http = hyper::server::conn::http1::Builder::new();
    http.max_buf_size(MAX_HEAD_BYTES)
        .max_header_size(MAX_HEAD_BYTES)
        .header_read_timeout(None)
        .keep_alive(true);
    let mut next_id: u64 = 0;
    // One line per minute at most, however long a flood keeps the
    // descriptors short.
    let mut logged: Option<Instant> = None;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                next_id = next_id.wrapping_add(1);
                admit(&http, &shared, stream, next_id);
            }
            Err(e) if is_out_of_resources(&e) => {
                if logged.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
                    let _ = crate::present::notice::write_accept_starved(
                        &mut std::io::stderr(),
                        &e,
                        ACCEPT_BACKOFF.as_millis(),
                    );
                    logged = Some(Instant::now());
                }
                // A connection waiting idle gives its descriptor to the one
                // waiting to be accepted (its task closes it before this
                // one runs again); with none to give, wait.
                let evicted = lock(&shared.conns).evict_one();
                if evicted {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
            // The connection was reset before it was accepted, and alike:
            // that one is gone, the next may come.
            Err(e) if is_transient(&e) => {}
            Err(e) => {
                let _ = crate::present::notice::write_accept_failed(&mut std::io::stderr(), &e);
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}
