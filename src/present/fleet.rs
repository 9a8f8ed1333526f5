//! `gpufree fleet` as text: the nodes whose GPUs are not free, most memory
//! held first, each with its GPUs, its holders and the command to run
//! there; then the nodes whose data is stale. Every name comes from a
//! label someone else chose and is escaped ([`crate::safe::fit`]); `--json`
//! writes the [`Fleet`] itself.

use super::next::{fleet_by_hand, fleet_command};
use super::Printer;
use crate::model::look_back_steps;
use crate::model::{Fleet, FleetHolder, FleetNode, StaleNode, StaleReason};
use crate::safe::fit;
use crate::units::{mib, span};
use std::collections::BTreeMap;
use std::io::{self, Write};

/// Widest label value (a node, a comm, an owner) in a line.
const NAME_MAX: usize = 64;

/// The fleet view as text (quiet: one line per node and per stale node).
pub fn write_fleet<W: Write>(w: &mut W, f: &Fleet, printer: &Printer) -> io::Result<()> {
    let quiet = printer.quiet();
    let seen = f.nodes_seen;
    let asked = format!(
        "Prometheus {}, {{{}}}",
        fit(&f.prometheus, NAME_MAX),
        fit(&f.selector, NAME_MAX)
    );
    let listed = f.nodes.len();
    let head = if listed == 0 && f.stale.is_empty() && f.leftovers_only {
        let free = f.nodes_free;
        format!("None of {seen} nodes has leftovers; {free} have every GPU free ({asked}).")
    } else if listed == 0 && f.stale.is_empty() {
        format!("All {seen} nodes' GPUs are free ({asked}).")
    } else {
        let what = if f.leftovers_only {
            "have leftovers (or GPUs whose verdict is unknown)"
        } else {
            "have GPUs that are not free"
        };
        format!(
            "{listed} of {seen} nodes {what}; {} stale ({asked}).",
            f.stale.len()
        )
    };
    if !quiet {
        writeln!(w, "{}", printer.bold(&head))?;
    }
    let fine = look_back_steps(f.history_seconds).1;
    for n in &f.nodes {
        write_node(w, n, printer, fine)?;
    }
    if !f.stale.is_empty() && !quiet {
        writeln!(w)?;
        writeln!(w, "{}", printer.warn("Stale (their GPUs may be anything):"))?;
    }
    for s in &f.stale {
        let age = (s.age_seconds.filter(|a| a.is_finite() && *a >= 0.0))
            .map_or(String::new(), |a| format!(" ({} old)", span(a)));
        let lead = if quiet { "stale " } else { "  " };
        writeln!(
            w,
            "{lead}{}{age}: {}",
            fit(&s.node, NAME_MAX),
            stale_why(s, f.max_age_seconds)
        )?;
    }
    Ok(())
}

/// `gpufree fleet` as it prints: the [`Fleet`]'s JSON document, or its
/// text.
pub fn write_fleet_command<W: Write>(w: &mut W, f: &Fleet, printer: &Printer) -> io::Result<()> {
    if printer.json() {
        return super::write_json(w, &super::json::FleetDoc::new(f));
    }
    write_fleet(w, f, printer)
}

/// Why a node is stale, in words (`max_age` is `--max-age`, in seconds).
pub fn stale_why(s: &StaleNode, max_age: u64) -> String {
    match s.reason {
        StaleReason::Down => "its target is down (up is 0)".into(),
        StaleReason::NoSeries => "its target is up but exports no gpufree_nvml_up".into(),
        StaleReason::Old => match s.age_seconds.filter(|a| a.is_finite()) {
            Some(a) => format!(
                "its newest data is {} old, over --max-age {}",
                span(a),
                span(max_age as f64)
            ),
            None => "its newest data's age is not a number".into(),
        },
        StaleReason::Future => match s.age_seconds.filter(|a| a.is_finite()) {
            Some(a) => format!(
                "its newest data is {} in the future (a clock ahead of Prometheus's)",
                span(-a)
            ),
            None => "its newest data is from the future (a clock ahead of Prometheus's)".into(),
        },
        StaleReason::BadLabel => {
            "a series of it names a GPU or a PID by a label that is not a plain integer".into()
        }
    }
}

/// How long, as a line says it: `for 2h 13m`; `for over 5h 52m` where it
/// held already when the history looked at began (its first sample there
/// is that old: it has held at least that long); `for under 3m 40s` where
/// the first sample seen is younger than the look back's finest step,
/// `fine` seconds: it held for at most a step more than that (a number
/// of seconds alone would claim a precision the look back has not).
fn held_for(seconds: Option<f64>, before_history: bool, fine: u64) -> String {
    match seconds {
        Some(s) if before_history => format!("for over {}", span(s)),
        Some(s) if s < fine as f64 => format!("for under {}", span(s + fine as f64)),
        Some(s) => format!("for {}", span(s)),
        None => String::new(),
    }
}

fn write_node<W: Write>(w: &mut W, n: &FleetNode, printer: &Printer, fine: u64) -> io::Result<()> {
    let mut line = format!(
        "{}  {}  {} held",
        printer.bold(&fit(&n.node, NAME_MAX)),
        n.state.as_str(),
        mib(n.held_bytes)
    );
    let long = held_for(n.held_seconds, n.held_before_history, fine);
    if !long.is_empty() {
        line.push(' ');
        line.push_str(&long);
    }
    if n.leftover {
        line.push_str(&format!("  {}", printer.warn("leftover")));
    }
    if printer.quiet() {
        return writeln!(w, "{line}");
    }
    writeln!(w)?;
    writeln!(w, "{line}")?;
    // Grouped once: never a scan of the holders per GPU.
    let mut on_gpu: BTreeMap<u32, Vec<&FleetHolder>> = BTreeMap::new();
    for h in &n.holders {
        on_gpu.entry(h.gpu).or_default().push(h);
    }
    for g in &n.gpus {
        let used = g
            .used_bytes
            .map_or("memory unknown".into(), |b| format!("{} used", mib(b)));
        let unaccounted = match g.unaccounted_bytes {
            Some(b) if b > 0 => format!(", {} unaccounted", mib(b)),
            _ => String::new(),
        };
        writeln!(
            w,
            "  GPU {}  {}  {used}{unaccounted}",
            g.gpu,
            g.state.as_str()
        )?;
        for h in on_gpu.get(&g.gpu).into_iter().flatten() {
            writeln!(w, "    {}", holder(h, fine))?;
        }
    }
    match fleet_command(n) {
        Some(c) => writeln!(w, "  next: {}", printer.bold(&c)),
        None => writeln!(w, "  next: {}", fleet_by_hand(n, NAME_MAX)),
    }
}

/// `PID 7  alice  python3  none  orphaned,renamed  100 MiB  for 10m 0s`.
fn holder(h: &FleetHolder, fine: u64) -> String {
    let mut flags = Vec::new();
    if h.orphaned {
        flags.push("orphaned");
    }
    if h.renamed {
        flags.push("renamed");
    }
    if h.leftover {
        flags.push("leftover");
    }
    let kind = h.owner_kind.as_str();
    let owner = if h.owner.is_empty() {
        kind.to_string()
    } else {
        format!("{kind} {}", fit(&h.owner, NAME_MAX))
    };
    let mut line = format!(
        "PID {}  {}  {}  {owner}",
        h.pid,
        fit(&h.user, 32),
        fit(&h.comm, 32)
    );
    if !flags.is_empty() {
        line.push_str(&format!("  {}", flags.join(",")));
    }
    line.push_str(&format!("  {}", mib(h.bytes)));
    let long = held_for(h.held_seconds, h.held_before_history, fine);
    if !long.is_empty() {
        line.push_str(&format!("  {long}"));
    }
    line
}
