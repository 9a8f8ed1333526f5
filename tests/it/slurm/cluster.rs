//! A real one-node Slurm cluster per test: munged, slurmctld and slurmd
//! (Debian's slurm-wlm) started as root with a configuration in the test's
//! temporary directory, on free ports of 127.0.0.1. The node has gres
//! gpu:8 over the machine's `/dev/loop0`..`/dev/loop7` (only Slurm looks at
//! them); the jobs and gpufree use the test's own device directory, and
//! the simulator gives the GPUs memory. Prolog, Epilog, HealthCheckProgram
//! and UnkillableStepProgram are thin wrappers that set gpufree's test
//! variables and exec the contrib scripts unchanged. The daemons are the
//! test's children (daemon.rs's [`Daemon`]), killed when the cluster drops;
//! their logs are printed when the test fails.

use crate::daemon::{until, Daemon};
use crate::harness::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The GPUs of the node.
pub const GPUS: u32 = 8;

/// A running cluster of one node.
pub struct Cluster {
    /// The node's device directory and the test's scratch space.
    pub d: TestDir,
    /// The node's name (this machine's short host name).
    pub node: String,
    conf: PathBuf,
    sim: PathBuf,
    /// munged, slurmctld, slurmd: stopped in the reverse order.
    daemons: Vec<Daemon>,
    started: Duration,
}

/// What a test tunes: how long the prolog waits for busy GPUs, and
/// slurm.conf's UnkillableStepTimeout and HealthCheckInterval (seconds; 0:
/// Slurm never runs the health check itself).
pub struct Tuning {
    pub prolog_timeout: &'static str,
    pub unkillable_timeout: u32,
    pub health_interval: u32,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            prolog_timeout: "3s",
            unkillable_timeout: 2,
            health_interval: 0,
        }
    }
}

/// A free TCP port on 127.0.0.1 (free when asked). Unlike daemon.rs's
/// engines, Slurm's daemons cannot be told port 0 and report the one they
/// took: slurmctld and slurmd each read both ports from slurm.conf
/// (SlurmctldPort, SlurmdPort) to reach the other, so the ports are fixed
/// in the file before either starts.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether this machine can run a cluster: root, Slurm and munge installed,
/// /dev/loop0..7 present; CI must (the test fails there), elsewhere it is
/// skipped.
fn runnable() -> bool {
    let needs = "Slurm (slurmctld, slurmd, munged from slurm-wlm and munge), root, and \
                 /dev/loop0..7 (gres.conf's GPU files)";
    if !rustix::process::geteuid().is_root() {
        skip_off_ci(needs, &"not root");
        return false;
    }
    let daemons = ["slurmctld", "slurmd", "munged"].map(|d| format!("/usr/sbin/{d}"));
    let loops = (0..GPUS).map(|i| format!("/dev/loop{i}"));
    for file in daemons.into_iter().chain(loops) {
        if !Path::new(&file).exists() {
            skip_off_ci(needs, &format!("{file} is missing"));
            return false;
        }
    }
    true
}

impl Cluster {
    /// Starts a cluster and waits until its node is idle; None where it
    /// cannot run here (skipped).
    pub fn start(t: Tuning) -> Option<Cluster> {
        if !runnable() {
            return None;
        }
        let began = Instant::now();
        let d = TestDir::new(GPUS);
        let dir = d.tmp.path().to_path_buf();
        let node = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string();
        let sim = d.state(&sim_state((0..GPUS).map(|i| sim_gpu(i, &[], 0)).collect()));
        let mut c = Cluster {
            d,
            node,
            conf: dir.join("slurm.conf"),
            sim,
            daemons: Vec::new(),
            started: Duration::ZERO,
        };
        c.write_config(&t);
        let key = dir.join("munge.key");
        let mut bytes = vec![0u8; 1024];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").unwrap(),
            &mut bytes,
        )
        .unwrap();
        std::fs::write(&key, bytes).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o400))
            .unwrap();
        let p = |n: &str| dir.join(n);
        c.daemon(
            "munged",
            Command::new("/usr/sbin/munged")
                .arg("--foreground")
                .arg("--force")
                .arg(format!("--key-file={}", p("munge.key").display()))
                .arg(format!("--socket={}", p("munge.sock").display()))
                .arg(format!("--pid-file={}", p("munged.pid").display()))
                .arg(format!("--log-file={}", p("munged.log").display()))
                .arg(format!("--seed-file={}", p("munge.seed").display())),
        );
        c.wait_for("munged's socket", Duration::from_secs(10), |_| {
            p("munge.sock").exists()
        });
        let conf = c.conf.clone();
        c.daemon(
            "slurmctld",
            Command::new("/usr/sbin/slurmctld")
                .arg("-D")
                .arg("-f")
                .arg(&conf),
        );
        // slurmd registers once at its start: the controller must answer.
        c.wait_for("slurmctld to answer", Duration::from_secs(20), |c| {
            run_cmd(c.cmd("scontrol").arg("ping"))
                .stdout
                .contains("is UP")
        });
        c.daemon(
            "slurmd",
            Command::new("/usr/sbin/slurmd")
                .arg("-D")
                .arg("-f")
                .arg(&conf),
        );
        c.wait_for("the node to be idle", Duration::from_secs(30), |c| {
            c.node_state() == "IDLE"
        });
        c.started = began.elapsed();
        eprintln!("slurm cluster up in {:?}", c.started);
        Some(c)
    }

    fn write_config(&self, t: &Tuning) {
        let dir = self.d.tmp.path();
        let p = |n: &str| dir.join(n).display().to_string();
        for sub in ["state", "spool"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        for script in ["prolog", "epilog", "healthcheck", "unkillable"] {
            self.wrapper(script, t);
        }
        let conf = format!(
            "ClusterName=gpufree\n\
             SlurmctldHost={node}(127.0.0.1)\n\
             SlurmctldPort={ctld}\nSlurmdPort={slurmd}\n\
             SlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nAuthInfo=socket={sock}\nCredType=cred/munge\n\
             StateSaveLocation={state}\nSlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={ctldpid}\nSlurmdPidFile={slurmdpid}\n\
             SlurmctldLogFile={ctldlog}\nSlurmdLogFile={slurmdlog}\n\
             SlurmdDebug=debug\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             GresTypes=gpu\nReturnToService=2\nMpiDefault=none\n\
             JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n\
             SchedulerType=sched/builtin\n\
             KillWait=1\nUnkillableStepTimeout={unkillable}\nMessageTimeout=5\n\
             Prolog={pro}\nEpilog={epi}\n\
             HealthCheckProgram={hc}\nHealthCheckInterval={health}\n\
             UnkillableStepProgram={unk}\n\
             NodeName={node} NodeAddr=127.0.0.1 CPUs=2 Gres=gpu:{GPUS} State=UNKNOWN\n\
             PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            node = self.node,
            ctld = free_port(),
            slurmd = free_port(),
            sock = p("munge.sock"),
            state = p("state"),
            spool = p("spool"),
            ctldpid = p("slurmctld.pid"),
            slurmdpid = p("slurmd.pid"),
            ctldlog = p("slurmctld.log"),
            slurmdlog = p("slurmd.log"),
            unkillable = t.unkillable_timeout,
            health = t.health_interval,
            pro = p("prolog"),
            epi = p("epilog"),
            hc = p("healthcheck"),
            unk = p("unkillable"),
        );
        std::fs::write(&self.conf, conf).unwrap();
        std::fs::write(
            dir.join("gres.conf"),
            format!("Name=gpu File=/dev/loop[0-{}]\n", GPUS - 1),
        )
        .unwrap();
    }

    /// `dir/NAME`: sets gpufree's test variables (no PATH: slurmd gives the
    /// scripts none) and execs `contrib/slurm/NAME.sh` unchanged.
    fn wrapper(&self, name: &str, t: &Tuning) {
        let dir = self.d.tmp.path();
        let vars = [
            ("GPUFREE", bin().display().to_string()),
            ("GPUFREE_BPF_CACHE", bpf_cache().to_string()),
            ("GPUFREE_DEV_DIR", self.d.dev.display().to_string()),
            ("GPUFREE_NVML_LIB", sim_lib().display().to_string()),
            ("GPUFREE_SIM_STATE", self.sim.display().to_string()),
            ("GPUFREE_JOURNAL_SOCKET", String::new()),
            ("GPUFREE_SYSLOG_SOCKET", String::new()),
            (
                "GPUFREE_CHECK_STATE",
                dir.join("check.json").display().to_string(),
            ),
            (
                "GPUFREE_DRAIN_MARK",
                dir.join("drained").display().to_string(),
            ),
            ("GPUFREE_PROLOG_TIMEOUT", t.prolog_timeout.to_string()),
            ("GPUFREE_EPILOG_GRACE", "1s".into()),
            ("GPUFREE_EPILOG_TIMEOUT", "5s".into()),
            ("GPUFREE_UNKILLABLE_WATCH", "20".into()),
            ("SLURM_CONF", self.conf.display().to_string()),
        ];
        let mut s = String::from("#!/bin/bash\n");
        for (k, v) in vars {
            s.push_str(&format!("export {k}='{v}'\n"));
        }
        if name == "unkillable" {
            // slurmstepd keeps no output of this one: the test does.
            s.push_str(&format!("exec 2>>'{}/unkillable.log'\n", dir.display()));
        }
        s.push_str(&format!(
            "exec '{}' \"$@\"\n",
            repo(&format!("contrib/slurm/{name}.sh")).display()
        ));
        let path = dir.join(name);
        std::fs::write(&path, s).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }

    /// Starts `cmd` as the daemon `name`, its output in `out/NAME.log`
    /// (its own log is `NAME.log`, from its configuration).
    fn daemon(&mut self, name: &'static str, cmd: &mut Command) {
        let out = self.d.tmp.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        let daemon = Daemon::start(name, cmd.env("SLURM_CONF", &self.conf), &out);
        self.daemons.push(daemon);
    }

    /// How long the cluster took to start, until its node was idle.
    pub fn startup(&self) -> Duration {
        self.started
    }

    /// Sets the simulated memory: `(gpu, pid, MiB)`, each reported while
    /// that process lives; `leaked` MiB on GPU 0 that no process holds.
    pub fn memory(&self, held: &[(u32, u32, u64)], leaked: u64) {
        let gpus: Vec<Value> = (0..GPUS)
            .map(|i| {
                let procs: Vec<(u32, u64, &str)> = held
                    .iter()
                    .filter(|h| h.0 == i)
                    .map(|h| (h.1, h.2, "while-alive"))
                    .collect();
                let mut g = sim_gpu(i, &procs, 0);
                if i == 0 && leaked > 0 {
                    g["leaked_bytes"] = serde_json::json!(leaked << 20);
                }
                g
            })
            .collect();
        assert_eq!(self.d.state(&sim_state(gpus)), self.sim);
    }

    /// A Slurm command with this cluster's configuration.
    pub fn cmd(&self, exe: &str) -> Command {
        let mut c = Command::new(exe);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// Runs `scontrol ARGS`; its stdout (it must succeed).
    pub fn scontrol(&self, args: &[&str]) -> String {
        let r = run_cmd(self.cmd("scontrol").args(args));
        r.assert_exit_with(
            0,
            format_args!("scontrol {args:?}: {}{}", r.stdout, r.stderr),
        );
        r.stdout
    }

    /// `scontrol show node`, one line.
    pub fn show_node(&self) -> String {
        self.scontrol(&["show", "node", &self.node])
    }

    /// The node's state (`IDLE`, `IDLE+DRAIN`, `MIXED`, ...).
    pub fn node_state(&self) -> String {
        let s = run_cmd(self.cmd("scontrol").args(["show", "node", &self.node]));
        field(&s.stdout, "State").unwrap_or_default()
    }

    /// The node's Reason, without Slurm's `[user@time]` suffix.
    pub fn reason(&self) -> Option<String> {
        let n = self.show_node();
        let line = n.lines().find_map(|l| l.trim().strip_prefix("Reason="))?;
        Some(match line.rfind(" [") {
            Some(i) => line[..i].to_string(),
            None => line.to_string(),
        })
    }

    /// `sinfo -R`'s reason for the node (`%E`, the whole of it).
    pub fn sinfo_reason(&self) -> String {
        let r = run_cmd(self.cmd("sinfo").args(["-h", "-R", "-o", "%E"]));
        r.stdout.trim().to_string()
    }

    /// Submits `script` (bash) asking for `gpus` GPUs; its job ID. The job
    /// gets gpufree's variables for this node from the environment.
    pub fn sbatch(&self, name: &str, gpus: u32, script: &str) -> u32 {
        let dir = self.d.tmp.path();
        let file = dir.join(format!("{name}.sh"));
        std::fs::write(&file, format!("#!/bin/bash\n{script}")).unwrap();
        let r = run_cmd(
            scratch(&mut self.cmd("sbatch"))
                .arg("--parsable")
                .arg(format!("--gres=gpu:{gpus}"))
                .arg(format!("--job-name={name}"))
                .arg(format!("--output={}/{name}.out", dir.display()))
                .arg(&file)
                .env("GPUFREE", bin())
                .env("GPUFREE_DEV_DIR", &self.d.dev)
                .env("GPUFREE_NVML_LIB", sim_lib())
                .env("GPUFREE_SIM_STATE", &self.sim)
                .env("SCRATCH", dir),
        );
        r.assert_exit_with(0, format_args!("sbatch: {}{}", r.stdout, r.stderr));
        r.stdout.trim().parse().unwrap()
    }

    /// `scontrol show job ID`.
    pub fn show_job(&self, id: u32) -> String {
        self.scontrol(&["show", "job", &id.to_string()])
    }

    /// The job's state (`RUNNING`, `COMPLETED`, `PENDING`, ...).
    pub fn job_state(&self, id: u32) -> String {
        field(&self.show_job(id), "JobState").unwrap_or_default()
    }

    /// What the job named `name` wrote so far.
    pub fn output(&self, name: &str) -> String {
        std::fs::read_to_string(self.d.tmp.path().join(format!("{name}.out"))).unwrap_or_default()
    }

    /// Waits (polling) until `ok` holds, up to `limit`; fails the test
    /// otherwise (the cluster's state and logs are printed as it drops).
    pub fn wait_for(&self, what: &str, limit: Duration, ok: impl Fn(&Cluster) -> bool) {
        let daemons: Vec<&Daemon> = self.daemons.iter().collect();
        until(what, limit.as_secs(), &daemons, || ok(self).then_some(()));
    }

    /// Waits until job `id` is in `state` and the node has finished with
    /// it (no longer COMPLETING: its epilog ran).
    pub fn wait_job(&self, id: u32, state: &str, limit: Duration) {
        self.wait_for(&format!("job {id} {state}"), limit, |c| {
            c.job_state(id) == state && !c.node_state().contains("COMPLETING")
        });
    }

    /// Runs the wrapper `name` as slurmd runs its programs: as root, with
    /// an empty environment.
    pub fn run_as_slurmd(&self, name: &str) -> Output {
        run_cmd(Command::new(self.d.tmp.path().join(name)).env_clear())
    }

    /// slurmctld's log so far.
    pub fn ctld_log(&self) -> String {
        std::fs::read_to_string(self.d.tmp.path().join("slurmctld.log")).unwrap_or_default()
    }

    /// The node and its jobs, and the daemons' own logs (their output is
    /// in `out/`, which [`until`] prints).
    fn logs(&self) -> String {
        let mut s = String::new();
        for show in ["node", "job"] {
            let r = run_cmd(self.cmd("scontrol").args(["show", show]));
            s.push_str(&format!("==> scontrol show {show} <==\n{}\n", r.stdout));
        }
        for name in [
            "munged.log",
            "slurmctld.log",
            "slurmd.log",
            "unkillable.log",
        ] {
            let text = std::fs::read_to_string(self.d.tmp.path().join(name)).unwrap_or_default();
            s.push_str(&format!("==> {name} <==\n{text}\n"));
        }
        s
    }
}

/// `KEY=value` of Slurm's `show` output.
pub fn field(show: &str, key: &str) -> Option<String> {
    show.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        // slurmd first (it runs the scripts), then slurmctld, then munged;
        // SIGKILL: their state is thrown away with the directory.
        let began = Instant::now();
        while let Some(daemon) = self.daemons.pop() {
            drop(daemon);
        }
        eprintln!("slurm cluster stopped in {:?}", began.elapsed());
    }
}
