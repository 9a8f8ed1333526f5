use super::*;
use crate::model::{Fleet, OwnerKind, StaleReason, VerdictState, CLOCK_SKEW_SECONDS};
use std::collections::BTreeMap;

fn source() -> Source {
    Source {
        url: "http://127.0.0.1:9090".into(),
        selector: job_matcher("gpufree"),
        node_label: "instance".into(),
        history: Duration::from_secs(6 * 3600),
        max_age: Duration::from_secs(120),
        timeout: Duration::from_secs(10),
        leftovers_only: false,
    }
}

fn sample(pairs: &[(&str, &str)], value: f64) -> Sample {
    let mut labels = Labels::default();
    for (k, v) in pairs {
        labels.set(k, v);
    }
    Sample { labels, value }
}

fn holder(node: &str, gpu: &str, pid: &str, owner_kind: &str, mib: f64) -> Sample {
    sample(
        &[
            ("instance", node),
            ("gpu", gpu),
            ("pid", pid),
            ("comm", "python3"),
            ("user", "alice"),
            ("owner_kind", owner_kind),
            ("owner", ""),
            ("orphaned", "true"),
            ("renamed", "false"),
        ],
        mib * 1048576.0,
    )
}

fn answers() -> join::Answers {
    let node = |n: &str, v: f64| sample(&[("instance", n)], v);
    let gpu = |n: &str, g: &str, state: &str| {
        sample(
            &[
                ("instance", n),
                ("gpu", g),
                ("uuid", "GPU-x"),
                ("state", state),
            ],
            1.0,
        )
    };
    let mem = |n: &str, g: &str, mib: f64| sample(&[("instance", n), ("gpu", g)], mib * 1048576.0);
    let mut held = holder("b:9835", "1", "7", "none", 0.0);
    held.value = 600.0;
    join::Answers {
        up: ["a:9835", "b:9835", "c:9835", "d:9835", "e:9835"]
            .map(|n| node(n, if n == "d:9835" { 0.0 } else { 1.0 }))
            .to_vec(),
        age: vec![
            node("a:9835", 5.0),
            node("b:9835", 5.0),
            node("c:9835", 5.0),
            node("e:9835", 500.0),
        ],
        snapshot_age: vec![node("a:9835", 1.0), node("c:9835", 1.0)],
        not_free: vec![gpu("b:9835", "1", "busy"), gpu("c:9835", "0", "busy")],
        used: vec![mem("b:9835", "1", 100.0), mem("c:9835", "0", 900.0)],
        unaccounted: vec![],
        holders: vec![
            holder("b:9835", "1", "7", "none", 100.0),
            holder("c:9835", "0", "9", "slurm-job", 900.0),
            // A holder of a free GPU is not listed.
            holder("a:9835", "2", "5", "none", 3.0),
        ],
        held: vec![held],
    }
}

#[test]
fn busy_nodes_are_ranked_by_memory_and_stale_ones_said() {
    let f = join::join(&source(), "http://p", answers());
    let names: Vec<&str> = f.nodes.iter().map(|n| n.node.as_str()).collect();
    assert_eq!(names, ["c:9835", "b:9835"]);
    assert_eq!((f.nodes_seen, f.nodes_free), (3, 1));
    let b = &f.nodes[1];
    assert_eq!(b.held_bytes, 100 << 20);
    assert_eq!(b.holders[0].pid, 7);
    assert_eq!(b.holders[0].held_seconds, Some(600.0));
    assert!(b.leftover && !f.nodes[0].leftover);
    assert_eq!(b.holders[0].owner_kind, OwnerKind::None);
    assert_eq!(f.nodes[0].holders[0].owner_kind, OwnerKind::SlurmJob);
    assert_eq!(b.host, "b");
    let stale: Vec<(&str, StaleReason, Option<f64>)> = f
        .stale
        .iter()
        .map(|s| (s.node.as_str(), s.reason, s.age_seconds))
        .collect();
    assert_eq!(
        stale,
        [
            ("d:9835", StaleReason::Down, None),
            ("e:9835", StaleReason::Old, Some(500.0))
        ]
    );
    assert_eq!(f.verdict(), VerdictState::Busy);

    let only = Source {
        leftovers_only: true,
        ..source()
    };
    let f = join::join(&only, "http://p", answers());
    assert_eq!(f.nodes.len(), 1);
    assert_eq!(f.nodes[0].node, "b:9835");
}

/// `--leftovers` keeps a node with one busy GPU (no leftover) and one
/// GPU whose verdict is unknown: the node is busy, the GPU unknown.
/// A serve narrowed to MIG devices exports only their verdicts, under
/// their GPU's number: a busy one makes the GPU busy, whatever order its
/// devices answer in, and never free.
#[test]
fn a_mig_device_s_verdict_counts_and_busy_outranks_unknown() {
    let mut a = answers();
    let mig = |uuid: &str, state: &str| {
        sample(
            &[
                ("instance", "a:9835"),
                ("gpu", "3"),
                ("mig", "1"),
                ("uuid", uuid),
                ("state", state),
            ],
            1.0,
        )
    };
    a.not_free.push(mig("MIG-b", "busy"));
    a.not_free.push(mig("MIG-u", "unknown"));
    let f = join::join(&source(), "http://p", a);
    let node = f
        .nodes
        .iter()
        .find(|n| n.node == "a:9835")
        .expect("a is not free");
    assert_eq!(node.gpus[0].gpu, 3);
    assert_eq!(node.gpus[0].state, VerdictState::Busy);
    assert_eq!(node.gpus[0].uuid, "MIG-b");
}

#[test]
fn leftovers_keep_a_busy_node_with_an_unknown_gpu() {
    let mut a = answers();
    let unknown = [("instance", "c:9835"), ("gpu", "5"), ("state", "unknown")];
    a.not_free.push(sample(&unknown, 1.0));
    let only = Source {
        leftovers_only: true,
        ..source()
    };
    let f = join::join(&only, "http://p", a);
    let names: Vec<&str> = f.nodes.iter().map(|n| n.node.as_str()).collect();
    assert_eq!(names, ["c:9835", "b:9835"]);
    assert_eq!(f.nodes[0].state, VerdictState::Busy);
}

/// A target up without gpufree's series is stale, and so is a node
/// whose age is not a number; an owner kind gpufree does not write is
/// none (a leftover).
#[test]
fn no_series_nan_ages_and_odd_owner_kinds() {
    let mut a = answers();
    a.up.push(sample(&[("instance", "f:9835")], 1.0));
    a.age.push(sample(&[("instance", "g:9835")], f64::NAN));
    a.holders[0].labels.set("owner_kind", "k8s pod; rm -rf");
    let f = join::join(&source(), "http://p", a);
    let reasons: Vec<(&str, StaleReason)> = f
        .stale
        .iter()
        .map(|s| (s.node.as_str(), s.reason))
        .collect();
    assert!(
        reasons.contains(&("f:9835", StaleReason::NoSeries)),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&("g:9835", StaleReason::Old)),
        "{reasons:?}"
    );
    let b = f.nodes.iter().find(|n| n.node == "b:9835").unwrap();
    assert_eq!(b.holders[0].owner_kind, OwnerKind::None);
    assert!(b.holders[0].leftover);
}

#[test]
fn a_node_label_becomes_a_host_and_a_safe_command() {
    assert_eq!(join::host("gpu-07:9835"), "gpu-07");
    assert_eq!(join::host("[fe80::1]:9835"), "fe80::1");
    assert_eq!(join::host("fe80::1"), "fe80::1");
    assert_eq!(join::host("gpu-07"), "gpu-07");
    let mut a = answers();
    let all = (a.up.iter_mut().chain(&mut a.age).chain(&mut a.not_free))
        .chain(a.used.iter_mut().chain(&mut a.holders).chain(&mut a.held));
    for s in all {
        if s.label("instance") == "b:9835" {
            s.labels.set("instance", "-oProxyCommand=x:1");
        }
    }
    let f = join::join(&source(), "http://p", a);
    let n = f.nodes.iter().find(|n| n.host.starts_with('-')).unwrap();
    // `present::next` writes no ssh command for it (present/tests/).
    assert_eq!(n.host, "-oProxyCommand=x");
    assert_eq!(n.node, "-oProxyCommand=x:1");
}

#[test]
fn queries_carry_the_selector_and_the_node_label() {
    let q = Queries::new(&Source {
        node_label: "nodename".into(),
        ..source()
    });
    assert_eq!(q.up, "min by (nodename) (up{job=\"gpufree\"})");
    assert_eq!(
        q.not_free,
        "max by (nodename, gpu, uuid, state) ({job=\"gpufree\",__name__=~\"gpufree_gpu_verdict|gpufree_mig_verdict\",state!=\"free\"} == 1)"
    );
    assert!(q.age.starts_with("(max by (nodename) "), "{}", q.age);
    // 6h: 24 steps of 15m, and 5 of 3m over the last 15m, each tagged so
    // that `min` sees it; only holders there now.
    assert!(
        q.held
            .contains("[21600s:900s]), \"gpufree_look_back\", \"coarse\", \"\", \"\") or "),
        "{}",
        q.held
    );
    assert!(
        q.held
            .contains("[900s:180s]), \"gpufree_look_back\", \"fine\""),
        "{}",
        q.held
    );
    assert!(
        q.held.ends_with(
            "and on (nodename, gpu, pid, comm) gpufree_process_gpu_memory_bytes{job=\"gpufree\"}"
        ),
        "{}",
        q.held
    );
    assert_eq!(steps(24 * 3600), (3600, 720));
    assert_eq!(steps(120), (5, 1));
    assert_eq!(job_matcher("a\"b\\c"), r#"job="a\"b\\c""#);
}

/// The stale reasons of `f`, by node.
fn reasons(f: &Fleet) -> BTreeMap<&str, StaleReason> {
    f.stale
        .iter()
        .map(|s| (s.node.as_str(), s.reason))
        .collect()
}

/// A not-free GPU, a holder or its time held named by a GPU or PID label
/// that is not a plain integer leaves its node unjudged (stale), never
/// free: the busy GPU is not dropped.
#[test]
fn a_gpu_or_pid_label_that_is_no_plain_integer_makes_the_node_stale() {
    for (gpu, pid) in [
        ("0x1", "5"),
        (" 0", "5"),
        ("+1", "5"),
        ("", "5"),
        ("GPU-1", "5"),
    ]
    .into_iter()
    .chain([("2", "-5"), ("2", "99999999999")])
    {
        let mut a = answers();
        if pid == "5" {
            let busy = [("instance", "a:9835"), ("gpu", gpu), ("state", "busy")];
            a.not_free.push(sample(&busy, 1.0));
        } else {
            a.holders.push(holder("a:9835", gpu, pid, "none", 1.0));
        }
        let f = join::join(&source(), "http://p", a);
        assert_eq!(
            reasons(&f).get("a:9835"),
            Some(&StaleReason::BadLabel),
            "{gpu:?} {pid:?}"
        );
        assert_eq!((f.nodes_seen, f.nodes_free), (2, 0), "{gpu:?} {pid:?}");
    }
}

/// Only an `up` of 1 is up; an age not finite or in the future is stale;
/// of duplicate answers for one node, the worst counts.
#[test]
fn odd_up_and_ages_and_duplicates_are_never_fresh() {
    let node = |v: f64| sample(&[("instance", "a:9835")], v);
    let cases: [(&str, Vec<Sample>, Vec<Sample>, StaleReason); 7] = [
        (
            "up NaN",
            vec![node(f64::NAN)],
            vec![node(5.0)],
            StaleReason::Down,
        ),
        ("up 2", vec![node(2.0)], vec![node(5.0)], StaleReason::Down),
        (
            "up twice",
            vec![node(1.0), node(0.0), node(1.0)],
            vec![node(5.0)],
            StaleReason::Down,
        ),
        (
            "age -Inf",
            vec![node(1.0)],
            vec![node(f64::NEG_INFINITY)],
            StaleReason::Future,
        ),
        (
            "age -1d",
            vec![node(1.0)],
            vec![node(-86400.0)],
            StaleReason::Future,
        ),
        (
            "age +Inf",
            vec![node(1.0)],
            vec![node(f64::INFINITY)],
            StaleReason::Old,
        ),
        (
            "age twice",
            vec![node(1.0)],
            vec![node(500.0), node(5.0)],
            StaleReason::Old,
        ),
    ];
    for (what, up, age, want) in cases {
        let mut a = answers();
        a.up.retain(|s| s.label("instance") != "a:9835");
        a.age.retain(|s| s.label("instance") != "a:9835");
        a.up.extend(up);
        a.age.extend(age);
        let f = join::join(&source(), "http://p", a);
        assert_eq!(reasons(&f).get("a:9835"), Some(&want), "{what}");
    }
    // A clock a few seconds ahead is not the future.
    let mut a = answers();
    a.age
        .iter_mut()
        .for_each(|s| s.value = -CLOCK_SKEW_SECONDS / 2.0);
    let f = join::join(&source(), "http://p", a);
    assert!(!reasons(&f).contains_key("a:9835"), "{:?}", f.stale);
}

/// A recycled PID under another name does not inherit the earlier
/// holder's time held.
#[test]
fn time_held_is_keyed_by_pid_and_comm() {
    let mut a = answers();
    a.held[0].labels.set("comm", "bash");
    let f = join::join(&source(), "http://p", a);
    let b = f.nodes.iter().find(|n| n.node == "b:9835").unwrap();
    assert_eq!(b.holders[0].held_seconds, None);
    assert!(Queries::new(&source())
        .held
        .contains("min by (instance, gpu, pid, comm) ("));
}

/// One node with many GPUs and holders is joined and written in about
/// linear time (it was quadratic: minutes for 60,000).
#[test]
fn a_huge_node_is_joined_and_written_quickly() {
    let n = 60_000;
    let mut a = answers();
    for g in 0..n {
        let g = g.to_string();
        let busy = [("instance", "a:9835"), ("gpu", &g), ("state", "busy")];
        a.not_free.push(sample(&busy, 1.0));
        a.holders.push(holder("a:9835", &g, "7", "none", 1.0));
    }
    let started = std::time::Instant::now();
    let f = join::join(&source(), "http://p", a);
    let mut out = Vec::new();
    crate::present::fleet::write_fleet(&mut out, &f, &crate::present::Printer::default()).unwrap();
    let took = started.elapsed();
    assert_eq!(
        f.nodes
            .iter()
            .find(|n| n.node == "a:9835")
            .unwrap()
            .held_bytes,
        (n as u64 + 3) << 20
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
}
