//! Which walk finds the holders: the /proc walk, or the in-kernel one
//! ([`crate::proc::bpf`]), chosen per collection from what it costs here.
//! Loading and verifying the BPF programs costs tens of milliseconds, more
//! than a whole /proc scan of a small host; each walk after that costs a
//! fraction of the /proc scan. So long-running commands (watch, serve,
//! wait) load once and walk on every refresh; one-shot commands load only
//! where the host has enough open files for the walk to repay the load
//! (the crossover was measured by `bench/scan.py --scaling`). Wherever the
//! in-kernel walk cannot run, or fails, the /proc walk runs: same answer,
//! and the reason is kept for `visibility`.

mod read_walks;

use super::{from_bpf, proc_is_ours, read_at, scan, Limits, ScanError, ScanResult};
use crate::model::{ScanMethod, ScanPick, ScanReason};
use crate::proc::bpf::{self, Programs, Unavailable};
use crate::proc::nodes::NodeSet;
use crate::proc::scan::jobs::Stuck;
use read_walks::{read_in_time, Walked};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The user's choice (`--scan`, `GPUFREE_SCAN`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ScanChoice {
    /// The cheaper one for this command on this host.
    #[default]
    Auto,
    /// Always the /proc walk.
    Procfs,
    /// The in-kernel walk wherever it can run.
    Bpf,
}

impl ScanChoice {
    /// Every choice, in the order `--help` lists them.
    pub const ALL: [ScanChoice; 3] = [ScanChoice::Auto, ScanChoice::Procfs, ScanChoice::Bpf];

    /// Its name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ScanChoice::Auto => "auto",
            ScanChoice::Procfs => "procfs",
            ScanChoice::Bpf => "bpf",
        }
    }

    /// The choice of this name (`--scan`, `GPUFREE_SCAN`).
    pub fn named(name: &str) -> Option<ScanChoice> {
        ScanChoice::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// Open files on the host (the kernel's count of allocated file handles,
/// `fs/file-nr`) from which a one-shot command loads the in-kernel walk
/// when it must relocate it (the first command of a boot: no cache):
/// there the walk saves more than the load costs. Measured on a 2-core
/// host (docs/guide/07-performance.md): a one-shot command with the
/// kernel walk costs about 55-66 ms before its first fd (the load); the
/// /proc walk about 1.4 µs of wall time per fd of a distinct file (0.8 µs
/// per dup()ed one), the kernel walk about 0.2 µs; so they cross near
/// 38,000 distinct files (56,000 dup()ed fds). dup()ed fds share one file
/// handle and are counted low: there auto keeps /proc a little too long.
pub const CROSSOVER_FILES: u64 = 40_000;

/// As [`CROSSOVER_FILES`], where this boot's relocation of the walk is
/// kept (every command after the first): the load costs about 10 ms more
/// than a /proc walk of a small host (14 ms against 4), which the kernel
/// walk repays near 8,000 distinct files.
pub const CROSSOVER_FILES_CACHED: u64 = 8_000;

/// What a collector knows of the in-kernel walk.
enum State {
    /// Not loaded yet.
    Untried,
    /// Loaded and verified: each walk costs only the walk.
    Loaded(Box<Programs>),
    /// Loaded, but the last walk was abandoned while its readers (this
    /// many still) were blocked: no new walk until they return.
    Busy(Box<Programs>, Arc<AtomicUsize>),
    /// It cannot run here; why (not tried again).
    Unavailable(Unavailable),
}

/// The walk chooser of one collector: the user's choice, whether the
/// command runs long, and the programs once loaded.
pub struct WalkChooser {
    choice: ScanChoice,
    long_lived: bool,
    hooks: bpf::TestHooks,
    /// Where this boot's relocation of the walk is kept (none: made anew
    /// on every load).
    cache: Option<PathBuf>,
    /// Where `gpufree prepare` keeps the walk loaded (a one-shot
    /// command's; none: load one).
    pins: Option<PathBuf>,
    state: Mutex<State>,
}

impl std::fmt::Debug for WalkChooser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalkChooser")
            .field("choice", &self.choice)
            .field("long_lived", &self.long_lived)
            .finish_non_exhaustive()
    }
}

impl WalkChooser {
    /// A chooser for `choice`; `long_lived`: the command collects again and
    /// again (the load is paid once).
    pub fn new(choice: ScanChoice, long_lived: bool, cache: Option<PathBuf>) -> WalkChooser {
        WalkChooser {
            choice,
            long_lived,
            hooks: bpf::TestHooks::from_env(),
            cache,
            pins: None,
            state: Mutex::new(State::Untried),
        }
    }
}

impl WalkChooser {
    /// The chooser, taking the walk `gpufree prepare` pinned in `pins`
    /// where it can: a one-shot command's only (one command at a time
    /// takes it; a long-running one loads its own).
    #[must_use]
    pub fn taking_pins(self, pins: Option<PathBuf>) -> WalkChooser {
        let pins = pins.filter(|_| !self.long_lived);
        WalkChooser { pins, ..self }
    }

    /// The programs loaded for `nodes`, or why they cannot be. A
    /// long-running command gives back what a parse of the kernel's BTF
    /// freed.
    fn load(&self, nodes: &NodeSet) -> State {
        let loaded = Programs::load(
            nodes,
            self.hooks,
            self.cache.as_deref(),
            self.pins.as_deref(),
        );
        let state = match loaded {
            Ok(p) => State::Loaded(Box::new(p)),
            Err(e) => State::Unavailable(e),
        };
        if self.long_lived {
            give_back_freed();
        }
        state
    }

    /// For a long-running command: loads the programs now, on the calling
    /// thread, where the command would use them. (The load's parse of the
    /// kernel's BTF allocates tens of MiB for a moment; made on a worker
    /// thread, its allocator keeps them for good: `watch` held 54 MiB
    /// instead of 13.)
    pub fn preload(&self, proc_fd: &OwnedFd, nodes: &NodeSet) {
        let wanted =
            self.choice == ScanChoice::Bpf || (self.choice == ScanChoice::Auto && self.long_lived);
        if !wanted || !proc_is_ours(proc_fd) {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*state, State::Untried) {
            *state = self.load(nodes);
        }
    }
}

/// Gives the allocator's free memory back to the system: glibc keeps what
/// the load's BTF parse freed (`watch` held 45 MiB instead of 13). Written
/// by hand: no maintained crate wraps malloc_trim.
#[cfg(target_env = "gnu")]
#[allow(unsafe_code)]
fn give_back_freed() {
    // SAFETY: malloc_trim takes no pointer; it only walks the allocator's
    // own free lists, under its own locks.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(target_env = "gnu"))]
fn give_back_freed() {}

/// The walk to use, with why.
#[derive(Debug, PartialEq, Eq)]
enum Pick {
    Bpf(ScanPick),
    Procfs(ScanPick),
}

/// What loading the in-kernel walk would take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// Nothing: it is loaded.
    Done,
    /// The verifier's check: this boot's relocation is kept.
    Kept,
    /// A relocation from the kernel's BTF too.
    Fresh,
}

/// The decision before any load.
fn pick(choice: ScanChoice, long_lived: bool, load: Load, open_files: Option<u64>) -> Pick {
    let crossover = if load == Load::Kept {
        CROSSOVER_FILES_CACHED
    } else {
        CROSSOVER_FILES
    };
    match choice {
        ScanChoice::Procfs => Pick::Procfs(ScanPick::ProcfsAsked),
        ScanChoice::Bpf => Pick::Bpf(ScanPick::BpfAsked),
        ScanChoice::Auto if long_lived => Pick::Bpf(ScanPick::LongLived),
        ScanChoice::Auto if load == Load::Done => Pick::Bpf(ScanPick::LoadedOnce),
        ScanChoice::Auto => match open_files {
            // Below both crossovers: whether the relocation is kept was not
            // looked at.
            Some(n) if n < CROSSOVER_FILES_CACHED => Pick::Procfs(ScanPick::FewFiles {
                open_files: n,
                crossover: CROSSOVER_FILES_CACHED,
            }),
            Some(n) if n >= crossover => Pick::Bpf(ScanPick::ManyFiles {
                open_files: n,
                crossover,
            }),
            Some(n) => Pick::Procfs(ScanPick::FewFiles {
                open_files: n,
                crossover,
            }),
            None => Pick::Procfs(ScanPick::FilesUnread),
        },
    }
}

/// The kernel's count of allocated file handles (`fs/file-nr`'s first
/// field), or the tests' ([`crate::test_hooks::open_files`]).
fn open_files(proc_fd: &OwnedFd) -> Option<u64> {
    if let Some(n) = crate::test_hooks::open_files() {
        return Some(n);
    }
    let bytes = read_at(proc_fd, "sys/fs/file-nr").ok()?;
    std::str::from_utf8(&bytes)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A finished scan and which walk made it, with why.
pub struct Scanned {
    /// The result.
    pub result: ScanResult,
    /// The walk that ran.
    pub method: ScanMethod,
    /// Why that one.
    pub reason: ScanReason,
}

impl WalkChooser {
    /// Scans with the walk this collection should use (see the module);
    /// the /proc walk wherever the in-kernel one cannot run, with why.
    pub fn scan(
        &self,
        proc_fd: &Arc<OwnedFd>,
        proc_root: &Path,
        nodes: &Arc<NodeSet>,
        limits: Limits,
        stuck: &Stuck,
    ) -> Result<Scanned, ScanError> {
        let fallback = |reason: ScanReason| {
            scan(proc_fd, proc_root, nodes, limits, stuck).map(|result| Scanned {
                result,
                method: ScanMethod::Procfs,
                reason,
            })
        };
        if self.choice == ScanChoice::Procfs {
            return fallback(ScanReason::Picked(ScanPick::ProcfsAsked));
        }
        if !proc_is_ours(proc_fd) {
            return fallback(ScanReason::ForeignProc {
                proc_root: proc_root.display().to_string(),
            });
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let loaded = matches!(*state, State::Loaded(_) | State::Busy(..));
        let open = open_files(proc_fd);
        let load = self.load_cost(loaded, open);
        let why = match pick(self.choice, self.long_lived, load, open) {
            Pick::Bpf(why) => why,
            Pick::Procfs(why) => return fallback(ScanReason::Picked(why)),
        };
        match self.walk(&mut state, proc_fd, nodes, limits, stuck) {
            Ok(result) => Ok(Scanned {
                result,
                method: ScanMethod::Bpf,
                reason: match &*state {
                    State::Loaded(p) | State::Busy(p, _) => ScanReason::Walked {
                        pick: why,
                        how: p.how(),
                        pin_not_taken: p.pin_not_taken().cloned(),
                    },
                    _ => ScanReason::Picked(why),
                },
            }),
            Err(e) => {
                drop(state);
                fallback(ScanReason::CouldNotRun(e))
            }
        }
    }

    /// What loading the walk would take (`loaded`: it is; `open`: the
    /// host's open files): only a one-shot command's choice between the
    /// two crossovers depends on whether the relocation is kept, so only
    /// there is the cache looked at.
    fn load_cost(&self, loaded: bool, open: Option<u64>) -> Load {
        let between = open.is_some_and(|n| (CROSSOVER_FILES_CACHED..CROSSOVER_FILES).contains(&n));
        match &self.cache {
            _ if loaded => Load::Done,
            Some(dir) if between && !self.long_lived && self.choice == ScanChoice::Auto => {
                if bpf::relocation_kept(dir) {
                    Load::Kept
                } else {
                    Load::Fresh
                }
            }
            _ => Load::Fresh,
        }
    }

    /// Loads the programs if need be, walks, and makes the records a
    /// result. A failure that would come again (the load, the clock,
    /// records it cannot read) is remembered, not retried on every refresh.
    fn walk(
        &self,
        state: &mut State,
        proc_fd: &Arc<OwnedFd>,
        nodes: &Arc<NodeSet>,
        limits: Limits,
        stuck: &Stuck,
    ) -> Result<ScanResult, Unavailable> {
        *state = match std::mem::replace(state, State::Untried) {
            State::Untried => self.load(nodes),
            State::Busy(p, readers) if readers.load(Ordering::Relaxed) == 0 => State::Loaded(p),
            other => other,
        };
        let programs = match state {
            State::Loaded(p) => p,
            State::Busy(..) => return Err(Unavailable::StillBlocked),
            State::Unavailable(e) => return Err(e.clone()),
            State::Untried => return Err(Unavailable::StillBlocked),
        };
        let clock = from_bpf::Clock::here(proc_fd);
        // Every process the walk sees alive started before this moment or
        // shares a tick with it (see from_bpf::pin_one).
        let began = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let began = u64::try_from(began.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(began.tv_nsec).unwrap_or(0);
        let files = programs.start()?;
        let records = match read_in_time(files, limits) {
            Walked::Done(bytes) => bpf::parse_all(&bytes),
            Walked::Abandoned(readers, why) => {
                if let State::Loaded(p) = std::mem::replace(state, State::Untried) {
                    *state = State::Busy(p, readers);
                }
                return Err(why);
            }
        };
        let result = match records {
            (_, true) => Err(Unavailable::BadRecords),
            (records, false) => {
                from_bpf::from_records(proc_fd, nodes, records, (clock, began), limits, stuck)
            }
        };
        if let Err(e @ (Unavailable::BadRecords | Unavailable::Calibration { .. })) = &result {
            *state = State::Unavailable(e.clone());
        }
        result
    }
}

#[cfg(test)]
mod tests;
