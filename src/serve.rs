//! `gpufree serve`: Prometheus metrics over HTTP, read-only.
//!
//! One collector thread takes a snapshot every interval (so at most one scan
//! runs at a time, whatever the scrape rate) and keeps the last good one; a
//! fixed pool of HTTP workers answers from that cache, with its age as a
//! metric, so a slow scan never delays a scrape and a failing NVML call never
//! takes the exporter down. Only `GET`/`HEAD` of `/metrics` and `/` are
//! served: no endpoint acts on the host.

use crate::model::Snapshot;
use crate::present::metrics::{render, Extra};
use crate::snapshot::Collector;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tiny_http::{Header, Method, Response, Server};

/// Options of `gpufree serve`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to listen on.
    pub listen: String,
    /// How often to take a snapshot.
    pub interval: Duration,
    /// Add command lines as labels.
    pub label_cmdline: bool,
    /// HTTP worker threads.
    pub workers: usize,
}

#[derive(Default)]
struct Cache {
    snapshot: Option<Snapshot>,
    taken: Option<Instant>,
    duration: f64,
    errors: u64,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[error("--listen {addr}: {why}")]
pub struct ServeError {
    /// The address.
    pub addr: String,
    /// Why.
    pub why: String,
}

fn collect_once(c: &Collector, cache: &Mutex<Cache>) {
    let started = Instant::now();
    let result = c.snapshot();
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    match result {
        Ok(s) => {
            cache.snapshot = Some(s);
            cache.taken = Some(Instant::now());
            cache.duration = started.elapsed().as_secs_f64();
        }
        Err(e) => {
            cache.errors += 1;
            eprintln!("gpufree serve: snapshot failed, serving the last good one: {e}");
        }
    }
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

/// Serves until the process is stopped. `on_ready` gets the bound address
/// (useful with port 0) once the first snapshot is cached.
pub fn serve(
    collector: Collector,
    opts: &Options,
    on_ready: impl FnOnce(std::net::SocketAddr),
) -> Result<(), ServeError> {
    let err = |why: String| ServeError {
        addr: opts.listen.clone(),
        why,
    };
    let server = Server::http(&opts.listen).map_err(|e| err(e.to_string()))?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| err("not an IP address".into()))?;
    let cache = Arc::new(Mutex::new(Cache::default()));
    collect_once(&collector, &cache);
    {
        let cache = Arc::clone(&cache);
        let interval = opts.interval;
        std::thread::spawn(move || loop {
            std::thread::sleep(interval);
            collect_once(&collector, &cache);
        });
    }
    on_ready(addr);
    let server = Arc::new(server);
    let label_cmdline = opts.label_cmdline;
    let workers: Vec<_> = (0..opts.workers.max(1))
        .map(|_| {
            let server = Arc::clone(&server);
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || loop {
                let Ok(req) = server.recv() else { return };
                let path = req.url().split('?').next().unwrap_or("").to_string();
                let method = req.method().clone();
                let response = if !matches!(method, Method::Get | Method::Head) {
                    let mut r =
                        Response::from_string("only GET and HEAD: this exporter is read-only\n")
                            .with_status_code(405);
                    if let Some(h) = header("Allow", "GET, HEAD") {
                        r.add_header(h);
                    }
                    r
                } else if path == "/metrics" {
                    let body = {
                        let c = cache.lock().unwrap_or_else(|p| p.into_inner());
                        match &c.snapshot {
                            Some(s) => render(
                                s,
                                &Extra {
                                    label_cmdline,
                                    snapshot_age_seconds: c
                                        .taken
                                        .map(|t| t.elapsed().as_secs_f64()),
                                    snapshot_duration_seconds: Some(c.duration),
                                    collection_errors: Some(c.errors),
                                },
                            ),
                            None => String::new(),
                        }
                    };
                    let mut r = Response::from_string(body);
                    if let Some(h) = header(
                        "Content-Type",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    ) {
                        r.add_header(h);
                    }
                    r
                } else if path == "/" {
                    Response::from_string("gpufree exporter: metrics at /metrics\n")
                } else {
                    Response::from_string("not found: metrics are at /metrics\n")
                        .with_status_code(404)
                };
                let _ = req.respond(response);
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    Ok(())
}
