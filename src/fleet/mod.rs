//! The fleet view's source: every node's gpufree series, read from
//! Prometheus's HTTP API in a fixed handful of instant queries, whatever
//! the fleet's size (`queries.rs`; `api.rs`: one query, bounded in time
//! and size), and joined into a [`Fleet`] (`join.rs`). Nothing here
//! prints: `present::fleet` writes the view, `cli` turns its verdict into
//! the exit code.

mod api;
mod join;
mod queries;

pub use api::{
    AnswerError, Labels, Sample, Server, Unreached, MAX_ANSWER_BYTES, MAX_LABELS, MAX_SERIES,
};
pub use queries::{steps, PerQuery, Queries};

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

/// Why the view could not be made; each names the URL and the query at
/// fault. (A bad `--prometheus` or `--node-label` is the command line's
/// error: `cli` refuses it before any of this runs.)
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// No answer: refused, unresolvable, timed out.
    #[error("--prometheus {url}: unreachable ({reason}) asking {query}")]
    Unreachable {
        /// The server.
        url: String,
        /// The query asked.
        query: String,
        /// Why.
        reason: Unreached,
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
    #[error("--prometheus {url}: the answer to {query} is unusable: {kind}")]
    Answer {
        /// The server.
        url: String,
        /// The query.
        query: String,
        /// What is wrong with it.
        kind: AnswerError,
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

/// The fleet as Prometheus sees it now: the queries sent at once, each
/// within what is left of `source.timeout`, then joined.
pub fn look(source: &Source) -> Result<Fleet, FleetError> {
    let server = Server::new(&source.url, source.timeout, source.max_age);
    let deadline = Instant::now() + source.timeout;
    let server = &server;
    let answers = std::thread::scope(|scope| {
        let running = Queries::new(source).map(|q| scope.spawn(move || server.query(&q, deadline)));
        running.map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    });
    let read = answers.transpose()?;
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
