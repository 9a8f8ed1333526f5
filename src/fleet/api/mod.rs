//! Prometheus's HTTP API: one instant query (`GET /api/v1/query`) with a
//! deadline and a bound on the answer's size, its envelope parsed into
//! typed samples (no `serde_json::Value` tree: a large fleet's answer is
//! parsed once, into what the view keeps).

use super::FleetError;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// The most bytes read from all of one view's answers together (they
/// arrive at once): a 1,000-node fleet's largest (every holder of 8,000
/// GPUs) is a few MiB.
pub const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// The most series one answer may hold: a 1,000-node fleet's largest
/// holds some 40,000.
pub const MAX_SERIES: usize = 200_000;

/// The most labels one series may carry (gpufree's most are a holder's
/// ten, with the target's).
pub const MAX_LABELS: usize = 64;

/// Why no answer came.
#[derive(Debug, thiserror::Error)]
pub enum Unreached {
    /// None before the deadline: the view's `--timeout`.
    #[error("no answer within --timeout {}", crate::units::seconds(.0.as_secs_f64()))]
    Late(Duration),
    /// The connection failed or was lost.
    #[error("{0}")]
    Io(std::io::Error),
    /// The request failed (refused, unresolvable, TLS).
    #[error("{0}")]
    Request(ureq::Error),
}

/// What makes an answer unusable: not Prometheus's (another server, a
/// proxy's page), not what was asked, or too large.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// An HTTP error status, without Prometheus's JSON.
    #[error("HTTP status {0}")]
    HttpStatus(u16),
    /// Not JSON, or not Prometheus's envelope.
    #[error("not Prometheus's JSON: {0}")]
    NotJson(serde_json::Error),
    /// `success` without `data`.
    #[error("a success without data")]
    NoData,
    /// Another result type (its name) where an instant vector was asked
    /// for.
    #[error("a {0} where a vector was asked for")]
    NotVector(String),
    /// A sample's value (as sent) that is no number.
    #[error("the value {0:?} is no number")]
    NotNumber(String),
    /// Over [`MAX_ANSWER_BYTES`], with the view's other answers.
    #[error("the answers are over {} MiB together", MAX_ANSWER_BYTES >> 20)]
    TooLarge,
    /// Over [`MAX_SERIES`].
    #[error("over {MAX_SERIES} series")]
    TooManySeries,
    /// Prometheus's warnings (the first; how many): a partial answer
    /// (a store, a shard or a remote read did not answer).
    #[error("a partial answer: Prometheus warns {0:?} ({1} warning(s))")]
    Warned(String, usize),
    /// Evaluated this many seconds from now (a cache's answer, or a
    /// clock far off), more than `--max-age`.
    #[error("evaluated {}, more than --max-age from now", when(*.0))]
    Evaluated(f64),
    /// A success under an HTTP status that is not one.
    #[error("a success under HTTP status {0}")]
    SuccessUnder(u16),
    /// A redirect (its status and `Location`): not followed.
    #[error("HTTP status {0}, a redirect to {1:?} (not followed)")]
    Redirect(u16, String),
}

/// `3d 0h ago`, `5m 0s ahead`: an evaluation time's offset from now.
fn when(offset: f64) -> String {
    let span = crate::units::span(offset.abs());
    if offset < 0.0 {
        format!("{span} ago")
    } else {
        format!("{span} ahead")
    }
}

/// One series of an instant vector: its labels and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Its labels (`__name__` too, where the query kept it).
    pub labels: Labels,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// A label's value ("" where the series has no such label).
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name)
    }
}

/// A series' labels as (name, value) pairs in as little memory as they
/// take: a 1,000-node fleet's answers hold some 40,000 series, and a map
/// per series would be most of the view's memory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Labels(Vec<(Box<str>, Box<str>)>);

impl Labels {
    /// A label's value ("" where there is no such label).
    pub fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| &**k == name)
            .map_or("", |(_, v)| v)
    }

    /// Sets a label's value.
    pub fn set(&mut self, name: &str, value: &str) {
        match self.0.iter_mut().find(|(k, _)| &**k == name) {
            Some((_, v)) => *v = value.into(),
            None => self.0.push((name.into(), value.into())),
        }
    }
}

/// A Prometheus server: its base URL and the client that asks it.
pub struct Server {
    base: String,
    agent: ureq::Agent,
    /// The whole view's `--timeout`, as errors name it.
    timeout: Duration,
    /// How far from now an answer's evaluation time may be.
    max_age: Duration,
    /// The bytes the view's answers may still take, together.
    budget: AtomicU64,
}

impl Server {
    /// The server at `base` (`http://HOST:PORT`, or with a path prefix:
    /// `cli` has checked it), asked within `timeout` in all; an answer
    /// evaluated more than `max_age` from now is refused.
    pub fn new(base: &str, timeout: Duration, max_age: Duration) -> Server {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Prometheus's API never redirects: a redirect is a wrong URL
            // or a login page, and may lead anywhere.
            .max_redirects(0)
            .user_agent(concat!("gpufree/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Server {
            base: base.trim_end_matches('/').to_string(),
            agent,
            timeout,
            max_age,
            budget: AtomicU64::new(MAX_ANSWER_BYTES),
        }
    }

    /// The base URL as given (without a trailing slash).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// One instant query, answered before `deadline` or not at all.
    pub fn query(&self, query: &str, deadline: Instant) -> Result<Vec<Sample>, FleetError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.unreachable(query, Unreached::Late(self.timeout)));
        }
        let mut res = self
            .agent
            .get(format!("{}/api/v1/query", self.base))
            .query("query", query)
            // Thanos and others: the whole answer or an error.
            .query("partial_response", "false")
            // Prometheus stops the query itself at the deadline too.
            .query("timeout", format!("{}ms", left.as_millis().max(1)))
            .config()
            .timeout_global(Some(left))
            .build()
            .call()
            .map_err(|e| self.unreachable(query, self.why(e)))?;
        let status = res.status().as_u16();
        if res.status().is_redirection() {
            let to = res.headers().get("location");
            let to = to.map_or("", |v| v.to_str().unwrap_or("(not text)"));
            return Err(self.bad(query, AnswerError::Redirect(status, to.to_string())));
        }
        // Parsed as it arrives: no copy of the whole answer is kept.
        let body = res
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .reader();
        let body = Budgeted {
            inner: body,
            budget: &self.budget,
        };
        self.parse(
            query,
            status,
            std::io::BufReader::with_capacity(1 << 16, body),
            crate::units::unix_now(),
        )
    }

    /// The samples of one answer (at `now`, Unix time), or the error it
    /// carries.
    fn parse(
        &self,
        query: &str,
        status: u16,
        body: impl std::io::Read,
        now: f64,
    ) -> Result<Vec<Sample>, FleetError> {
        let env: Envelope = match serde_json::from_reader(body) {
            Ok(env) => env,
            Err(e) if e.is_io() => return Err(self.read_failed(query, e.into())),
            Err(_) if !(200..300).contains(&status) => {
                return Err(self.bad(query, AnswerError::HttpStatus(status)));
            }
            Err(e) => return Err(self.bad(query, AnswerError::NotJson(e))),
        };
        if env.status != "success" {
            return Err(FleetError::Query {
                url: self.base.clone(),
                query: query.to_string(),
                kind: env.error_type.unwrap_or_default(),
                why: env.error.unwrap_or_default(),
            });
        }
        if !(200..300).contains(&status) {
            return Err(self.bad(query, AnswerError::SuccessUnder(status)));
        }
        if let Some(w) = env.warnings.first() {
            let warned = AnswerError::Warned(w.clone(), env.warnings.len());
            return Err(self.bad(query, warned));
        }
        let data = env
            .data
            .ok_or_else(|| self.bad(query, AnswerError::NoData))?;
        if data.result_type != "vector" {
            return Err(self.bad(query, AnswerError::NotVector(data.result_type)));
        }
        if data.result.over {
            return Err(self.bad(query, AnswerError::TooManySeries));
        }
        let max_age = self.max_age.as_secs_f64();
        data.result
            .series
            .into_iter()
            .map(|s| {
                let off = s.value.0 - now;
                if !off.is_finite() || off.abs() > max_age {
                    return Err(self.bad(query, AnswerError::Evaluated(off)));
                }
                let value = (s.value.1.parse())
                    .map_err(|_| self.bad(query, AnswerError::NotNumber(s.value.1)))?;
                Ok(Sample {
                    labels: s.metric,
                    value,
                })
            })
            .collect()
    }

    /// Why a request failed (a timeout is the view's `--timeout`).
    fn why(&self, e: ureq::Error) -> Unreached {
        match e {
            ureq::Error::Timeout(_) => Unreached::Late(self.timeout),
            ureq::Error::Io(io) => Unreached::Io(io),
            e => Unreached::Request(e),
        }
    }

    /// The answer stopped arriving (a timeout, a lost connection) or
    /// went past [`MAX_ANSWER_BYTES`].
    fn read_failed(&self, query: &str, e: std::io::Error) -> FleetError {
        let inner = e.get_ref().and_then(|e| e.downcast_ref::<ureq::Error>());
        if e.get_ref().is_some_and(|e| e.is::<OverBudget>()) {
            return self.bad(query, AnswerError::TooLarge);
        }
        match inner {
            Some(ureq::Error::BodyExceedsLimit(_)) => self.bad(query, AnswerError::TooLarge),
            Some(ureq::Error::Timeout(_)) => self.unreachable(query, Unreached::Late(self.timeout)),
            _ => self.unreachable(query, Unreached::Io(e)),
        }
    }

    fn unreachable(&self, query: &str, reason: Unreached) -> FleetError {
        FleetError::Unreachable {
            url: self.base.clone(),
            query: query.to_string(),
            reason,
        }
    }

    fn bad(&self, query: &str, kind: AnswerError) -> FleetError {
        FleetError::Answer {
            url: self.base.clone(),
            query: query.to_string(),
            kind,
        }
    }
}

mod wire;
use wire::{Budgeted, Envelope, OverBudget};

#[cfg(test)]
mod tests;
