//! The common frameworks' process trees, as real processes on the
//! simulator: vLLM (the seed incident), torchrun, DeepSpeed, accelerate,
//! mpirun, Ray, SGLang, a Jupyter kernel, multiprocessing spawn children and
//! orphaned DataLoader workers. Each row is one tree of holders (the gpufree
//! binary under the framework's argv, renamed as the framework renames its
//! processes); `why` must give one finding for the job's memory holders,
//! first, naming their launcher, and its `next` line, run as printed, must
//! free every GPU and end exactly those holders.

use crate::harness::*;
use gpufree::demo::holder::{ChildSpec, HoldSpec};
use serde_json::Value;
use std::os::fd::OwnedFd;

/// GPU memory of each memory holder.
const MIB: u64 = 20 * 1024;

/// `multiprocessing`'s spawn start method: how vLLM, SGLang and plain
/// `multiprocessing` start their workers.
const SPAWN: &str = "/usr/bin/python3 -c 'from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)' --multiprocessing-fork";

/// One process of a shape's tree.
#[derive(Clone, Default)]
struct P {
    label: String,
    argv: String,
    comm: Option<String>,
    title: Option<String>,
    /// Device nodes held open (not mapped), by name.
    fd: Vec<&'static str>,
    /// A memory holder: maps `nvidiaN` and `nvidia-uvm`, and NVML lists it
    /// with [`MIB`] on GPU N.
    gpu: Option<u32>,
    kids: Vec<P>,
    /// Exits once its children are ready; they survive it (orphans).
    exits: bool,
    subreaper: bool,
}

/// A process labelled `label` with `argv` (shell words).
fn p(label: &str, argv: &str) -> P {
    P {
        label: label.into(),
        argv: argv.into(),
        ..P::default()
    }
}

impl P {
    fn comm(self, c: &str) -> P {
        P {
            comm: Some(c.into()),
            ..self
        }
    }
    fn title(self, t: &str) -> P {
        P {
            title: Some(t.into()),
            ..self
        }
    }
    fn fd(self, nodes: &[&'static str]) -> P {
        P {
            fd: nodes.to_vec(),
            ..self
        }
    }
    fn kids(self, kids: Vec<P>) -> P {
        P { kids, ..self }
    }
    fn exits(self) -> P {
        P {
            exits: true,
            ..self
        }
    }
    fn subreaper(self) -> P {
        P {
            subreaper: true,
            ..self
        }
    }
    /// Its comm as /proc shows it: the title's or the name set, cut to 15
    /// bytes, else the holder binary's.
    fn shown_comm(&self) -> String {
        let c = self.title.as_deref().or(self.comm.as_deref());
        c.unwrap_or("gpufree").chars().take(15).collect()
    }
    /// This process and its descendants.
    fn all(&self) -> Vec<&P> {
        let mut v = vec![self];
        for k in &self.kids {
            v.extend(k.all());
        }
        v
    }
}

/// `n` memory holders `rank0..`, rank `i` on GPU `i`, made by `f(i)` from
/// `rank(i, argv)`.
fn ranks(n: u32, argv: &str, f: impl Fn(u32, P) -> P) -> Vec<P> {
    (0..n)
        .map(|i| {
            let r = P {
                gpu: Some(i),
                ..p(&format!("rank{i}"), argv)
            };
            f(i, r)
        })
        .collect()
}

/// A vLLM API server holding nvidia-uvm, with its resource tracker (the
/// same) and `engine`, which starts `tp` renamed `VLLM::Worker_TP{i}`s.
fn vllm_server(tp: u32, engine: P) -> P {
    p("server", &format!("/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model /models/m --tensor-parallel-size {tp}"))
        .comm("python3")
        .fd(&["nvidia-uvm"])
        .kids(vec![
            p("tracker", "/usr/bin/python3 -c 'from multiprocessing.resource_tracker import main;main(25)'")
                .comm("python3")
                .fd(&["nvidia-uvm"]),
            engine.kids(ranks(tp, SPAWN, |i, r| r.title(&format!("VLLM::Worker_TP{i}")))),
        ])
}

/// One row: a tree and what `why` must say about it.
pub(crate) struct Shape {
    tree: P,
    /// The first finding's kind.
    kind: &'static str,
    /// The label of the launcher the first finding names as `launcher PID
    /// (COMM) [ROLE]`, and its ROLE; None: the group is one process, named
    /// as `PID (COMM)`, or orphans, named by the tree's top (their reaper).
    launcher: Option<(&'static str, Option<&'static str>)>,
}

/// The holder spec of `p` over the nodes of `d`.
fn spec(d: &TestDir, p: &P, parent_exits: bool) -> ChildSpec {
    let mut mmap = Vec::new();
    if let Some(g) = p.gpu {
        mmap = vec![d.node(&format!("nvidia{g}")), d.node("nvidia-uvm")];
    }
    ChildSpec {
        argv: shlex::split(&p.argv).expect("argv in shell words"),
        spec: HoldSpec {
            label: p.label.clone(),
            title: p.title.clone(),
            comm: p.comm.clone(),
            fd: p.fd.iter().map(|n| d.node(n)).collect(),
            mmap,
            children: p.kids.iter().map(|k| spec(d, k, p.exits)).collect(),
            survive_parent: parent_exits,
            exit_after_ms: p.exits.then_some(0),
            subreaper: p.subreaper,
            ..HoldSpec::default()
        },
    }
}

/// A started tree: every process pinned by a pidfd opened while it was
/// known to be ours (alive or a zombie nobody reaps), killed through it on
/// drop, the orphans among them included.
pub(crate) struct Tree {
    spawned: gpufree::demo::holder::Spawned,
    pidfds: Vec<OwnedFd>,
}

impl Tree {
    fn start(d: &TestDir, root: &P) -> Tree {
        let s = spec(d, root, false);
        let spawned = gpufree::demo::holder::spawn(&bin(), &s).expect("holder tree starts");
        let pidfds = spawned
            .pids
            .iter()
            .filter_map(|(pid, _)| {
                rustix::process::pidfd_open(
                    rustix::process::Pid::from_raw(*pid as i32).unwrap(),
                    rustix::process::PidfdFlags::empty(),
                )
                .ok()
            })
            .collect();
        Tree { spawned, pidfds }
    }

    fn pid(&self, label: &str) -> u32 {
        self.spawned.pid_of(label)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        for fd in &self.pidfds {
            let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
        }
    }
}

/// The row's host: its device directory, its tree started, the simulator's
/// state listing each memory holder, and the holders' PIDs in order.
pub(crate) fn host(shape: &Shape) -> (TestDir, Tree, std::path::PathBuf, Vec<u32>) {
    let procs = shape.tree.all();
    let gpus = procs
        .iter()
        .filter_map(|p| p.gpu)
        .max()
        .map_or(0, |g| g + 1);
    let d = TestDir::new(gpus);
    let tree = Tree::start(&d, &shape.tree);
    for e in procs.iter().filter(|p| p.exits) {
        wait_state(tree.pid(&e.label), 'Z'); // its children are reparented
    }
    let holders: Vec<(u32, u32)> = procs
        .iter()
        .filter_map(|p| Some((tree.pid(&p.label), p.gpu?)))
        .collect();
    let mut group: Vec<u32> = holders.iter().map(|h| h.0).collect();
    group.sort_unstable();
    let state = d.state(&sim_state(
        holders
            .iter()
            .map(|(pid, g)| sim_gpu(*g, &[(*pid, MIB, "while-alive")], 0))
            .collect(),
    ));
    (d, tree, state, group)
}

/// Starts the row's tree, runs `why`, checks its first finding and runs
/// that finding's `next`; fails with everything that differed.
fn run(shape: Shape) {
    let procs = shape.tree.all();
    let (d, tree, state, group) = host(&shape);

    let r = Gpufree::new(["why"]).json().on(&d, &state).run();
    // Live holders are an error finding: why exits 1.
    let doc = r.assert_exit(1).json();
    let mut problems = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            problems.push(what);
        }
    };
    let root = rustix::process::getuid().is_root();
    check(
        !(root && doc.to_string().contains("sudo")),
        "why suggests sudo to root".into(),
    );
    let findings = doc["findings"].as_array().cloned().unwrap_or_default();
    let first = findings.first().cloned().unwrap_or(Value::Null);
    let mut pids = u32s(&first["pids"]);
    pids.sort_unstable();
    check(
        first["kind"] == shape.kind,
        format!("first finding is {}, not {}", first["kind"], shape.kind),
    );
    check(pids == group, format!("its pids {pids:?}, not {group:?}"));
    let message = first["message"].as_str().unwrap_or_default();
    let named = match shape.launcher {
        Some((label, role)) => {
            let l = procs.iter().find(|p| p.label == label).unwrap();
            let mut s = format!("launcher {} ({})", tree.pid(label), l.shown_comm());
            if let Some(role) = role {
                s.push_str(&format!(" [{role}]"));
            }
            s
        }
        // Orphans are named by the reaper their dead parent left them to
        // (the tree's top); one process is named itself.
        None if shape.kind == "orphans" => format!(
            "a dead parent (now under PID {} ({}))",
            tree.pid(&shape.tree.label),
            shape.tree.shown_comm()
        ),
        None => {
            assert_eq!(group.len(), 1, "several holders with no launcher");
            let p = procs.iter().find(|p| p.gpu.is_some()).unwrap();
            format!("{} ({})", tree.pid(&p.label), p.shown_comm())
        }
    };
    check(
        message.contains(&named),
        format!("message {message:?} does not name {named:?}"),
    );
    let covering: Vec<&Value> = findings
        .iter()
        .filter(|f| f["kind"] == shape.kind && u32s(&f["pids"]).iter().any(|p| group.contains(p)))
        .collect();
    check(
        covering.len() == 1,
        format!(
            "{} {} findings cover the group, not 1",
            covering.len(),
            shape.kind
        ),
    );

    // The first finding's next line, as printed, frees the GPUs.
    let next = first["next"].as_str().unwrap_or_default();
    let words = shlex::split(next).unwrap_or_default();
    let killed = if words.get(..2) == Some(&["gpufree".to_string(), "kill".to_string()][..]) {
        let mut args: Vec<&str> = words[2..].iter().map(String::as_str).collect();
        args.push("--yes");
        let ran = Gpufree::new(["kill"])
            .json()
            .on(&d, &state)
            .args(&args)
            .run();
        let after = ran.assert_exit(0).json();
        check(
            !(root && (after.to_string().contains("sudo") || ran.stderr.contains("sudo"))),
            "kill suggests sudo to root".into(),
        );
        for g in after["gpus"].as_array().cloned().unwrap_or_default() {
            check(
                g["memory"]["used_bytes"] == 0,
                format!(
                    "after {next:?}, GPU {} uses {}",
                    g["index"], g["memory"]["used_bytes"]
                ),
            );
        }
        let targets = u32s(&after["kill"]["targets"]);
        let missed: Vec<&u32> = group.iter().filter(|p| !targets.contains(p)).collect();
        check(missed.is_empty(), format!("{next:?} leaves out {missed:?}"));
        let living: Vec<&u32> = group.iter().filter(|p| alive(**p)).collect();
        check(
            living.is_empty(),
            format!("after {next:?}, {living:?} live on"),
        );
        true
    } else {
        false
    };
    check(killed, format!("next {next:?} is no gpufree kill"));
    drop(tree);
    let said: Vec<String> = findings
        .iter()
        .map(|f| {
            format!(
                "{} {} pids={} next={}",
                f["kind"], f["message"], f["pids"], f["next"]
            )
        })
        .collect();
    assert!(
        problems.is_empty(),
        "{}\nwhy's findings:\n{}",
        problems.join("\n"),
        said.join("\n")
    );
}

/// One test per row, and every row by name ([`rows`]: `--from` is
/// tested on each host too).
macro_rules! shapes {
    ($($(#[$m:meta])* $name:ident => $row:expr,)*) => {
        $(
            #[test]
            $(#[$m])*
            fn $name() {
                run($row);
            }
        )*
        /// Every row, by its test's name.
        pub(crate) fn rows() -> Vec<(&'static str, Shape)> {
            vec![$((stringify!($name), $row),)*]
        }
    };
}

shapes! {
    // The seed incident: an API server holding nvidia-uvm, its resource
    // tracker, the engine core (holding nothing) and its renamed workers.
    vllm_api_server_engine_core_and_renamed_workers => Shape {
        tree: vllm_server(4, p("engine", SPAWN).title("VLLM::EngineCore")),
        kind: "live-holders",
        launcher: Some(("engine", Some("vLLM engine core"))),
    },
    // As the demo has it: the engine core holds nodes by fd (NVML opens
    // them), so the API server tops one tree of holders.
    vllm_engine_core_holding_nodes => Shape {
        tree: vllm_server(
            2,
            p("engine", SPAWN)
                .title("VLLM::EngineCore")
                .fd(&["nvidiactl", "nvidia0"]),
        ),
        kind: "live-holders",
        launcher: Some(("server", Some("vLLM API server"))),
    },
    torchrun_elastic_agent_and_ranks => Shape {
        tree: p("agent", "/usr/bin/python3 /usr/local/bin/torchrun --nproc-per-node 4 train.py")
            .comm("torchrun")
            .kids(ranks(4, "/usr/bin/python3 -u train.py", |_, r| r.comm("pt_main_thread"))),
        kind: "live-holders",
        launcher: Some(("agent", Some("torchrun elastic agent"))),
    },
    deepspeed_launcher_and_ranks => Shape {
        tree: p("launcher", "/usr/bin/python3 -u -m deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3QiOiBbMCwgMSwgMiwgM119 --master_addr=127.0.0.1 --master_port=29500 train.py")
            .comm("python3")
            .kids(ranks(4, "/usr/bin/python3 -u train.py --deepspeed ds.json", |_, r| r.comm("pt_main_thread"))),
        kind: "live-holders",
        launcher: Some(("launcher", Some("DeepSpeed launcher"))),
    },
    accelerate_launcher_and_ranks => Shape {
        tree: p("launcher", "/usr/bin/python3 /usr/local/bin/accelerate launch --num_processes 4 train.py")
            .comm("accelerate")
            .kids(ranks(4, "/usr/bin/python3 -u train.py", |_, r| r.comm("pt_main_thread"))),
        kind: "live-holders",
        launcher: Some(("launcher", Some("accelerate launcher"))),
    },
    mpirun_and_ranks => Shape {
        tree: p("launcher", "mpirun -np 4 python3 train.py")
            .comm("mpirun")
            .kids(ranks(4, "python3 train.py", |_, r| r.comm("python3"))),
        kind: "live-holders",
        launcher: Some(("launcher", Some("MPI launcher"))),
    },
    ray_raylet_and_workers => Shape {
        tree: p("raylet", "/usr/local/lib/python3.12/dist-packages/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/ray/session_latest/sockets/raylet --node_ip_address=10.0.0.2")
            .comm("raylet")
            .kids(ranks(4, "/usr/bin/python3 /usr/local/lib/python3.12/dist-packages/ray/_private/workers/default_worker.py --node-ip-address=10.0.0.2", |_, r| r.title("ray::Worker"))),
        kind: "live-holders",
        launcher: Some(("raylet", Some("Ray raylet"))),
    },
    // Workers that finished their task are titled ray::IDLE and keep their
    // CUDA context: still the same raylet's workers.
    ray_raylet_and_busy_and_idle_workers => Shape {
        tree: p("raylet", "/usr/local/lib/python3.12/dist-packages/ray/core/src/ray/raylet/raylet --node_ip_address=10.0.0.2")
            .comm("raylet")
            .kids(ranks(4, "/usr/bin/python3 /usr/local/lib/python3.12/dist-packages/ray/_private/workers/default_worker.py", |i, r| {
                r.title(if i < 2 { "ray::Worker" } else { "ray::IDLE" })
            })),
        kind: "live-holders",
        launcher: Some(("raylet", Some("Ray raylet"))),
    },
    sglang_launcher_and_schedulers => Shape {
        tree: p("launcher", "/usr/bin/python3 -m sglang.launch_server --model-path /models/m --tp 4")
            .comm("python3")
            .kids(
                ranks(4, SPAWN, |i, r| r.title(&format!("sglang::scheduler_TP{i}")))
                    .into_iter()
                    .chain([p("detokenizer", SPAWN).title("sglang::detokenizer")])
                    .collect(),
            ),
        kind: "live-holders",
        launcher: Some(("launcher", Some("SGLang server"))),
    },
    jupyter_kernel_alone => Shape {
        tree: p("server", "/usr/bin/python3 /usr/local/bin/jupyter-lab --no-browser")
            .comm("jupyter-lab")
            .kids(ranks(1, "/usr/bin/python3 -m ipykernel_launcher -f /root/.local/share/jupyter/runtime/kernel-1.json", |_, r| {
                r.comm("python3")
            })),
        kind: "live-holders",
        launcher: None,
    },
    multiprocessing_spawn_children => Shape {
        tree: p("parent", "/usr/bin/python3 train.py")
            .comm("python3")
            .kids(ranks(4, SPAWN, |_, r| r.comm("python3"))),
        kind: "live-holders",
        launcher: Some(("parent", None)),
    },
    // The training process died; its DataLoader workers (forked, so with its
    // command line) live on, reparented to the user's systemd manager (a
    // subreaper), mapping the GPUs. One finding should cover them both (one
    // dead parent, one process group) and its next end exactly them.
    dataloader_orphans_under_a_user_manager => Shape {
        tree: p("manager", "/usr/lib/systemd/systemd --user")
            .comm("systemd")
            .subreaper()
            .kids(vec![p("trainer", "/usr/bin/python3 train.py")
                .comm("python3")
                .exits()
                .kids(ranks(2, "/usr/bin/python3 train.py", |_, r| r.comm("pt_data_worker")))]),
        kind: "orphans",
        launcher: None,
    },
}
