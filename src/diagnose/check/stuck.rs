//! `check`'s `stuck`: holders in D, judged by what check's window of
//! samples saw (every sample in D, and where the kernel says they wait).

use super::{named, problem};
use crate::model::{
    Condition, Level, Problem, Process, Sampled, Snapshot, Stuck, Wait, Window, STUCK_WINDOW_MS,
};
use std::collections::BTreeMap;

/// Holders the snapshot saw in uninterruptible sleep (D), one problem per
/// level and reason ([`stuck_one`]): critical only for those in D across
/// the whole window in a GPU driver (or where the kernel does not say),
/// a warning for the others.
pub(super) fn stuck(s: &Snapshot, windows: &BTreeMap<u32, Window>) -> Vec<Problem> {
    let mut groups: Vec<(Level, Stuck, Vec<&Process>)> = Vec::new();
    for p in s.processes.iter().filter(|p| p.state == "D") {
        let (level, why) = stuck_one(windows.get(&p.pid));
        match groups.iter_mut().find(|g| g.0 == level && g.1 == why) {
            Some(g) => g.2.push(p),
            None => groups.push((level, why, vec![p])),
        }
    }
    groups
        .into_iter()
        .map(|(level, why, ps)| {
            let mut p = problem(Condition::Stuck, level, None);
            p.bytes = crate::model::saturating_sum(ps.iter().map(|p| p.memory_bytes()));
            p.processes = named(&ps);
            p.stuck = Some(why);
            p
        })
        .collect()
}

/// How stuck one holder seen in D is, from what its window saw, and why.
/// Critical only when every sample of a window of at least two samples
/// [`STUCK_WINDOW_MS`] apart or more found it in D, and none waiting
/// elsewhere than a GPU driver (where the kernel says nothing, D across
/// the window decides alone). Anything less is a warning: a vfork
/// parent, an NFS, Lustre or FUSE read, a process that left D or exited
/// within the window, one never sampled again.
pub(crate) fn stuck_one(window: Option<&Window>) -> (Level, Stuck) {
    let samples = window.map_or(&[][..], |w| &w.samples[..]);
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return (Level::Warning, Stuck::NotSampled);
    };
    let n = samples.len();
    let span_ms = last.at_ms.saturating_sub(first.at_ms);
    let waits: Vec<&Wait> = samples
        .iter()
        .filter_map(|s| match &s.seen {
            Sampled::State { state: 'D', wait } => Some(wait),
            _ => None,
        })
        .collect();
    if waits.len() < n || n < 2 || span_ms < STUCK_WINDOW_MS {
        let why = Stuck::Partly {
            in_d: waits.len(),
            samples: n,
            span_ms,
            exited: samples.iter().any(|s| s.seen == Sampled::Gone),
            unread: samples.iter().filter(|s| s.seen == Sampled::Unread).count(),
        };
        return (Level::Warning, why);
    }
    if let Some(Wait::Elsewhere { symbol, module }) =
        waits.iter().find(|w| matches!(w, Wait::Elsewhere { .. }))
    {
        let why = Stuck::Elsewhere {
            symbol: symbol.clone(),
            module: module.clone(),
        };
        return (Level::Warning, why);
    }
    match waits.iter().find(|w| matches!(w, Wait::Driver { .. })) {
        Some(Wait::Driver { symbol, module }) => (
            Level::Critical,
            Stuck::Driver {
                span_ms,
                symbol: symbol.clone(),
                module: module.clone(),
            },
        ),
        _ => (Level::Critical, Stuck::Unsaid { span_ms }),
    }
}
