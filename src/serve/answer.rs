//! The answer to one request: `GET /metrics` (text or OpenMetrics) and
//! `GET /healthz` from the cache, everything else refused; the body marks
//! its connection busy until it is sent.

use super::{lock, Shared};
use crate::present::metrics::{render_live_part, Extra};
use crate::serve::connections::Conn;
use hyper::body::{Bytes, Frame, SizeHint};
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A response body of shared chunks; when it is dropped (sent, or the
/// connection gone) its connection is idle again.
pub(super) struct Reply {
    /// The chunks, last first.
    chunks: Vec<Bytes>,
    _busy: Busy,
}

/// Ends its connection's answer when dropped: idle, or in the next head.
pub(super) struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.answered();
    }
}

impl hyper::body::Body for Reply {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.get_mut().chunks.pop().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.chunks.iter().map(|b| b.len() as u64).sum())
    }
}

pub(super) const TEXT: &str = "text/plain; charset=utf-8";

pub(super) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The response to one request.
pub(super) fn answer(
    shared: &Shared,
    conn: &Arc<Conn>,
    req: &Request<hyper::body::Incoming>,
) -> Response<Reply> {
    conn.busy();
    let replier = Replier(conn);
    let path = req.uri().path();
    let has_body = hyper::body::Body::size_hint(req.body()).exact() != Some(0);
    let mut response = refused(&replier, req.method(), path, has_body)
        .unwrap_or_else(|| from_cache(&replier, shared, path));
    if has_body || response.status() == StatusCode::METHOD_NOT_ALLOWED {
        // Its body is not read: the connection cannot carry another request.
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Makes the responses of one connection: each body marks it busy until
/// it is sent.
struct Replier<'a>(&'a Arc<Conn>);

impl Replier<'_> {
    /// A response of `kind` made of `chunks`.
    fn reply(&self, status: StatusCode, kind: &'static str, chunks: Vec<Bytes>) -> Response<Reply> {
        let mut r = Response::new(Reply {
            chunks: chunks.into_iter().rev().collect(),
            _busy: Busy(Arc::clone(self.0)),
        });
        *r.status_mut() = status;
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
        r
    }

    /// A plain-text response.
    fn text(&self, status: StatusCode, body: &'static str) -> Response<Reply> {
        self.reply(status, TEXT, vec![Bytes::from_static(body.as_bytes())])
    }

    /// 503 with a Retry-After: no snapshot was ever taken.
    fn no_snapshot_yet(&self) -> Response<Reply> {
        let mut r = self.text(
            StatusCode::SERVICE_UNAVAILABLE,
            "no snapshot yet: the first collection failed (see the exporter's log)\n",
        );
        r.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("5"));
        r
    }
}

/// The refusal of a request this exporter does not serve (an unknown
/// path, a method other than GET and HEAD, a request body); None for one
/// it serves.
fn refused(
    r: &Replier<'_>,
    method: &Method,
    path: &str,
    has_body: bool,
) -> Option<Response<Reply>> {
    if !matches!(path, "/metrics" | "/healthz") {
        return Some(r.text(
            StatusCode::NOT_FOUND,
            "not found: metrics are at /metrics, health at /healthz\n",
        ));
    }
    if !matches!(*method, Method::GET | Method::HEAD) {
        let mut response = r.text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD: this exporter is read-only\n",
        );
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Some(response);
    }
    has_body.then(|| {
        r.text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "no request bodies: this exporter only answers GET\n",
        )
    })
}

/// `/metrics` or `/healthz`, answered from the cache.
fn from_cache(r: &Replier<'_>, shared: &Shared, path: &str) -> Response<Reply> {
    let cache = lock(&shared.cache);
    let age = cache.taken.map(|t| t.elapsed());
    let fresh = age.is_some_and(|a| a <= shared.stale_after);
    match (path, &cache.body) {
        ("/metrics", Some(body)) => {
            let live = render_live_part(&Extra {
                snapshot_age_seconds: age.map(|a| a.as_secs_f64()),
                collection_errors: Some(cache.errors),
                ..Extra::default()
            });
            r.reply(
                StatusCode::OK,
                OPENMETRICS,
                vec![body.clone(), Bytes::from(live)],
            )
        }
        ("/metrics", None) => r.no_snapshot_yet(),
        (_, _) if fresh => r.text(StatusCode::OK, "ok\n"),
        (_, Some(_)) => r.text(
            StatusCode::SERVICE_UNAVAILABLE,
            "stale: the last good snapshot is too old (collections fail; see the exporter's log)\n",
        ),
        (_, None) => r.text(
            StatusCode::SERVICE_UNAVAILABLE,
            "no snapshot yet: the first collection failed (see the exporter's log)\n",
        ),
    }
}
