//! What "released" means for one execution, and the end verdict: the
//! targets' memory back, no target or what started again holding.

use crate::act::kill::plan::Selectors;
use crate::diagnose::verdict::holders_only_driver;
use crate::diagnose::verdict::Policy;
use crate::diagnose::{verdict, IDLE_SLACK_BYTES};
use crate::model::Vendor;
use crate::model::{
    GpuName, Held, Holds, Named, OwnerKind, Process, Reason, Report, Restart, Selection, Snapshot,
    VerdictState, Why,
};
use crate::pipeline::select;
use std::collections::{BTreeMap, BTreeSet};

/// How a process that was no target keeps a release from counting.
pub(super) enum Stranger<'a> {
    /// A child the target had before the kill.
    Child { parent: u32 },
    /// Started during the kill by the target's parent: a supervisor.
    ByParent { target: u32, parent: u32 },
    /// Started during the kill in the target's system unit, whose policy
    /// restarts (or could not be read).
    ByUnit { target: u32, unit: &'a str },
    /// Started during the kill beside the target: its fork, or a process
    /// of its unit, pod, container, or user and cgroup.
    Beside { target: u32 },
}

/// What "released" means for one execution.
pub(super) struct Release {
    /// Per GPU the targets touched: used bytes expected once their memory
    /// is back.
    pub(super) expected: BTreeMap<u32, u64>,
    /// PIDs whose NVML listing must go: targets and zombies that matched.
    pub(super) watched: BTreeSet<u32>,
    /// Every identity the run meant to free (planned or joined).
    pub(super) meant: BTreeSet<(u32, u64)>,
    /// Children the targets had before the kill (not targets themselves).
    pub(super) children: BTreeMap<(u32, u64), u32>,
    /// The GPUs the command is about, when only GPUs were selected.
    pub(super) gpus: Option<Selection>,
    /// What `--gpu` selected, if given: a GPU selected in part (MIG
    /// devices) is read as those devices in every reading.
    pub(super) selected: Selection,
}

impl Release {
    pub(super) fn new(
        initial: &Snapshot,
        signalled: &[Process],
        report: &Report,
        sel: &Selectors,
        meant: BTreeSet<(u32, u64)>,
    ) -> Release {
        let mut watched: BTreeSet<u32> = signalled.iter().map(|p| p.pid).collect();
        // Matched zombies that NVML lists: their memory is part of the ask.
        watched.extend(report.skipped.iter().filter(|k| !k.refused).map(|k| k.pid));
        let mut expected = BTreeMap::new();
        // A GPU selected in part is its selected MIG devices, here as in
        // every later reading (`memory_held`).
        let selected = sel.gpus.clone().unwrap_or_default();
        let mut gpus = initial.gpus.clone();
        for g in &mut gpus {
            selected.narrow_gpu(g);
        }
        for g in &gpus {
            let theirs: u64 = if g.vendor == Vendor::Nvidia {
                g.listed_bytes(|pid| watched.contains(&pid))
            } else {
                // A DRM GPU: what the targets' clients and the KFD held.
                signalled
                    .iter()
                    .flat_map(|p| &p.gpu_memory)
                    .filter(|m| m.gpu == g.index)
                    .filter_map(|m| m.used_bytes)
                    .fold(0, u64::saturating_add)
            };
            let touched = theirs > 0
                || signalled.iter().any(|p| p.touches_gpu(g.index))
                || g.nvml_processes.iter().any(|p| watched.contains(&p.pid));
            if touched {
                expected.insert(g.index, g.memory.used_bytes.saturating_sub(theirs));
            }
        }
        let children = initial
            .processes
            .iter()
            .filter_map(|p| {
                signalled
                    .iter()
                    .find(|t| t.pid == p.ppid)
                    .map(|t| ((p.pid, p.start_time_ticks), t.pid))
            })
            .collect();
        Release {
            expected,
            watched,
            meant,
            children,
            gpus: sel
                .gpus_only()
                .then(|| sel.gpus.clone().unwrap_or_default()),
            selected,
        }
    }

    /// What still holds the watched memory on these GPUs (empty: it is
    /// back). A GPU whose memory cannot be read is held until it can be.
    pub(super) fn memory_held(&self, gpus: &[crate::model::Gpu], nvml: bool) -> Vec<Held> {
        let mut held = Vec::new();
        for (&index, &expected) in &self.expected {
            let Some(mut g) = gpus
                .iter()
                .find(|g| g.index == index)
                .filter(|g| nvml || g.vendor != Vendor::Nvidia)
                .map(std::borrow::Cow::Borrowed)
            else {
                held.push(Held::NotReported { gpu: index });
                continue;
            };
            if self.selected.mig.contains_key(&index) {
                self.selected.narrow_gpu(g.to_mut());
            }
            if !g.memory.known && holders_only_driver(&g).is_some() {
                // No used memory to wait for: its clients gone (the targets
                // exited) is the release; the end verdict checks holders.
                continue;
            }
            if !g.memory.known {
                held.push(Held::Unreadable { gpu: index });
                continue;
            }
            let listed: Vec<u32> = g
                .nvml_processes
                .iter()
                .filter(|p| self.watched.contains(&p.pid))
                .map(|p| p.pid)
                .collect();
            let limit = expected.saturating_add(IDLE_SLACK_BYTES);
            if !listed.is_empty() || g.memory.used_bytes > limit {
                held.push(Held::Over {
                    gpu: index,
                    used: g.memory.used_bytes,
                    limit,
                    listed,
                });
            }
        }
        held
    }

    /// How `p`, not a target, keeps the release from counting, if it does:
    /// a child the targets had, or a process started during the kill by a
    /// target's parent, in a target's unit, pod or container, or with its
    /// user and cgroup (a fork that left the session), that holds what the
    /// target held.
    pub(super) fn stranger<'a>(
        &self,
        end: &'a Snapshot,
        p: &Process,
        signalled: &'a [Process],
        first_tick: u64,
    ) -> Option<Stranger<'a>> {
        if !p.is_live() || p.protected {
            return None;
        }
        if let Some(&parent) = self.children.get(&(p.pid, p.start_time_ticks)) {
            return Some(Stranger::Child { parent });
        }
        // A CUDA context maps its GPU's node or has memory; a monitor
        // (nvidia-smi, nvtop, gpufree serve) only opens nodes, and the
        // control nodes (nvidiactl, nvidia-uvm) are everyone's.
        let context = p.memory_bytes() > 0
            || p.devices
                .iter()
                .any(|d| d.gpu.is_some() && d.via.contains(&crate::model::Via::Mmap));
        if !context {
            return None;
        }
        let gpus = crate::diagnose::gpus_of(p);
        let shares = |t: &Process| crate::diagnose::gpus_of(t).iter().any(|g| gpus.contains(g));
        let same_owner = |t: &Process| {
            matches!(
                t.owner.kind,
                OwnerKind::SystemdUnit | OwnerKind::Container | OwnerKind::K8sPod
            ) && t.owner.kind == p.owner.kind
                && t.owner.id == p.owner.id
        };
        let t = signalled.iter().find(|t| {
            shares(t)
                && p.start_time_ticks >= first_tick
                && (p.ppid == t.pid
                    || p.ppid == t.ppid
                    || same_owner(t)
                    || (p.uid == t.uid && p.cgroup == t.cgroup))
        })?;
        let by_parent = p.ppid == t.ppid && p.ppid > 1;
        // A unit whose files say Restart=no did not start it again.
        let restarting_unit = t
            .owner
            .system_unit()
            .filter(|u| same_owner(t) && end.units.get(*u).is_none_or(|r| r.restarts()));
        Some(if by_parent {
            Stranger::ByParent {
                target: t.pid,
                parent: p.ppid,
            }
        } else if let Some(unit) = restarting_unit {
            Stranger::ByUnit {
                target: t.pid,
                unit,
            }
        } else {
            Stranger::Beside { target: t.pid }
        })
    }

    /// Why `p`, not a target, keeps the release from counting, with what
    /// stops its supervisor; None when it does not.
    pub(super) fn restarted(
        &self,
        end: &Snapshot,
        p: &Process,
        signalled: &[Process],
        first_tick: u64,
    ) -> Option<Why> {
        // What the command freed: the selected MIG devices where it
        // selected some, else the GPUs this process holds.
        let free = match &self.gpus {
            Some(sel) if !sel.mig.is_empty() => sel.clone(),
            _ => Selection::whole(crate::diagnose::gpus_of(p)),
        };
        let how = match self.stranger(end, p, signalled, first_tick)? {
            Stranger::Child { parent } => Restart::Child { parent },
            // A supervisor goes first; its workers, orphaned then, are
            // freed by GPU.
            Stranger::ByParent { target, parent } => Restart::ByParent {
                target,
                parent,
                parent_comm: end.comm_of(parent).map(str::to_string),
                free,
            },
            Stranger::ByUnit { target, unit } => Restart::ByUnit {
                target,
                unit: unit.to_string(),
                stop: crate::diagnose::supervisors::stop_unit(unit, &free),
                parent: p.ppid,
                free,
            },
            Stranger::Beside { target } => Restart::Beside { target },
        };
        Some(Why::Restarted {
            holder: Named::of(p),
            holds: Holds::of(p),
            how,
        })
    }

    /// The end verdict from a fresh snapshot.
    pub(super) fn judge(
        &self,
        end: &Snapshot,
        report: &Report,
        signalled: &[Process],
        first_tick: u64,
        holders_only: bool,
    ) -> crate::model::Verdict {
        let unchecked: Vec<Reason> = report
            .unchecked
            .iter()
            .map(|u| {
                // Its sentence is `Change`'s Display, made in present.
                Reason::new(Why::Unchecked {
                    pid: u.pid,
                    why: u.why.to_string(),
                })
            })
            .collect();
        if let Some(gpus) = &self.gpus {
            let policy = Policy {
                holders_only,
                ..Policy::default()
            };
            return self.judge_gpus(end, gpus, &policy, unchecked, signalled, first_tick);
        }
        let mut busy: Vec<Reason> = end
            .processes
            .iter()
            .filter_map(|p| self.still_held_by(end, p, report, signalled, first_tick))
            .map(Reason::new)
            .collect();
        let mut unknown = unchecked;
        // The targets' memory, from the end snapshot's NVML: what cannot be
        // read leaves the release unknown, unless the holders alone count.
        for held in self.memory_held(&end.gpus, end.nvml.available) {
            let (gpu, reported) = match held {
                Held::Over {
                    gpu,
                    used,
                    limit,
                    listed,
                } => {
                    let why = Why::MemoryOver {
                        used,
                        limit,
                        listed,
                    };
                    busy.push(Reason::new(why).on(GpuName {
                        index: gpu,
                        mig: Vec::new(),
                    }));
                    continue;
                }
                Held::NotReported { gpu } => (gpu, false),
                Held::Unreadable { gpu } => (gpu, true),
            };
            if !holders_only {
                unknown.push(Reason::new(Why::ReleaseUnproven {
                    gpu,
                    reported,
                    error: end.nvml.error.as_ref().map(ToString::to_string),
                }));
            }
        }
        verdict::finish(busy, unknown, Vec::new())
    }

    /// The end verdict of "free these GPUs": their verdict, naming what
    /// started a holder again where one did.
    fn judge_gpus(
        &self,
        end: &Snapshot,
        gpus: &Selection,
        policy: &Policy,
        unchecked: Vec<Reason>,
        signalled: &[Process],
        first_tick: u64,
    ) -> crate::model::Verdict {
        let v = verdict::overall(&select(end.clone(), gpus), policy);
        let (busy, unknown) = match v.state {
            VerdictState::Busy => (
                end.processes
                    .iter()
                    .filter(|p| end.in_selection(p, gpus))
                    .filter_map(|p| self.restarted(end, p, signalled, first_tick))
                    .map(Reason::new)
                    .chain(v.reasons)
                    .collect(),
                unchecked,
            ),
            _ => (Vec::new(), unchecked.into_iter().chain(v.reasons).collect()),
        };
        verdict::finish(busy, unknown, v.caveats)
    }

    /// Why `p` of the end snapshot keeps the release from counting, if it
    /// does: a target that changed but is still listed, a target still
    /// holding, a zombie still listed, or a stranger started again.
    fn still_held_by(
        &self,
        end: &Snapshot,
        p: &Process,
        report: &Report,
        signalled: &[Process],
        first_tick: u64,
    ) -> Option<Why> {
        let listed = |pid: u32| {
            end.gpus
                .iter()
                .any(|g| g.nvml_processes.iter().any(|n| n.pid == pid))
        };
        let meant = self.meant.contains(&(p.pid, p.start_time_ticks));
        if report.changed.iter().any(|c| c.pid == p.pid) && listed(p.pid) {
            Some(Why::ChangedListed { pid: p.pid })
        } else if meant && p.is_live() {
            Some(Why::StillHolds {
                holder: Named::of(p),
                holds: Holds::of(p),
                asleep: p.state == "D",
                wchan: p.wchan.clone().filter(|_| p.state == "D"),
            })
        } else if self.watched.contains(&p.pid) && !p.is_live() && listed(p.pid) {
            Some(Why::ZombieStillListed {
                pid: p.pid,
                ppid: p.ppid,
            })
        } else {
            self.restarted(end, p, signalled, first_tick)
        }
    }
}
