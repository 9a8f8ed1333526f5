//! `gpufree fleet`: the fleet view, read from Prometheus and printed; its
//! verdict is the exit code (as `check`'s: 0 free, 1 not free, 3 unknown).
//! Its flags are checked here, before anything is asked: a bad
//! `--prometheus` or `--node-label` is the command line's error (exit 2).

use super::{shown, verdict_outcome, Error, FleetArgs, Outcome, Settings};
use crate::fleet::{job_matcher, look, Source};
use crate::present::notice::write_queried;
use crate::present::Printer;
use std::io::Write;

/// `gpufree fleet`: one look at every node through Prometheus.
pub(super) fn run_fleet(
    s: &Settings,
    args: &FleetArgs,
    printer: &Printer,
) -> Result<Outcome, Error> {
    let source = source(args)?;
    let started = std::time::Instant::now();
    let fleet = look(&source).map_err(|e| match e {
        e if e.is_bad_selector() => Error::FleetSelector(e),
        e => Error::Fleet(e),
    })?;
    if s.common.verbose > 0 {
        let millis = started.elapsed().as_secs_f64() * 1000.0;
        let _ = write_queried(&mut std::io::stderr(), fleet.queries, millis);
    }
    let mut out = printer.guard(std::io::stdout().lock());
    let written = crate::present::fleet::write_fleet_command(&mut out, &fleet, printer);
    shown(
        written.and_then(|()| out.flush()),
        verdict_outcome(fleet.verdict()),
    )
}

/// The flags as a [`Source`], once the URL and the label are ones
/// Prometheus could take.
fn source(args: &FleetArgs) -> Result<Source, Error> {
    check_url(&args.prometheus)?;
    if !is_label_name(&args.node_label) {
        return Err(Error::FleetLabel(args.node_label.clone()));
    }
    Ok(Source {
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
    })
}

/// `--prometheus`: an http or https URL with a host and no user or
/// password (a command line is every local user's to read, and every
/// error would print it).
fn check_url(url: &str) -> Result<(), Error> {
    let Ok(uri) = url.parse::<ureq::http::Uri>() else {
        return Err(Error::FleetUrl(url.to_string()));
    };
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(Error::FleetCredentials);
    }
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(Error::FleetUrl(url.to_string()));
    }
    Ok(())
}

/// Whether `s` is a Prometheus label name.
fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_without_credentials_are_taken() {
        for bad in [
            "",
            "127.0.0.1:9090",
            "ftp://x/",
            "http://",
            "file:///etc/passwd",
        ] {
            assert!(matches!(check_url(bad), Err(Error::FleetUrl(_))), "{bad}");
        }
        let e = check_url("https://user:secret@prom.example/").unwrap_err();
        assert!(matches!(e, Error::FleetCredentials));
        assert!(!e.to_string().contains("secret"), "{e}");
        assert!(check_url("https://prom.example/prometheus/").is_ok());
        assert!(is_label_name("_node1") && !is_label_name("no-de") && !is_label_name("1a"));
    }
}
