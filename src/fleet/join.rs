//! The answers of one view's queries joined into a [`Fleet`]: each node's
//! freshness; its GPUs that are not free, with their memory; their
//! holders, with how long each has held; ranked, most memory held first.

use super::{PerQuery, Sample, Source};
use crate::model::{
    Fleet, FleetGpu, FleetHolder, FleetNode, OwnerKind, StaleNode, StaleReason, VerdictState,
    CLOCK_SKEW_SECONDS,
};
use std::collections::{BTreeMap, BTreeSet};

/// What each query answered.
pub(super) type Answers = PerQuery<Vec<Sample>>;

/// The view of the answers `a` from the server at `url`.
pub(super) fn join(source: &Source, url: &str, a: Answers) -> Fleet {
    let l = source.node_label.as_str();
    let (mut fresh, mut stale) = freshness(source, &a);
    for node in bad_labels(&a, l, &fresh) {
        fresh.remove(&node);
        stale.push(StaleNode {
            node,
            age_seconds: None,
            reason: StaleReason::BadLabel,
        });
    }
    stale.sort_by(|a, b| a.node.cmp(&b.node));
    let gpus = not_free(&a, l, &fresh);
    let history = source.history.as_secs();
    let before = history.saturating_sub(super::steps(history).0) as f64;
    let mut holders = holders(&a, l, &gpus, before);
    let not_free: BTreeSet<&String> = gpus.keys().map(|(n, _)| n).collect();
    let nodes_free = fresh.len() - not_free.len();
    let mut nodes: Vec<FleetNode> = Vec::new();
    for (name, g) in gpus {
        match nodes.last_mut() {
            Some(n) if n.node == name.0 => n.gpus.push(g),
            _ => nodes.push(FleetNode {
                host: host(&name.0).to_string(),
                node: name.0,
                gpus: vec![g],
                ..FleetNode::default()
            }),
        }
    }
    for n in &mut nodes {
        summarize(n, holders.remove(&n.node).unwrap_or_default());
    }
    if source.leftovers_only {
        let unknown = |n: &FleetNode| n.gpus.iter().any(|g| g.state == VerdictState::Unknown);
        nodes.retain(|n| n.leftover || unknown(n));
    }
    nodes.sort_by(|a, b| {
        let secs = |n: &FleetNode| n.held_seconds.unwrap_or(-1.0);
        (b.held_bytes.cmp(&a.held_bytes))
            .then(secs(b).total_cmp(&secs(a)))
            .then(a.node.cmp(&b.node))
    });
    Fleet {
        prometheus: url.to_string(),
        node_label: source.node_label.clone(),
        selector: source.selector.clone(),
        queries: super::Queries::COUNT,
        history_seconds: source.history.as_secs(),
        max_age_seconds: source.max_age.as_secs(),
        leftovers_only: source.leftovers_only,
        nodes_seen: fresh.len(),
        nodes_free,
        nodes,
        stale,
    }
}

/// The GPUs of fresh nodes that are not free, by node and index, with
/// their memory.
fn not_free(a: &Answers, l: &str, fresh: &BTreeSet<String>) -> BTreeMap<(String, u32), FleetGpu> {
    let mut gpus: BTreeMap<(String, u32), FleetGpu> = BTreeMap::new();
    for s in &a.not_free {
        let Some(key) = key(s, l).filter(|(n, _)| fresh.contains(n)) else {
            continue;
        };
        let g = FleetGpu {
            gpu: key.1,
            uuid: s.label("uuid").to_string(),
            state: gpu_state(s.label("state")),
            used_bytes: None,
            unaccounted_bytes: None,
        };
        // A GPU's MIG devices answer under its number too: a busy one
        // outranks an unknown, as a node's busy GPU does.
        match gpus.get(&key) {
            Some(had) if had.state == VerdictState::Busy => {}
            _ => {
                gpus.insert(key, g);
            }
        }
    }
    for s in &a.used {
        if let Some(g) = key(s, l).and_then(|k| gpus.get_mut(&k)) {
            g.used_bytes = Some(bytes(s.value));
        }
    }
    for s in &a.unaccounted {
        if let Some(g) = key(s, l).and_then(|k| gpus.get_mut(&k)) {
            g.unaccounted_bytes = Some(bytes(s.value));
        }
    }
    gpus
}

/// The holders of `gpus`, by node, each with how long it has held (since
/// before the history where that is at least `before` seconds: the look
/// back's first step).
fn holders(
    a: &Answers,
    l: &str,
    gpus: &BTreeMap<(String, u32), FleetGpu>,
    before: f64,
) -> BTreeMap<String, Vec<FleetHolder>> {
    // By PID and comm: a recycled PID under another name starts anew.
    let held: BTreeMap<(String, u32, &str, &str), f64> = a
        .held
        .iter()
        .filter_map(|s| {
            let (n, g) = key(s, l)?;
            Some(((n, g, s.label("pid"), s.label("comm")), s.value))
        })
        .collect();
    let mut holders: BTreeMap<String, Vec<FleetHolder>> = BTreeMap::new();
    for s in &a.holders {
        let Some(k) = key(s, l).filter(|k| gpus.contains_key(k)) else {
            continue;
        };
        let Some(pid) = plain(s.label("pid")) else {
            continue;
        };
        let owner_kind = OwnerKind::from_label(s.label("owner_kind"));
        let held_seconds = held
            .get(&(k.0.clone(), k.1, s.label("pid"), s.label("comm")))
            .copied()
            .filter(|v| v.is_finite());
        holders.entry(k.0).or_default().push(FleetHolder {
            gpu: k.1,
            pid,
            user: s.label("user").to_string(),
            comm: s.label("comm").to_string(),
            owner: s.label("owner").to_string(),
            orphaned: s.label("orphaned") == "true",
            renamed: s.label("renamed") == "true",
            bytes: bytes(s.value),
            held_seconds,
            held_before_history: held_seconds.is_some_and(|v| v >= before),
            leftover: owner_kind.is_unowned(),
            owner_kind,
        });
    }
    holders
}

/// The nodes whose data is fresh, and those whose data is stale or
/// missing (down targets, targets up without gpufree's series, data
/// older than `--max-age`), by name.
fn freshness(source: &Source, a: &Answers) -> (BTreeSet<String>, Vec<StaleNode>) {
    let l = source.node_label.as_str();
    // Each query aggregates `by (L)`: one sample a node; of several (a
    // proxy's answer), the worst.
    let by_node = |v: &[Sample], worse: fn(f64, f64) -> f64| -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        for s in v {
            let e = m.entry(s.label(l).to_string()).or_insert(s.value);
            *e = worse(*e, s.value);
        }
        m
    };
    let up = by_node(&a.up, |a, b| if a.is_nan() { a } else { a.min(b) });
    let age = by_node(&a.age, worse_age);
    let snapshot_age = by_node(&a.snapshot_age, worse_age);
    let max_age = source.max_age.as_secs_f64();
    let mut fresh = BTreeSet::new();
    let mut stale = Vec::new();
    let names: BTreeSet<&String> = up.keys().chain(age.keys()).collect();
    for n in names {
        let data_age = age
            .get(n)
            .map(|a| a + snapshot_age.get(n).copied().unwrap_or(0.0));
        let reason = match (up.get(n), data_age) {
            // Only 1 is up (not NaN, not 2).
            (Some(u), _) if *u != 1.0 => StaleReason::Down,
            (_, None) => StaleReason::NoSeries,
            (_, Some(a)) if a.is_nan() || a > max_age => StaleReason::Old,
            (_, Some(a)) if a < -CLOCK_SKEW_SECONDS => StaleReason::Future,
            _ => {
                fresh.insert(n.clone());
                continue;
            }
        };
        stale.push(StaleNode {
            node: n.clone(),
            age_seconds: data_age,
            reason,
        });
    }
    (fresh, stale)
}

/// A node's holders, its state, memory held and how long.
fn summarize(n: &mut FleetNode, mut holders: Vec<FleetHolder>) {
    holders.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.pid.cmp(&b.pid)));
    n.state = if n.gpus.iter().any(|g| g.state == VerdictState::Busy) {
        VerdictState::Busy
    } else {
        VerdictState::Unknown
    };
    // Once per node, by GPU: never a scan of the holders per GPU.
    let mut on_gpu: BTreeMap<u32, u64> = BTreeMap::new();
    for h in &holders {
        let b = on_gpu.entry(h.gpu).or_default();
        *b = b.saturating_add(h.bytes);
    }
    n.held_bytes = crate::model::saturating_sum(
        n.gpus
            .iter()
            .map(|g| (g.used_bytes).unwrap_or_else(|| on_gpu.get(&g.gpu).copied().unwrap_or(0))),
    );
    n.held_seconds = holders
        .iter()
        .filter_map(|h| h.held_seconds)
        .max_by(f64::total_cmp);
    n.held_before_history = holders.iter().any(|h| h.held_before_history);
    n.leftover = holders.iter().any(|h| h.leftover);
    n.holders = holders;
}

/// The host of a node label's value: `gpu-07:9835` → `gpu-07`,
/// `[fe80::1]:9835` → `fe80::1`; anything else as it is.
pub(super) fn host(node: &str) -> &str {
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split_once(']').map_or(node, |(h, _)| h);
    }
    match node.rsplit_once(':') {
        Some((h, port))
            if !h.contains(':') && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            h
        }
        _ => node,
    }
}

/// A series' node and GPU.
fn key(s: &Sample, node_label: &str) -> Option<(String, u32)> {
    let gpu = plain(s.label("gpu"))?;
    Some((s.label(node_label).to_string(), gpu))
}

/// A label that is a plain integer, as gpufree writes a GPU's index and
/// a PID (digits only: not `+1`, ` 0`, `0x1`, `GPU-…`, empty).
fn plain(label: &str) -> Option<u32> {
    let digits = !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| label.parse().ok()).flatten()
}

/// The fresh nodes with a series whose GPU or PID label is not a plain
/// integer: what it says cannot be placed, so they are not judged (never
/// free for a series dropped).
fn bad_labels(a: &Answers, l: &str, fresh: &BTreeSet<String>) -> BTreeSet<String> {
    let by_gpu = (a.not_free.iter())
        .chain(&a.used)
        .chain(&a.unaccounted)
        .chain(&a.holders)
        .chain(&a.held);
    let bad_gpu = by_gpu.filter(|s| plain(s.label("gpu")).is_none());
    let bad_pid = (a.holders.iter().chain(&a.held)).filter(|s| plain(s.label("pid")).is_none());
    (bad_gpu.chain(bad_pid))
        .map(|s| s.label(l))
        .filter(|n| fresh.contains(*n))
        .map(str::to_string)
        .collect()
}

/// Of two ages of one node, the worse: one not a number, infinite or in
/// the future, else the older.
fn worse_age(a: f64, b: f64) -> f64 {
    let bad = |x: f64| !x.is_finite() || x < -CLOCK_SKEW_SECONDS;
    match (bad(a), bad(b)) {
        (true, _) => a,
        (_, true) => b,
        _ => a.max(b),
    }
}

/// A not-free GPU's `state` label: `busy`, else unknown (the query asks
/// for `state!="free"`).
fn gpu_state(label: &str) -> VerdictState {
    if label == VerdictState::Busy.as_str() {
        VerdictState::Busy
    } else {
        VerdictState::Unknown
    }
}

/// A sample's value as bytes (negative and NaN as 0).
fn bytes(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v as u64
    } else {
        0
    }
}
