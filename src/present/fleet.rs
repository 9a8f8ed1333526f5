//! `gpufree fleet` as text: the nodes whose GPUs are not free, most memory
//! held first, each with its GPUs, its holders and the command to run
//! there; then the nodes whose data is stale. Every name comes from a
//! label someone else chose and is escaped ([`crate::safe::fit`]); `--json`
//! writes the [`Fleet`] itself.

use super::Paint;
use crate::model::{Fleet, FleetHolder, FleetNode};
use crate::safe::fit;
use crate::units::{mib, span};
use std::io::{self, Write};

/// Widest label value (a node, a comm, an owner) in a line.
const NAME_MAX: usize = 64;

/// The fleet view as text (quiet: one line per node and per stale node).
pub fn write_fleet<W: Write>(w: &mut W, f: &Fleet, paint: &Paint, quiet: bool) -> io::Result<()> {
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
        writeln!(w, "{}", paint.bold(&head))?;
    }
    for n in &f.nodes {
        write_node(w, n, f, paint, quiet)?;
    }
    if !f.stale.is_empty() && !quiet {
        writeln!(w)?;
        writeln!(w, "{}", paint.warn("Stale (their GPUs may be anything):"))?;
    }
    for s in &f.stale {
        let age = s
            .age_seconds
            .map_or(String::new(), |a| format!(" ({} old)", span(a)));
        let lead = if quiet { "stale " } else { "  " };
        writeln!(
            w,
            "{lead}{}{age}: {}",
            fit(&s.node, NAME_MAX),
            fit(&s.why, 200)
        )?;
    }
    Ok(())
}

/// How long, as a line says it: `for 2h 13m`, `for over 6h 0m` where it
/// started before the history looked at.
fn held_for(seconds: Option<f64>, before_history: bool, history: u64) -> String {
    match seconds {
        Some(_) if before_history => format!("for over {}", span(history as f64)),
        Some(s) => format!("for {}", span(s)),
        None => String::new(),
    }
}

fn write_node<W: Write>(
    w: &mut W,
    n: &FleetNode,
    f: &Fleet,
    paint: &Paint,
    quiet: bool,
) -> io::Result<()> {
    let mut line = format!(
        "{}  {}  {} held",
        paint.bold(&fit(&n.node, NAME_MAX)),
        n.state,
        mib(n.held_bytes)
    );
    let long = held_for(n.held_seconds, n.held_before_history, f.history_seconds);
    if !long.is_empty() {
        line.push(' ');
        line.push_str(&long);
    }
    if n.leftover {
        line.push_str(&format!("  {}", paint.warn("leftover")));
    }
    if quiet {
        return writeln!(w, "{line}");
    }
    writeln!(w)?;
    writeln!(w, "{line}")?;
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
            fit(&g.state, 16)
        )?;
        for h in n.holders.iter().filter(|h| h.gpu == g.gpu) {
            writeln!(w, "    {}", holder(h, f.history_seconds))?;
        }
    }
    match &n.command {
        Some(c) => writeln!(w, "  next: {}", paint.bold(c)),
        None => writeln!(
            w,
            "  next: gpufree why --gpu {} on {} (its name is not a safe ssh host)",
            n.gpus
                .iter()
                .map(|g| g.gpu.to_string())
                .collect::<Vec<_>>()
                .join(" --gpu "),
            fit(&n.node, NAME_MAX)
        ),
    }
}

/// `PID 7  alice  python3  none  orphaned,renamed  100 MiB  for 10m 0s`.
fn holder(h: &FleetHolder, history: u64) -> String {
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
    let owner = if h.owner.is_empty() {
        fit(&h.owner_kind, NAME_MAX)
    } else {
        format!("{} {}", fit(&h.owner_kind, 16), fit(&h.owner, NAME_MAX))
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
    let long = held_for(h.held_seconds, h.held_before_history, history);
    if !long.is_empty() {
        line.push_str(&format!("  {long}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FleetGpu, StaleNode};

    fn fleet() -> Fleet {
        let holder = FleetHolder {
            gpu: 3,
            pid: 4242,
            user: "bob".into(),
            comm: "ev\x1b]0;pwned\x07il".into(),
            owner_kind: "none".into(),
            orphaned: true,
            bytes: 80 << 30,
            held_seconds: Some(7980.0),
            leftover: true,
            ..FleetHolder::default()
        };
        Fleet {
            prometheus: "http://prom:9090".into(),
            selector: "job=\"gpufree\"".into(),
            history_seconds: 21600,
            nodes_seen: 3,
            nodes_free: 2,
            nodes: vec![FleetNode {
                node: "gpu-7\u{202e}:9835".into(),
                host: "gpu-7\u{202e}".into(),
                state: "busy".into(),
                held_bytes: 80 << 30,
                held_seconds: Some(7980.0),
                leftover: true,
                gpus: vec![FleetGpu {
                    gpu: 3,
                    state: "busy".into(),
                    used_bytes: Some(80 << 30),
                    ..FleetGpu::default()
                }],
                holders: vec![holder],
                command: None,
                ..FleetNode::default()
            }],
            stale: vec![StaleNode {
                node: "gpu-9:9835".into(),
                age_seconds: Some(400.0),
                why: "its newest data is 6m 40s old, over --max-age 3m".into(),
            }],
            ..Fleet::default()
        }
    }

    #[test]
    fn a_node_its_holder_and_a_stale_node_print_escaped() {
        let mut out = Vec::new();
        write_fleet(&mut out, &fleet(), &Paint::default(), false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            !text.contains('\x1b') && !text.contains('\u{202e}'),
            "{text:?}"
        );
        for want in [
            "1 of 3 nodes have GPUs that are not free; 1 stale",
            "gpu-7\\u{202e}:9835  busy  81,920 MiB held for 2h 13m  leftover",
            "  GPU 3  busy  81,920 MiB used\n",
            "    PID 4242  bob  ev\\e]0;pwned\\ail  none  orphaned,leftover  81,920 MiB  for 2h 13m\n",
            "(its name is not a safe ssh host)",
            "  gpu-9:9835 (6m 40s old): its newest data is 6m 40s old",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        let mut out = Vec::new();
        write_fleet(&mut out, &fleet(), &Paint::default(), true).unwrap();
        let quiet = String::from_utf8(out).unwrap();
        assert_eq!(quiet.lines().count(), 2, "{quiet}");
    }
}
