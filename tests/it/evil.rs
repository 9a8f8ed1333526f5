//! Hostile names: every string gpufree prints comes from someone else (a
//! process's comm and command line, a cgroup's unit name, a `--pattern`).
//! The corpus below goes through every presenter: no control character
//! but the line break, no DEL, C1 or bidi control may reach the terminal;
//! long fields are cut; JSON keeps them whole; every `next` command, pasted
//! into bash, runs exactly the argument vector it was built from.
//!
//! Golden outputs come from a fake /proc tree (fixed PIDs) and the
//! simulator; `GPUFREE_BLESS=1` rewrites them after a deliberate change.

use crate::harness::{bin, hex, sim_gpu, sim_state, spawn_ready, Gpufree, Output, TestDir};
use clap::Parser;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../corpus/evil.rs"]
mod names;
use names::corpus;

/// Characters that must never reach a terminal from data.
fn unsafe_char(c: char) -> bool {
    (c < ' ' && c != '\n')
        || ('\x7f'..='\u{9f}').contains(&c)
        || matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// Fails when `out` carries anything a terminal would obey.
pub(crate) fn assert_inert(what: &str, out: &[u8]) {
    let text = String::from_utf8_lossy(out);
    if let Some((i, c)) = text.char_indices().find(|(_, c)| unsafe_char(*c)) {
        let from = text[..i].char_indices().rev().nth(40).map_or(0, |(j, _)| j);
        panic!(
            "{what}: {c:?} reaches the terminal at byte {i}: {:?}",
            &text[from..i]
        );
    }
}

/// One process of a fake /proc tree, with raw bytes for its names.
struct Fake<'a> {
    pid: u32,
    comm: &'a [u8],
    cmdline: Vec<&'a [u8]>,
    uid: u32,
    cgroup: Vec<u8>,
    node: &'a Path,
}

fn add(root: &Path, p: &Fake<'_>) {
    let d = root.join(p.pid.to_string());
    std::fs::create_dir_all(d.join("fd")).unwrap();
    let mut fields: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
    fields[0] = "S".into();
    fields[1] = "1".into();
    fields[17] = "1".into();
    fields[19] = (1000 + p.pid).to_string();
    let mut stat = format!("{} (", p.pid).into_bytes();
    stat.extend_from_slice(p.comm);
    stat.extend_from_slice(format!(") {}\n", fields.join(" ")).as_bytes());
    std::fs::write(d.join("stat"), stat).unwrap();
    let mut comm = p.comm.to_vec();
    comm.push(b'\n');
    std::fs::write(d.join("comm"), comm).unwrap();
    let mut status = b"Name:\t".to_vec();
    status.extend_from_slice(p.comm);
    status.extend_from_slice(
        format!("\nUid:\t{u}\t{u}\t{u}\t{u}\nNSpid:\t{}\n", p.pid, u = p.uid).as_bytes(),
    );
    std::fs::write(d.join("status"), status).unwrap();
    let mut cmd = Vec::new();
    for a in &p.cmdline {
        cmd.extend_from_slice(a);
        cmd.push(0);
    }
    std::fs::write(d.join("cmdline"), cmd).unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", d.join("exe")).unwrap();
    std::fs::write(d.join("cgroup"), &p.cgroup).unwrap();
    std::os::unix::fs::symlink(p.node, d.join("fd").join("3")).unwrap();
    std::fs::write(
        d.join("maps"),
        "55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1234 /usr/bin/python3.11\n",
    )
    .unwrap();
}

/// A fake /proc with one holder per corpus entry (its comm, its command
/// line and its unit name all hostile) and the simulator listing each
/// with GPU memory.
pub(crate) struct Scene {
    pub(crate) d: TestDir,
    proc_root: PathBuf,
    state: PathBuf,
}

const FIRST_PID: u32 = 4100;

pub(crate) fn scene() -> Scene {
    let d = TestDir::new(1);
    let proc_root = d.tmp.path().join("proc");
    std::fs::create_dir(&proc_root).unwrap();
    let node = d.node("nvidia0");
    for (i, evil) in corpus().iter().enumerate() {
        let pid = FIRST_PID + i as u32;
        let comm: Vec<u8> = evil.iter().copied().take(15).collect();
        let mut cgroup = b"0::/system.slice/".to_vec();
        cgroup.extend(evil.iter().copied().filter(|b| *b != b'/').take(200));
        cgroup.extend_from_slice(b".service\n");
        add(
            &proc_root,
            &Fake {
                pid,
                comm: &comm,
                cmdline: vec![evil, b"--serve", evil],
                uid: if i % 2 == 0 { 0 } else { 65534 },
                cgroup,
                node: &node,
            },
        );
    }
    let procs: Vec<(u32, u64, &str)> = (0..corpus().len() as u32)
        .map(|i| (FIRST_PID + i, 1024, "always"))
        .collect();
    let mut gpu = sim_gpu(0, &procs, 0);
    gpu["name"] = Value::String("NVIDIA \u{1b}[5mH200\u{202e}".into());
    let state = d.state(&sim_state(vec![gpu]));
    Scene {
        d,
        proc_root,
        state,
    }
}

impl Scene {
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.gpufree(args).run()
    }

    /// `gpufree ARGS` on the scene, to be run.
    pub(crate) fn gpufree(&self, args: &[&str]) -> Gpufree {
        Gpufree::new(args)
            .proc_root(&self.proc_root)
            .dev(&self.d.dev)
            .sim(&self.state)
    }

    /// Output with the temporary directory written as `$TMP` and the
    /// seconds a wait took (they count from the start, collection
    /// included, so a loaded machine reads 0.1 where another reads 0.0)
    /// as `N.N`.
    fn normalized(&self, out: &[u8]) -> String {
        let text =
            String::from_utf8_lossy(out).replace(self.d.tmp.path().to_str().unwrap(), "$TMP");
        regex::Regex::new(r"not free after [0-9]+\.[0-9] s")
            .unwrap()
            .replace_all(&text, "not free after N.N s")
            .into_owned()
    }
}

fn golden(name: &str, text: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("GPUFREE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (GPUFREE_BLESS=1 writes it)", path.display()));
    assert_eq!(
        text,
        want,
        "{name} differs from {} (GPUFREE_BLESS=1 rewrites it after a deliberate change)",
        path.display()
    );
}

#[test]
fn hostile_names_reach_no_terminal_and_match_the_golden_outputs() {
    let s = scene();
    for (name, args, code) in [
        ("evil-status.txt", &["status"][..], 0),
        ("evil-why.txt", &["why"][..], 1),
        (
            "evil-why-pattern.txt",
            &["why", "--pattern", "it's \"q"][..],
            1,
        ),
        ("evil-wait.txt", &["wait", "--timeout", "0"][..], 1),
    ] {
        let out = s.run(args);
        out.assert_exit(code);
        assert_inert(&format!("{args:?} stdout"), &out.stdout_bytes);
        assert_inert(&format!("{args:?} stderr"), &out.stderr_bytes);
        let text = s.normalized(&out.stdout_bytes);
        // The 64 KiB name is cut in text output.
        assert!(
            text.lines().all(|l| l.len() < 4096),
            "{args:?}: a line of {} bytes",
            text.lines().map(str::len).max().unwrap_or(0)
        );
        golden(name, &text);
    }
}

#[test]
fn json_keeps_hostile_names_whole_and_escaped() {
    let s = scene();
    let out = s.run(&["status", "--json"]);
    out.assert_exit(0);
    assert_inert("status --json", &out.stdout_bytes);
    let doc: Value = serde_json::from_slice(&out.stdout_bytes).unwrap();
    for (i, evil) in corpus().iter().enumerate() {
        let pid = FIRST_PID + i as u32;
        let p = doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("{pid} missing"));
        // Bytes that are not UTF-8 are kept as `\xHH` text.
        let want: String = evil
            .utf8_chunks()
            .map(|c| {
                let bad: String = c.invalid().iter().map(|b| format!("\\x{b:02x}")).collect();
                format!("{}{bad}", c.valid())
            })
            .collect();
        assert_eq!(p["cmdline"][0].as_str().unwrap(), want, "{pid}");
        assert_eq!(p["cmdline"][2].as_str().unwrap(), want, "{pid}");
    }
    assert_eq!(
        doc["gpus"][0]["name"].as_str().unwrap(),
        "NVIDIA \u{1b}[5mH200\u{202e}"
    );
}

/// A directory of fake commands that record their argv (NUL-separated,
/// one record per line) instead of acting; nothing else is on PATH.
fn recorders(dir: &Path) -> PathBuf {
    let bin = dir.join("fakebin");
    std::fs::create_dir(&bin).unwrap();
    let script = "#!/bin/sh\nprintf '%s\\0' \"${0##*/}\" \"$@\" >> \"$RECORD\"\nprintf '\\n' >> \"$RECORD\"\n";
    for name in [
        "gpufree",
        "kill",
        "systemctl",
        "nvidia-smi",
        "nvidia-cuda-mps-control",
    ] {
        let p = bin.join(name);
        std::fs::write(&p, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

/// The argv a shell runs for `line`, through the recorders: the same under
/// bash and under dash (Debian's /bin/sh), or the test fails.
fn pasted(fakebin: &Path, record: &Path, line: &str) -> Vec<Vec<u8>> {
    let mut runs = Vec::new();
    for shell in ["/bin/bash", "/bin/dash"] {
        assert!(Path::new(shell).exists(), "{shell} is needed for this test");
        std::fs::write(record, b"").unwrap();
        // `kill` is a builtin: the recorder must answer instead (bash can
        // turn its builtin off; dash's is bypassed by the path).
        let script = if shell.ends_with("bash") {
            format!("enable -n kill\n{line}")
        } else {
            line.replacen("kill -s", &format!("{}/kill -s", fakebin.display()), 1)
        };
        let status = Command::new(shell)
            .arg("-c")
            .arg(script)
            .env_clear()
            .env("PATH", fakebin)
            .env("RECORD", record)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "{shell}: pasting {line:?} failed: {status}"
        );
        let rec = std::fs::read(record).unwrap();
        let first = rec.split(|b| *b == b'\n').next().unwrap_or_default();
        runs.push(
            first
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>(),
        );
    }
    assert!(
        runs.windows(2).all(|w| w[0] == w[1]),
        "bash and dash run {line:?} differently: {runs:?}"
    );
    runs.swap_remove(0)
}

#[test]
fn every_next_line_pastes_as_the_argv_it_was_built_from() {
    let s = scene();
    let fakebin = recorders(s.d.tmp.path());
    let record = s.d.tmp.path().join("record");
    let out = s.run(&["why", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout_bytes).unwrap();
    let text_out = s.run(&["why"]);
    let text = String::from_utf8(text_out.stdout_bytes).unwrap();
    let text_nexts: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("next: "))
        .collect();
    let findings = doc["findings"].as_array().unwrap();
    let nexts: Vec<&str> = findings
        .iter()
        .filter_map(|f| f["next"].as_str())
        .filter(|n| !n.is_empty())
        .collect();
    assert_eq!(text_nexts, nexts, "the text shows the JSON's next lines");
    // Every hostile holder is freed by some next line: by its unit's exact
    // name, as one argument that gpufree's own command line reads back, or,
    // where the name holds a control character (no shell can be shown such
    // a word safely), by its PIDs.
    let mut units_seen = 0;
    let mut covered: Vec<u32> = Vec::new();
    for next in &nexts {
        let argv = pasted(&fakebin, &record, next);
        assert!(!argv.is_empty(), "{next:?} ran nothing");
        if argv[0] != b"gpufree" {
            continue;
        }
        let words: Vec<String> = argv
            .iter()
            .map(|a| String::from_utf8(a.clone()).unwrap())
            .collect();
        let cli = gpufree::cli::Cli::try_parse_from(&words)
            .unwrap_or_else(|e| panic!("{next:?} pastes as {words:?}, which gpufree refuses: {e}"));
        if let Some(gpufree::cli::Command::Kill(k)) = cli.command {
            if let Some(unit) = k.unit {
                let of_unit: Vec<u32> = doc["processes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|p| p["owner"]["name"] == unit.as_str())
                    .map(|p| p["pid"].as_u64().unwrap() as u32)
                    .collect();
                assert!(
                    !of_unit.is_empty(),
                    "{next:?} ran --unit {unit:?}, no holder's unit"
                );
                covered.extend(of_unit);
                units_seen += 1;
            }
            covered.extend(k.pid);
        }
    }
    assert!(
        units_seen >= 5,
        "only {units_seen} unit kills among {nexts:?}"
    );
    for i in 0..corpus().len() as u32 {
        assert!(
            covered.contains(&(FIRST_PID + i)),
            "no next line frees {}: {nexts:?}",
            FIRST_PID + i
        );
    }
    // A --pattern with quotes that starts like a flag (it hits every
    // holder, so the next line kills by it) comes back as the same pattern.
    let pat = "--serve|it's \"q";
    let out = s.run(&["why", "--json", &format!("--pattern={pat}")]);
    let doc: Value =
        serde_json::from_slice(&out.stdout_bytes).unwrap_or_else(|e| panic!("{e}: {}", out.stderr));
    let f = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "pattern")
        .expect("a pattern finding");
    let argv = pasted(&fakebin, &record, f["next"].as_str().unwrap());
    let words: Vec<String> = argv
        .iter()
        .map(|a| String::from_utf8(a.clone()).unwrap())
        .collect();
    match gpufree::cli::Cli::try_parse_from(&words).map(|c| c.command) {
        Ok(Some(gpufree::cli::Command::Kill(k))) => {
            assert_eq!(k.matcher.as_deref(), Some(pat), "{}", f["next"])
        }
        other => panic!("{} pastes as {words:?}: {other:?}", f["next"]),
    }
}

/// A real process with a hostile command line and comm that holds `node`:
/// python3 re-executes itself with the raw bytes as its arguments (after
/// `-c CODE`: python cannot start under some of them as argv[0]; the fake
/// /proc tree above covers that) and writes its comm, then waits (it dies
/// with the test).
fn evil_holder(node: &Path, comm: &[u8], argv: &[&[u8]]) -> std::process::Child {
    let stage1 = "import os,sys,ctypes\n\
        ctypes.CDLL(None).prctl(1, 9)\n\
        fd = os.open(sys.argv[1], os.O_RDWR)\n\
        os.set_inheritable(fd, True)\n\
        args = [b'A' * int(a[4:]) if a.startswith('big:') else bytes.fromhex(a) for a in sys.argv[3:]]\n\
        os.environ['EVIL_COMM'] = sys.argv[2]\n\
        code = \"import os,time,ctypes\\nctypes.CDLL(None).prctl(1, 9)\\nopen('/proc/self/comm','wb').write(bytes.fromhex(os.environ['EVIL_COMM']))\\nprint('ready', flush=True)\\ntime.sleep(600)\"\n\
        os.execv(sys.executable, [b'python3', '-c', code] + args)\n";
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(stage1)
        .arg(node)
        .arg(hex(comm))
        .args(argv.iter().map(|a| {
            if a.starts_with(b"big:") {
                String::from_utf8_lossy(a).into_owned()
            } else {
                hex(a)
            }
        }));
    spawn_ready(&mut cmd)
}

#[test]
fn kill_plan_and_report_on_real_hostile_processes_are_inert() {
    let d = TestDir::new(1);
    let node = d.node("nvidia0");
    let corpus = corpus();
    let mut children: Vec<std::process::Child> = corpus
        .iter()
        .take(11)
        .map(|evil| {
            let comm: Vec<u8> = evil.iter().copied().take(15).collect();
            evil_holder(&node, &comm, &[evil, b"-m", b"vllm", evil])
        })
        .collect();
    // One with the 64 KiB command line (spelt out by the holder: in hex it
    // would pass the kernel's limit on one argument).
    children.push(evil_holder(&node, b"big", &[b"big:65536", b"x"]));
    let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    let state = d.one_gpu(&[], 0);
    let base = |extra: &[&str]| Gpufree::new(extra).on(&d, &state).run();
    let mut args = vec!["kill", "--dry-run"];
    let pid_args: Vec<String> = pids.iter().map(u32::to_string).collect();
    for p in &pid_args {
        args.extend(["--pid", p.as_str()]);
    }
    let plan = base(&args);
    plan.assert_exit(0);
    assert_inert("kill --dry-run", &plan.stdout_bytes);
    assert_inert("kill --dry-run stderr", &plan.stderr_bytes);
    let text = String::from_utf8_lossy(&plan.stdout_bytes);
    assert!(text.contains("\\e]0;pwned\\atitle"), "{text}");
    assert!(text.contains("\\u{202e}gnp.exe"), "{text}");
    assert!(
        text.lines().all(|l| l.len() < 4096),
        "a 64 KiB line printed whole"
    );
    for p in &pids {
        assert!(
            text.contains(&format!(" {p} ")),
            "{p} not in the plan:\n{text}"
        );
    }
    args[1] = "--yes";
    let done = base(&args);
    assert_inert("kill --yes", &done.stdout_bytes);
    assert_inert("kill --yes stderr", &done.stderr_bytes);
    done.assert_exit(0);
    for c in &mut children {
        let st = c.wait().unwrap();
        assert!(!st.success(), "{} was not signalled", c.id());
    }
}

/// A user's own copy of a program, named like a driver daemon, is no driver
/// daemon: its memory makes the GPU busy and `kill --gpu` takes it. A real
/// daemon (a root-owned file in a root-owned directory) holding memory
/// beyond the idle slack makes the GPU busy too, though it is never killed
/// by default.
#[test]
fn a_daemon_name_is_believed_only_from_a_file_only_root_could_place() {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to give the copy to another user");
        return;
    }
    let d = TestDir::new(1);
    let spawn = |dir: &Path, owner: Option<u32>| {
        std::fs::create_dir(dir).unwrap();
        let exe = dir.join("nvidia-persistenced");
        std::fs::copy(bin(), &exe).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(dir, Some(uid), Some(uid)).unwrap();
            std::os::unix::fs::chown(&exe, Some(uid), Some(uid)).unwrap();
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        gpufree::demo::holder::spawn(
            &exe,
            &gpufree::demo::holder::ChildSpec {
                argv: vec!["nvidia-persistenced".into()],
                spec: gpufree::demo::holder::HoldSpec {
                    fd: vec![d.node("nvidia0")],
                    ..Default::default()
                },
            },
        )
        .unwrap()
    };
    let fake = spawn(&d.tmp.path().join("user-bin"), Some(65534));
    let state = d.one_gpu(&[(fake.pid(), 80 * 1024, "while-alive")], 0);
    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    let p = crate::harness::process(&doc, fake.pid()).unwrap();
    assert_eq!(p["protected"], false, "a user's file named like a daemon");
    assert_eq!(doc["gpus"][0]["verdict"]["state"], "busy");
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0", "--yes"])
        .run();
    r.assert_exit(0);
    let doc = r.json_or_null();
    assert_eq!(
        crate::harness::u32s(&doc["kill"]["targets"]),
        vec![fake.pid()]
    );
    drop(fake);
    // The real thing: protected, never a target, but its memory is busy.
    let real = spawn(&d.tmp.path().join("sbin"), None);
    let state = d.one_gpu(&[(real.pid(), 80 * 1024, "while-alive")], 0);
    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    let p = crate::harness::process(&doc, real.pid()).unwrap();
    assert_eq!(p["protected"], true);
    assert_eq!(
        doc["gpus"][0]["verdict"]["state"], "busy",
        "{}",
        doc["gpus"][0]["verdict"]
    );
    let r = Gpufree::new(["wait", "--timeout", "0"])
        .on(&d, &state)
        .run();
    r.assert_exit(1);
    assert!(r.stdout.contains("driver daemon"), "{}", r.stdout);
}
