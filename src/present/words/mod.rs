//! The words of a finding: its message, its evidence one line each, and
//! its next command, made from the finding's typed evidence. `why`, the
//! status table, the kill plan, watch and the JSON documents all read a
//! finding through [`words`].

use super::next::next_line;
use crate::model::{Evidence, Finding};

pub mod bundle;
pub mod check;
pub mod demo;
pub mod doctor;
mod fault;
pub mod from;
pub mod front;
mod holders;
mod idle;
mod k8s;
mod mps;
pub mod nvml;
pub mod prepare;
pub mod proc;
mod renamed;
mod roles;
pub mod scan;
pub mod selector;
pub mod target;
pub mod unavailable;
mod unseen;
pub mod verdict;
pub mod watch;

pub use fault::{xid_action, xid_report};
pub use holders::restarter;
pub use roles::role;

/// GPU indexes as `0-7` or `0, 2, 5`.
pub fn gpu_list(gpus: &[u32]) -> String {
    let mut g = gpus.to_vec();
    g.sort_unstable();
    g.dedup();
    if g.len() > 2 && g.windows(2).all(|w| w[1] == w[0] + 1) {
        return format!("{}-{}", g[0], g[g.len() - 1]);
    }
    g.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// A finding in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Words {
    /// One or two sentences for a person.
    pub message: String,
    /// The exact next command (empty for none).
    pub next: String,
    /// Evidence, one line each (processes, states, commands).
    pub details: Vec<String>,
}

/// At most this many detail lines, then `... and N more`.
const MAX_DETAILS: usize = 12;

/// The words of finding `f`.
pub fn words(f: &Finding) -> Words {
    let (message, mut details) = said(f);
    if details.len() > MAX_DETAILS {
        let more = details.len() - MAX_DETAILS;
        details.truncate(MAX_DETAILS);
        details.push(format!("... and {more} more"));
    }
    Words {
        message,
        next: next_line(&f.next),
        details,
    }
}

/// The message and the detail lines of `f`.
fn said(f: &Finding) -> (String, Vec<String>) {
    match &f.evidence {
        Evidence::Group(g) => holders::group(f, g),
        Evidence::Orphans(orphans) => holders::orphans(orphans),
        Evidence::Renamed { how, holders } => renamed::renamed(*how, holders),
        Evidence::Pattern(h) => holders::pattern(h),
        Evidence::DeviceHolders {
            with_memory_holders,
            holders,
        } => holders::device_holders(*with_memory_holders, holders),
        Evidence::Zombie {
            who,
            parent,
            threads,
            listed,
        } => holders::zombie(who, *parent, *threads, *listed),
        Evidence::Uninterruptible { who, wchan } => holders::blocked(who, wchan.as_deref(), false),
        Evidence::Stopped { who, wchan } => holders::blocked(who, wchan.as_deref(), true),
        Evidence::Protected(list) => holders::protected(list),
        Evidence::PartialView { verdict, unseen } => {
            let as_root = f.next == crate::model::Next::AsRoot;
            (unseen::partial_view(*verdict, unseen, as_root), Vec::new())
        }
        Evidence::OutsideNamespace | Evidence::StaleNvmlPid => {
            (unseen::listed_elsewhere(f), Vec::new())
        }
        Evidence::Unaccounted { gpu, cause } => unseen::unaccounted(*gpu, f.bytes, cause),
        Evidence::Mps(m) => mps::mps(m),
        Evidence::Allocation(a) => k8s::allocation(a, &f.gpus, f.bytes),
        Evidence::Free(caveats) => (unseen::free(&f.gpus, caveats), Vec::new()),
        Evidence::DriverFault(d) => fault::driver_fault(d),
        Evidence::AppFault(a) => fault::app_fault(a),
        Evidence::Heard(h) => fault::heard(h),
        Evidence::Idle(i) => idle::idle(i, &f.gpus, f.bytes),
        Evidence::IdleUnknown(u) => idle::unknown(u),
    }
}
