//! The fleet view's source: every node's gpufree series, read from
//! Prometheus's HTTP API in a fixed handful of instant queries, whatever
//! the fleet's size (`queries.rs`; `api.rs`: one query, bounded in time
//! and size), and joined into a [`Fleet`] (`join.rs`). Nothing here
//! prints: `present::fleet` writes the view, `cli` turns its verdict into
//! the exit code.

mod api;
mod join;
mod queries;

pub use api::{Labels, Sample, Server, MAX_ANSWER_BYTES};
pub use queries::{steps, Queries};

use crate::model::Fleet;
use std::time::{Duration, Instant};

/// What to ask and how long to wait: plain values from the command line.
#[derive(Debug, Clone)]
pub struct Source {
    /// Prometheus's base URL.
    pub url: String,
    /// The label matchers that pick gpufree's targets, without braces
    /// (`job="gpufree"`).
    pub selector: String,
    /// The label that names a node.
    pub node_label: String,
    /// How far back a holder's time held is looked for.
    pub history: Duration,
    /// A node's data older than this is stale.
    pub max_age: Duration,
    /// The whole view's deadline, every request included.
    pub timeout: Duration,
    /// List only nodes with a leftover holder (or an unknown verdict).
    pub leftovers_only: bool,
}

/// Why the view could not be made; each names the URL (or the flag) and
/// the query at fault.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// `--prometheus` is not an http(s) URL.
    #[error("--prometheus {0}: not an http:// or https:// URL of a Prometheus server")]
    Url(String),
    /// `--prometheus` carries a user or password: every local user reads
    /// a command line, and every error would print it.
    #[error("--prometheus: a URL with a user or password is refused (every local user can read a command line, and errors print the URL); reach an authenticated Prometheus through a local proxy")]
    Credentials,
    /// `--node-label` is not a label name.
    #[error("--node-label {0:?}: not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")]
    Label(String),
    /// No answer: refused, unresolvable, timed out.
    #[error("--prometheus {url}: unreachable ({why}) asking {query}")]
    Unreachable {
        /// The server.
        url: String,
        /// The query asked.
        query: String,
        /// Why.
        why: String,
    },
    /// Prometheus answered the query with an error.
    #[error("--prometheus {url}: the query {query} failed: {kind}: {why}")]
    Query {
        /// The server.
        url: String,
        /// The query.
        query: String,
        /// Prometheus's `errorType` (`bad_data` for a query that does not
        /// parse, e.g. from a bad `--selector`).
        kind: String,
        /// Prometheus's `error`.
        why: String,
    },
    /// The answer is not Prometheus's (another server, a proxy's page),
    /// or too large.
    #[error("--prometheus {url}: the answer to {query} is unusable: {why}")]
    Answer {
        /// The server.
        url: String,
        /// The query.
        query: String,
        /// Why.
        why: String,
    },
    /// No node at all: nothing to judge is not "free".
    #[error("--prometheus {url}: no gpufree series and no target match {{{selector}}}")]
    NoNodes {
        /// The server.
        url: String,
        /// The selector.
        selector: String,
    },
}

impl FleetError {
    /// A query Prometheus could not parse: made of the user's
    /// `--selector` or `--job` (the rest is gpufree's own).
    pub fn is_bad_selector(&self) -> bool {
        matches!(self, FleetError::Query { kind, .. } if kind == "bad_data")
    }
}

/// `job="NAME"` with NAME written as a PromQL string.
pub fn job_matcher(job: &str) -> String {
    let mut s = String::from("job=\"");
    for c in job.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// Whether `s` is a Prometheus label name.
fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The fleet as Prometheus sees it now: the queries sent at once, each
/// within what is left of `source.timeout`, then joined.
pub fn look(source: &Source) -> Result<Fleet, FleetError> {
    if !is_label_name(&source.node_label) {
        return Err(FleetError::Label(source.node_label.clone()));
    }
    let server = Server::new(&source.url, source.timeout)?;
    let deadline = Instant::now() + source.timeout;
    let q = Queries::new(source);
    let asked = q.all();
    let answers: Vec<Result<Vec<Sample>, FleetError>> = std::thread::scope(|scope| {
        let running: Vec<_> = asked
            .iter()
            .map(|query| scope.spawn(|| server.query(query, deadline)))
            .collect();
        running
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let answers = answers.into_iter().collect::<Result<Vec<_>, _>>()?;
    let mut answers = answers.into_iter();
    let mut next = || answers.next().unwrap_or_default();
    let read = join::Answers {
        up: next(),
        age: next(),
        snapshot_age: next(),
        not_free: next(),
        used: next(),
        unaccounted: next(),
        holders: next(),
        held: next(),
    };
    let fleet = join::join(source, server.base(), read);
    if fleet.nodes_seen == 0 && fleet.stale.is_empty() {
        return Err(FleetError::NoNodes {
            url: server.base().to_string(),
            selector: source.selector.clone(),
        });
    }
    Ok(fleet)
}

#[cfg(test)]
mod tests;
