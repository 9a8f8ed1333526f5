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

use super::*;
use crate::model::ScanMethod;
use crate::proc::bpf::{self, Programs, Unavailable};

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

impl std::str::FromStr for ScanChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(ScanChoice::Auto),
            "procfs" => Ok(ScanChoice::Procfs),
            "bpf" => Ok(ScanChoice::Bpf),
            _ => Err(format!("'{s}' is not one of auto, procfs, bpf")),
        }
    }
}

/// Open files on the host (the kernel's count of allocated file handles,
/// `fs/file-nr`) from which a one-shot command loads the in-kernel walk:
/// there the walk saves more than the load costs (bench/scan.py --scaling
/// on a 2-core host: see README's performance section).
pub const CROSSOVER_FILES: u64 = 40_000;

/// What a collector knows of the in-kernel walk.
enum State {
    /// Not loaded yet.
    Untried,
    /// Loaded and verified: each walk costs only the walk.
    Loaded(Box<Programs>),
    /// It cannot run here; why.
    Unavailable(Unavailable),
    /// A walk did not finish in time; how many of its readers are still
    /// blocked.
    Stuck(Arc<AtomicUsize>),
}

/// The walk chooser of one collector: the user's choice, whether the
/// command runs long, and the programs once loaded.
pub struct Methods {
    choice: ScanChoice,
    long_lived: bool,
    break_verifier: bool,
    state: Mutex<State>,
}

impl std::fmt::Debug for Methods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Methods")
            .field("choice", &self.choice)
            .field("long_lived", &self.long_lived)
            .finish_non_exhaustive()
    }
}

/// The test-only variable that makes the kernel's verifier refuse the
/// programs (the fallback is tested with a real refusal).
pub const BREAK_VERIFIER_ENV: &str = "GPUFREE_TEST_BPF_BREAK_VERIFIER";

/// The test-only variable that holds each walk's reader this many
/// milliseconds before it reads, as a task whose memory map lock is stuck
/// would (the timeout and its fallback are tested without such a task).
pub const SLOW_WALK_ENV: &str = "GPUFREE_TEST_BPF_SLOW_WALK_MS";

fn slow_walk() -> Option<Duration> {
    static SLOW: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    *SLOW.get_or_init(|| {
        let ms = std::env::var(SLOW_WALK_ENV).ok()?.parse().ok()?;
        Some(Duration::from_millis(ms))
    })
}

impl Methods {
    /// A chooser for `choice`; `long_lived`: the command collects again and
    /// again (the load is paid once).
    pub fn new(choice: ScanChoice, long_lived: bool) -> Methods {
        Methods {
            choice,
            long_lived,
            break_verifier: std::env::var_os(BREAK_VERIFIER_ENV).is_some_and(|v| v == "1"),
            state: Mutex::new(State::Untried),
        }
    }
}

/// The decision before any load: Ok(why the in-kernel walk) or Err(why
/// the /proc walk).
fn decide(
    choice: ScanChoice,
    long_lived: bool,
    loaded: bool,
    open_files: Option<u64>,
) -> Result<String, String> {
    match choice {
        ScanChoice::Procfs => Err("--scan procfs".into()),
        ScanChoice::Bpf => Ok("--scan bpf".into()),
        ScanChoice::Auto if loaded => Ok("loaded once for this command".into()),
        ScanChoice::Auto if long_lived => {
            Ok("a long-running command: loaded once, walked on every refresh".into())
        }
        ScanChoice::Auto => match open_files {
            Some(n) if n >= CROSSOVER_FILES => Ok(format!(
                "{n} open files on the host (from {CROSSOVER_FILES} the walk repays its load)"
            )),
            Some(n) => Err(format!(
                "{n} open files on the host: below {CROSSOVER_FILES}, loading the in-kernel walk costs more than it saves"
            )),
            None => Err("the host's count of open files (sys/fs/file-nr) could not be read".into()),
        },
    }
}

/// The kernel's count of allocated file handles (`fs/file-nr`'s first field).
fn open_files(proc_fd: &OwnedFd) -> Option<u64> {
    let bytes = read_at(proc_fd, "sys/fs/file-nr").ok()?;
    std::str::from_utf8(&bytes)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether the proc root is this process's own namespace's (its `self` is
/// this process): the in-kernel walk numbers processes as this namespace
/// does, so it can stand in only for such a /proc.
fn proc_is_ours(proc_fd: &OwnedFd) -> bool {
    rustix::fs::readlinkat(proc_fd, "self", Vec::new())
        .ok()
        .and_then(|l| l.to_str().ok()?.parse::<u32>().ok())
        == Some(std::process::id())
}

/// Whether this process runs in a nested PID namespace (its status lists
/// more than one PID): the kernel's walk then sees that namespace only.
fn nested(proc_fd: &OwnedFd) -> bool {
    read_at(proc_fd, "self/status")
        .ok()
        .and_then(|b| parse::parse_status(&b).ok())
        .is_some_and(|s| s.nspid.len() > 1)
}

/// A finished scan and which walk made it, with why.
pub struct Scanned {
    /// The result.
    pub result: ScanResult,
    /// The walk that ran.
    pub method: ScanMethod,
    /// Why that one.
    pub reason: String,
}

impl Methods {
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
        let fallback = |reason: String| {
            scan(proc_fd, proc_root, nodes, limits, stuck).map(|result| Scanned {
                result,
                method: ScanMethod::Procfs,
                reason,
            })
        };
        if self.choice == ScanChoice::Procfs {
            return fallback("--scan procfs".into());
        }
        if !proc_is_ours(proc_fd) {
            return fallback(format!(
                "{} is not this PID namespace's /proc: the in-kernel walk would number other processes",
                proc_root.display()
            ));
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let loaded = matches!(*state, State::Loaded(_));
        let why = match decide(self.choice, self.long_lived, loaded, open_files(proc_fd)) {
            Ok(why) => why,
            Err(why) => return fallback(why),
        };
        match self.walk(&mut state, proc_fd, nodes, limits, stuck) {
            Ok(result) => {
                Ok(Scanned {
                    result,
                    method: ScanMethod::Bpf,
                    reason: if nested(proc_fd) {
                        format!("{why}; it walks this PID namespace only (gpufree runs in a nested one)")
                    } else {
                        why
                    },
                })
            }
            Err(why) => {
                drop(state);
                fallback(format!("the in-kernel walk could not run: {why}"))
            }
        }
    }

    /// Loads the programs if need be, walks, and makes the records a
    /// result; a failure is remembered (not retried on every refresh).
    fn walk(
        &self,
        state: &mut State,
        proc_fd: &Arc<OwnedFd>,
        nodes: &NodeSet,
        limits: Limits,
        stuck: &Stuck,
    ) -> Result<ScanResult, Unavailable> {
        if let State::Stuck(flag) = state {
            if flag.load(Ordering::Relaxed) > 0 {
                return Err(still_stuck());
            }
            *state = State::Untried;
        }
        if matches!(state, State::Untried) {
            *state = match Programs::load(nodes, self.break_verifier) {
                Ok(p) => State::Loaded(Box::new(p)),
                Err(e) => State::Unavailable(e),
            };
        }
        let programs = match state {
            State::Loaded(p) => p,
            State::Unavailable(e) => return Err(e.clone()),
            _ => return Err(still_stuck()),
        };
        let files = programs.start()?;
        let clock = kernel::Clock::here(proc_fd);
        match read_in_time(files, limits) {
            Read::Done(records) => {
                kernel::from_records(proc_fd, nodes, records?, clock, limits, stuck)
            }
            Read::TimedOut(flag) => {
                *state = State::Stuck(flag);
                Err(Unavailable::Failed {
                    step: "the walk",
                    why: format!(
                        "did not finish within {:.1} s (a task's memory map is locked)",
                        limits.read_timeout.as_secs_f64()
                    ),
                })
            }
        }
    }
}

fn still_stuck() -> Unavailable {
    Unavailable::Failed {
        step: "the walk",
        why: "an earlier walk is still blocked in the kernel".into(),
    }
}

/// A walk read to its end, or abandoned.
enum Read {
    Done(Result<Vec<bpf::Record>, Unavailable>),
    /// Not done in time; the count of readers still blocked.
    TimedOut(Arc<AtomicUsize>),
}

/// Reads the walks, each on a thread of its own (the file walk and the
/// mapping walk cost about the same, and a host has cores to spare for
/// them), waiting at most the read timeout (or until the deadline):
/// `task_vma` takes each task's memory map lock, and a task stuck in the
/// kernel holding it would hold the walk.
fn read_in_time(files: Vec<std::fs::File>, limits: Limits) -> Read {
    let busy = Arc::new(AtomicUsize::new(files.len()));
    let (tx, rx) = mpsc::channel();
    for (i, f) in files.into_iter().enumerate() {
        let (tx, busy) = (tx.clone(), Arc::clone(&busy));
        let spawned = std::thread::Builder::new()
            .name("gpufree-bpf-walk".into())
            .spawn(move || {
                if let Some(pause) = slow_walk() {
                    std::thread::sleep(pause);
                }
                let out = bpf::read_walk(f);
                busy.fetch_sub(1, Ordering::Relaxed);
                let _ = tx.send((i, out));
            });
        if let Err(e) = spawned {
            return Read::Done(Err(Unavailable::Failed {
                step: "the walk",
                why: format!("no thread to read it: {e}"),
            }));
        }
    }
    drop(tx);
    let until = Instant::now()
        + match limits.deadline {
            Some(d) => limits
                .read_timeout
                .min(d.saturating_duration_since(Instant::now())),
            None => limits.read_timeout,
        };
    let mut walks = BTreeMap::new();
    loop {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok((i, Ok(bytes))) => {
                walks.insert(i, bytes);
            }
            Ok((_, Err(e))) => {
                return Read::Done(Err(Unavailable::Failed {
                    step: "reading the walk",
                    why: e.to_string(),
                }))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => return Read::TimedOut(busy),
        }
    }
    // Every process first, then the holders, in the programs' order.
    let bytes: Vec<u8> = walks.into_values().flatten().collect();
    let (records, bad) = bpf::parse_all(&bytes);
    Read::Done(if bad {
        Err(Unavailable::Failed {
            step: "the walk",
            why: "wrote records this gpufree cannot read".into(),
        })
    } else {
        Ok(records)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shot_commands_load_only_past_the_crossover() {
        let auto = ScanChoice::Auto;
        assert!(decide(auto, false, false, Some(CROSSOVER_FILES - 1)).is_err());
        assert!(decide(auto, false, false, Some(CROSSOVER_FILES)).is_ok());
        assert!(decide(auto, false, false, None).is_err());
        // Long-running commands, and programs already loaded, always walk.
        assert!(decide(auto, true, false, Some(10)).is_ok());
        assert!(decide(auto, false, true, Some(10)).is_ok());
        // A forced choice is obeyed either way.
        assert!(decide(ScanChoice::Bpf, false, false, Some(10)).is_ok());
        assert!(decide(ScanChoice::Procfs, true, true, Some(1 << 30)).is_err());
        assert_eq!("bpf".parse(), Ok(ScanChoice::Bpf));
        assert!("kernel".parse::<ScanChoice>().is_err());
    }
}
