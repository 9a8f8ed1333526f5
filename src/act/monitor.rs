//! The one loop of every command that watches the host until something
//! happens: `wait`, kill's grace period, its wait for the memory and its
//! watch for restarts, and the refreshes of `watch` and `serve`.
//!
//! A loop is look, decide, nap: a [`Watch`] looks at the host (a snapshot,
//! an NVML read, its pinned processes) and says whether to go on; then,
//! unless its deadline has passed, the loop naps for the interval, cut
//! short by the deadline and, where the watch names pidfds, by a process
//! exiting. An interrupted kill ([`super::quiesce::interrupted`]) ends
//! every loop after the look under way: the interrupt handler is letting
//! the targets go and ending the process, and nothing more is looked at.

use super::quiesce::interrupted;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::ops::ControlFlow;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// What a loop watches, and when it stops.
pub trait Watch {
    /// What a look that ends the loop found.
    type Out;

    /// One look at the host: `Break` ends the loop with what it found,
    /// `Continue` naps until the next look.
    fn look(&mut self, tick: Tick) -> ControlFlow<Self::Out>;

    /// The moment the loop gives up (None: never). Asked after every look,
    /// so a look may move it.
    fn deadline(&self) -> Option<Instant>;

    /// Pidfds whose process's exit ends a nap at once; none (the default):
    /// the nap is a plain sleep.
    fn wake_on(&self) -> Vec<BorrowedFd<'_>> {
        Vec::new()
    }
}

/// The occasion of one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// 0 for the first look (before any nap), then 1, 2, ...
    pub number: u64,
    /// Whether a pidfd ended the nap before this look (a process exited).
    pub woken: bool,
}

impl Tick {
    /// Whether this is the first look, before any nap.
    pub fn first(&self) -> bool {
        self.number == 0
    }
}

/// How a loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended<T> {
    /// A look ended it, with what it found.
    Stopped(T),
    /// Its deadline passed first.
    Deadline,
    /// The kill was interrupted: the process is ending.
    Interrupted,
}

/// Runs `watch`'s loop, napping at most `interval` between two looks.
/// There is always a first look, whatever the deadline.
pub fn run<W: Watch>(watch: &mut W, interval: Duration) -> Ended<W::Out> {
    let mut tick = Tick {
        number: 0,
        woken: false,
    };
    loop {
        if let ControlFlow::Break(out) = watch.look(tick) {
            return Ended::Stopped(out);
        }
        if interrupted() {
            return Ended::Interrupted;
        }
        let nap = match watch.deadline() {
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return Ended::Deadline;
                }
                interval.min(deadline - now)
            }
            None => interval,
        };
        tick = Tick {
            number: tick.number + 1,
            woken: nap_until_exit(&watch.wake_on(), nap),
        };
    }
}

/// Sleeps `nap`, or less if one of `pidfds` becomes readable first (its
/// process exited); whether one did. Without pidfds, a plain sleep.
pub fn nap_until_exit(pidfds: &[BorrowedFd<'_>], nap: Duration) -> bool {
    if pidfds.is_empty() {
        std::thread::sleep(nap);
        return false;
    }
    let mut polls: Vec<PollFd<'_>> = pidfds
        .iter()
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    let ts = Timespec {
        tv_sec: nap.as_secs() as i64,
        tv_nsec: i64::from(nap.subsec_nanos()),
    };
    match poll(&mut polls, Some(&ts)) {
        Ok(n) => n > 0,
        // A poll that fails (EINTR, or the pidfds refused) still naps: a
        // failure that repeats must not turn the loop into a busy one.
        Err(_) => {
            std::thread::sleep(nap);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts looks; stops at `stop_at`, gives up at `deadline`.
    struct Counter {
        looks: Vec<Tick>,
        stop_at: u64,
        deadline: Option<Instant>,
    }

    impl Watch for Counter {
        type Out = u64;
        fn look(&mut self, tick: Tick) -> ControlFlow<u64> {
            self.looks.push(tick);
            if tick.number == self.stop_at {
                ControlFlow::Break(tick.number)
            } else {
                ControlFlow::Continue(())
            }
        }
        fn deadline(&self) -> Option<Instant> {
            self.deadline
        }
    }

    #[test]
    fn looks_first_then_naps_until_a_look_stops_it() {
        let mut w = Counter {
            looks: Vec::new(),
            stop_at: 3,
            deadline: None,
        };
        let started = Instant::now();
        assert_eq!(run(&mut w, Duration::from_millis(5)), Ended::Stopped(3));
        assert_eq!(w.looks.len(), 4);
        assert!(w.looks[0].first() && !w.looks[1].first());
        assert!(w.looks.iter().all(|t| !t.woken), "no pidfds: plain sleeps");
        assert!(started.elapsed() >= Duration::from_millis(15), "three naps");
    }

    #[test]
    fn the_deadline_cuts_the_last_nap_and_ends_the_loop() {
        let mut w = Counter {
            looks: Vec::new(),
            stop_at: u64::MAX,
            deadline: Some(Instant::now() + Duration::from_millis(30)),
        };
        let started = Instant::now();
        assert_eq!(run(&mut w, Duration::from_secs(10)), Ended::Deadline);
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(30), "{took:?}");
        assert!(
            took < Duration::from_secs(5),
            "the nap ends at the deadline: {took:?}"
        );
        assert_eq!(w.looks.len(), 2, "a look before and one after the nap");
    }

    #[test]
    fn a_passed_deadline_still_gets_its_first_look() {
        let mut w = Counter {
            looks: Vec::new(),
            stop_at: u64::MAX,
            deadline: Some(Instant::now()),
        };
        assert_eq!(run(&mut w, Duration::from_secs(10)), Ended::Deadline);
        assert_eq!(w.looks.len(), 1);
    }
}
