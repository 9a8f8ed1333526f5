//! The plan and the release, tested from snapshot values.

use super::settle::{restart_sec, SUSPECT_WATCH};
use super::*;
use crate::act::kill::settle::known_restart_watch;
use crate::model::Process;
use crate::model::{DeviceUse, GpuMemory, Owner, OwnerKind, Selection, Via};
use crate::present::words::target::{left, target};
use regex::Regex;
use std::collections::BTreeMap;
use std::collections::BTreeSet;

fn p(pid: u32, ppid: u32, gpu: Option<u32>, memory: u64) -> Process {
    Process {
        pid,
        ppid,
        comm: "python3".into(),
        cmdline: vec!["python3".into(), "serve.py".into()],
        exe: Some("/usr/bin/python3.12".into()),
        state: "S".into(),
        threads: 1,
        start_time_ticks: 1000 + u64::from(pid),
        gpu_memory: gpu
            .filter(|_| memory > 0)
            .map(|g| {
                vec![GpuMemory {
                    gpu: g,
                    used_bytes: Some(memory),
                }]
            })
            .unwrap_or_default(),
        devices: vec![
            DeviceUse {
                path: "/test-dev/nvidia-uvm".into(),
                gpu: None,
                via: vec![Via::Fd],
            },
            DeviceUse {
                path: format!("/test-dev/nvidia{}", gpu.unwrap_or(0)),
                gpu: Some(gpu.unwrap_or(0)),
                via: vec![Via::Fd],
            },
        ]
        .into_iter()
        .filter(|d| gpu.is_some() || d.gpu.is_none())
        .collect(),
        ..Process::default()
    }
}

fn snap(ps: Vec<Process>) -> Snapshot {
    Snapshot {
        processes: ps,
        ..Snapshot::default()
    }
}

fn safety() -> Safety {
    Safety {
        me: 50,
        ancestors: vec![40, 1],
        uid: 0,
        ..Safety::default()
    }
}

fn pids(plan: &Plan) -> Vec<u32> {
    plan.targets.iter().map(|e| e.pid).collect()
}

#[test]
fn gpu_selection_takes_its_holders_and_the_shared_node_holders_of_their_launcher() {
    // 100 launcher (uvm only), 101/102 workers on GPU 0 and 1, 103 tracker
    // (uvm only), and 200: an unrelated uvm holder.
    let s = snap(vec![
        p(100, 10, None, 0),
        p(101, 100, Some(0), 5),
        p(102, 100, Some(1), 5),
        p(103, 100, None, 0),
        p(200, 10, None, 0),
    ]);
    let sel = Selectors {
        gpus: Some(Selection::whole(vec![0])),
        ..Selectors::default()
    };
    assert_eq!(pids(&plan(&s, &sel, &safety())), vec![100, 101, 103]);
    let sel = Selectors {
        gpus: Some(Selection::whole(vec![0, 1])),
        ..Selectors::default()
    };
    assert_eq!(pids(&plan(&s, &sel, &safety())), vec![100, 101, 102, 103]);
    let inc = Safety {
        include_shared: true,
        ..safety()
    };
    assert_eq!(pids(&plan(&s, &sel, &inc)), vec![100, 101, 102, 103, 200]);
}

#[test]
fn a_mig_selection_lends_no_shared_holder_of_a_group_on_other_instances() {
    use crate::model::{Gpu, MigDevice, NvmlProcess, NvmlProcessKind};
    // 100 launcher (uvm only), 101 on MIG device 0:0, 102 on 0:1, 103 a
    // tracker (uvm only): one group across two instances of GPU 0.
    let on = |index: u32, pids: &[u32]| MigDevice {
        index,
        gpu_instance_id: Some(index + 1),
        compute_instance_id: Some(0),
        nvml_processes: pids
            .iter()
            .map(|&pid| NvmlProcess {
                pid,
                used_bytes: Some(5),
                kind: NvmlProcessKind::Compute,
            })
            .collect(),
        ..MigDevice::default()
    };
    let host = |procs: Vec<Process>, devices: Vec<MigDevice>| Snapshot {
        gpus: vec![Gpu {
            mig_mode: Some(true),
            mig_devices: devices,
            ..Gpu::default()
        }],
        ..snap(procs)
    };
    let only_01 = Selectors {
        gpus: Some(Selection {
            gpus: vec![0],
            mig: [(0, [1].into())].into(),
        }),
        ..Selectors::default()
    };
    let group = vec![
        p(100, 10, None, 0),
        p(101, 100, Some(0), 5),
        p(102, 100, Some(0), 5),
        p(103, 100, None, 0),
    ];
    let s = host(group.clone(), vec![on(0, &[101]), on(1, &[102])]);
    // The launcher and tracker may serve 101 on the other tenant's
    // instance: only 102 is this kill's.
    assert_eq!(pids(&plan(&s, &only_01, &safety())), vec![102]);
    // The whole GPU takes them along, as before.
    let whole = Selectors {
        gpus: Some(Selection::whole(vec![0])),
        ..Selectors::default()
    };
    assert_eq!(pids(&plan(&s, &whole, &safety())), vec![100, 101, 102, 103]);
    // A group all on 0:1 brings its shared holders.
    let mut alone = group;
    alone.remove(1);
    let s = host(alone, vec![on(0, &[]), on(1, &[102])]);
    assert_eq!(pids(&plan(&s, &only_01, &safety())), vec![100, 102, 103]);
}

#[test]
fn selectors_narrow_and_non_holders_are_never_targets() {
    let mut a = p(101, 10, Some(0), 5);
    a.owner = Owner {
        kind: OwnerKind::SystemdUnit,
        id: "vllm.service".into(),
        name: "vllm.service".into(),
        claims: None,
    };
    a.uid = 1000;
    a.user = "alice".into();
    let mut b = p(102, 10, Some(0), 5);
    b.comm = "VLLM::Worker_TP".into();
    b.cmdline = vec!["VLLM::Worker_TP1".into()];
    let s = snap(vec![a, b]);
    let unit = Selectors {
        unit: Some("vllm".into()),
        ..Selectors::default()
    };
    assert_eq!(pids(&plan(&s, &unit, &safety())), vec![101]);
    // A user's unit of the same name is another owner, named in full.
    let mut mine = s.clone();
    let mut u = p(103, 10, Some(0), 5);
    u.owner = Owner {
        kind: OwnerKind::SystemdUnit,
        id: "vllm.service".into(),
        name: "vllm.service (user 1000)".into(),
        claims: None,
    };
    mine.processes.push(u);
    assert_eq!(pids(&plan(&mine, &unit, &safety())), vec![101]);
    let full = Selectors {
        unit: Some("vllm.service (user 1000)".into()),
        ..Selectors::default()
    };
    assert_eq!(pids(&plan(&mine, &full, &safety())), vec![103]);
    assert!(check_unit(&mine, "vllm").is_ok());
    let user = Selectors {
        user: Some(UserSel::Name("alice".into())),
        ..Selectors::default()
    };
    assert_eq!(pids(&plan(&s, &user, &safety())), vec![101]);
    let uid = Selectors {
        user: Some(UserSel::Uid(0)),
        ..Selectors::default()
    };
    assert_eq!(pids(&plan(&s, &uid, &safety())), vec![102]);
    let m = Selectors {
        matcher: Some(Regex::new("Worker_TP1").unwrap()),
        ..Selectors::default()
    };
    assert_eq!(pids(&plan(&s, &m, &safety())), vec![102]);
    let exe = Selectors {
        matcher: Some(Regex::new("python3\\.12$").unwrap()),
        ..Selectors::default()
    };
    assert_eq!(
        pids(&plan(&s, &exe, &safety())),
        vec![101, 102],
        "the exe counts: renamed workers still match"
    );
    let stranger = Selectors {
        pids: vec![101, 777],
        ..Selectors::default()
    };
    let pl = plan(&s, &stranger, &safety());
    assert_eq!(pids(&pl), vec![101]);
    assert!(pl
        .skipped
        .iter()
        .any(|k| k.pid == 777 && !k.refused && left(&k.why).contains("never a target")));
}

#[test]
fn safety_refuses_init_self_ancestors_protected_others_and_zombies() {
    let mut prot = p(60, 1, Some(0), 0);
    prot.protected = true;
    prot.comm = "nvidia-persiste".into();
    let mut other = p(61, 10, Some(0), 5);
    other.uid = 1001;
    other.user = "bob".into();
    let mut z = p(62, 33, Some(0), 0);
    z.state = "Z".into();
    let s = snap(vec![
        p(1, 0, Some(0), 5),
        p(50, 40, Some(0), 5),
        p(40, 1, Some(0), 5),
        prot,
        other,
        z,
    ]);
    let all = Selectors {
        gpus: Some(Selection::whole(vec![0])),
        ..Selectors::default()
    };
    let pl = plan(&s, &all, &safety());
    assert_eq!(
        pids(&pl),
        vec![61],
        "root may signal other users' processes"
    );
    let reasons: BTreeMap<u32, String> = pl.skipped.iter().map(|k| (k.pid, left(&k.why))).collect();
    assert!(reasons[&1].contains("init"));
    assert!(reasons[&50].contains("itself"));
    assert!(reasons[&40].contains("ancestor"));
    assert!(reasons[&60].contains("protected"));
    assert!(reasons[&62].contains("parent 33 must reap"));
    let forced = Safety {
        force_protected: true,
        ..safety()
    };
    assert_eq!(pids(&plan(&s, &all, &forced)), vec![60, 61]);
    let nobody = Safety {
        uid: 65534,
        ..safety()
    };
    let pl = plan(&s, &all, &nobody);
    assert!(pids(&pl).is_empty());
    assert!(pl
        .skipped
        .iter()
        .any(|k| k.pid == 61 && left(&k.why).contains("run as root")));
}

#[test]
fn a_known_supervisor_is_given_its_restart_delay_and_a_start_up() {
    assert_eq!(restart_sec("5"), Duration::from_secs(5));
    assert_eq!(restart_sec("100ms"), Duration::from_millis(100));
    assert_eq!(restart_sec("1min 30s"), Duration::from_secs(90));
    assert_eq!(restart_sec("soon"), Duration::from_millis(100));
    let mut t = p(10, 1, Some(0), 1 << 30);
    t.owner = crate::model::Owner {
        kind: OwnerKind::SystemdUnit,
        id: "vllm.service".into(),
        name: "vllm.service".into(),
        claims: None,
    };
    let mut s = snap(vec![t.clone()]);
    assert_eq!(
        known_restart_watch(&s, &[t.clone()]),
        Duration::ZERO,
        "no unit file read"
    );
    let unit = |restart: &str, sec: Option<&str>| crate::model::UnitRestart {
        restart: restart.into(),
        restart_sec: sec.map(str::to_string),
        source: Default::default(),
        unreadable: Vec::new(),
    };
    s.units.insert("vllm.service".into(), unit("no", None));
    assert_eq!(known_restart_watch(&s, &[t.clone()]), Duration::ZERO);
    s.units
        .insert("vllm.service".into(), unit("always", Some("2s")));
    assert_eq!(
        known_restart_watch(&s, &[t.clone()]),
        Duration::from_secs(2) + SUSPECT_WATCH
    );
    t.owner.kind = OwnerKind::K8sPod;
    assert_eq!(known_restart_watch(&s, &[t]), SUSPECT_WATCH);
}

/// NVML sizes near u64::MAX (a lying or broken driver) neither
/// overflow the targets' listed memory nor the expected memory plus
/// its slack, in a debug build.
#[test]
fn release_of_huge_nvml_sizes_does_not_overflow() {
    use crate::model::{Gpu, Memory, NvmlProcess, NvmlProcessKind};
    let listed = |pid| NvmlProcess {
        pid,
        used_bytes: Some(u64::MAX),
        kind: NvmlProcessKind::Compute,
    };
    let full = |index, pids: Vec<u32>| Gpu {
        index,
        memory: Memory {
            used_bytes: u64::MAX,
            known: true,
            ..Memory::default()
        },
        nvml_processes: pids.into_iter().map(listed).collect(),
        ..Gpu::default()
    };
    // GPU 0: both targets listed at u64::MAX; GPU 1: full, listing
    // only a process that is no target.
    let s = Snapshot {
        gpus: vec![full(0, vec![101, 102]), full(1, vec![999])],
        ..snap(vec![p(101, 10, Some(0), 5), p(102, 10, Some(1), 5)])
    };
    let r = Release::new(
        &s,
        &s.processes,
        &Report::default(),
        &Selectors::default(),
        BTreeSet::new(),
    );
    assert_eq!(r.expected[&0], 0);
    assert_eq!(r.expected[&1], u64::MAX);
    let mut after = s.gpus.clone();
    after[0].nvml_processes.clear();
    after[0].memory.used_bytes = 0;
    assert!(r.memory_held(&after, true).is_empty());
    after[0].memory.used_bytes = 1 << 40;
    assert!(matches!(
        r.memory_held(&after, true)[..],
        [Held::Over { gpu: 0, used, .. }] if used == 1 << 40
    ));
    // Without NVML nothing is known about either GPU: unknown, not busy.
    assert_eq!(
        r.memory_held(&after, false),
        [Held::NotReported { gpu: 0 }, Held::NotReported { gpu: 1 }]
    );
    after[0].memory.known = false;
    assert_eq!(r.memory_held(&after, true)[0], Held::Unreadable { gpu: 0 });
}

#[test]
fn a_drm_gpu_is_released_by_sysfs_memory_or_by_its_clients_gone() {
    use crate::model::{Gpu, Memory};
    let s = Snapshot {
        gpus: vec![Gpu {
            vendor: crate::model::Vendor::Amd,
            driver: Some("amdgpu".into()),
            memory: Memory {
                used_bytes: 8 << 30,
                known: true,
                ..Memory::default()
            },
            ..Gpu::default()
        }],
        ..snap(vec![p(101, 10, Some(0), 5 << 30)])
    };
    let r = Release::new(
        &s,
        &s.processes,
        &Report::default(),
        &Selectors::default(),
        BTreeSet::new(),
    );
    let mut after = s.gpus.clone();
    // Without NVML, sysfs still tells an AMD GPU's memory.
    assert!(matches!(
        r.memory_held(&after, false)[..],
        [Held::Over { gpu: 0, .. }]
    ));
    after[0].memory.used_bytes = 100 << 20;
    assert!(r.memory_held(&after, false).is_empty());
    // An unreadable amdgpu file is unknown; xe publishes no use at all,
    // so its clients gone is the release.
    after[0].memory.known = false;
    assert_eq!(r.memory_held(&after, false), [Held::Unreadable { gpu: 0 }]);
    after[0].vendor = crate::model::Vendor::Intel;
    after[0].driver = Some("xe".into());
    assert!(r.memory_held(&after, false).is_empty());
}

/// Trust III: a user's process whose delegated cgroup names root's
/// container (`user@65534.service/app.slice/docker-<id>.scope`) only
/// claims it: `--unit <id>` selects root's container alone, and the
/// user's manager's id selects the user's.
#[test]
fn unit_never_selects_a_claimed_container() {
    const CID: &str = "3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7a8";
    let mut root = p(101, 10, Some(0), 5);
    root.owner = Owner {
        kind: OwnerKind::Container,
        id: CID.into(),
        name: "docker 3f2a1b4c5d6e".into(),
        claims: None,
    };
    let mut user = p(102, 11, Some(0), 5);
    user.uid = 65534;
    user.owner = Owner {
        kind: OwnerKind::Session,
        id: "user@65534.service".into(),
        name: "apps of uid 65534".into(),
        claims: Some(crate::model::Claim {
            kind: OwnerKind::Container,
            id: CID.into(),
            name: "docker 3f2a1b4c5d6e".into(),
        }),
    };
    let s = snap(vec![root, user]);
    for unit in [CID, &CID[..12], "docker 3f2a1b4c5d6e"] {
        let sel = Selectors {
            unit: Some(unit.into()),
            ..Selectors::default()
        };
        assert!(check_unit(&s, unit).is_ok(), "{unit}");
        assert_eq!(pids(&plan(&s, &sel, &safety())), vec![101], "{unit}");
    }
    let manager = Selectors {
        unit: Some("user@65534.service".into()),
        ..Selectors::default()
    };
    assert_eq!(pids(&plan(&s, &manager, &safety())), vec![102]);
    // With the whole GPU selected, the user's holder of shared nodes
    // only is not "started with" root's container.
    let mut shared = p(103, 11, None, 0);
    shared.owner = s.processes[1].owner.clone();
    let mut s = s;
    s.processes.push(shared);
    let gpu = Selectors {
        gpus: Some(Selection::whole(vec![0])),
        unit: Some(CID.into()),
        ..Selectors::default()
    };
    assert_eq!(pids(&plan(&s, &gpu, &safety())), vec![101]);
}

/// A user's unit named like a system unit is another owner: its holder of
/// shared nodes only is not "started with" the system unit's holders.
#[test]
fn a_users_unit_of_the_same_name_lends_no_shared_holder() {
    let unit = |name: &str| Owner {
        kind: OwnerKind::SystemdUnit,
        id: "vllm.service".into(),
        name: name.into(),
        claims: None,
    };
    let mut system = p(101, 10, Some(0), 5);
    system.owner = unit("vllm.service");
    let mut same = p(102, 10, None, 0);
    same.owner = unit("vllm.service");
    let mut users = p(103, 11, None, 0);
    users.uid = 1000;
    users.owner = unit("vllm.service (user 1000)");
    let s = snap(vec![system, same, users]);
    let sel = Selectors {
        gpus: Some(Selection::whole(vec![0])),
        unit: Some("vllm".into()),
        ..Selectors::default()
    };
    assert_eq!(pids(&plan(&s, &sel, &safety())), vec![101, 102]);
}

/// A person's MPS daemons (`nvidia-cuda-mps-*` run by alice): alice's own
/// kill leaves them out as protected, root's kill of the GPU includes them
/// with the client, saying why, and the server's words still say its
/// clients go with it.
#[test]
fn a_persons_mps_is_protected_only_in_that_persons_kills() {
    use crate::model::{Gpu, NvmlProcess, NvmlProcessKind, Protection};
    let daemon = |pid: u32, program: &str, memory: u64| {
        let mut d = p(pid, 1, Some(0), memory);
        d.comm = "nvidia-cuda-mps".into();
        d.exe = Some(format!("/usr/bin/{program}"));
        d.cmdline = vec![program.into()];
        d.protected = true;
        d.protection = Some(Protection::User);
        d.uid = 1000;
        d.user = "alice".into();
        d
    };
    let mut client = p(72, 10, Some(0), 0);
    client.uid = 1000;
    client.user = "alice".into();
    let mut s = snap(vec![
        daemon(70, "nvidia-cuda-mps-control", 0),
        daemon(71, "nvidia-cuda-mps-server", 64 << 20),
        client,
    ]);
    s.gpus = vec![Gpu {
        index: 0,
        nvml_processes: vec![NvmlProcess {
            pid: 72,
            used_bytes: Some(4 << 30),
            kind: NvmlProcessKind::Mps,
        }],
        ..Gpu::default()
    }];
    assert_eq!(
        s.mps_role(&s.processes[1]),
        Some(crate::model::MpsRole::Server)
    );
    let all = Selectors {
        gpus: Some(Selection::whole(vec![0])),
        ..Selectors::default()
    };
    let alices = Safety {
        uid: 1000,
        ..safety()
    };
    let pl = plan(&s, &all, &alices);
    assert_eq!(pids(&pl), vec![72]);
    let skipped: BTreeMap<u32, &Skipped> = pl.skipped.iter().map(|k| (k.pid, k)).collect();
    assert!(skipped[&70].refused && left(&skipped[&70].why).contains("protected"));
    assert!(skipped[&71].refused && left(&skipped[&71].why).contains("protected, left running"));
    let pl = plan(&s, &all, &safety());
    assert_eq!(pids(&pl), vec![70, 71, 72], "{pl:?}");
    let reason = |pid: u32| {
        pl.targets
            .iter()
            .find(|t| t.pid == pid)
            .map(|t| target(&t.why))
            .unwrap()
    };
    assert!(reason(70).contains("alice's own MPS daemon: protected only in alice's kills"));
    assert!(reason(71).contains("alice's own MPS daemon"));
    assert!(
        reason(71).contains("its clients are targets too"),
        "{}",
        reason(71)
    );
    assert!(reason(72).contains("an MPS client of server 71"));
    // bob's kill may not touch alice's processes at all.
    let bobs = Safety {
        uid: 1001,
        ..safety()
    };
    assert!(pids(&plan(&s, &all, &bobs)).is_empty());
    // A system account's MPS stays out of root's kill.
    for d in &mut s.processes[..2] {
        d.uid = 0;
        d.user = "root".into();
        d.protection = Some(Protection::System);
    }
    assert_eq!(pids(&plan(&s, &all, &safety())), vec![72]);
}
