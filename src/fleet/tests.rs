use super::*;
use crate::model::{OwnerKind, StaleReason, VerdictState};

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
    // `present::next` writes no ssh command for it (present/tests.rs).
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
        "max by (nodename, gpu, uuid, state) (gpufree_gpu_verdict{job=\"gpufree\",state!=\"free\"} == 1)"
    );
    assert!(q.age.starts_with("max by (nodename) "), "{}", q.age);
    // 6h: 24 steps of 15m, and 5 of 3m over the last 15m.
    assert!(q.held.contains("[21600s:900s]) or "), "{}", q.held);
    assert!(q.held.contains("[900s:180s])"), "{}", q.held);
    assert_eq!(steps(24 * 3600), (3600, 720));
    assert_eq!(steps(120), (5, 1));
    assert_eq!(job_matcher("a\"b\\c"), r#"job="a\"b\\c""#);
}
