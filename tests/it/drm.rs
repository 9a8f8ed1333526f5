//! AMD and Intel GPUs through DRM and the KFD, on fixture trees: a sysfs
//! laid out as the kernel's (cards, render nodes, their PCI devices and
//! drivers, amdgpu's memory files, the KFD's topology and processes), a
//! /proc whose DRM fds carry drm-usage-stats fdinfo, and a device
//! directory of plain files.

use crate::harness::*;
use gpufree::demo::holder::HoldSpec;
use serde_json::Value;
use std::os::unix::fs::symlink;
use std::path::Path;

const GIB: u64 = 1 << 30;
const AMD: &str = "0000:c3:00.0";
const INTEL: &str = "0000:03:00.0";

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A PCI device bound to `driver` with `files`, and `class/drm/NAME/device`
/// linking to it for each of `names`.
fn pci_gpu(sys: &Path, slot: &str, driver: &str, names: &[&str], files: &[(&str, &str)]) {
    let dev = sys.join("devices/pci0000:00").join(slot);
    std::fs::create_dir_all(&dev).unwrap();
    for (name, text) in files {
        std::fs::write(dev.join(name), text).unwrap();
    }
    let drv = sys.join("bus/pci/drivers").join(driver);
    std::fs::create_dir_all(&drv).unwrap();
    symlink(&drv, dev.join("driver")).unwrap();
    for name in names {
        let class = sys.join("class/drm").join(name);
        std::fs::create_dir_all(&class).unwrap();
        symlink(&dev, class.join("device")).unwrap();
    }
}

/// A host with an MI300-like AMD GPU (card1, renderD128: 192 GiB, 30 GiB
/// used) known to the KFD as gpu id 4242, and an Intel xe GPU (card0,
/// renderD129), plus a BMC's display controller (card2, no render node).
fn host(d: &TestDir) -> std::path::PathBuf {
    let sys = d.tmp.path().join("sys");
    pci_gpu(
        &sys,
        AMD,
        "amdgpu",
        &["card1", "renderD128"],
        &[
            ("vendor", "0x1002\n"),
            ("mem_info_vram_total", &format!("{}\n", 192 * GIB)),
            ("mem_info_vram_used", &format!("{}\n", 30 * GIB)),
        ],
    );
    pci_gpu(
        &sys,
        INTEL,
        "xe",
        &["card0", "renderD129"],
        &[("vendor", "0x8086\n")],
    );
    pci_gpu(
        &sys,
        "0000:02:00.0",
        "ast",
        &["card2"],
        &[("vendor", "0x1a03\n")],
    );
    write(&sys, "class/kfd/kfd/topology/nodes/0/gpu_id", "0\n");
    write(&sys, "class/kfd/kfd/topology/nodes/1/gpu_id", "4242\n");
    write(
        &sys,
        "class/kfd/kfd/topology/nodes/1/properties",
        &format!("domain 0\nlocation_id {}\n", 0xc3 << 8),
    );
    for n in [
        "dri/card0",
        "dri/card1",
        "dri/card2",
        "dri/renderD128",
        "dri/renderD129",
        "kfd",
    ] {
        write(&d.dev, n, "x");
    }
    sys
}

fn amdgpu(client: u64, vram_gib: u64) -> String {
    format!(
        "pos:\t0\nflags:\t02100002\ndrm-driver:\tamdgpu\ndrm-client-id:\t{client}\n\
         drm-pdev:\t{AMD}\ndrm-total-vram:\t{kib} KiB\ndrm-resident-vram:\t{kib} KiB\n\
         drm-total-gtt:\t2048 KiB\n",
        kib = vram_gib * GIB / 1024
    )
}

fn holder<'a>(pid: u32, ppid: u32, comm: &'a str, fds: &'a [&'a Path]) -> FakeProcess<'a> {
    FakeProcess {
        pid,
        ppid,
        comm,
        state: 'S',
        start: 100 + u64::from(pid),
        cmdline: &["python3", "train.py"],
        exe: "/usr/bin/python3.12",
        uid: 0,
        cgroup: "0::/system.slice/train.service\n",
        fds,
        maps: &[],
    }
}

fn gpu<'a>(doc: &'a Value, vendor: &str) -> &'a Value {
    doc["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["vendor"] == vendor)
        .unwrap_or_else(|| panic!("no {vendor} GPU: {doc}"))
}

fn memory_on(doc: &Value, pid: u32, gpu: &Value) -> Vec<Value> {
    let p = process(doc, pid).unwrap_or_else(|| panic!("{pid} missing: {doc}"));
    p["gpu_memory"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["gpu"] == gpu["index"])
        .map(|m| m["used_bytes"].clone())
        .collect()
}

/// `gpufree WORDS` on the fixture host: its /proc, devices and sysfs,
/// no NVML library.
fn on_host(words: &[&str], fake: &FakeProc, d: &TestDir, sys: &Path) -> Gpufree {
    Gpufree::new(words)
        .proc_root(&fake.root)
        .dev(&d.dev)
        .no_nvml()
        .env("GPUFREE_SYS_ROOT", sys)
}

#[test]
fn amd_and_intel_holders_show_their_memory_shared_clients_counted_once() {
    let d = TestDir::new(0);
    let sys = host(&d);
    let fake = FakeProc::new(d.tmp.path());
    let (r128, r129, kfd) = (
        d.node("dri/renderD128"),
        d.node("dri/renderD129"),
        d.node("kfd"),
    );
    // A trainer with 8 GiB in client 7, and its forked DataLoader worker
    // that inherited the same fd: one client, two processes.
    fake.add(&holder(100, 1, "python3", &[&r128]));
    fake.fdinfo(100, 0, &amdgpu(7, 8));
    fake.add(&holder(101, 100, "pt_data_worker", &[&r128]));
    fake.fdinfo(101, 0, &amdgpu(7, 8));
    // A ROCm job: 1 GiB through its render fd, 4 GiB as the KFD counts.
    fake.add(&holder(102, 1, "VLLM::Worker_TP0", &[&r128, &kfd]));
    fake.fdinfo(102, 0, &amdgpu(9, 1));
    write(
        &sys,
        "class/kfd/kfd/proc/102/vram_4242",
        &format!("{}\n", 4 * GIB),
    );
    // An xe client with 96 MiB in vram0 (and its engine cycles, no memory).
    fake.add(&holder(200, 1, "level_zero_app", &[&r129]));
    fake.fdinfo(
        200,
        0,
        &format!(
            "drm-driver:\txe\ndrm-client-id:\t9\ndrm-pdev:\t{INTEL}\n\
             drm-total-vram0:\t96 MiB\ndrm-resident-vram0:\t96 MiB\n\
             drm-total-gtt:\t256 KiB\ndrm-cycles-rcs:\t1500000\n"
        ),
    );
    let doc = on_host(&["status", "--json"], &fake, &d, &sys).doc();
    let gpus = doc["gpus"].as_array().unwrap();
    assert_eq!(
        gpus.len(),
        2,
        "the BMC's display controller is no GPU: {doc}"
    );
    let amd = gpu(&doc, "amd");
    assert_eq!(amd["pci_bus_id"], AMD);
    assert_eq!(amd["memory"]["total_bytes"], 192 * GIB);
    assert_eq!(amd["memory"]["used_bytes"], 30 * GIB);
    // Client 7 once (8) + the ROCm job's KFD VRAM (4, not 4 + 1).
    assert_eq!(amd["memory"]["accounted_bytes"], 12 * GIB);
    assert_eq!(amd["memory"]["unaccounted_bytes"], 18 * GIB);
    assert_eq!(amd["verdict"]["state"], "busy");
    // The shared client counts once, in the first process's memory, and
    // each process says who shares it.
    assert_eq!(memory_on(&doc, 100, amd), [Value::from(8 * GIB)]);
    assert_eq!(memory_on(&doc, 101, amd), [Value::from(0)]);
    let clients = |pid| process(&doc, pid).unwrap()["drm_clients"].clone();
    assert_eq!(
        clients(101),
        serde_json::json!([{"gpu": amd["index"], "driver": "amdgpu", "client_id": 7,
                            "device_bytes": 8 * GIB, "shared_with": [100]}])
    );
    assert_eq!(clients(100)[0]["shared_with"], serde_json::json!([101]));
    assert_eq!(memory_on(&doc, 102, amd), [Value::from(4 * GIB)]);
    let dev = &process(&doc, 102).unwrap()["devices"];
    let render = dev
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["path"].as_str().unwrap().ends_with("dri/renderD128"))
        .unwrap();
    assert_eq!(render["gpu"], amd["index"]);
    assert_eq!(render["via"], serde_json::json!(["fd"]));

    let intel = gpu(&doc, "intel");
    assert_eq!(intel["pci_bus_id"], INTEL);
    assert_eq!(memory_on(&doc, 200, intel), [Value::from(96u64 << 20)]);
    assert_eq!(intel["verdict"]["state"], "busy");

    // In words: no NVIDIA advice for an AMD GPU, and no NVML missed on a
    // host without NVIDIA GPUs.
    let why = on_host(&["why"], &fake, &d, &sys).run();
    why.assert_exit(1);
    assert!(why.stdout.contains("the amdgpu driver"), "{}", why.stdout);
    for wrong in ["nvidia-smi", "NVML is unavailable", "CUDA"] {
        assert!(!why.stdout.contains(wrong), "{wrong}: {}", why.stdout);
    }
    let status = on_host(&["status"], &fake, &d, &sys).run();
    assert!(
        !status.stdout.contains("NVML unavailable"),
        "{}",
        status.stdout
    );
    // The shared client, said where it is counted once.
    let gpu = amd["index"].as_u64().unwrap();
    for (pid, other) in [(100, 101), (101, 100)] {
        let said = format!(
            "drm: client 7 on GPU {gpu} (amdgpu, 8,192 MiB), shared with {other}; counted once, in the lowest PID"
        );
        let block = status
            .stdout
            .split(&format!("  {pid}  "))
            .nth(1)
            .unwrap_or_default();
        assert!(block.contains(&said), "{pid}: {}", status.stdout);
    }
}

#[test]
fn an_idle_amd_gpu_is_free_and_an_unreadable_memory_file_is_unknown() {
    let d = TestDir::new(0);
    let sys = host(&d);
    let fake = FakeProc::idle(d.tmp.path());
    // 200 MiB used at idle: the driver's own, within the idle slack.
    write(
        &sys,
        &format!("devices/pci0000:00/{AMD}/mem_info_vram_used"),
        &format!("{}\n", 200u64 << 20),
    );
    let doc = on_host(&["status", "--json"], &fake, &d, &sys).doc();
    assert_eq!(gpu(&doc, "amd")["verdict"]["state"], "free", "{doc}");
    let intel = gpu(&doc, "intel");
    assert_eq!(intel["verdict"]["state"], "free", "{doc}");
    let caveats = intel["verdict"]["caveats"].to_string();
    assert!(caveats.contains("xe publishes no used memory"), "{caveats}");

    std::fs::remove_file(sys.join(format!("devices/pci0000:00/{AMD}/mem_info_vram_used"))).unwrap();
    let doc = on_host(&["status", "--json"], &fake, &d, &sys).doc();
    let amd = gpu(&doc, "amd");
    assert_eq!(amd["verdict"]["state"], "unknown", "{doc}");
    assert!(amd["verdict"]["reasons"]
        .to_string()
        .contains("mem_info_vram_used"));
}

#[test]
fn kill_by_pci_slot_frees_the_amd_holder_only_and_sees_its_clients_gone() {
    let d = TestDir::new(1);
    let sys = host(&d);
    write(
        &sys,
        &format!("devices/pci0000:00/{AMD}/mem_info_vram_used"),
        &format!("{}\n", 200u64 << 20),
    );
    // The simulated H200's own DRM nodes (nvidia-drm): NVML's GPU 0, no
    // new GPU.
    pci_gpu(
        &sys,
        "0000:18:00.0",
        "nvidia",
        &["card3", "renderD130"],
        &[("vendor", "0x10de\n")],
    );
    write(&d.dev, "dri/renderD130", "x");
    let desktop = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec![d.node("dri/renderD130")],
            ..HoldSpec::default()
        },
    );
    let amd = hold(
        &["gpufree"],
        HoldSpec {
            title: Some("VLLM::Worker_TP0".into()),
            fd: vec![d.node("dri/renderD128"), d.node("kfd")],
            ..HoldSpec::default()
        },
    );
    let intel = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec![d.node("dri/renderD129")],
            ..HoldSpec::default()
        },
    );
    let state = d.one_gpu(&[], 0);
    let sys_env = [("GPUFREE_SYS_ROOT", sys.to_str().unwrap())];
    let r = Gpufree::new(["status"])
        .json()
        .on(&d, &state)
        .envs(sys_env.iter().copied())
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    // NVML's GPU first, then the DRM cards in card order.
    let order: Vec<(u64, &str)> = doc["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["index"].as_u64().unwrap(), g["vendor"].as_str().unwrap()))
        .collect();
    assert_eq!(order, [(0, "nvidia"), (1, "intel"), (2, "amd")], "{doc}");
    let on = &process(&doc, desktop.pid()).unwrap()["devices"][0];
    assert_eq!(on["gpu"], 0, "an NVIDIA render node is NVML's GPU's: {on}");

    let out = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", AMD, "--yes"])
        .envs(sys_env.iter().copied())
        .run();
    let doc = out.json_or_null();
    out.assert_exit_with(0, format_args!("{doc}"));
    let k = &doc["kill"];
    assert_eq!(u32s(&k["targets"]), [amd.pid()]);
    assert_eq!(k["released"], true, "{doc}");
    assert!(!alive(amd.pid()));
    assert!(
        alive(intel.pid()),
        "the Intel GPU's holder was not selected"
    );
}

#[test]
fn kfd_memory_on_a_gpu_id_the_topology_cannot_place_is_never_called_the_driver_s() {
    let d = TestDir::new(0);
    let sys = host(&d);
    let fake = FakeProc::new(d.tmp.path());
    let kfd = d.node("kfd");
    // A ROCm process with 6 GiB on KFD GPU id 777, which no topology node
    // places on a PCI device; nothing else accounts for the 30 GiB used.
    fake.add(&holder(102, 1, "rocm_job", &[&kfd]));
    let vram = "class/kfd/kfd/proc/102/vram_777";
    write(&sys, vram, &format!("{}\n", 6 * GIB));
    let doc = on_host(&["status", "--json"], &fake, &d, &sys).doc();
    let amd = gpu(&doc, "amd");
    assert_eq!(amd["verdict"]["state"], "unknown", "{doc}");
    let reasons = amd["verdict"]["reasons"].to_string();
    assert!(
        reasons.contains("KFD VRAM of PID 102 on KFD GPU id 777")
            && reasons.contains("6,144 MiB cannot be placed on a GPU"),
        "{reasons}"
    );
    // Placed nowhere, it is not the driver's either.
    let why = on_host(&["why"], &fake, &d, &sys).run();
    assert!(!why.stdout.contains("the amdgpu driver"), "{}", why.stdout);
    assert!(why.stdout.contains("KFD GPU id 777"), "{}", why.stdout);
    // Without it, the same 30 GiB is the driver's: busy.
    std::fs::remove_file(sys.join(vram)).unwrap();
    let doc = on_host(&["status", "--json"], &fake, &d, &sys).doc();
    assert_eq!(gpu(&doc, "amd")["verdict"]["state"], "busy", "{doc}");
}

#[test]
fn metrics_carry_the_amd_and_intel_gpus() {
    let d = TestDir::new(0);
    let sys = host(&d);
    let fake = FakeProc::new(d.tmp.path());
    let r128 = d.node("dri/renderD128");
    fake.add(&holder(100, 1, "python3", &[&r128]));
    fake.fdinfo(100, 0, &amdgpu(7, 8));
    let r = on_host(&["metrics"], &fake, &d, &sys).run();
    r.assert_exit(0);
    let m = &r.stdout;
    // The series of `name` with every label of `with`.
    let series = |name: &str, with: &[&str]| {
        m.lines()
            .find(|l| {
                l.starts_with(&format!("gpufree_{name}{{")) && with.iter().all(|w| l.contains(w))
            })
            .unwrap_or_default()
            .to_string()
    };
    // In card order: the xe card0 is GPU 0, the amdgpu card1 GPU 1.
    let amd = "gpu=\"1\"";
    assert!(
        series("gpu_memory_used_bytes", &[amd]).ends_with(&format!(" {}", 30 * GIB)),
        "{m}"
    );
    assert!(
        series("gpu_memory_accounted_bytes", &[amd]).ends_with(&format!(" {}", 8 * GIB)),
        "{m}"
    );
    assert!(
        series("gpu_verdict", &[amd, "state=\"busy\""]).ends_with(" 1"),
        "{m}"
    );
    assert!(
        series("gpu_holders", &[amd, "kind=\"memory\""]).ends_with(" 1"),
        "{m}"
    );
    // xe publishes no used memory: no memory series for it, and a verdict.
    assert!(
        series("gpu_memory_used_bytes", &["gpu=\"0\""]).is_empty(),
        "{m}"
    );
    assert!(!series("gpu_verdict", &["gpu=\"0\""]).is_empty(), "{m}");
}

/// amdgpu's fdinfo before drm-usage-stats' memory keys: the client, and
/// no `drm-resident-`, `drm-total-` or `drm-memory-` line.
fn amdgpu_without_usage(client: u64) -> String {
    format!("pos:\t0\nflags:\t02100002\ndrm-driver:\tamdgpu\ndrm-client-id:\t{client}\ndrm-pdev:\t{AMD}\n")
}

#[test]
fn fdinfo_without_usage_keys_makes_the_memory_unknown_not_the_driver_s() {
    let d = TestDir::new(0);
    let sys = host(&d);
    let fake = FakeProc::new(d.tmp.path());
    let r128 = d.node("dri/renderD128");
    // Two holders of the AMD GPU whose clients say no memory; 30 GiB used.
    fake.add(&holder(100, 1, "python3", &[&r128]));
    fake.fdinfo(100, 0, &amdgpu_without_usage(7));
    fake.add(&holder(101, 1, "python3", &[&r128]));
    fake.fdinfo(101, 0, &amdgpu_without_usage(8));
    let doc = on_host(&["status", "--json"], &fake, &d, &sys).doc();
    let amd = gpu(&doc, "amd");
    // Busy for its holders; the 30 GiB no one accounts for is unknown
    // (not the driver's), for what the clients do not say.
    assert_eq!(amd["verdict"]["state"], "busy", "{doc}");
    let causes = amd["verdict"]["causes"].to_string();
    assert!(
        causes.contains(r#""kind":"unaccounted""#) && !causes.contains("driver-held"),
        "{causes}"
    );
    let reasons = amd["verdict"]["reasons"].to_string();
    assert!(
        reasons.contains("memory of PID 100's DRM client 7")
            && reasons.contains("no drm-resident-"),
        "{reasons}"
    );
    // Each holder's memory is unknown (null), not 0.
    assert_eq!(memory_on(&doc, 100, amd), [Value::Null]);
    assert_eq!(memory_on(&doc, 101, amd), [Value::Null]);
    let clients = &process(&doc, 100).unwrap()["drm_clients"];
    assert_eq!(clients[0]["memory_unknown"], true, "{clients}");
    let why = on_host(&["why"], &fake, &d, &sys).run();
    for wrong in [
        "the amdgpu driver",
        "every DRM client",
        "without GPU memory",
    ] {
        assert!(!why.stdout.contains(wrong), "{wrong}: {}", why.stdout);
    }
    // No leak: unknown, with its exit code.
    let check = on_host(&["check"], &fake, &d, &sys).run();
    check.assert_exit(3);
    assert!(!check.stdout.contains("critical"), "{}", check.stdout);
}

#[test]
fn kfd_vram_on_no_gpu_or_of_an_unseen_process_is_unplaced_and_unknown() {
    let d = TestDir::new(0);
    let sys = host(&d);
    let fake = FakeProc::new(d.tmp.path());
    let kfd = d.node("kfd");
    // KFD GPU id 5151's topology node says PCI 0000:c4:00.0: no GPU here.
    write(&sys, "class/kfd/kfd/topology/nodes/2/gpu_id", "5151\n");
    write(
        &sys,
        "class/kfd/kfd/topology/nodes/2/properties",
        &format!("domain 0\nlocation_id {}\n", 0xc4 << 8),
    );
    fake.add(&holder(102, 1, "rocm_job", &[&kfd]));
    let vram = "class/kfd/kfd/proc/102/vram_5151";
    write(&sys, vram, &format!("{}\n", 6 * GIB));
    let doc = on_host(&["status", "--json"], &fake, &d, &sys).doc();
    let amd = gpu(&doc, "amd");
    assert_eq!(amd["verdict"]["state"], "unknown", "{doc}");
    let unavailable = doc["unavailable"].to_string();
    assert!(
        unavailable.contains("KFD VRAM of PID 102 on KFD GPU id 5151")
            && unavailable.contains("0000:c4:00.0, which is no GPU here"),
        "{unavailable}"
    );
    let why = on_host(&["why"], &fake, &d, &sys).run();
    assert!(!why.stdout.contains("the amdgpu driver"), "{}", why.stdout);

    // PID 4000 has KFD VRAM on the AMD GPU and no /proc entry here.
    std::fs::remove_file(sys.join(vram)).unwrap();
    write(
        &sys,
        "class/kfd/kfd/proc/4000/vram_4242",
        &format!("{}\n", 20 * GIB),
    );
    let doc = on_host(&["status", "--json"], &fake, &d, &sys).doc();
    let amd = gpu(&doc, "amd");
    assert_eq!(amd["verdict"]["state"], "unknown", "{doc}");
    let reasons = amd["verdict"]["reasons"].to_string();
    assert!(
        reasons.contains("KFD VRAM of PID 4000 on KFD GPU id 4242")
            && reasons.contains("another PID namespace"),
        "{reasons}"
    );
    let why = on_host(&["why"], &fake, &d, &sys).run();
    assert!(why.stdout.contains("PID 4000"), "{}", why.stdout);
    assert!(
        !why.stdout.contains("every process the KFD lists were read"),
        "{}",
        why.stdout
    );
    let check = on_host(&["check"], &fake, &d, &sys).run();
    check.assert_exit(3);
}

#[test]
fn shared_drm_buffers_are_said_to_be_counted_by_each_sharer() {
    let d = TestDir::new(0);
    let sys = host(&d);
    let fake = FakeProc::new(d.tmp.path());
    let r128 = d.node("dri/renderD128");
    // Two clients, each 8 GiB resident, 4 GiB of it shared (one buffer
    // exported by one and imported by the other: 12 GiB in truth). What
    // the format tells cannot show with whom a buffer is shared.
    for (pid, client) in [(100, 7), (101, 8)] {
        fake.add(&holder(pid, 1, "python3", &[&r128]));
        fake.fdinfo(
            pid,
            0,
            &format!(
                "{}drm-shared-vram:\t{} KiB\n",
                amdgpu(client, 8),
                4 * GIB / 1024
            ),
        );
    }
    let doc = on_host(&["status", "--json"], &fake, &d, &sys).doc();
    let amd = gpu(&doc, "amd");
    assert_eq!(amd["memory"]["accounted_bytes"], 16 * GIB, "{doc}");
    assert_eq!(amd["memory"]["shared_bytes"], 8 * GIB, "{doc}");
    let caveats = amd["verdict"]["caveats"].to_string();
    assert!(
        caveats.contains("share 8,192 MiB") && caveats.contains("more than once"),
        "{caveats}"
    );
}

#[test]
fn a_process_whose_stat_or_maps_cannot_be_read_is_counted_unreadable_not_skipped() {
    let d = TestDir::new(0);
    let sys = host(&d);
    let fake = FakeProc::new(d.tmp.path());
    let r128 = d.node("dri/renderD128");
    fake.add(&holder(100, 1, "python3", &[&r128]));
    fake.fdinfo(100, 0, &amdgpu(7, 8));
    fake.add(&holder(101, 1, "python3", &[&r128]));
    fake.fdinfo(101, 0, &amdgpu(8, 8));
    std::fs::remove_file(fake.root.join("100/stat")).unwrap();
    std::fs::remove_file(fake.root.join("101/maps")).unwrap();
    let doc = on_host(&["status", "--json"], &fake, &d, &sys).doc();
    let v = &doc["visibility"];
    assert_eq!(v["processes_unreadable"], 2, "{v}");
    assert_eq!(v["unreadable_pids"], serde_json::json!([100, 101]), "{v}");
    let why = v["unreadable"].to_string();
    assert!(
        why.contains("reading stat failed") && why.contains("reading maps failed"),
        "{why}"
    );
    // What they hold is unknown: so is whether the AMD GPU is free.
    assert_eq!(gpu(&doc, "amd")["verdict"]["state"], "unknown", "{doc}");
}

#[test]
fn an_idle_xe_host_says_its_total_and_accounted_memory_in_text_without_nvml_words() {
    let d = TestDir::new(0);
    let sys = host(&d);
    let fake = FakeProc::idle(d.tmp.path());
    // No AMD GPU: an xe card alone, with its VRAM total in its tile.
    std::fs::remove_file(d.dev.join("dri/renderD128")).unwrap();
    write(
        &sys,
        &format!("devices/pci0000:00/{INTEL}/tile0/physical_vram_size_bytes"),
        &format!("{}\n", 16 * GIB),
    );
    let doc = on_host(&["status", "--json"], &fake, &d, &sys).doc();
    let intel = gpu(&doc, "intel");
    assert_eq!(intel["memory"]["total_bytes"], 16 * GIB, "{doc}");
    assert_eq!(intel["memory"]["accounted_bytes"], 0, "{doc}");
    let status = on_host(&["status"], &fake, &d, &sys).run();
    let row = status
        .stdout
        .lines()
        .find(|l| l.contains("Intel GPU (xe)"))
        .unwrap_or_default();
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cells,
        [
            "0",
            "Intel GPU (xe)",
            "unknown / 16,384 MiB",
            "0 MiB",
            "unknown",
            "free"
        ],
        "{}",
        status.stdout
    );
    let why = on_host(&["why"], &fake, &d, &sys).run();
    for out in [&status.stdout, &why.stdout] {
        assert!(!out.contains("NVML"), "{out}");
        assert!(
            out.contains("GPU 0 free: no process holds memory or a device node"),
            "{out}"
        );
    }
}
