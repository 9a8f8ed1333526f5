//! Fleet views as `fleet::look` makes them: a busy node, a node with an
//! unknown GPU and stale nodes of every reason; and the hostile-names
//! corpus as node labels, users, comms and owners.

use super::evil::corpus;
use crate::model::{
    Fleet, FleetGpu, FleetHolder, FleetNode, OwnerKind, StaleNode, StaleReason, VerdictState,
};

/// The view's head, as for `--prometheus http://prom:9090` with the
/// default flags.
fn head(nodes: Vec<FleetNode>, stale: Vec<StaleNode>) -> Fleet {
    Fleet {
        prometheus: "http://prom:9090".into(),
        node_label: "instance".into(),
        selector: "job=\"gpufree\"".into(),
        queries: 8,
        history_seconds: 21600,
        max_age_seconds: 180,
        leftovers_only: false,
        nodes_seen: nodes.len() + 10,
        nodes_free: 10,
        nodes,
        stale,
    }
}

/// A GPU that is not free.
fn gpu(index: u32, state: VerdictState, used_mib: Option<u64>, unaccounted_mib: u64) -> FleetGpu {
    FleetGpu {
        gpu: index,
        uuid: format!("GPU-{index:08x}"),
        state,
        used_bytes: used_mib.map(|m| m << 20),
        unaccounted_bytes: Some(unaccounted_mib << 20),
    }
}

/// A holder of `mib` on GPU `gpu`, held `secs` (over the history where
/// `before`).
fn holder(gpu: u32, pid: u32, kind: OwnerKind, owner: &str, mib: u64, secs: f64) -> FleetHolder {
    FleetHolder {
        gpu,
        pid,
        user: "alice".into(),
        comm: "python3".into(),
        owner_kind: kind,
        owner: owner.into(),
        orphaned: kind == OwnerKind::None,
        renamed: false,
        bytes: mib << 20,
        held_seconds: Some(secs),
        held_before_history: secs >= 20700.0,
        leftover: kind.is_unowned(),
    }
}

/// A node as `join` summarizes it.
fn node(name: &str, host: &str, gpus: Vec<FleetGpu>, holders: Vec<FleetHolder>) -> FleetNode {
    let busy = gpus.iter().any(|g| g.state == VerdictState::Busy);
    FleetNode {
        node: name.into(),
        host: host.into(),
        state: if busy {
            VerdictState::Busy
        } else {
            VerdictState::Unknown
        },
        held_bytes: gpus.iter().filter_map(|g| g.used_bytes).sum(),
        held_seconds: holders
            .iter()
            .filter_map(|h| h.held_seconds)
            .max_by(f64::total_cmp),
        held_before_history: holders.iter().any(|h| h.held_before_history),
        leftover: holders.iter().any(|h| h.leftover),
        gpus,
        holders,
    }
}

/// Three nodes not free (a leftover held since before the history beside
/// a Slurm job; a GPU whose verdict is unknown, on an IPv6 host; one on a
/// host ssh would take for an option), three stale nodes (down, no
/// series, too old).
pub(super) fn fleet() -> Fleet {
    let busy = node(
        "gpu-07:9835",
        "gpu-07",
        vec![
            gpu(0, VerdictState::Busy, Some(81_920), 0),
            gpu(3, VerdictState::Busy, Some(40_960), 512),
        ],
        vec![
            holder(0, 4242, OwnerKind::None, "", 81_920, 21_150.0),
            holder(3, 777, OwnerKind::SlurmJob, "88123", 40_448, 7_980.0),
        ],
    );
    let unknown = node(
        "[fe80::1]:9835",
        "fe80::1",
        vec![gpu(1, VerdictState::Unknown, None, 0)],
        vec![],
    );
    let option = node(
        "-oProxyCommand=x:9835",
        "-oProxyCommand=x",
        vec![gpu(2, VerdictState::Unknown, Some(0), 0)],
        vec![],
    );
    let stale = |node: &str, age: Option<f64>, reason| StaleNode {
        node: node.into(),
        age_seconds: age,
        reason,
    };
    head(
        vec![busy, unknown, option],
        vec![
            stale("gpu-02:9835", Some(12.0), StaleReason::Down),
            stale("gpu-03:9835", None, StaleReason::NoSeries),
            stale("gpu-09:9835", Some(400.0), StaleReason::Old),
            stale("gpu-10:9835", Some(-3600.0), StaleReason::Future),
            stale("gpu-11:9835", None, StaleReason::BadLabel),
        ],
    )
}

/// One node per corpus name, its label, user, comm and owner that name;
/// and one stale node so named.
pub(super) fn evil_fleet() -> Fleet {
    let names: Vec<String> = corpus()
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    let nodes = (0u32..)
        .zip(&names)
        .map(|(i, name)| {
            let mut h = holder(0, 4100 + i, OwnerKind::SystemdUnit, name, 1024, 60.0);
            h.user = name.clone();
            h.comm = name.chars().take(15).collect();
            let label = format!("{name}:9835");
            node(
                &label,
                name,
                vec![gpu(0, VerdictState::Busy, Some(1024), 0)],
                vec![h],
            )
        })
        .collect();
    let stale = names.iter().map(|name| StaleNode {
        node: name.clone(),
        age_seconds: Some(f64::NAN),
        reason: StaleReason::Old,
    });
    head(nodes, stale.collect())
}

/// ssh is given only a plain host name: no user, no URI, no shell's
/// characters, no look-alike letters, no option, nothing over 253 bytes.
#[test]
fn only_a_plain_host_gets_an_ssh_command() {
    use crate::present::next::plain_host;
    for ok in [
        "gpu-07",
        "gpu_7.example.org",
        "fe80::1",
        "[fe80::1]",
        "10.0.0.7",
    ] {
        assert!(plain_host(ok), "{ok}");
    }
    let long = "a".repeat(254);
    for bad in [
        "",
        "-oProxyCommand=x",
        "$(touch /tmp/pwn27)",
        "a'b;c",
        "root@evil.example",
        "ssh://x",
        "g\u{440}u-1",
        "a b",
        long.as_str(),
    ] {
        assert!(!plain_host(bad), "{bad}");
    }
}
