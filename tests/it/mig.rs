//! NVIDIA MIG on the simulator: unmodified NVML clients (pynvml, nvitop)
//! see the MIG devices of two GPUs in MIG mode (7 and 3 instances) beside
//! a whole GPU; gpufree shows, selects and frees them per instance.

use crate::harness::*;
use gpufree::demo::holder::{HoldSpec, Spawned};
use serde_json::{json, Value};

const GIB: u64 = 1 << 30;

/// MIG device `j` of GPU `gpu`'s UUID.
pub fn mig_uuid(gpu: u32, j: u32) -> String {
    format!("MIG-{gpu:02}{j:06}-7a1b-5c2d-8e3f-0123456789ab")
}

/// A simulated H200 in MIG mode with `n` instances of `profile` (`gib`
/// GiB each, GPU instance ids 1.., compute instance 0), and `procs`
/// `(mig index, pid, MiB)` on them, all while-alive.
pub fn mig_gpu(gpu: u32, n: u32, profile: &str, gib: u64, procs: &[(u32, u32, u64)]) -> Value {
    let mut g = sim_gpu(gpu, &[], 0);
    let mig: Vec<Value> = (0..n)
        .map(|j| {
            let ps: Vec<Value> = procs
                .iter()
                .filter(|p| p.0 == j)
                .map(|p| json!({"pid": p.1, "used_bytes": p.2 << 20}))
                .collect();
            json!({"uuid": mig_uuid(gpu, j), "gpu_instance_id": j + 1, "compute_instance_id": 0,
                   "profile": profile, "memory_total_bytes": gib * GIB, "processes": ps})
        })
        .collect();
    g["mig_mode"] = json!(true);
    g["mig"] = json!(mig);
    g
}

/// The foundation's mixed host: GPU 0 in 7 × 1g.18gb, GPU 1 in 3 ×
/// 2g.35gb, GPU 2 whole (MIG disabled); `a` holds 5 GiB on 0:0, `b` 7 GiB on 0:1, `c`
/// 3 GiB on 1:2, `w` 1 GiB on the whole GPU 2.
fn mixed(d: &TestDir, a: u32, b: u32, c: u32, w: u32) -> std::path::PathBuf {
    let mut whole = sim_gpu(2, &[(w, 1024, "while-alive")], 0);
    whole["mig_mode"] = json!(false);
    d.state(&sim_state(vec![
        mig_gpu(0, 7, "1g.18gb", 18, &[(0, a, 5120), (1, b, 7168)]),
        mig_gpu(1, 3, "2g.35gb", 35, &[(2, c, 3072)]),
        whole,
    ]))
}

fn python_has(modules: &str) -> bool {
    std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn sim_exec(state: &std::path::Path, cmd: &[&str]) -> String {
    let r = Gpufree::new(["sim", "exec", "--state", state.to_str().unwrap(), "--"])
        .args(cmd)
        .env("COLUMNS", "140")
        .run();
    r.assert_exit_with(0, format_args!("{cmd:?}: {}", r.stderr));
    r.stdout
}

const PYNVML_MIG: &str = "import pynvml as n, json
n.nvmlInit()
out=[]
for i in range(n.nvmlDeviceGetCount()):
  h=n.nvmlDeviceGetHandleByIndex(i)
  try: mode=n.nvmlDeviceGetMigMode(h)[0]
  except n.NVMLError_NotSupported: mode=None
  g={'mode':mode,'used':n.nvmlDeviceGetMemoryInfo(h).used,'migs':[],
     'pids':[[p.pid,p.gpuInstanceId] for p in n.nvmlDeviceGetComputeRunningProcesses(h)]}
  for j in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
    try: m=n.nvmlDeviceGetMigDeviceHandleByIndex(h,j)
    except n.NVMLError_NotFound: break
    mem=n.nvmlDeviceGetMemoryInfo(m, version=n.nvmlMemory_v2)
    p=n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
    g['migs'].append({'uuid':n.nvmlDeviceGetUUID(m),'name':n.nvmlDeviceGetName(m),
      'gi':n.nvmlDeviceGetGpuInstanceId(m),'ci':n.nvmlDeviceGetComputeInstanceId(m),
      'total':mem.total,'used':mem.used,'is_mig':n.nvmlDeviceIsMigDeviceHandle(m).value,
      'parent':n.nvmlDeviceGetIndex(p),'index':n.nvmlDeviceGetIndex(m),
      'by_uuid':n.nvmlDeviceGetName(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(m))),
      'pids':[x.pid for x in n.nvmlDeviceGetComputeRunningProcesses(m)]})
  out.append(g)
n.nvmlShutdown()
print(json.dumps(out))";

/// pynvml lists the MIG devices of both MIG GPUs with their UUIDs, ids,
/// memory and processes; the parents list every instance's processes and
/// count their memory; the whole GPU has none.
#[test]
fn pynvml_and_nvitop_see_the_mig_devices() {
    if !python_has("pynvml, nvitop") {
        skip_off_ci(
            "nvidia-ml-py and nvitop",
            &"pip install nvidia-ml-py nvitop",
        );
        return;
    }
    let Mixed {
        a, b, c, w, state, ..
    } = &mixed_host();
    let py: Vec<Value> =
        serde_json::from_str(&sim_exec(state, &["python3", "-c", PYNVML_MIG])).unwrap();
    assert_eq!(py.len(), 3);
    let counts: Vec<usize> = py
        .iter()
        .map(|g| g["migs"].as_array().unwrap().len())
        .collect();
    assert_eq!(counts, [7, 3, 0]);
    assert_eq!(
        py.iter().map(|g| g["mode"].clone()).collect::<Vec<_>>(),
        [json!(1), json!(1), json!(0)]
    );
    let m01 = &py[0]["migs"][1];
    assert_eq!(m01["uuid"], mig_uuid(0, 1));
    assert_eq!(m01["name"], "NVIDIA H200 MIG 1g.18gb");
    assert_eq!(m01["by_uuid"], "NVIDIA H200 MIG 1g.18gb");
    assert_eq!((m01["gi"].clone(), m01["ci"].clone()), (json!(2), json!(0)));
    assert_eq!(
        (m01["total"].clone(), m01["used"].clone()),
        (json!(18 * GIB), json!(7 * GIB))
    );
    assert_eq!(
        (m01["parent"].clone(), m01["index"].clone()),
        (json!(0), json!(1))
    );
    assert_eq!(m01["is_mig"], 1);
    assert_eq!(m01["pids"], json!([b.pid()]));
    assert_eq!(py[0]["migs"][0]["pids"], json!([a.pid()]));
    assert_eq!(py[0]["migs"][2]["pids"], json!([]));
    assert_eq!(py[1]["migs"][2]["pids"], json!([c.pid()]));
    assert_eq!(py[1]["migs"][2]["uuid"], mig_uuid(1, 2));
    assert_eq!(py[0]["used"], 12 * GIB, "the parent counts its instances");
    assert_eq!(py[0]["pids"], json!([[a.pid(), 1], [b.pid(), 2]]));
    assert_eq!(py[2]["pids"], json!([[w.pid(), u32::MAX]]));

    let nv = sim_exec(state, &["nvitop", "-1"]);
    for j in 0..7 {
        let gi = j + 1;
        assert!(
            nv.contains(&format!("0:{j}      1g.18gb @ GI/CI: {gi}/0")),
            "{nv}"
        );
    }
    for j in 0..3 {
        assert!(
            nv.contains(&format!("1:{j}      2g.35gb @ GI/CI: {}/0", j + 1)),
            "{nv}"
        );
    }
    assert!(nv.contains("7168MiB / 18432MiB"), "{nv}");
    assert_eq!(nv.matches(" Enabled ").count(), 2, "{nv}");
    assert!(nv.contains(" Disabled "), "{nv}");
    for (at, p) in [("0:0", a), ("0:1", b), ("1:2", c)] {
        let pid = p.pid().to_string();
        let row = nv
            .lines()
            .find(|l| l.split_whitespace().nth(2) == Some(pid.as_str()));
        let cols: Vec<&str> = row.unwrap_or_default().split_whitespace().collect();
        assert_eq!(cols.get(1..4), Some(&[at, pid.as_str(), "C"][..]), "{nv}");
    }
}

/// The mixed host with its holders, for gpufree's own MIG tests.
struct Mixed {
    d: TestDir,
    a: Spawned,
    b: Spawned,
    c: Spawned,
    w: Spawned,
    state: std::path::PathBuf,
}

fn mixed_host() -> Mixed {
    let d = TestDir::new(3);
    let (a, b, c, w) = (
        d.mapper("nvidia0"),
        d.mapper("nvidia0"),
        d.mapper("nvidia1"),
        d.mapper("nvidia2"),
    );
    let state = mixed(&d, a.pid(), b.pid(), c.pid(), w.pid());
    Mixed {
        d,
        a,
        b,
        c,
        w,
        state,
    }
}

impl Mixed {
    /// `gpufree WORDS` on this host and the simulator.
    fn on(&self, words: &[&str]) -> Gpufree {
        Gpufree::new(words).dev(&self.d.dev).sim(&self.state)
    }
}

#[test]
fn status_shows_each_mig_device_its_memory_holders_and_verdict() {
    let h = mixed_host();
    let r = h.on(&["status"]).json().run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    let gpus = doc["gpus"].as_array().unwrap();
    let counts: Vec<usize> = gpus
        .iter()
        .map(|g| g["mig_devices"].as_array().unwrap().len())
        .collect();
    assert_eq!(counts, [7, 3, 0]);
    assert_eq!(gpus[0]["mig_mode"], true);
    assert_eq!(gpus[2]["mig_mode"], false);
    let m01 = &gpus[0]["mig_devices"][1];
    assert_eq!(m01["index"], 1);
    assert_eq!(m01["uuid"], mig_uuid(0, 1));
    assert_eq!(m01["name"], "NVIDIA H200 MIG 1g.18gb");
    assert_eq!(
        (
            m01["gpu_instance_id"].clone(),
            m01["compute_instance_id"].clone()
        ),
        (json!(2), json!(0))
    );
    assert_eq!(m01["memory"]["total_bytes"], 18 * GIB);
    assert_eq!(m01["memory"]["used_bytes"], 7 * GIB);
    assert_eq!(m01["memory"]["accounted_bytes"], 7 * GIB);
    assert_eq!(m01["nvml_processes"][0]["pid"], h.b.pid());
    let states = |g: usize| -> Vec<String> {
        gpus[g]["mig_devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["verdict"]["state"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        states(0),
        ["busy", "busy", "free", "free", "free", "free", "free"]
    );
    assert_eq!(states(1), ["free", "free", "busy"]);
    // Instance 0:0's verdict names its own holder, not its neighbour's.
    let reasons = gpus[0]["mig_devices"][0]["verdict"]["reasons"].to_string();
    assert!(reasons.contains(&format!("PID {}", h.a.pid())), "{reasons}");
    assert!(
        !reasons.contains(&format!("PID {}", h.b.pid())),
        "{reasons}"
    );
    let a = process(&doc, h.a.pid()).unwrap();
    assert_eq!(a["gpu_memory"], json!([{"gpu": 0, "used_bytes": 5 * GIB}]));

    let out = h.on(&["status"]).args(["--no-color"]).run().stdout;
    let row = |label: &str| {
        out.lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_default()
            .to_string()
    };
    assert!(row(" 0:1").contains("7,168 MiB / 18,432 MiB"), "{out}");
    assert!(row(" 0:1").ends_with("busy"), "{out}");
    assert!(row(" 0:2").ends_with("free"), "{out}");
    assert!(row(" 1:2").contains("3,072 MiB / 35,840 MiB"), "{out}");
    assert!(
        out.contains(&format!("mig: 0:1 ({})", mig_uuid(0, 1))),
        "{out}"
    );
    assert!(
        out.contains(&format!("mig: 1:2 ({})", mig_uuid(1, 2))),
        "{out}"
    );
}

#[test]
fn kill_one_mig_device_frees_it_and_nothing_else() {
    let h = mixed_host();
    let r = h
        .on(&["kill"])
        .json()
        .args(["--gpu", "0:1", "--yes", "--grace", "2s"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    // b and a both map the GPU's node; only b is on instance 0:1.
    assert_eq!(u32s(&doc["kill"]["targets"]), [h.b.pid()], "{doc}");
    assert_eq!(doc["kill"]["released"], true, "{doc}");
    assert!(!alive(h.b.pid()));
    for other in [&h.a, &h.c, &h.w] {
        assert!(alive(other.pid()), "{} was no target", other.pid());
    }
    // The document describes the instance it freed.
    let g = &doc["gpus"][0];
    assert_eq!(g["mig_devices"].as_array().unwrap().len(), 1, "{g}");
    assert_eq!(g["mig_devices"][0]["uuid"], mig_uuid(0, 1));
    assert_eq!(g["verdict"]["state"], "free", "{g}");
}

#[test]
fn a_mig_uuid_selects_it_for_wait_and_why() {
    let h = mixed_host();
    // GPU 0 is busy (0:0 and 0:1), its instance 0:2 is free.
    let ran = h
        .on(&["wait"])
        .json()
        .args(["--gpu", &mig_uuid(0, 2), "--timeout", "0"])
        .run();
    ran.assert_exit(0);
    let res = h
        .on(&["wait"])
        .json()
        .args(["--gpu", "0", "--timeout", "0"])
        .run();
    res.assert_exit(1);
    let out = h
        .on(&["wait"])
        .args(["--gpu", "0:0", "--timeout", "0"])
        .run();
    out.assert_exit(1);
    assert!(out.stdout.contains("GPU 0:0"), "{}", out.stdout);
    let got = h
        .on(&["why"])
        .json()
        .args(["--gpu", &mig_uuid(0, 0)[..12]])
        .run();
    let doc = got.json_or_null();
    got.assert_exit(1);
    let pids: Vec<u32> = doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(pids, [h.a.pid()], "{doc}");
    // Said of the instance, as --gpu names it, never of the whole GPU.
    let why = h
        .on(&["why"])
        .args(["--gpu", "0:0", "--no-color"])
        .run()
        .stdout;
    assert!(why.starts_with("Why GPU 0:0 is not free"), "{why}");
    let run2 = h
        .on(&["wait"])
        .json()
        .args(["--gpu", "0:0", "--gpu", "1:2", "--timeout", "0"])
        .run();
    let doc = run2.json_or_null();
    let reasons = doc["verdict"]["reasons"].as_array().unwrap();
    assert!(
        reasons
            .iter()
            .any(|r| r.as_str().unwrap().starts_with("GPU 0:0: ")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.as_str().unwrap().starts_with("GPU 1:2: ")),
        "{reasons:?}"
    );
    let bad = h.on(&["status"]).args(["--gpu", "0:7"]).run();
    bad.assert_exit(2);
    assert!(
        bad.stderr.contains("--gpu 0:7: no such GPU or MIG device"),
        "{}",
        bad.stderr
    );
}

#[test]
fn metrics_have_each_mig_device() {
    let h = mixed_host();
    let out = h.on(&["metrics"]).run();
    out.assert_exit(0);
    let m = &out.stdout;
    // The first series of `name` for MIG device gpu:mig that has `with`.
    let series = |name: &str, gpu: u32, mig: u32, with: &str| -> String {
        let start = format!("gpufree_{name}{{gpu=\"{gpu}\",mig=\"{mig}\"");
        m.lines()
            .find(|l| l.starts_with(&start) && l.contains(with))
            .unwrap_or_default()
            .to_string()
    };
    let used = series("mig_memory_used_bytes", 0, 1, "");
    assert!(
        used.contains(&format!("uuid=\"{}\"", mig_uuid(0, 1))),
        "{m}"
    );
    assert!(
        used.contains("gpu_instance=\"2\",compute_instance=\"0\""),
        "{m}"
    );
    assert!(used.ends_with(&format!(" {}", 7 * GIB)), "{used}");
    let busy = |gpu, mig| series("mig_verdict", gpu, mig, "state=\"busy\"");
    assert!(busy(0, 1).ends_with(" 1"), "{m}");
    assert!(busy(0, 2).ends_with(" 0"), "{m}");
    assert!(busy(1, 2).ends_with(" 1"), "{m}");
    assert_eq!(
        m.matches("gpufree_mig_memory_total_bytes{").count(),
        10,
        "{m}"
    );
    // Narrowed to 0:1, the instance's numbers never pass for GPU 0's.
    let one = h.on(&["metrics"]).args(["--gpu", "0:1"]).run().stdout;
    assert!(
        !one.contains("gpufree_gpu_memory_used_bytes{gpu=\"0\""),
        "{one}"
    );
    assert!(
        one.contains("gpufree_mig_memory_used_bytes{gpu=\"0\",mig=\"1\""),
        "{one}"
    );
}

#[test]
fn a_process_holding_a_mig_capability_holds_that_instance() {
    let h = mixed_host();
    // The driver's table: cap 21 opens GPU instance 2 (MIG device 0:1),
    // cap 22 its compute instance 0, cap 30 GPU instance 3 (0:2); caps 1
    // and 2 are the driver's config and monitor, no instance.
    let caps = h.d.dev.join("nvidia-caps");
    std::fs::create_dir(&caps).unwrap();
    for n in [1, 2, 21, 22, 30] {
        std::fs::write(caps.join(format!("nvidia-cap{n}")), [0u8; 64]).unwrap();
    }
    let table = h.d.tmp.path().join("mig-minors");
    std::fs::write(
        &table,
        "config 1\nmonitor 2\ngpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\ngpu0/gi3/access 30\n",
    )
    .unwrap();
    // A process of instance 0:1 that NVML does not list (no context yet):
    // it opened the GPU's node and the instance's capabilities.
    let opener = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec![
                h.d.node("nvidia0"),
                caps.join("nvidia-cap21"),
                caps.join("nvidia-cap22"),
            ],
            ..HoldSpec::default()
        },
    );
    // One that holds only GPU instance 3's access: MIG device 0:2, which
    // NVML lists nothing on.
    let on_02 = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec![caps.join("nvidia-cap30")],
            ..HoldSpec::default()
        },
    );
    // One that holds only the monitor capability: no instance.
    let monitor = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec![caps.join("nvidia-cap2")],
            ..HoldSpec::default()
        },
    );
    // Without the driver's table nothing places the capabilities: any
    // instance may be theirs, so no instance is free; a wait says unknown.
    let ran = h.on(&["status"]).json().run();
    let doc = ran.json_or_null();
    let m03 = &doc["gpus"][0]["mig_devices"][3]["verdict"];
    assert_eq!(m03["state"], "unknown", "{m03}");
    assert!(
        m03["reasons"]
            .to_string()
            .contains("mig-minors table could not be read"),
        "{m03}"
    );
    let res = h
        .on(&["wait"])
        .json()
        .args(["--gpu", "0:3", "--timeout", "0"])
        .run();
    res.assert_exit(3);

    let env = [("GPUFREE_MIG_MINORS", table.to_str().unwrap())];
    let r = Gpufree::new(["status"])
        .json()
        .dev(&h.d.dev)
        .sim(&h.state)
        .envs(env.iter().copied())
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    let cap21 = caps.join("nvidia-cap21").display().to_string();
    assert_eq!(
        doc["mig_caps"][&cap21],
        json!({"gpu": 0, "gpu_instance_id": 2}),
        "{}",
        doc["mig_caps"]
    );
    let p = process(&doc, opener.pid()).unwrap();
    assert!(p["devices"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["path"] == cap21 && d["gpu"] == 0));
    let states: Vec<&str> = doc["gpus"][0]["mig_devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["verdict"]["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states[..4],
        ["busy", "busy", "busy", "free"],
        "0:2 is held through its capability alone"
    );
    let m = process(&doc, monitor.pid()).unwrap();
    assert!(m["devices"][0]["gpu"].is_null(), "{m}");

    // why on 0:1 names both of its holders; kill 0:1 ends exactly them.
    let out = Gpufree::new(["kill"])
        .json()
        .dev(&h.d.dev)
        .sim(&h.state)
        .args(["--gpu", "0:1", "--yes", "--grace", "2s"])
        .envs(env.iter().copied())
        .run();
    let doc = out.json_or_null();
    out.assert_exit(0);
    let mut want = vec![h.b.pid(), opener.pid()];
    want.sort_unstable();
    let mut targets = u32s(&doc["kill"]["targets"]);
    targets.sort_unstable();
    assert_eq!(targets, want, "{doc}");
    assert!(!alive(opener.pid()) && !alive(h.b.pid()));
    for other in [&h.a, &h.c, &h.w, &monitor, &on_02] {
        assert!(alive(other.pid()), "{} was no target", other.pid());
    }
}

#[test]
fn watch_draws_a_bar_per_mig_device() {
    let h = mixed_host();
    let cmd = format!(
        "env GPUFREE_SIM_STATE={} {} watch --dev-dir {} --nvml-lib {} --interval 200ms",
        h.state.display(),
        bin().display(),
        h.d.dev.display(),
        sim_lib().display()
    );
    let Some(t) = Tmux::start("watch-mig", &cmd) else {
        return;
    };
    let s = t.wait_for("1:2");
    let row = |label: &str| {
        s.lines()
            .find(|l| l.contains(&format!(" {label} ")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        row("0:1").contains("busy") && row("0:1").contains("7,168 MiB / 18,432 MiB"),
        "{s}"
    );
    assert!(row("0:2").contains("free"), "{s}");
    assert!(row("1:2").contains("3,072 MiB / 35,840 MiB"), "{s}");
    t.keys(&["q"]);
}
