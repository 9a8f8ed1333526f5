//! The workers that read processes in parallel, each read bounded by the
//! read timeout and the caller's deadline; a read that blocks (FUSE, a
//! hung NFS) leaves its process unread, never the scan hung.

use super::{Limits, Unread, MAPS_CHUNK};
use rustix::io::Errno;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// One process's reads, run on a worker thread with a reusable buffer.
pub(super) type Job<T> = Arc<dyn Fn(u32, &mut Vec<u8>) -> T + Send + Sync>;

/// PIDs whose reads are stuck in the kernel (a thread still waits on one),
/// kept across scans: a process that hangs every read costs one thread,
/// not one per scan of a `watch` or `serve` that runs for days. Until that
/// thread returns, the PID is reported as timed out without a new read.
#[derive(Debug, Clone, Default)]
pub struct Stuck(Arc<Mutex<std::collections::BTreeSet<u32>>>);

impl Stuck {
    pub(super) fn set(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<u32>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs `job` on every PID over worker threads, each PID's job under
/// `limits`. A job that does not return in time is reported as
/// `Err(TimedOut)`; its thread is left behind (it holds only shared
/// references), and a fresh worker takes over the queue. PIDs not started
/// by the deadline are `Err(NotReached)`.
pub(super) fn run_jobs<T: Send + 'static>(
    pids: Vec<u32>,
    threads: usize,
    limits: Limits,
    stuck: &Stuck,
    job: Job<T>,
) -> Vec<(u32, Result<T, Unread>)> {
    let mut done: BTreeMap<u32, Result<T, Unread>> = BTreeMap::new();
    let pids = skip_stuck(pids, stuck, &mut done);
    let (tx, rx) = mpsc::channel::<(u32, T)>();
    let pool = Pool {
        queue: Arc::new(Queue {
            pids,
            next: AtomicUsize::new(0),
            busy: Mutex::new(Vec::new()),
            delivered: AtomicUsize::new(0),
            caller: std::thread::current(),
        }),
        tx,
        job,
        stuck: stuck.clone(),
    };
    let mut working = (0..threads.max(1)).filter(|_| pool.spawn()).count();
    let total = done.len() + pool.queue.pids.len();
    let tick = Duration::from_millis(20).min(limits.read_timeout);
    loop {
        for (pid, r) in rx.try_iter() {
            done.entry(pid).or_insert(Ok(r));
        }
        if done.len() >= total {
            break;
        }
        let past_deadline = limits.deadline.is_some_and(|d| Instant::now() >= d);
        if past_deadline || working == 0 {
            pool.stop(&rx, &mut done, limits.read_timeout, working == 0);
            break;
        }
        // Woken by the worker that delivers the last result, else each
        // tick to look for hung reads: never once per result.
        std::thread::park_timeout(tick);
        for pid in pool.take_hung(limits.read_timeout) {
            done.entry(pid)
                .or_insert(Err(Unread::TimedOut(limits.read_timeout)));
            working -= 1;
            if pool.spawn() {
                working += 1;
            }
        }
    }
    done.into_iter().collect()
}

/// The PIDs to read: those whose earlier read is still stuck are
/// reported as such at once, and left out.
fn skip_stuck<T>(
    pids: Vec<u32>,
    stuck: &Stuck,
    done: &mut BTreeMap<u32, Result<T, Unread>>,
) -> Vec<u32> {
    let still = stuck.set();
    pids.into_iter()
        .filter(|pid| {
            let hung = still.contains(pid);
            if hung {
                done.insert(*pid, Err(Unread::StillStuck));
            }
            !hung
        })
        .collect()
}

/// The PIDs the workers take in turn, and what each worker is reading.
struct Queue {
    pids: Vec<u32>,
    next: AtomicUsize,
    /// Per worker: the PID it works on and since when. A worker and the
    /// caller change a slot and the stuck set only under this lock.
    busy: Mutex<Vec<Option<(u32, Instant)>>>,
    /// Results sent so far; the one that sends the last wakes the caller.
    delivered: AtomicUsize,
    /// The thread waiting for the results.
    caller: std::thread::Thread,
}

impl Queue {
    fn busy(&self) -> std::sync::MutexGuard<'_, Vec<Option<(u32, Instant)>>> {
        self.busy.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The workers' shared queue, their channel back and the job they run.
struct Pool<T> {
    queue: Arc<Queue>,
    tx: mpsc::Sender<(u32, T)>,
    job: Job<T>,
    stuck: Stuck,
}

impl<T: Send + 'static> Pool<T> {
    /// Starts a worker; false when the system refuses a thread (EAGAIN).
    fn spawn(&self) -> bool {
        let slot = {
            let mut busy = self.queue.busy();
            busy.push(None);
            busy.len() - 1
        };
        let (queue, tx, job, stuck) = (
            Arc::clone(&self.queue),
            self.tx.clone(),
            Arc::clone(&self.job),
            self.stuck.clone(),
        );
        std::thread::Builder::new()
            .name("gpufree-scan".into())
            .spawn(move || work(&queue, slot, &tx, &job, &stuck))
            .is_ok()
    }

    /// The PIDs whose read has taken `read_timeout` or longer: reported
    /// once (their slots emptied) and added to the stuck set; their
    /// threads stay stuck.
    fn take_hung(&self, read_timeout: Duration) -> Vec<u32> {
        let mut busy = self.queue.busy();
        busy.iter_mut()
            .filter_map(|s| match *s {
                Some((pid, since)) if since.elapsed() >= read_timeout => {
                    *s = None;
                    self.stuck.set().insert(pid);
                    Some(pid)
                }
                _ => None,
            })
            .collect()
    }

    /// Stops the queue. Results already sent count; a read in hand past
    /// the read timeout is stuck; the rest was not read (or, when no
    /// worker could be started, failed for want of a thread).
    fn stop(
        &self,
        rx: &mpsc::Receiver<(u32, T)>,
        done: &mut BTreeMap<u32, Result<T, Unread>>,
        read_timeout: Duration,
        no_workers: bool,
    ) {
        self.queue
            .next
            .store(self.queue.pids.len(), Ordering::Relaxed);
        for (pid, r) in rx.try_iter() {
            done.entry(pid).or_insert(Ok(r));
        }
        let mut busy = self.queue.busy();
        for (pid, since) in busy.iter_mut().filter_map(|s| s.take()) {
            if since.elapsed() >= read_timeout {
                self.stuck.set().insert(pid);
                done.entry(pid)
                    .or_insert(Err(Unread::TimedOut(since.elapsed())));
            }
        }
        drop(busy);
        let left = if no_workers {
            Unread::Failed {
                what: "a worker thread",
                errno: Errno::AGAIN,
            }
        } else {
            Unread::NotReached
        };
        for &pid in &self.queue.pids {
            done.entry(pid).or_insert(Err(left));
        }
    }
}

/// A worker: takes the next PID until the queue is empty or the caller
/// has given up, marking its slot busy while it reads.
fn work<T>(queue: &Queue, slot: usize, tx: &mpsc::Sender<(u32, T)>, job: &Job<T>, stuck: &Stuck) {
    let mut buf = Vec::with_capacity(MAPS_CHUNK);
    loop {
        let i = queue.next.fetch_add(1, Ordering::Relaxed);
        let Some(&pid) = queue.pids.get(i) else { break };
        queue.busy()[slot] = Some((pid, Instant::now()));
        let r = job(pid, &mut buf);
        {
            let mut busy = queue.busy();
            // A slot the caller emptied was reported stuck.
            if busy[slot].take().is_none() {
                stuck.set().remove(&pid);
            }
        }
        if tx.send((pid, r)).is_err() {
            break; // the caller has given up on us
        }
        if queue.delivered.fetch_add(1, Ordering::AcqRel) + 1 == queue.pids.len() {
            queue.caller.unpark();
        }
    }
}

/// Grows this process's fd table once, before the scan's workers start,
/// to hold `more` fds above those open now (a pinned holder's directory
/// each). The kernel grows a table that threads share by doubling it, each
/// time waiting out an RCU grace period (`expand_fdtable`'s
/// `synchronize_rcu`) with every thread that opens a file blocked behind
/// it: pinning 10,000 holders took nine such waits and left both workers
/// idle half the time. Asked once here, it waits at most once. Best
/// effort: within the soft limit, and nothing else changes when the
/// kernel refuses.
pub(super) fn reserve_fds(more: usize) {
    use rustix::process::{getrlimit, Resource};
    // A table starts with room for 64 (BITS_PER_LONG) fds.
    if more < 64 {
        return;
    }
    let Ok(probe) = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC) else {
        return;
    };
    // The lowest free fd: where the workers' fds begin.
    let first = u64::try_from(std::os::fd::AsRawFd::as_raw_fd(&probe)).unwrap_or(0);
    let limit = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    let want = (first + more as u64 + 64).min(limit.saturating_sub(1));
    // A copy at `want` or above sizes the table for it; dropped (closed)
    // at once, the table keeps its size.
    if let Ok(want) = i32::try_from(want) {
        let _ = rustix::io::fcntl_dupfd_cloexec(&probe, want);
    }
}

pub(super) fn worker_count(n: usize) -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
        .min(n.div_ceil(64).max(1))
}
