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
    /// The server at `base` (`http://HOST:PORT`, or with a path prefix),
    /// asked within `timeout` in all; anything but an http or https URL
    /// is refused.
    pub fn new(base: &str, timeout: Duration) -> Result<Server, FleetError> {
        let url: Result<ureq::http::Uri, _> = base.parse();
        let scheme_ok = url
            .as_ref()
            .is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
        if !scheme_ok {
            return Err(FleetError::Url(base.to_string()));
        }
        if url
            .as_ref()
            .is_ok_and(|u| u.authority().is_some_and(|a| a.as_str().contains('@')))
        {
            return Err(FleetError::Credentials);
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .user_agent(concat!("gpufree/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(Server {
            base: base.trim_end_matches('/').to_string(),
            agent,
            timeout,
        })
    }

    /// The base URL as given (without a trailing slash).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// One instant query, answered before `deadline` or not at all.
    pub fn query(&self, query: &str, deadline: Instant) -> Result<Vec<Sample>, FleetError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.unreachable(query, self.late()));
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
            .map_err(|e| self.unreachable(query, self.why(&e)))?;
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
                return Err(self.bad(query, format!("HTTP status {status}")));
            }
            Err(e) => return Err(self.bad(query, format!("not Prometheus's JSON: {e}"))),
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
            .ok_or_else(|| self.bad(query, "a success without data".into()))?;
        if data.result_type != "vector" {
            let what = format!("a {} where a vector was asked for", data.result_type);
            return Err(self.bad(query, what));
        }
        data.result
            .into_iter()
            .map(|s| {
                let value = s.value.1.parse().map_err(|_| {
                    self.bad(query, format!("the value {:?} is no number", s.value.1))
                })?;
                Ok(Sample {
                    labels: s.metric,
                    value,
                })
            })
            .collect()
    }

    /// Why a request failed, in a few words (a timeout names the flag).
    fn why(&self, e: &ureq::Error) -> String {
        match e {
            ureq::Error::Timeout(_) => self.late(),
            ureq::Error::Io(io) => io.to_string(),
            e => e.to_string(),
        }
    }

    /// The answer stopped arriving (a timeout, a lost connection) or
    /// went past [`MAX_ANSWER_BYTES`].
    fn read_failed(&self, query: &str, e: std::io::Error) -> FleetError {
        let ureq_error = e.get_ref().and_then(|e| e.downcast_ref::<ureq::Error>());
        match ureq_error {
            Some(ureq::Error::BodyExceedsLimit(_)) => self.bad(
                query,
                format!("the answer is over {} MiB", MAX_ANSWER_BYTES >> 20),
            ),
            Some(e) => self.unreachable(query, self.why(e)),
            None => self.unreachable(query, e.to_string()),
        }
    }

    fn late(&self) -> String {
        let t = crate::units::seconds(self.timeout.as_secs_f64());
        format!("no answer within --timeout {t}")
    }

    fn unreachable(&self, query: &str, why: String) -> FleetError {
        FleetError::Unreachable {
            url: self.base.clone(),
            query: query.to_string(),
            why,
        }
    }

    fn bad(&self, query: &str, why: String) -> FleetError {
        FleetError::Answer {
            url: self.base.clone(),
            query: query.to_string(),
            why,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Server {
        Server::new("http://127.0.0.1:9090/", Duration::from_secs(1)).unwrap()
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
        assert!(matches!(e, FleetError::Answer { .. }), "{e}");
    }

    #[test]
    fn only_http_urls_are_taken() {
        for bad in [
            "",
            "127.0.0.1:9090",
            "ftp://x/",
            "http://",
            "file:///etc/passwd",
        ] {
            assert!(Server::new(bad, Duration::from_secs(1)).is_err(), "{bad}");
        }
        assert!(matches!(
            Server::new("https://user:secret@prom.example/", Duration::from_secs(1)),
            Err(FleetError::Credentials)
        ));
        let s = Server::new("https://prom.example/prometheus/", Duration::from_secs(1)).unwrap();
        assert_eq!(s.base(), "https://prom.example/prometheus");
    }
}
