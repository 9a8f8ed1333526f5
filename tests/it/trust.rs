//! Trust in `kill` and `wait` (issue "Trust I"): nothing unproven is called
//! free or released, selectors match exactly, the timeout is a hard cap,
//! and what the targets fork while they are being stopped is freed in the
//! same run. Real processes, the simulator, real cgroups where named.

use crate::harness::*;
use gpufree::demo::holder::{ChildSpec, HoldSpec, Spawned};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Root-only tests skip loudly off CI and fail on CI.
fn need_root(what: &str) -> bool {
    if is_root() {
        return true;
    }
    skip_off_ci("root", &what);
    false
}

#[test]
fn zombie_still_listed_by_nvml_is_not_released_exit_4_naming_the_parent() {
    let d = TestDir::new(1);
    let z = d.zombie("nvidia0");
    let state = d.one_gpu(&[(z.pid(), 1024, "always")], 0);
    let pid = z.pid().to_string();
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &pid, "--yes", "--timeout", "1s"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit_with(4, format_args!("{}", doc["kill"]));
    assert_eq!(doc["kill"]["released"], false);
    let reasons = doc["kill"]["reasons"].to_string();
    assert!(
        reasons.contains(&format!("parent PID {} must reap it", std::process::id())),
        "{reasons}"
    );
    // The same GPU-wide: the verdict of GPU 0 names the zombie.
    let out = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0", "--yes", "--timeout", "1s"])
        .run();
    let doc = out.json_or_null();
    out.assert_exit_with(4, format_args!("{}", doc["kill"]));
    assert!(doc["kill"]["reasons"].to_string().contains("zombie"));
}

#[test]
fn without_nvml_the_release_is_unknown_exit_3_unless_holders_only() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let r = Gpufree::new(["kill"])
        .json()
        .dev(&d.dev)
        .no_nvml()
        .args(["--gpu", "0", "--yes", "--grace", "2s"])
        .run();
    r.assert_exit(3);
    let last = r.stderr.lines().last().unwrap_or("");
    assert!(
        last.starts_with("gpufree: kill: the release is unknown") && last.contains("NVML"),
        "one line says why: {}",
        r.stderr
    );
    assert!(!alive(h.pid()), "the holder was still freed");
    let doc = r.json();
    assert_eq!(doc["kill"]["released"], false);
    assert_eq!(doc["kill"]["verdict"], "unknown");
    let h = d.mapper("nvidia0");
    let r = Gpufree::new(["kill"])
        .json()
        .dev(&d.dev)
        .no_nvml()
        .args(["--gpu", "0", "--yes", "--holders-only"])
        .run();
    r.assert_exit(0);
    assert_eq!(r.json()["kill"]["released"], true);
    assert!(!alive(h.pid()));
}

#[test]
fn wait_without_nvml_exits_3_at_once_naming_why_and_0_with_holders_only() {
    let d = TestDir::new(1);
    let wait = Gpufree::new(["wait"])
        .dev(&d.dev)
        .no_nvml()
        .args(["--timeout", "30s"]);
    let started = Instant::now();
    let r = wait.run();
    r.assert_exit(3);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "no point waiting"
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("NVML is unavailable"), "{}", r.stderr);
    let r = wait.arg("--holders-only").run();
    r.assert_exit(0);
}

#[test]
fn wait_on_a_lost_gpu_is_unknown_exit_3_never_free() {
    let d = TestDir::new(1);
    let mut g = sim_gpu(0, &[], 0);
    g["errors"] = json!({"memory_info": 15, "compute_processes": 15, "graphics_processes": 15});
    let state = d.state(&sim_state(vec![g]));
    let started = Instant::now();
    let r = Gpufree::new(["wait"])
        .on(&d, &state)
        .args(["--timeout", "1s"])
        .run();
    r.assert_exit(3);
    assert!(r.stderr.contains("GPU_IS_LOST"), "{}", r.stderr);
    assert!(started.elapsed() < Duration::from_millis(1700));
}

#[test]
fn scan_hitting_emfile_is_unknown_never_free() {
    // A hard limit of 6 open files: gpufree cannot open /proc/PID
    // directories for most processes. That is "could not see", not "gone".
    // (At 8 the walk and NVML's thread sometimes both fit: every process
    // is read, and "free" is then the truth, 1 run in 20 here.)
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let r = Gpufree::new(["wait", "--json", "--timeout", "0"])
        .on(&d, &state)
        .wrapped(["prlimit", "--nofile=6:6", "--"])
        .run();
    r.assert_exit_not(0); // never free when the scan could not read
    r.assert_exit(3);
    assert!(r.stderr.contains("Too many open files"), "{}", r.stderr);
}

#[test]
fn kill_timeout_bounds_the_whole_kill_grace_included() {
    let d = TestDir::new(1);
    let h = hold(
        &["gpufree"],
        HoldSpec {
            mmap: vec![d.node("nvidia0")],
            ignore_term: true,
            ..HoldSpec::default()
        },
    );
    let state = d.one_gpu(&[(h.pid(), 1024, "while-alive")], 0);
    let started = Instant::now();
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0", "--yes", "--grace", "30s", "--timeout", "2s"])
        .run();
    let doc = r.json_or_null();
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2500 + 300),
        "--timeout 2s took {took:?} (the kill's own start included)"
    );
    r.assert_exit_with(0, format_args!("{}", doc["kill"]));
    assert_eq!(u32s(&doc["kill"]["killed_hard"]), vec![h.pid()]);
    assert!(!alive(h.pid()));
}

#[test]
fn fork_on_term_chain_is_followed_to_the_end_in_one_run() {
    // A forks B on SIGTERM and exits; B forks C on SIGTERM and exits; C
    // holds the node until it is signalled. Each is orphaned by the time
    // the rescan sees it, in the same process group and session as A.
    let d = TestDir::new(1);
    let c = ChildSpec {
        argv: vec!["gpufree".into(), "link-c".into()],
        spec: HoldSpec {
            survive_parent: true,
            mmap: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    };
    let b = ChildSpec {
        argv: vec!["gpufree".into(), "link-b".into()],
        spec: HoldSpec {
            survive_parent: true,
            mmap: vec![d.node("nvidia0")],
            fork_on_term: Some(Box::new(c)),
            ..HoldSpec::default()
        },
    };
    let a = hold(
        &["gpufree", "link-a"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            fork_on_term: Some(Box::new(b)),
            ..HoldSpec::default()
        },
    );
    let state = d.one_gpu(&[], 0);
    let pid = a.pid().to_string();
    // --pid names A only: B and C join because A forked them.
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &pid, "--yes", "--grace", "3s", "--timeout", "20s"])
        .run();
    let doc = r.json_or_null();
    let found = u32s(&doc["kill"]["found_by_rescan"]);
    let survivors = survivors_reaped(&found, "link-");
    r.assert_exit_with(0, format_args!("{}", doc["kill"]));
    assert_eq!(found.len(), 2, "B and C: {}", doc["kill"]);
    assert_eq!(survivors, Vec::<u32>::new(), "forked holders survived");
    assert!(!alive(a.pid()));
    assert_eq!(doc["kill"]["released"], true);
    assert!(doc["processes"].as_array().unwrap().is_empty(), "{doc}");
}

#[test]
fn term_ignoring_child_that_reforks_is_killed_and_its_copies_too() {
    // A holder whose child ignores SIGTERM and answers each one by forking
    // a copy of itself that holds the node.
    let d = TestDir::new(1);
    let parent = hold(
        &["gpufree", "launcher"],
        HoldSpec {
            fd: vec![d.node("nvidia-uvm")],
            children: vec![ChildSpec {
                argv: vec!["gpufree".into(), "reforker".into()],
                spec: HoldSpec {
                    label: "reforker".into(),
                    survive_parent: true,
                    mmap: vec![d.node("nvidia0")],
                    refork_on_term: 4,
                    ..HoldSpec::default()
                },
            }],
            ..HoldSpec::default()
        },
    );
    let reforker = parent.pids[0].0;
    let state = d.one_gpu(&[(reforker, 2048, "while-alive")], 0);
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args([
            "--gpu",
            "0",
            "--yes",
            "--grace",
            "500ms",
            "--timeout",
            "20s",
        ])
        .run();
    let doc = r.json_or_null();
    let found = u32s(&doc["kill"]["found_by_rescan"]);
    let mut all = found.clone();
    all.push(reforker);
    let survivors = survivors_reaped(&all, "reforker");
    r.assert_exit_with(0, format_args!("{}", doc["kill"]));
    assert!(!found.is_empty(), "its copies were found: {}", doc["kill"]);
    assert!(u32s(&doc["kill"]["killed_hard"]).contains(&reforker));
    assert_eq!(
        survivors,
        Vec::<u32>::new(),
        "the re-forker or a copy survived"
    );
    assert!(doc["kill"]["rounds"].as_u64().unwrap() >= 2);
    assert_eq!(doc["kill"]["released"], true);
}

/// A cgroup directory of the test's own (v2, or the v1 freezer), removed at
/// the end.
struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// `/sys/fs/cgroup/unified/gpufree-it-PID/REL` (or under the v2 root);
    /// None, said, where there is no writable cgroup v2 (a failure on CI).
    fn new(rel: &str) -> Option<Cgroup> {
        let made = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.join("cgroup.procs").exists() && p.join("cgroup.subtree_control").exists())
            .and_then(|root| Cgroup::under(&root, rel));
        if made.is_none() {
            assert!(std::env::var_os("CI").is_none(), "CI needs cgroup v2");
            eprintln!("skipped: no writable cgroup v2 here");
        }
        made
    }

    /// The same in the cgroup v1 freezer hierarchy.
    fn freezer(rel: &str) -> Option<Cgroup> {
        let root = PathBuf::from("/sys/fs/cgroup/freezer");
        root.join("tasks").exists().then_some(())?;
        Cgroup::under(&root, rel)
    }

    fn under(root: &Path, rel: &str) -> Option<Cgroup> {
        let path = root
            .join(format!("gpufree-it-{}", std::process::id()))
            .join(rel);
        std::fs::create_dir_all(&path).ok()?;
        Some(Cgroup { path })
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Our processes are gone by now (declared after this guard); remove
        // the directory, then each parent up to the test's own top
        // (`gpufree-it-PID`) while it is empty.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let top = format!("gpufree-it-{}", std::process::id());
        for dir in self.path.ancestors().skip(1) {
            if std::fs::remove_dir(dir).is_err() || dir.ends_with(&top) {
                break;
            }
        }
    }
}

fn in_cgroup(d: &TestDir, cg: &Cgroup) -> Spawned {
    let h = d.mapper("nvidia0");
    cg.add(h.pid());
    h
}

#[test]
fn kill_unit_matches_exactly_not_by_prefix() {
    if !need_root("moving processes into cgroups") {
        return;
    }
    let d = TestDir::new(1);
    let (Some(one), Some(ten)) = (
        Cgroup::new("audit-vllm-1.service"),
        Cgroup::new("audit-vllm-10.service"),
    ) else {
        return; // said by Cgroup::new
    };
    let h1 = in_cgroup(&d, &one);
    let h10 = in_cgroup(&d, &ten);
    let state = d.one_gpu(&[], 0);
    // A holder started in the clock tick the kill starts in counts as
    // started during it (start times are known to a tick): h10, a sibling
    // of h1, would be taken for h1's parent starting it again.
    std::thread::sleep(std::time::Duration::from_millis(30));
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--unit", "audit-vllm-1", "--yes", "--grace", "2s"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit_with(0, format_args!("{}", doc["kill"]));
    assert_eq!(u32s(&doc["kill"]["targets"]), vec![h1.pid()]);
    assert!(!alive(h1.pid()));
    assert!(alive(h10.pid()), "audit-vllm-10 is another unit");
    let out = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--unit", "audit-vllm-10.service", "--yes", "--grace", "2s"])
        .run();
    let doc = out.json_or_null();
    out.assert_exit(0);
    assert_eq!(u32s(&doc["kill"]["targets"]), vec![h10.pid()]);
}

#[test]
fn kill_unit_container_prefix_must_be_unique_and_12_hex_digits() {
    if !need_root("moving processes into cgroups") {
        return;
    }
    let d = TestDir::new(1);
    let id_a = format!("abcdef012345{}", "0".repeat(52));
    let id_b = format!("abcdef012345{}", "1".repeat(52));
    let (Some(a), Some(b)) = (
        Cgroup::new(&format!("docker/{id_a}")),
        Cgroup::new(&format!("docker/{id_b}")),
    ) else {
        return; // said by Cgroup::new
    };
    let ha = in_cgroup(&d, &a);
    let hb = in_cgroup(&d, &b);
    let state = d.one_gpu(&[], 0);
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--unit", "abcdef012345", "--yes"])
        .run();
    r.assert_exit_with(2, format_args!("ambiguous"));
    assert!(
        r.stderr.contains("ambiguous") && r.stderr.contains(&id_a) && r.stderr.contains(&id_b),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    let out = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--unit", "abcdef01234", "--yes"])
        .run();
    let doc = out.json_or_null();
    out.assert_exit_with(0, format_args!("11 hex digits name nothing"));
    assert_eq!(u32s(&doc["kill"]["targets"]), Vec::<u32>::new());
    let ran = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--unit", "abcdef0123451", "--yes", "--grace", "2s"])
        .run();
    let doc = ran.json_or_null();
    ran.assert_exit(0);
    assert_eq!(u32s(&doc["kill"]["targets"]), vec![hb.pid()]);
    assert!(alive(ha.pid()));
    let _ = Value::Null;
}

/// Trust III: a cgroup path is read from the root down. Nobody's process
/// placed under its own manager's delegated subtree, in a scope named after
/// root's container (`user@65534.service/app.slice/docker-<id>.scope`), is
/// the user's and only claims the container: `status` shows two owners,
/// `kill --unit <id>` plans root's process alone, and `check` calls
/// nobody's a leftover (on main it was root's container: one group, both
/// planned, check OK).
#[test]
fn a_users_delegated_cgroup_named_like_roots_container_only_claims_it() {
    if !need_root("moving processes into cgroups and running as nobody") {
        return;
    }
    let d = TestDir::new(1);
    let id = "3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7a8";
    let (Some(users), Some(roots)) = (
        Cgroup::new(&format!(
            "user.slice/user-65534.slice/user@65534.service/app.slice/docker-{id}.scope"
        )),
        Cgroup::new(&format!("system.slice/docker-{id}.scope")),
    ) else {
        return; // said by Cgroup::new
    };
    let nobody = mapper_as_nobody(&d, "nvidia0");
    users.add(nobody.pid());
    let root = in_cgroup(&d, &roots);
    let state = d.one_gpu(
        &[
            (nobody.pid(), 18 * 1024 + 600, "while-alive"),
            (root.pid(), 4096, "while-alive"),
        ],
        0,
    );

    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    let owner = |pid: u32| process(&doc, pid).unwrap()["owner"].clone();
    let (mine, theirs) = (owner(root.pid()), owner(nobody.pid()));
    assert_eq!(process(&doc, nobody.pid()).unwrap()["uid"], 65534);
    assert_eq!(
        (&mine["kind"], &mine["id"], mine.get("claims")),
        (&json!("container"), &json!(id), None),
        "{mine}"
    );
    assert_eq!(
        (&theirs["kind"], &theirs["id"], &theirs["name"]),
        (
            &json!("session"),
            &json!("user@65534.service"),
            &json!("apps of uid 65534")
        ),
        "{theirs}"
    );
    assert_eq!(
        theirs["claims"],
        json!({"kind": "container", "id": id, "name": "docker 3f2a1b4c5d6e"})
    );
    let nexts: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "live-holders")
        .map(|f| f["next"].as_str().unwrap())
        .collect();
    assert_eq!(nexts.len(), 2, "two groups: {}", doc["findings"]);
    assert_eq!(
        nexts.iter().filter(|n| n.contains(id)).count(),
        1,
        "{nexts:?}"
    );

    for unit in [id, &id[..12]] {
        let r = Gpufree::new(["kill"])
            .json()
            .on(&d, &state)
            .args(["--unit", unit, "--dry-run"])
            .run();
        let doc = r.json_or_null();
        r.assert_exit(0);
        let planned: Vec<u64> = doc["plan"]["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(
            planned,
            vec![u64::from(root.pid())],
            "--unit {unit}: {}",
            doc["plan"]
        );
    }

    let (doc, left) = check_leftovers(&d, &state);
    assert_eq!(doc["level"], "critical", "{doc}");
    assert_eq!(left.len(), 1, "{doc}");
    assert_eq!(left[0]["level"], "critical");
    assert_eq!(left[0]["processes"], json!([[nobody.pid(), "gpufree"]]));
    assert_eq!(left[0]["bytes"], json!((18u64 * 1024 + 600) << 20));
}

/// A cgroup directory handed to a user (chowned, not a `user@UID.service`:
/// the kernel says it is theirs), or one a group may write (others make
/// the directories below it), is theirs whatever they name below it:
/// nobody's process in `DIR/docker-<root's id>.scope` only claims root's
/// container — `kill --unit <id>` plans root's process alone, and `check`
/// calls nobody's a leftover (before, read by names alone, it was root's
/// container: one group, both planned, check OK).
#[test]
fn a_cgroup_handed_to_a_user_is_theirs_whatever_it_names_below() {
    use std::os::unix::fs::PermissionsExt;
    if !need_root("chowning and moving processes into cgroups") {
        return;
    }
    for (dir, id, hand, who) in [
        (
            "mine",
            "4b3a2c1d5e6f7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7a8",
            "chown",
            "of uid 65534",
        ),
        (
            "ours",
            "5c3a2c1d5e6f7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7a9",
            "g+w",
            "of group 65534",
        ),
    ] {
        let d = TestDir::new(1);
        let (Some(users), Some(roots)) = (
            Cgroup::new(&format!("{dir}/docker-{id}.scope")),
            Cgroup::new(&format!("system.slice/docker-{id}.scope")),
        ) else {
            return; // said by Cgroup::new
        };
        let handed = users.path.parent().unwrap();
        if hand == "chown" {
            std::os::unix::fs::chown(handed, Some(65534), Some(65534)).unwrap();
        } else {
            std::os::unix::fs::chown(handed, Some(0), Some(65534)).unwrap();
            std::fs::set_permissions(handed, std::fs::Permissions::from_mode(0o775)).unwrap();
        }
        let nobody = mapper_as_nobody(&d, "nvidia0");
        users.add(nobody.pid());
        let root = in_cgroup(&d, &roots);
        let state = d.one_gpu(
            &[
                (nobody.pid(), 19 * 1024, "while-alive"),
                (root.pid(), 4096, "while-alive"),
            ],
            0,
        );
        let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
        let owner = |pid: u32| process(&doc, pid).unwrap()["owner"].clone();
        let (theirs, mine) = (owner(nobody.pid()), owner(root.pid()));
        assert_eq!(
            (&mine["kind"], &mine["id"]),
            (&json!("container"), &json!(id)),
            "{hand}: {mine}"
        );
        assert_eq!(theirs["kind"], "session", "{hand}: {theirs}");
        assert!(
            theirs["name"]
                .as_str()
                .unwrap()
                .ends_with(&format!("/{dir} {who}")),
            "{hand}: {theirs}"
        );
        assert_eq!(theirs["claims"]["id"], id, "{hand}: {theirs}");
        let r = Gpufree::new(["kill"])
            .json()
            .on(&d, &state)
            .args(["--unit", id, "--dry-run"])
            .run();
        let doc = r.json_or_null();
        r.assert_exit(0);
        let planned: Vec<u64> = doc["plan"]["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(
            planned,
            vec![u64::from(root.pid())],
            "{hand}: {}",
            doc["plan"]
        );
        let (doc, left) = check_leftovers(&d, &state);
        assert_eq!(left.len(), 1, "{hand}: {doc}");
        assert_eq!(left[0]["processes"], json!([[nobody.pid(), "gpufree"]]));
        drop((nobody, root));
    }
}

/// `check --format json` on the simulator: its document and its
/// `leftover` problems.
fn check_leftovers(d: &TestDir, state: &Path) -> (Value, Vec<Value>) {
    let r = Gpufree::new(["check"])
        .on(d, state)
        .args([
            "--format",
            "json",
            "--state",
            d.tmp.path().join("check.json").to_str().unwrap(),
        ])
        .run();
    let doc: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    let left = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["condition"] == "leftover")
        .cloned()
        .collect();
    (doc, left)
}

/// Kills the holders of `cg` (and an innocent beside them, when given);
/// returns the kill document.
fn kill_in(d: &TestDir, holders: &[&Spawned]) -> Value {
    let state = d.one_gpu(&[], 0);
    let pids: Vec<String> = holders.iter().map(|h| h.pid().to_string()).collect();
    let mut args = vec!["--yes", "--grace", "2s"];
    for p in &pids {
        args.extend(["--pid", p.as_str()]);
    }
    let r = Gpufree::new(["kill"])
        .json()
        .on(d, &state)
        .args(&args)
        .run();
    let doc = r.json_or_null();
    r.assert_exit_with(0, format_args!("{}", doc["kill"]));
    for h in holders {
        assert!(!alive(h.pid()), "{} survived", h.pid());
    }
    doc
}

#[test]
fn a_cgroup_of_only_targets_is_frozen_not_stopped_v2_and_v1() {
    if !need_root("freezing cgroups") {
        return;
    }
    let d = TestDir::new(1);
    if let Some(cg) = Cgroup::new("frozen-v2") {
        let (a, b) = (in_cgroup(&d, &cg), in_cgroup(&d, &cg));
        let doc = kill_in(&d, &[&a, &b]);
        let frozen = doc["kill"]["frozen_cgroups"].to_string();
        assert!(
            frozen.contains("cgroup v2") && frozen.contains("frozen-v2"),
            "{frozen}"
        );
    }
    if let Some(cg) = Cgroup::freezer("frozen-v1") {
        let (a, b) = (in_cgroup(&d, &cg), in_cgroup(&d, &cg));
        let doc = kill_in(&d, &[&a, &b]);
        let frozen = doc["kill"]["frozen_cgroups"].to_string();
        assert!(
            frozen.contains("freezer") && frozen.contains("frozen-v1"),
            "{frozen}"
        );
    } else {
        eprintln!("no cgroup v1 freezer here");
    }
}

#[test]
fn a_cgroup_shared_with_a_bystander_is_never_frozen() {
    if !need_root("moving processes into cgroups") {
        return;
    }
    let d = TestDir::new(1);
    let Some(cg) = Cgroup::new("shared") else {
        return; // said by Cgroup::new
    };
    let h = in_cgroup(&d, &cg);
    // A process of the same cgroup that holds no GPU: never a target, and
    // never frozen or stopped by gpufree.
    let bystander = hold(&["gpufree", "bystander"], HoldSpec::default());
    cg.add(bystander.pid());
    let doc = kill_in(&d, &[&h]);
    assert_eq!(doc["kill"]["frozen_cgroups"], json!([]));
    assert!(alive(bystander.pid()));
    assert!(
        !matches!(state_of(bystander.pid()), 'T' | 't'),
        "the bystander runs on"
    );
}

/// NVML may go on listing a PID after its process is gone (the context kept
/// by a child that inherited the GPU files, or a driver that lags), and the
/// PID may name an innocent process by then. A process gpufree can read
/// that holds no GPU node holds no GPU memory: never attributed, never a
/// target.
#[test]
fn nvml_listing_a_pid_that_now_names_an_innocent_never_makes_it_a_target() {
    let d = TestDir::new(1);
    let innocent = hold(&["gpufree", "innocent"], HoldSpec::default());
    let pid = innocent.pid();
    let state = d.one_gpu(&[(pid, 2048, "always")], 0);
    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    assert!(process(&doc, pid).is_none(), "not a holder: {doc}");
    assert_eq!(doc["visibility"]["nvml_pids_stale"], json!([pid]));
    assert_eq!(doc["gpus"][0]["verdict"]["state"], "busy");
    assert!(doc["gpus"][0]["verdict"]["reasons"]
        .to_string()
        .contains("had this PID before"));
    assert!(doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["kind"] == "stale-nvml-pid" && f["pids"] == json!([pid])));
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0", "--yes", "--timeout", "1s"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit_with(4, format_args!("the memory is not back: {}", doc["kill"]));
    assert_eq!(u32s(&doc["kill"]["targets"]), Vec::<u32>::new());
    let p = pid.to_string();
    let out = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &p, "--yes"])
        .run();
    let doc = out.json_or_null();
    // Named by PID: refused for safety, at once.
    out.assert_exit_with(5, format_args!("{}", doc["kill"]));
    assert_eq!(u32s(&doc["kill"]["targets"]), Vec::<u32>::new());
    assert!(alive(pid), "the innocent was never signalled");
}

/// Interrupted while it holds its targets still (one in a frozen cgroup,
/// one stopped), kill lets both go before it exits: nothing stays frozen
/// or stopped, and nothing was signalled.
#[test]
fn an_interrupted_kill_leaves_no_target_stopped_or_frozen() {
    if !need_root("freezing cgroups") {
        return;
    }
    let d = TestDir::new(1);
    let Some(cg) = Cgroup::new("interrupted") else {
        return; // said by Cgroup::new
    };
    let frozen = in_cgroup(&d, &cg);
    let stopped = d.mapper("nvidia0");
    let state = d.one_gpu(&[], 0);
    let (a, b) = (frozen.pid().to_string(), stopped.pid().to_string());
    let kill = Gpufree::new(["kill"])
        .on(&d, &state)
        .args(["--yes", "--pid", &a, "--pid", &b])
        .env("GPUFREE_TEST_PAUSE", "held")
        .spawn();
    let pid = rustix::process::Pid::from_child(&kill.child);
    // gpufree stops itself once both targets are held.
    let status = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::UNTRACED)
        .unwrap()
        .unwrap()
        .1;
    assert!(status.stopped(), "gpufree paused while holding its targets");
    let events = std::fs::read_to_string(cg.path.join("cgroup.events")).unwrap();
    assert!(events.contains("frozen 1"), "{events}");
    assert_eq!(state_of(stopped.pid()), 'T');
    // Ctrl-C (it acts once gpufree runs again).
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    kill.finish().assert_exit(130);
    let events = std::fs::read_to_string(cg.path.join("cgroup.events")).unwrap();
    assert!(events.contains("frozen 0"), "left frozen: {events}");
    assert!(
        !matches!(state_of(stopped.pid()), 'T' | 't'),
        "left stopped"
    );
    assert!(
        alive(frozen.pid()) && alive(stopped.pid()),
        "nothing was signalled"
    );
}

fn state_of(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit(')')
        .next()
        .unwrap()
        .trim_start()
        .chars()
        .next()
        .unwrap()
}

#[test]
fn kill_by_pid_on_a_gpu_whose_memory_cannot_be_read_is_unknown_not_released() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let mut g = sim_gpu(0, &[(h.pid(), 1024, "while-alive")], 0);
    g["errors"] = json!({"memory_info": 15});
    let state = d.state(&sim_state(vec![g]));
    let pid = h.pid().to_string();
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &pid, "--yes", "--timeout", "1s"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit_with(3, format_args!("{}", doc["kill"]));
    assert_eq!(doc["kill"]["released"], false);
    assert!(doc["kill"]["reasons"]
        .to_string()
        .contains("memory could not be read"));
    assert!(!alive(h.pid()), "the holder itself was freed");
}

/// What the targets leave holding is never "released": a child that starts
/// a session of its own on SIGTERM (not followed: it is no longer
/// recognisably theirs), and a child they had before the kill (not named).
#[test]
fn children_left_holding_make_the_release_busy_not_free() {
    let d = TestDir::new(1);
    let escaper = ChildSpec {
        argv: vec!["gpufree".into(), "escaper".into()],
        spec: HoldSpec {
            survive_parent: true,
            new_session: true,
            mmap: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    };
    let a = hold(
        &["gpufree", "parent-a"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            fork_on_term: Some(Box::new(escaper)),
            ..HoldSpec::default()
        },
    );
    let state = d.one_gpu(&[], 0);
    let pid = a.pid().to_string();
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &pid, "--yes", "--grace", "3s", "--timeout", "10s"])
        .run();
    let doc = r.json_or_null();
    let reasons = doc["kill"]["reasons"].to_string();
    let left: Vec<u32> = doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap() as u32)
        .collect();
    let survivors = survivors_reaped(&left, "escaper");
    r.assert_exit_with(4, format_args!("{}", doc["kill"]));
    assert!(reasons.contains("started during the kill"), "{reasons}");
    assert_eq!(
        survivors.len(),
        1,
        "the escaper was left, and said: {left:?}"
    );

    let b = hold(
        &["gpufree", "parent-b"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            children: vec![ChildSpec {
                argv: vec!["gpufree".into(), "older-child".into()],
                spec: HoldSpec {
                    survive_parent: true,
                    mmap: vec![d.node("nvidia0")],
                    ..HoldSpec::default()
                },
            }],
            ..HoldSpec::default()
        },
    );
    let child = b.pids[0].0;
    // A child the target had before the kill: started a clock tick (10 ms)
    // or more before it, since one of the kill's own tick may have started
    // during it (and joins the targets).
    std::thread::sleep(std::time::Duration::from_millis(25));
    let pid = b.pid().to_string();
    let out = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &pid, "--yes", "--grace", "3s", "--timeout", "10s"])
        .run();
    let doc = out.json_or_null();
    let survivors = survivors_reaped(&[child], "older-child");
    out.assert_exit_with(4, format_args!("{}", doc["kill"]));
    assert!(
        doc["kill"]["reasons"]
            .to_string()
            .contains(&format!("a child of target {}", b.pid())),
        "{}",
        doc["kill"]
    );
    assert_eq!(
        survivors,
        vec![child],
        "a child that was not named is left alone"
    );
}

/// A driver whose initialisation hangs holds up neither the /proc scan nor
/// the deadline: `wait` is unknown (3) in time, and with --holders-only it
/// answers from the holders, saying that the memory was not checked.
#[test]
fn a_hung_nvml_init_starves_nothing() {
    let d = TestDir::new(1);
    let mut state = sim_state(vec![sim_gpu(0, &[], 0)]);
    state["hang_ms"] = json!({"init": 60_000});
    let state = d.state(&state);
    let wait = |extra: &[&str]| {
        let started = Instant::now();
        let r = Gpufree::new(["wait", "--timeout", "1s"])
            .on(&d, &state)
            .args(extra)
            .run();
        (r, started.elapsed())
    };
    let (r, took) = wait(&[]);
    r.assert_exit(3);
    assert!(
        r.stderr.contains("nvmlInit"),
        "names the call: {}",
        r.stderr
    );
    assert!(took < Duration::from_millis(1500), "{took:?}");
    let (r, took) = wait(&["--holders-only"]);
    r.assert_exit(0);
    assert!(r.stdout.contains("memory not checked"), "{}", r.stdout);
    assert!(!r.stdout.contains("NVML accounts"), "{}", r.stdout);
    assert!(took < Duration::from_millis(1500), "{took:?}");
}

/// In a PID namespace whose /proc is still its parent's (`unshare --pid
/// --fork` without `--mount-proc`), the PIDs /proc lists name other
/// processes where signals go: kill refuses (exit 5), dry run included,
/// and the holder it would have targeted is untouched.
#[test]
fn kill_where_proc_is_another_namespaces_signals_nothing_exit_5() {
    if !need_root("unshare --pid") {
        return;
    }
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let state = d.one_gpu(&[(h.pid(), 1024, "while-alive")], 0);
    for extra in [&["--yes"][..], &["--dry-run"][..]] {
        let r = Gpufree::new(["kill", "--gpu", "0"])
            .on(&d, &state)
            .args(extra)
            .wrapped(["unshare", "--pid", "--fork", "--"])
            .run();
        r.assert_exit_with(5, format_args!("{extra:?}: {}", r.stderr));
        assert_eq!(
            r.stderr.trim(),
            format!(
                "gpufree: kill: {}",
                gpufree::present::words::target::FOREIGN_PROC
            ),
            "{extra:?}"
        );
        assert!(alive(h.pid()), "{extra:?}: the holder was signalled");
    }
}
