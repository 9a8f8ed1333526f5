//! Findings that say only what is true, on real python3 processes: a
//! launch group's words, PIDs and next name one set; a comm renamed with
//! prctl and a command line rewritten are different findings, each saying
//! which of `pkill`, `pkill -f` and `ps | grep` it defeats; `why --gpu N`
//! never suggests itself.

use crate::harness::*;
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::BufRead;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};

fn pid_set(f: &Value) -> BTreeSet<u32> {
    u32s(&f["pids"]).into_iter().collect()
}

/// The PIDs `gpufree kill --pid A --pid B ...` names.
fn killed(next: &Value) -> BTreeSet<u32> {
    let words: Vec<&str> = next.as_str().unwrap().split(' ').collect();
    assert!(
        next.as_str().unwrap().starts_with("gpufree kill "),
        "{next}"
    );
    words
        .windows(2)
        .filter(|w| w[0] == "--pid")
        .map(|w| w[1].parse().unwrap())
        .collect()
}

/// Processes this test started, killed by identity when dropped.
struct Ours(Vec<OwnedFd>);

impl Ours {
    fn adopt(pids: &[u32]) -> Ours {
        Ours(
            pids.iter()
                .map(|p| {
                    pidfd_open(Pid::from_raw(*p as i32).unwrap(), PidfdFlags::empty()).unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Ours {
    fn drop(&mut self) {
        for fd in &self.0 {
            let _ = pidfd_send_signal(fd, Signal::KILL);
        }
    }
}

/// The scene: an orphaned launcher L (its parent exited) holding
/// nvidia-uvm, its worker W (parent L, alive) holding GPU 0's node, and
/// another orphan X holding GPU 1's; each changed only its comm with
/// prctl(PR_SET_NAME), its command line untouched. Returns (L, W, X)
/// once all three are ready and L and X are reparented.
fn scene(d: &TestDir) -> ((u32, u32, u32), Ours) {
    let code = "import os,sys,time,ctypes\n\
        libc=ctypes.CDLL(None)\n\
        dev=sys.argv[1]\n\
        r,w=os.pipe()\n\
        def name(n): libc.prctl(15, n, 0, 0, 0)\n\
        def orphan(body):\n\
        \x20   pid=os.fork()\n\
        \x20   if pid==0:\n\
        \x20       if os.fork()==0:\n\
        \x20           body(); os._exit(0)\n\
        \x20       os._exit(0)\n\
        \x20   os.waitpid(pid,0)\n\
        def launcher():\n\
        \x20   f=open(dev+'/nvidia-uvm','rb'); name(b'launcher')\n\
        \x20   if os.fork()==0:\n\
        \x20       g=open(dev+'/nvidia0','rb'); name(b'worker')\n\
        \x20       os.write(w,b'W %d\\n' % os.getpid()); time.sleep(120); os._exit(0)\n\
        \x20   os.write(w,b'L %d\\n' % os.getpid()); time.sleep(120)\n\
        def stray():\n\
        \x20   g=open(dev+'/nvidia1','rb'); name(b'stray')\n\
        \x20   os.write(w,b'X %d\\n' % os.getpid()); time.sleep(120)\n\
        orphan(launcher); orphan(stray)\n\
        got={}\n\
        f=os.fdopen(r)\n\
        while len(got)<3:\n\
        \x20   k,v=f.readline().split(); got[k]=v\n\
        print(got['L'],got['W'],got['X'],flush=True)\n";
    let mut top = Command::new("python3")
        .args(["-c", code])
        .arg(&d.dev)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(top.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    top.wait().unwrap();
    let p: Vec<u32> = line
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(p.len(), 3, "{line:?}");
    let ours = Ours::adopt(&p);
    // The middle processes have exited: L and X are reparented already
    // (the top waited for them), W is L's.
    for (pid, comm) in [(p[0], "launcher"), (p[1], "worker"), (p[2], "stray")] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while stat(pid).map(|s| s.comm) != Some(comm.into()) {
            assert!(
                std::time::Instant::now() < deadline,
                "{pid} never named {comm}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    ((p[0], p[1], p[2]), ours)
}

#[test]
fn orphaned_launchers_group_names_the_same_pids_in_its_words_its_pids_and_its_next() {
    let d = TestDir::new(2);
    let ((l, w, x), _ours) = scene(&d);
    let state = d.state(&sim_state(vec![
        sim_gpu(0, &[(w, 20 * 1024, "while-alive")], 0),
        sim_gpu(1, &[(x, 8 * 1024, "while-alive")], 0),
    ]));
    let doc = Gpufree::new(["why"]).json().on(&d, &state).run().json();
    if stat(l).unwrap().ppid != 1 || stat(x).unwrap().ppid != 1 {
        skip_off_ci(
            "orphans reparented to PID 1",
            &"a subreaper took them, which /proc cannot tell from a parent",
        );
        return;
    }
    let group = findings_of(&doc, "orphans")
        .into_iter()
        .find(|f| pid_set(f).contains(&w))
        .unwrap_or_else(|| panic!("no group holds W: {doc}"));
    let message = group["message"].as_str().unwrap();
    // Its PIDs: the two with memory; its words count them, and say W's
    // parent is alive and that the launcher goes too.
    assert_eq!(pid_set(group), BTreeSet::from([w, x]), "{group}");
    assert!(
        message.starts_with("2 live processes in trees whose top's parent died"),
        "{message}"
    );
    assert!(!message.contains("of a dead parent"), "{message}");
    assert!(
        message.ends_with(&format!(
            "the next also stops 1 of its processes without GPU memory: {l}"
        )),
        "{message}"
    );
    let details = group["details"].to_string();
    assert!(
        details.contains(&format!(
            "its parent is alive, in the tree of {l}, whose parent died"
        )),
        "{details}"
    );
    assert!(details.contains("nvidia-uvm"), "{details}");
    // Its next kills exactly those and the launcher it names.
    assert_eq!(killed(&group["next"]), BTreeSet::from([l, w, x]), "{group}");
}

#[test]
fn comm_renamed_with_prctl_is_not_called_setproctitle_and_pkill_f_still_hits() {
    let d = TestDir::new(2);
    let ((l, w, x), _ours) = scene(&d);
    let state = d.state(&sim_state(vec![
        sim_gpu(0, &[(w, 20 * 1024, "while-alive")], 0),
        sim_gpu(1, &[(x, 8 * 1024, "while-alive")], 0),
    ]));
    let doc = Gpufree::new(["why"])
        .json()
        .opt_value("--pattern", "python3")
        .on(&d, &state)
        .run()
        .json();
    let renamed = findings_of(&doc, "renamed-holders");
    assert_eq!(renamed.len(), 1, "{doc}");
    let f = renamed[0];
    assert_eq!(pid_set(f), BTreeSet::from([l, w, x]), "{f}");
    let message = f["message"].as_str().unwrap();
    assert!(!message.contains("setproctitle"), "{message}");
    assert!(
        message.starts_with("3 holders changed only their comm (prctl PR_SET_NAME)"),
        "{message}"
    );
    assert!(
        message.contains("plain `pkill python3` (comm) and `ps -e` miss all of them"),
        "{message}"
    );
    assert!(
        message.contains("`pkill -f python3` and `ps aux | grep python3` miss none"),
        "{message}"
    );
    // The same model `why --pattern` uses: it hits all three.
    let pattern = &findings_of(&doc, "pattern")[0];
    let hits: BTreeSet<u32> = pattern["details"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| {
            d.as_str()?
                .strip_prefix("hits ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(hits, BTreeSet::from([l, w, x]), "{pattern}");
    // And procps agrees: pgrep -f sees them, plain pgrep does not.
    let pgrep = |args: &[&str]| -> BTreeSet<u32> {
        let out = Command::new("pgrep").args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|p| [l, w, x].contains(p))
            .collect()
    };
    if Command::new("pgrep").arg("-V").output().is_ok() {
        assert_eq!(pgrep(&["-f", "python3"]), BTreeSet::from([l, w, x]));
        assert!(pgrep(&["python3"]).is_empty());
    }
}

#[test]
fn rewritten_command_line_is_its_own_finding_that_pkill_by_comm_still_hits() {
    let d = TestDir::new(1);
    // python3 started again with argv[0] 'trainer: rank 0' (as a
    // setproctitle of the command line would leave it), its comm the
    // interpreter's.
    let code = format!(
        "import os,sys,time\n\
         if 'REXEC' not in os.environ:\n\
         \x20   os.environ['REXEC']='1'\n\
         \x20   code=open('/proc/self/cmdline','rb').read().split(b'\\0')[2]\n\
         \x20   os.execv(sys.executable, [b'trainer: rank 0', b'-c', code])\n\
         f=open({:?},'rb')\n\
         print('ready',flush=True)\n\
         time.sleep(120)\n",
        d.node("nvidia0").to_str().unwrap()
    );
    let mut child = spawn_ready(Command::new("python3").args(["-c", &code]));
    let pid = child.id();
    let state = d.one_gpu(&[(pid, 1024, "while-alive")], 0);
    let doc = Gpufree::new(["why"]).json().on(&d, &state).run().json();
    let _ = child.kill();
    let _ = child.wait();
    let renamed = findings_of(&doc, "renamed-holders");
    assert_eq!(renamed.len(), 1, "{doc}");
    let message = renamed[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("1 holder rewrote its command line (setproctitle), comm unchanged"),
        "{message}"
    );
    assert!(
        message.contains("`pkill -f python3` and `ps aux | grep python3` miss it"),
        "{message}"
    );
    assert!(
        message.contains("plain `pkill python3` (comm) misses none"),
        "{message}"
    );
}

/// The launcher holding only nvidia-uvm: status counts it apart from the
/// GPUs, as the shared driver nodes' holder why names; `why --gpu 0`
/// never suggests `gpufree why --gpu 0`.
#[test]
fn status_and_why_count_the_shared_node_holder_alike_and_why_never_suggests_itself() {
    let d = TestDir::new(2);
    let ((l, w, x), _ours) = scene(&d);
    let state = d.state(&sim_state(vec![
        sim_gpu(0, &[(w, 20 * 1024, "while-alive")], 0),
        sim_gpu(1, &[(x, 8 * 1024, "while-alive")], 0),
    ]));
    let status = Gpufree::new(["status"]).on(&d, &state).run();
    let text = status.stdout.clone();
    assert!(
        text.contains("GPU 0: 1 holding memory, 0 holding its device node"),
        "{text}"
    );
    assert!(
        text.contains(
            "Shared driver nodes only (nvidiactl, nvidia-uvm...): 1 holding no GPU's own node"
        ),
        "{text}"
    );
    let doc = Gpufree::new(["why"]).json().on(&d, &state).run().json();
    let nodes = findings_of(&doc, "device-holders");
    assert_eq!(nodes.len(), 1, "{doc}");
    assert_eq!(pid_set(nodes[0]), BTreeSet::from([l]));
    assert!(
        nodes[0]["message"].as_str().unwrap().starts_with(
            "1 process holds only shared driver nodes (no GPU's own node) open without GPU memory"
        ),
        "{}",
        nodes[0]["message"]
    );
    for sel in [vec!["--gpu", "0"], vec![]] {
        let doc = Gpufree::new(["why"])
            .json()
            .args(&sel)
            .on(&d, &state)
            .run()
            .json();
        let again = format!("gpufree why {}", sel.join(" "));
        for f in doc["findings"].as_array().unwrap() {
            assert_ne!(f["next"].as_str().unwrap_or("").trim(), again.trim(), "{f}");
        }
    }
}

/// A PID NVML lists whose process holds no GPU node: `why --gpu 0` and
/// plain `why` on a one-GPU host point at the visibility, not at
/// themselves.
#[test]
fn stale_nvml_pid_next_is_never_the_why_just_run() {
    let d = TestDir::new(1);
    let mut child = spawn_ready(Command::new("python3").args([
        "-c",
        "import time\nprint('ready',flush=True)\ntime.sleep(120)",
    ]));
    let state = d.one_gpu(&[(child.id(), 1024, "while-alive")], 0);
    let runs: Vec<Value> = [vec!["--gpu", "0"], vec![]]
        .iter()
        .map(|sel| {
            Gpufree::new(["why"])
                .json()
                .args(sel)
                .on(&d, &state)
                .run()
                .json()
        })
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    for doc in runs {
        let stale = findings_of(&doc, "stale-nvml-pid");
        assert_eq!(stale.len(), 1, "{doc}");
        assert_eq!(
            stale[0]["next"], "gpufree why --json  # see visibility and unavailable",
            "{doc}"
        );
    }
}
