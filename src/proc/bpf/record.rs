//! The records the kernel program writes (`struct gf_rec` in holders.h),
//! read field by field from the iterator's bytes.

/// A process (`REC_TASK`), from the walk of every thread group leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    /// Its PID in the reader's namespace.
    pub pid: u32,
    /// Its parent's PID there; 0 where the parent is not visible there.
    pub ppid: u32,
    /// `start_boottime` in nanoseconds.
    pub start_ns: u64,
    /// Its comm, as the kernel keeps it (up to 15 bytes).
    pub comm: Vec<u8>,
}

/// How a process holds a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Through this open fd.
    Fd(u32),
    /// Through a mapping; `kept`: taken from the result the walk kept at
    /// an earlier walk of the same map (unchanged since).
    Mapping {
        /// Kept, not walked now.
        kept: bool,
    },
}

/// One fd or mapping of a process on a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldRecord {
    /// The process's PID in the reader's namespace (0: not visible there).
    pub pid: u32,
    /// Its thread group leader's `start_boottime` in nanoseconds.
    pub start_ns: u64,
    /// The index of the target (the node's index in the node set).
    pub target: usize,
    /// By fd or by mapping.
    pub how: Hold,
    /// For an fd: the task whose table has it (the leader, or a live
    /// thread once the leader has exited), in the reader's namespace.
    pub tid: u32,
}

/// A process the per-process walk could not read in full (its fd table,
/// or its mappings: the memory map's lock was taken): to be read again
/// through /proc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unread {
    /// The process's PID in the reader's namespace (0: not visible there).
    pub pid: u32,
    /// Its thread group leader's `start_boottime` in nanoseconds.
    pub start_ns: u64,
}

/// The size of one record.
pub const SIZE: usize = 48;
const TASK: u32 = 1;
const FD: u32 = 2;
const VMA: u32 = 3;
const UNREAD: u32 = 4;

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(a)
}

/// One record of the walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A process.
    Task(TaskRecord),
    /// A holder's fd or mapping.
    Hold(HoldRecord),
    /// A process not read in full.
    Unread(Unread),
}

/// Parses one record; None for a kind this loader does not know (a program
/// newer than it: never trusted).
pub fn parse(b: &[u8; SIZE]) -> Option<Record> {
    let (kind, pid, aux) = (u32_at(b, 0), u32_at(b, 4), u32_at(b, 8));
    let target = usize::try_from(u32_at(b, 12)).ok()?;
    let start_ns = u64_at(b, 16);
    let tid = u32_at(b, 24);
    let hold = |how| {
        Some(Record::Hold(HoldRecord {
            pid,
            start_ns,
            target,
            how,
            tid,
        }))
    };
    match kind {
        TASK => {
            let comm = &b[32..48];
            let len = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
            Some(Record::Task(TaskRecord {
                pid,
                ppid: aux,
                start_ns,
                comm: comm[..len].to_vec(),
            }))
        }
        FD => hold(Hold::Fd(aux)),
        VMA => hold(Hold::Mapping { kept: aux == 1 }),
        UNREAD => Some(Record::Unread(Unread { pid, start_ns })),
        _ => None,
    }
}

/// Parses a whole walk's output: its records, and whether any bytes were
/// left that make no record (a torn or foreign stream).
pub fn parse_all(bytes: &[u8]) -> (Vec<Record>, bool) {
    let chunks = bytes.chunks_exact(SIZE);
    let torn = !chunks.remainder().is_empty();
    let mut out = Vec::with_capacity(bytes.len() / SIZE);
    let mut foreign = false;
    for chunk in chunks {
        let mut rec = [0u8; SIZE];
        rec.copy_from_slice(chunk);
        match parse(&rec) {
            Some(r) => out.push(r),
            None => foreign = true,
        }
    }
    (out, torn || foreign)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: u32, pid: u32, aux: u32, target: u32, start: u64, comm: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [kind, pid, aux, target] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&start.to_ne_bytes());
        b.extend_from_slice(&(pid + 1).to_ne_bytes()); // tid
        b.extend_from_slice(&0u32.to_ne_bytes());
        let mut c = [0u8; 16];
        c[..comm.len()].copy_from_slice(comm);
        b.extend_from_slice(&c);
        b
    }

    #[test]
    fn reads_each_kind_and_flags_what_it_cannot() {
        let mut bytes = rec(1, 42, 1, 0, 7_000_000_000, b"VLLM::Worker_TP");
        bytes.extend(rec(2, 42, 9, 3, 7_000_000_000, b""));
        bytes.extend(rec(3, 42, 0, 1, 7_000_000_000, b""));
        bytes.extend(rec(4, 43, 2, 0, 8_000_000_000, b""));
        let (recs, bad) = parse_all(&bytes);
        assert!(!bad);
        assert_eq!(
            recs[0],
            Record::Task(TaskRecord {
                pid: 42,
                ppid: 1,
                start_ns: 7_000_000_000,
                comm: b"VLLM::Worker_TP".to_vec()
            })
        );
        assert!(matches!(
            recs[1],
            Record::Hold(HoldRecord {
                how: Hold::Fd(9),
                target: 3,
                ..
            })
        ));
        assert!(matches!(
            recs[2],
            Record::Hold(HoldRecord {
                how: Hold::Mapping { kept: false },
                target: 1,
                ..
            })
        ));
        assert_eq!(
            recs[3],
            Record::Unread(Unread {
                pid: 43,
                start_ns: 8_000_000_000
            })
        );
        // A kind it does not know, or a torn tail, is never silently dropped.
        assert!(parse_all(&rec(9, 1, 0, 0, 0, b"")).1);
        assert!(parse_all(&bytes[..SIZE + 3]).1);
    }
}
