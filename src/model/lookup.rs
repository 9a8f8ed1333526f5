//! A snapshot's holders, GPUs and per-process samples indexed once by
//! PID and GPU index ([`Lookup`]), so that a pass over every holder asks
//! about each one in constant or logarithmic time: `Snapshot::parent_of`,
//! `mps_role` and the idle rule each search the whole snapshot, fine
//! once and quadratic per holder. The rules stay where they are; this
//! only finds what they read. Each index is built the first time it is
//! asked for.

use super::idle::{over_gpus, Samples};
use super::{Activity, Gpu, MpsRole, Process, Snapshot};
use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};

/// The snapshot `s` indexed for per-holder questions. It borrows the
/// snapshot, so it cannot outlive a change to it.
pub struct Lookup<'a> {
    s: &'a Snapshot,
    processes: HashMap<u32, &'a Process>,
    gpus: HashMap<u32, &'a Gpu>,
    /// The PIDs NVML lists as MPS clients of any GPU.
    mps_clients: OnceCell<HashSet<u32>>,
    /// The PIDs NVML lists on any GPU, in any list.
    listed: OnceCell<HashSet<u32>>,
    /// Each GPU's per-process samples (where the driver read them), by
    /// GPU index.
    samples: OnceCell<HashMap<u32, Samples>>,
    /// Each PID's children, holders and the rest the scan read.
    children: OnceCell<HashMap<u32, Vec<u32>>>,
}

impl<'a> Lookup<'a> {
    /// Indexes `s` (linear in its holders, GPUs and listings).
    pub fn new(s: &'a Snapshot) -> Lookup<'a> {
        let mut processes = HashMap::with_capacity(s.processes.len());
        for p in &s.processes {
            // The first of a PID, as a search from the front finds it.
            processes.entry(p.pid).or_insert(p);
        }
        let mut gpus = HashMap::with_capacity(s.gpus.len());
        for g in &s.gpus {
            gpus.entry(g.index).or_insert(g);
        }
        Lookup {
            s,
            processes,
            gpus,
            mps_clients: OnceCell::new(),
            listed: OnceCell::new(),
            samples: OnceCell::new(),
            children: OnceCell::new(),
        }
    }

    /// GPU `gpu`'s samples, where the driver read them.
    fn samples(&self, gpu: u32) -> Option<&Samples> {
        let all = self.samples.get_or_init(|| {
            (self.gpus.iter())
                .filter_map(|(&i, g)| Some((i, Samples::of(g.driver_evidence.as_ref())?)))
                .collect()
        });
        all.get(&gpu)
    }

    /// The snapshot it indexes.
    pub fn snapshot(&self) -> &'a Snapshot {
        self.s
    }

    /// The holder `pid` (the first, should two share it).
    pub fn process(&self, pid: u32) -> Option<&'a Process> {
        self.processes.get(&pid).copied()
    }

    /// GPU `index`.
    pub fn gpu(&self, index: u32) -> Option<&'a Gpu> {
        self.gpus.get(&index).copied()
    }

    /// Whether NVML lists `pid` on any GPU.
    pub fn listed(&self, pid: u32) -> bool {
        let listed = self.listed.get_or_init(|| {
            (self.s.gpus.iter())
                .flat_map(|g| g.nvml_processes.iter().map(|n| n.pid))
                .collect()
        });
        listed.contains(&pid)
    }

    /// As [`Snapshot::parent_of`].
    pub fn parent_of(&self, pid: u32) -> Option<u32> {
        self.process(pid)
            .map(|p| p.ppid)
            .or_else(|| self.s.parents.get(&pid).map(|k| k.ppid))
    }

    /// As [`Snapshot::comm_of`].
    pub fn comm_of(&self, pid: u32) -> Option<&'a str> {
        self.process(pid)
            .map(|p| p.comm.as_str())
            .or_else(|| self.s.parents.get(&pid).map(|k| k.comm.as_str()))
    }

    /// As [`Snapshot::mps_role`].
    pub fn mps_role(&self, p: &Process) -> Option<MpsRole> {
        let clients = self.mps_clients.get_or_init(|| self.s.mps_clients());
        super::mps::role(p, clients.contains(&p.pid))
    }

    /// As [`super::process_activity`].
    pub fn process_activity(&self, p: &Process) -> Option<Activity> {
        over_gpus(p, |gpu| {
            self.samples(gpu)
                .map_or(Activity::Unknown, |x| x.activity(p.pid))
        })
    }

    /// `pid`'s largest SM utilisation in GPU `gpu`'s samples (0 without
    /// one); None where the GPU's samples were not read.
    pub fn sm_on(&self, gpu: u32, pid: u32) -> Option<u32> {
        Some(self.samples(gpu)?.sm(pid))
    }

    /// As [`super::sm_percent`].
    pub fn sm_percent(&self, p: &Process) -> Option<u32> {
        p.gpu_memory
            .iter()
            .filter_map(|m| self.sm_on(m.gpu, p.pid))
            .max()
    }

    /// As [`super::judged_activity`].
    pub fn judged_activity(&self, p: &Process) -> Option<Activity> {
        super::idle::judged(p, self.mps_role(p), || self.process_activity(p))
    }

    /// Every PID that descends from `root` (`root` first), as
    /// [`Snapshot::descends_from`] says: breadth first down the children,
    /// [`DESCENT_STEPS`] levels at most, each PID once (a loop of parents
    /// is walked once, a chain thousands deep once).
    pub fn subtree(&self, root: u32) -> Vec<u32> {
        let children = self.children.get_or_init(|| children(self.s, self));
        let mut below = vec![root];
        let mut seen = HashSet::from([root]);
        let mut level = 0..1;
        for _ in 1..DESCENT_STEPS {
            let from = level.end;
            for i in level {
                let kids = children.get(&below[i]).map_or(&[][..], Vec::as_slice);
                below.extend(kids.iter().filter(|&&k| seen.insert(k)));
            }
            level = from..below.len();
            if level.is_empty() {
                break;
            }
        }
        below
    }
}

/// How far up the parents [`Snapshot::descends_from`] looks: a PID
/// farther than this below the root is no descendant.
pub const DESCENT_STEPS: u32 = 4096;

/// Each PID's children, by [`Lookup::parent_of`]'s parents (none for a
/// PID whose parent is 0 or itself).
fn children(s: &Snapshot, lookup: &Lookup<'_>) -> HashMap<u32, Vec<u32>> {
    let pids = s.processes.iter().map(|p| p.pid);
    let kin = s.parents.keys().copied();
    let mut seen = HashSet::new();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in pids.chain(kin).filter(|pid| seen.insert(*pid)) {
        match lookup.parent_of(pid) {
            Some(up) if up != 0 && up != pid => children.entry(up).or_default().push(pid),
            _ => {}
        }
    }
    children
}

#[cfg(test)]
mod tests {
    use super::Lookup;
    use crate::model::{
        judged_activity, process_activity, sm_percent, DriverEvidence, Gpu, GpuMemory, Kin,
        NvmlProcess, NvmlProcessKind, Process, ProcessUtil, Reading, Snapshot,
    };

    fn holder(pid: u32, ppid: u32, gpu: u32) -> Process {
        Process {
            pid,
            ppid,
            comm: format!("p{pid}"),
            state: "S".into(),
            gpu_memory: vec![GpuMemory {
                gpu,
                used_bytes: Some(1 << 20),
            }],
            ..Process::default()
        }
    }

    fn listing(pid: u32, kind: NvmlProcessKind) -> NvmlProcess {
        NvmlProcess {
            pid,
            used_bytes: Some(1 << 20),
            kind,
        }
    }

    fn sample(pid: u32, sm: u32, mem: u32) -> ProcessUtil {
        ProcessUtil {
            pid,
            sm,
            mem,
            ..ProcessUtil::default()
        }
    }

    /// Every answer of the index is the snapshot's own: MPS roles, the
    /// idle rule on a GPU with samples and one without, SM, parents.
    #[test]
    fn the_index_answers_as_the_snapshot_does() {
        let mut server = holder(1, 0, 0);
        server.exe = Some("/usr/bin/nvidia-cuda-mps-server".into());
        server.protected = true;
        let mut zombie = holder(7, 3, 0);
        zombie.state = "Z".into();
        let mut twice = holder(8, 3, 0);
        twice.gpu_memory.push(GpuMemory {
            gpu: 1,
            used_bytes: None,
        });
        let processes = vec![
            server,
            holder(2, 1, 0),
            holder(3, 40, 0),
            holder(4, 3, 0),
            holder(5, 3, 0),
            holder(6, 3, 1),
            zombie,
            twice,
            holder(3, 41, 1), // a second holder of one PID: the first counts
        ];
        let samples = vec![
            sample(3, 50, 0),
            sample(4, 0, 0),
            sample(3, 0, 0),
            sample(8, 0, 9),
        ];
        let gpus = vec![
            Gpu {
                index: 0,
                nvml_processes: vec![
                    listing(2, NvmlProcessKind::Mps),
                    listing(2, NvmlProcessKind::Compute),
                    listing(3, NvmlProcessKind::Compute),
                ],
                driver_evidence: Some(DriverEvidence {
                    process_utilization: Reading::Value(samples),
                    ..DriverEvidence::default()
                }),
                ..Gpu::default()
            },
            Gpu {
                index: 1,
                ..Gpu::default()
            },
        ];
        let kin = |ppid, comm: &str| Kin {
            ppid,
            comm: comm.into(),
            ..Kin::default()
        };
        let s = Snapshot {
            gpus,
            processes,
            parents: [(40, kin(1, "torchrun")), (3, kin(99, "shadowed"))].into(),
            ..Snapshot::default()
        };
        let look = Lookup::new(&s);
        for p in &s.processes {
            assert_eq!(look.mps_role(p), s.mps_role(p), "{}", p.pid);
            assert_eq!(
                look.process_activity(p),
                process_activity(&s, p),
                "{}",
                p.pid
            );
            assert_eq!(look.judged_activity(p), judged_activity(&s, p), "{}", p.pid);
            assert_eq!(look.sm_percent(p), sm_percent(&s, p), "{}", p.pid);
        }
        for pid in [0, 1, 3, 7, 40, 41, 99] {
            assert_eq!(look.parent_of(pid), s.parent_of(pid), "{pid}");
            assert_eq!(look.comm_of(pid), s.comm_of(pid), "{pid}");
            assert_eq!(look.listed(pid), pid == 2 || pid == 3, "{pid}");
        }
        for (pid, root) in [(4, 3), (4, 40), (4, 1), (3, 40), (2, 3), (40, 40)] {
            let below = look.subtree(root).contains(&pid);
            assert_eq!(below, s.descends_from(pid, root), "{pid} below {root}");
        }
    }
}
