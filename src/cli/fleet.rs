//! `gpufree fleet`: the fleet view, read from Prometheus and printed; its
//! verdict is the exit code (as `check`'s: 0 free, 1 not free, 3 unknown).

use super::*;
use crate::fleet::{job_matcher, look, Source};
use crate::model::FleetVerdict;

/// `gpufree fleet`: one look at every node through Prometheus.
pub(super) fn run_fleet(s: &Settings, args: &FleetArgs, paint: &Paint) -> Result<Outcome, Error> {
    let source = Source {
        url: args.prometheus.clone(),
        selector: args
            .selector
            .clone()
            .unwrap_or_else(|| job_matcher(&args.job)),
        node_label: args.node_label.clone(),
        history: args.history,
        max_age: args.max_age,
        timeout: args.timeout,
        leftovers_only: args.leftovers,
    };
    let started = std::time::Instant::now();
    let fleet = look(&source).map_err(|e| match e {
        e if e.is_bad_selector() => Error::FleetSelector(e),
        e => Error::Fleet(e),
    })?;
    if s.common.verbose > 0 {
        eprintln!(
            "gpufree: {} queries to Prometheus in {:.1} ms",
            fleet.queries,
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    let mut out = Guard::new(std::io::stdout().lock(), paint.color);
    let written = if s.common.json {
        write_json(&mut out, &fleet)
    } else {
        crate::present::fleet::write_fleet(&mut out, &fleet, paint, s.common.quiet)
    };
    let outcome = match fleet.verdict() {
        FleetVerdict::Free => Outcome::Done,
        FleetVerdict::NotFree => Outcome::NotReached,
        FleetVerdict::Unknown => Outcome::Unknown,
    };
    shown(written.and_then(|()| out.flush()), outcome)
}
