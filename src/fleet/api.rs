//! Prometheus's HTTP API: one instant query (`GET /api/v1/query`) with a
//! deadline and a bound on the answer's size, its envelope parsed into
//! typed samples (no `serde_json::Value` tree: a large fleet's answer is
//! parsed once, into what the view keeps).

use super::FleetError;
use serde::Deserialize;
use std::time::{Duration, Instant};

/// The largest answer read from one query, in bytes: a 1,000-node fleet's
/// largest (every holder of 8,000 GPUs) is a few MiB.
pub const MAX_ANSWER_BYTES: u64 = 64 << 20;

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
    /// Over [`MAX_ANSWER_BYTES`].
    #[error("the answer is over {} MiB", MAX_ANSWER_BYTES >> 20)]
    TooLarge,
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

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
        struct Pairs;
        impl<'de> serde::de::Visitor<'de> for Pairs {
            type Value = Labels;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of label names to values")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut m: M) -> Result<Labels, M::Error> {
                let mut pairs = Vec::with_capacity(m.size_hint().unwrap_or(4));
                while let Some(pair) = m.next_entry::<Box<str>, Box<str>>()? {
                    pairs.push(pair);
                }
                pairs.shrink_to_fit();
                Ok(Labels(pairs))
            }
        }
        d.deserialize_map(Pairs)
    }
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Series>,
}

#[derive(Deserialize)]
struct Series {
    metric: Labels,
    value: (f64, String),
}

/// A Prometheus server: its base URL and the client that asks it.
pub struct Server {
    base: String,
    agent: ureq::Agent,
    /// The whole view's `--timeout`, as errors name it.
    timeout: Duration,
}

impl Server {
    /// The server at `base` (`http://HOST:PORT`, or with a path prefix:
    /// `cli` has checked it), asked within `timeout` in all.
    pub fn new(base: &str, timeout: Duration) -> Server {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .user_agent(concat!("gpufree/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Server {
            base: base.trim_end_matches('/').to_string(),
            agent,
            timeout,
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
            // Prometheus stops the query itself at the deadline too.
            .query("timeout", format!("{}ms", left.as_millis().max(1)))
            .config()
            .timeout_global(Some(left))
            .build()
            .call()
            .map_err(|e| self.unreachable(query, self.why(e)))?;
        let status = res.status().as_u16();
        // Parsed as it arrives: no copy of the whole answer is kept.
        let body = res
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .reader();
        self.parse(
            query,
            status,
            std::io::BufReader::with_capacity(1 << 16, body),
        )
    }

    /// The samples of one answer, or the error it carries.
    fn parse(
        &self,
        query: &str,
        status: u16,
        body: impl std::io::Read,
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
        let data = env
            .data
            .ok_or_else(|| self.bad(query, AnswerError::NoData))?;
        if data.result_type != "vector" {
            return Err(self.bad(query, AnswerError::NotVector(data.result_type)));
        }
        data.result
            .into_iter()
            .map(|s| {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Server {
        Server::new("http://127.0.0.1:9090/", Duration::from_secs(1))
    }

    #[test]
    fn a_vector_parses_into_samples() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"instance":"a:1","gpu":"3"},"value":[1700000000.5,"42"]},
            {"metric":{},"value":[1700000000.5,"NaN"]}]}}"#;
        let s = server().parse("q", 200, &body[..]).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].label("gpu"), "3");
        assert_eq!(s[0].label("missing"), "");
        assert!((s[0].value - 42.0).abs() < f64::EPSILON);
        assert!(s[1].value.is_nan());
    }

    #[test]
    fn an_error_names_the_query_and_prometheus_words() {
        let body = br#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#;
        let e = server().parse("up{", 400, &body[..]).unwrap_err();
        assert!(matches!(e, FleetError::Query { ref kind, .. } if kind == "bad_data"));
        assert!(e.to_string().contains("parse error at char 5"), "{e}");
        let e = server()
            .parse("up", 502, &b"<html>bad gateway"[..])
            .unwrap_err();
        assert!(e.to_string().contains("HTTP status 502"), "{e}");
        let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}"#;
        let e = server().parse("time()", 200, &scalar[..]).unwrap_err();
        let not_json = |e: &FleetError| {
            matches!(
                e,
                FleetError::Answer {
                    kind: AnswerError::NotJson(_),
                    ..
                }
            )
        };
        assert!(not_json(&e), "{e}");
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        let e = server().parse("up[1m]", 200, &matrix[..]).unwrap_err();
        assert!(
            matches!(e, FleetError::Answer { kind: AnswerError::NotVector(ref t), .. } if t == "matrix"),
            "{e}"
        );
        let text = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{},"value":[1,"many"]}]}}"#;
        let e = server().parse("up", 200, &text[..]).unwrap_err();
        assert!(
            e.to_string().ends_with(r#"the value "many" is no number"#),
            "{e}"
        );
    }

    #[test]
    fn a_trailing_slash_is_not_kept() {
        let s = Server::new("https://prom.example/prometheus/", Duration::from_secs(1));
        assert_eq!(s.base(), "https://prom.example/prometheus");
    }
}
