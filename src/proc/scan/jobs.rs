//! The workers that read processes in parallel, each read bounded by the
//! read timeout and the caller's deadline; a read that blocks (FUSE, a
//! hung NFS) leaves its process unread, never the scan hung.

use super::*;

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
    let pids: Vec<u32> = {
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
    };
    struct Queue {
        pids: Vec<u32>,
        next: AtomicUsize,
        /// Per worker: the PID it works on and since when. A worker and the
        /// caller change a slot and the stuck set only under this lock.
        busy: Mutex<Vec<Option<(u32, Instant)>>>,
    }
    let queue = Arc::new(Queue {
        pids,
        next: AtomicUsize::new(0),
        busy: Mutex::new(Vec::new()),
    });
    fn lock(q: &Queue) -> std::sync::MutexGuard<'_, Vec<Option<(u32, Instant)>>> {
        q.busy.lock().unwrap_or_else(|p| p.into_inner())
    }
    let (tx, rx) = mpsc::channel::<(u32, T)>();
    // Starts a worker; false when the system refuses a thread (EAGAIN).
    let spawn = |queue: &Arc<Queue>, tx: &mpsc::Sender<(u32, T)>| -> bool {
        let slot = {
            let mut busy = lock(queue);
            busy.push(None);
            busy.len() - 1
        };
        let (queue, tx, job, stuck) = (
            Arc::clone(queue),
            tx.clone(),
            Arc::clone(&job),
            stuck.clone(),
        );
        std::thread::Builder::new()
            .name("gpufree-scan".into())
            .spawn(move || {
                let mut buf = Vec::with_capacity(MAPS_CHUNK);
                loop {
                    let i = queue.next.fetch_add(1, Ordering::Relaxed);
                    let Some(&pid) = queue.pids.get(i) else { break };
                    lock(&queue)[slot] = Some((pid, Instant::now()));
                    let r = job(pid, &mut buf);
                    {
                        let mut busy = lock(&queue);
                        // A slot the caller emptied was reported stuck.
                        if busy[slot].take().is_none() {
                            stuck.set().remove(&pid);
                        }
                    }
                    if tx.send((pid, r)).is_err() {
                        break; // the caller has given up on us
                    }
                }
            })
            .is_ok()
    };
    let mut working = (0..threads.max(1)).filter(|_| spawn(&queue, &tx)).count();
    let total = done.len() + queue.pids.len();
    let tick = Duration::from_millis(20).min(limits.read_timeout);
    while done.len() < total {
        let now = Instant::now();
        let past_deadline = limits.deadline.is_some_and(|d| now >= d);
        if past_deadline || working == 0 {
            // Stop the queue. Results already sent count; a read in hand
            // past the read timeout is stuck; the rest was not read.
            queue.next.store(queue.pids.len(), Ordering::Relaxed);
            for (pid, r) in rx.try_iter() {
                done.entry(pid).or_insert(Ok(r));
            }
            let mut busy = lock(&queue);
            for (pid, since) in busy.iter_mut().filter_map(|s| s.take()) {
                if since.elapsed() >= limits.read_timeout {
                    stuck.set().insert(pid);
                    done.entry(pid)
                        .or_insert(Err(Unread::TimedOut(since.elapsed())));
                }
            }
            drop(busy);
            let left = if working == 0 {
                Unread::Failed {
                    what: "a worker thread",
                    errno: Errno::AGAIN,
                }
            } else {
                Unread::NotReached
            };
            for &pid in &queue.pids {
                done.entry(pid).or_insert(Err(left));
            }
            break;
        }
        match rx.recv_timeout(tick) {
            Ok((pid, r)) => {
                done.entry(pid).or_insert(Ok(r));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let hung: Vec<u32> = {
                    let mut busy = lock(&queue);
                    busy.iter_mut()
                        .filter_map(|s| match *s {
                            Some((pid, since)) if since.elapsed() >= limits.read_timeout => {
                                // Reported once; the thread stays stuck.
                                *s = None;
                                stuck.set().insert(pid);
                                Some(pid)
                            }
                            _ => None,
                        })
                        .collect()
                };
                for pid in hung {
                    done.entry(pid)
                        .or_insert(Err(Unread::TimedOut(limits.read_timeout)));
                    working -= 1;
                    if spawn(&queue, &tx) {
                        working += 1;
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    done.into_iter().collect()
}

pub(super) fn worker_count(n: usize) -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
        .min(n.div_ceil(64).max(1))
}
