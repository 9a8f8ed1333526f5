//! MIG in the model: what the capability nodes open, which processes are
//! surely or maybe on which MIG device, a snapshot narrowed to some of a
//! GPU's MIG devices, and `Selection`, what `--gpu` selects (whole GPUs
//! and MIG devices), with how it is said back (`--gpu 0:1`).

use super::{Gpu, MigDevice, Process, Snapshot};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};

/// MIG device `mig` of GPU `gpu` as `--gpu` takes it: `0:1`.
pub fn mig_label(gpu: u32, mig: u32) -> String {
    format!("{gpu}:{mig}")
}

/// What a MIG capability node (`nvidia-caps/nvidia-capN`) opens, from the
/// driver's `mig-minors` table: a GPU instance's access, or one compute
/// instance's inside it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct MigCap {
    /// The GPU (NVML index) it belongs to.
    pub gpu: u32,
    /// Its GPU instance.
    pub gpu_instance_id: u32,
    /// Its compute instance; None for the GPU instance's own access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_instance_id: Option<u32>,
}

impl MigCap {
    /// Whether this capability opens MIG device `m` of its GPU.
    pub fn opens(&self, m: &MigDevice) -> bool {
        m.gpu_instance_id == Some(self.gpu_instance_id)
            && self
                .compute_instance_id
                .is_none_or(|ci| m.compute_instance_id == Some(ci))
    }
}

impl Snapshot {
    /// The MIG capabilities of GPU `gpu` that `p` holds.
    fn caps_of<'a>(&'a self, p: &'a Process, gpu: u32) -> impl Iterator<Item = &'a MigCap> {
        p.devices
            .iter()
            .filter_map(|d| self.mig_caps.get(&d.path))
            .filter(move |c| c.gpu == gpu)
    }

    /// Whether `p` is surely on MIG device `m` of `gpu`: NVML lists it
    /// there, or it holds the capability of `m`'s own compute instance.
    /// Only this makes a process a kill target of `--gpu GPU:MIG`. (Once
    /// per holder: [`MigListings::surely_holds`].)
    pub fn surely_holds_mig(&self, p: &Process, gpu: u32, m: &MigDevice) -> bool {
        self.surely(p, gpu, m, m.nvml_processes.iter().any(|n| n.pid == p.pid))
    }

    /// [`Self::surely_holds_mig`], given whether NVML lists `p` on `m`.
    fn surely(&self, p: &Process, gpu: u32, m: &MigDevice, listed: bool) -> bool {
        listed
            || self
                .caps_of(p, gpu)
                .any(|c| c.compute_instance_id.is_some() && c.opens(m))
    }

    /// Whether `p` holds or may hold MIG device `m` of `gpu`: surely, or
    /// it holds the access of `m`'s GPU instance and nothing more specific
    /// says which compute instance of it (a CUDA process opens both; the
    /// GPU instance's alone leaves every compute instance in it possible).
    /// What judges a device free counts these; what kills does not.
    pub fn may_hold_mig(&self, p: &Process, gpu: u32, m: &MigDevice) -> bool {
        self.may(p, gpu, m, &|d| {
            d.nvml_processes.iter().any(|n| n.pid == p.pid)
        })
    }

    /// [`Self::may_hold_mig`], told by `listed` whether NVML lists `p` on
    /// a device of `gpu`.
    fn may(
        &self,
        p: &Process,
        gpu: u32,
        m: &MigDevice,
        listed: &dyn Fn(&MigDevice) -> bool,
    ) -> bool {
        if self.surely(p, gpu, m, listed(m)) {
            return true;
        }
        let gi_only = self
            .caps_of(p, gpu)
            .any(|c| c.compute_instance_id.is_none() && c.opens(m));
        let placed_elsewhere = self
            .gpus
            .iter()
            .filter(|g| g.index == gpu)
            .flat_map(|g| &g.mig_devices)
            .filter(|o| o.gpu_instance_id == m.gpu_instance_id)
            .any(|o| self.surely(p, gpu, o, listed(o)));
        gi_only && !placed_elsewhere
    }

    /// The MIG devices of `g` that `p` holds.
    pub fn migs_maybe_held<'a>(
        &'a self,
        p: &'a Process,
        g: &'a Gpu,
    ) -> impl Iterator<Item = &'a MigDevice> {
        g.mig_devices
            .iter()
            .filter(move |m| self.may_hold_mig(p, g.index, m))
    }

    /// This snapshot narrowed to the MIG devices `keep` of GPU `gpu`: the
    /// GPU's memory and lists become theirs ([`Gpu::restrict_to`]), and
    /// of the processes that touch the GPU only those holding one of them
    /// stay (a process on another instance, or one holding only the
    /// GPU's own node, holds nothing of these).
    pub fn restrict_mig(&mut self, gpu: u32, keep: &BTreeSet<u32>) {
        let Some(at) = self.gpus.iter().position(|g| g.index == gpu) else {
            return;
        };
        let whole = self.gpus[at].clone();
        let kept: Vec<&MigDevice> = whole
            .mig_devices
            .iter()
            .filter(|m| keep.contains(&m.index))
            .collect();
        let listings = MigListings::of(std::slice::from_ref(&whole));
        let stays: Vec<bool> = self
            .processes
            .iter()
            .map(|p| !p.touches_gpu(gpu) || kept.iter().any(|m| listings.may_hold(self, p, gpu, m)))
            .collect();
        let mut stays = stays.into_iter();
        self.processes.retain(|_| stays.next().unwrap_or(false));
        self.gpus[at].restrict_to(keep);
    }
}

/// Who NVML lists on each MIG device of a snapshot, read once (by GPU,
/// MIG index and PID), so that asking it of every holder does not search
/// every device's list each time.
pub struct MigListings(HashSet<(u32, u32, u32)>);

impl MigListings {
    /// The listings of every MIG device of `gpus`.
    pub fn of(gpus: &[Gpu]) -> MigListings {
        let mut listed = HashSet::new();
        for g in gpus {
            for m in &g.mig_devices {
                listed.extend(m.nvml_processes.iter().map(|n| (g.index, m.index, n.pid)));
            }
        }
        MigListings(listed)
    }

    /// As [`Snapshot::surely_holds_mig`], of `s` (the snapshot these
    /// listings were read from).
    pub fn surely_holds(&self, s: &Snapshot, p: &Process, gpu: u32, m: &MigDevice) -> bool {
        s.surely(p, gpu, m, self.0.contains(&(gpu, m.index, p.pid)))
    }

    /// As [`Snapshot::may_hold_mig`], of `s` (the snapshot these listings
    /// were read from).
    pub fn may_hold(&self, s: &Snapshot, p: &Process, gpu: u32, m: &MigDevice) -> bool {
        s.may(p, gpu, m, &|d| self.0.contains(&(gpu, d.index, p.pid)))
    }
}

/// What `--gpu` selected: GPUs by index, and of some of them only some MIG
/// devices (`--gpu 0:1`, `--gpu MIG-...`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    /// The selected GPUs (a GPU selected in part too), by index, in order.
    pub gpus: Vec<u32>,
    /// The GPUs selected only in part: their selected MIG device indexes.
    pub mig: std::collections::BTreeMap<u32, BTreeSet<u32>>,
}

impl Selection {
    /// Whole GPUs.
    pub fn whole(gpus: Vec<u32>) -> Selection {
        Selection {
            gpus,
            mig: Default::default(),
        }
    }

    /// How many GPUs and MIG devices it names (a GPU selected in part
    /// counts its MIG devices).
    pub fn count(&self) -> usize {
        self.gpus
            .iter()
            .map(|g| self.mig.get(g).map_or(1, BTreeSet::len))
            .sum()
    }

    /// Whether GPU `gpu` is selected, whole or in part.
    pub fn has(&self, gpu: u32) -> bool {
        self.gpus.contains(&gpu)
    }

    /// What it selects as `--gpu` takes it (`0`, `1:2`), in order.
    pub fn names(&self) -> Vec<String> {
        let mut gpus = self.gpus.clone();
        gpus.sort_unstable();
        gpus.dedup();
        gpus.iter()
            .flat_map(|g| match self.mig.get(g) {
                None => vec![g.to_string()],
                Some(ms) => ms.iter().map(|&m| mig_label(*g, m)).collect(),
            })
            .collect()
    }

    /// `--gpu` arguments that select exactly this (`--gpu 0 --gpu 1:2`).
    pub fn args(&self) -> Vec<String> {
        self.names()
            .into_iter()
            .flat_map(|sel| ["--gpu".to_string(), sel])
            .collect()
    }

    /// Whether it selects every GPU of `gpus`, each whole.
    pub fn is_all(&self, gpus: &[Gpu]) -> bool {
        self.mig.is_empty() && gpus.iter().all(|g| self.has(g.index))
    }

    /// `gpus` as the selection sees them: the selected ones, those selected
    /// in part narrowed to their MIG devices (fresh NVML readings compare
    /// with a narrowed snapshot this way).
    pub fn narrow_gpus(&self, gpus: &mut Vec<Gpu>) {
        gpus.retain(|g| self.has(g.index));
        for g in gpus.iter_mut() {
            self.narrow_gpu(g);
        }
    }

    /// `g` as the selection sees it: narrowed to its selected MIG devices
    /// where it is selected in part, else as it is.
    pub fn narrow_gpu(&self, g: &mut Gpu) {
        if let Some(keep) = self.mig.get(&g.index) {
            g.restrict_to(keep);
        }
    }
}

impl Snapshot {
    /// GPUs `gpus` as this snapshot has them: a GPU narrowed to some MIG
    /// devices stands for those devices (what a next command selects).
    pub fn selection_of(&self, gpus: &[u32]) -> Selection {
        let mig = self
            .gpus
            .iter()
            .filter(|g| g.mig_only && gpus.contains(&g.index))
            .map(|g| (g.index, g.mig_devices.iter().map(|m| m.index).collect()))
            .collect();
        Selection {
            gpus: gpus.to_vec(),
            mig,
        }
    }

    /// Whether `p` holds what `sel` selects (what a kill targets): a GPU
    /// selected whole, or surely one of the MIG devices selected of a GPU
    /// selected in part ([`Snapshot::surely_holds_mig`]).
    pub fn in_selection(&self, p: &Process, sel: &Selection) -> bool {
        sel.gpus.iter().any(|&gpu| match sel.mig.get(&gpu) {
            None => p.touches_gpu(gpu),
            Some(keep) => self.gpus.iter().filter(|g| g.index == gpu).any(|g| {
                g.mig_devices
                    .iter()
                    .filter(|m| keep.contains(&m.index))
                    .any(|m| self.surely_holds_mig(p, gpu, m))
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceUse, Memory, Via};

    fn mig(index: u32, gi: u32) -> MigDevice {
        mig_ci(index, gi, 0)
    }

    fn mig_ci(index: u32, gi: u32, ci: u32) -> MigDevice {
        MigDevice {
            index,
            gpu_instance_id: Some(gi),
            compute_instance_id: Some(ci),
            memory: Memory {
                total_bytes: 18 << 30,
                known: true,
                ..Memory::default()
            },
            ..MigDevice::default()
        }
    }

    #[test]
    fn a_capability_holder_holds_its_instance_and_no_other() {
        let cap = "/dev/nvidia-caps/nvidia-cap21";
        let holder = Process {
            pid: 40,
            devices: vec![DeviceUse {
                path: cap.into(),
                gpu: Some(0),
                via: vec![Via::Fd],
            }],
            ..Process::default()
        };
        let mut s = Snapshot {
            gpus: vec![Gpu {
                mig_mode: Some(true),
                mig_devices: vec![mig(0, 1), mig(1, 2)],
                ..Gpu::default()
            }],
            processes: vec![holder],
            ..Snapshot::default()
        };
        // gi 2's own access (no compute instance): every CI of gi 2.
        s.mig_caps.insert(
            cap.into(),
            MigCap {
                gpu: 0,
                gpu_instance_id: 2,
                compute_instance_id: None,
            },
        );
        let (p, g) = (&s.processes[0], &s.gpus[0]);
        let held: Vec<u32> = s.migs_maybe_held(p, g).map(|m| m.index).collect();
        assert_eq!(held, [1]);
        let one = |m: u32| Selection {
            gpus: vec![0],
            mig: [(0, [m].into())].into(),
        };
        // Its GPU instance's access alone: it may be on 0:1, which is then
        // not free, but nothing says it surely is: no kill target.
        assert!(!s.in_selection(p, &one(1)));
        assert!(!s.in_selection(p, &one(0)));
        let mut narrowed = s.clone();
        narrowed.restrict_mig(0, &[0].into());
        assert!(narrowed.processes.is_empty(), "{narrowed:?}");
        s.restrict_mig(0, &[1].into());
        assert_eq!(s.processes.len(), 1);
        assert_eq!(s.gpus[0].memory.total_bytes, 18 << 30);
        assert_eq!(s.gpus[0].mig_devices.len(), 1);
    }

    #[test]
    fn a_sibling_compute_instance_is_never_a_target() {
        // GPU instance 1 holds two compute instances: 0:0 (ci 0) and 0:1
        // (ci 1). P is on 0:0: it holds GPU instance 1's access and ci 0's.
        let caps = [("cap1", None), ("cap2", Some(0)), ("cap3", Some(1))];
        let p = Process {
            pid: 50,
            devices: caps[..2]
                .iter()
                .map(|(c, _)| DeviceUse {
                    path: (*c).into(),
                    gpu: Some(0),
                    via: vec![Via::Fd],
                })
                .collect(),
            ..Process::default()
        };
        let mut s = Snapshot {
            gpus: vec![Gpu {
                mig_mode: Some(true),
                mig_devices: vec![mig_ci(0, 1, 0), mig_ci(1, 1, 1)],
                ..Gpu::default()
            }],
            processes: vec![p],
            ..Snapshot::default()
        };
        for (c, ci) in caps {
            let cap = MigCap {
                gpu: 0,
                gpu_instance_id: 1,
                compute_instance_id: ci,
            };
            s.mig_caps.insert(c.into(), cap);
        }
        let (p, g) = (&s.processes[0], &s.gpus[0]);
        assert_eq!(
            s.migs_maybe_held(p, g).map(|m| m.index).collect::<Vec<_>>(),
            [0]
        );
        let sel = |m: u32| Selection {
            gpus: vec![0],
            mig: [(0, [m].into())].into(),
        };
        assert!(s.in_selection(p, &sel(0)));
        assert!(!s.in_selection(p, &sel(1)), "0:1 is its sibling's");
    }
}
