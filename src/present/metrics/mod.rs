//! Prometheus metrics of a snapshot (prometheus-client, base units).
//!
//! Per GPU: total, used, accounted and unaccounted bytes, holder counts. Per
//! holder: its GPU memory, labelled with gpu, uuid, pid, comm, user,
//! owner_kind, owner and the orphaned/renamed flags (never the command line
//! unless asked: it can hold secrets and has unbounded cardinality). Per
//! finding kind and GPU: how many processes it names, so an alert can say
//! "GPU 3 on node X has 40 GiB held by an orphan of vllm.service". Per
//! GPU, the driver's own evidence (`driver.rs`): its recovery action, row
//! remap state and Xid reports. Per holder and GPU (`idle.rs`): its SM
//! utilisation over the idle window and whether it is idle.

mod devices;
mod driver;
mod idle;

use crate::model::{Gpu, Snapshot, VerdictState};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(String, String)>;

/// What the metrics include beyond the snapshot.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// Add the holder's command line as a label.
    pub label_cmdline: bool,
    /// Seconds since the snapshot was taken (`serve`'s cache).
    pub snapshot_age_seconds: Option<f64>,
    /// How long the snapshot took.
    pub snapshot_duration_seconds: Option<f64>,
    /// When the snapshot was taken (began), in seconds since the Unix
    /// epoch: its age whoever serves it (`serve`, or node_exporter
    /// re-serving an old textfile) is `time()` less this.
    pub snapshot_timestamp_seconds: Option<f64>,
    /// Snapshots that failed since start (`serve`).
    pub collection_errors: Option<u64>,
}

/// A label value from outside (a process's name, a unit's, the driver's):
/// its control and bidi characters written out as `\e`, `\u{202e}`... so
/// that neither the exposition nor a terminal showing it obeys them; the
/// encoder then escapes the backslashes, quotes and line breaks.
fn label_value(s: &str) -> String {
    crate::safe::escape(s).into_owned()
}

/// A count or a size as a gauge's i64, capped at i64::MAX (a size from the
/// driver above it would read as negative).
fn gauge<T: TryInto<i64>>(v: T) -> i64 {
    v.try_into().unwrap_or(i64::MAX)
}

fn gauge_family(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let f = Family::<Labels, Gauge>::default();
    registry.register(name, help, f.clone());
    f
}

fn l(pairs: &[(&str, String)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn seconds(r: &mut Registry, name: &str, help: &str, v: f64) {
    let g = Gauge::<f64, AtomicU64>::default();
    g.set(v);
    r.register(name, help, g);
}

/// What changes between two scrapes of one snapshot: its age and the
/// failed collections.
fn add_live(r: &mut Registry, extra: &Extra) {
    if let Some(age) = extra.snapshot_age_seconds {
        seconds(
            r,
            "snapshot_age_seconds",
            "Age of the snapshot these metrics show",
            age,
        );
    }
    if let Some(n) = extra.collection_errors {
        let c = prometheus_client::metrics::counter::Counter::<u64>::default();
        c.inc_by(n);
        r.register(
            "collection_errors",
            "Snapshots that failed (NVML or /proc errors, or --gpu naming no GPU)",
            c,
        );
    }
}

fn encode_text(r: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, r);
    out
}

/// The metrics of `s` in the OpenMetrics text format.
pub fn render(s: &Snapshot, extra: &Extra) -> String {
    let mut r = Registry::with_prefix("gpufree");
    add_gpus(&mut r, s);
    devices::add_mig(&mut r, s);
    devices::add_unallocated(&mut r, s);
    driver::add_driver(&mut r, s);
    add_processes(&mut r, s, extra);
    idle::add_idle(&mut r, s);
    add_findings(&mut r, s);
    add_visibility(&mut r, s);
    if let Some(d) = extra.snapshot_duration_seconds {
        seconds(
            &mut r,
            "snapshot_duration_seconds",
            "How long the snapshot took",
            d,
        );
    }
    if let Some(t) = extra.snapshot_timestamp_seconds {
        seconds(
            &mut r,
            "snapshot_timestamp_seconds",
            "When the snapshot these metrics show was taken, in seconds since the Unix epoch",
            t,
        );
    }
    add_live(&mut r, extra);
    encode_text(&r)
}

/// Per GPU: its memory split (when NVML reports it), its holders by kind
/// and its verdict.
fn add_gpus(r: &mut Registry, s: &Snapshot) {
    let memory = [
        ("gpu_memory_total_bytes", "GPU framebuffer size"),
        (
            "gpu_memory_used_bytes",
            "GPU memory in use, as NVML reports it",
        ),
        (
            "gpu_memory_accounted_bytes",
            "GPU memory used by processes visible here",
        ),
        (
            "gpu_memory_unaccounted_bytes",
            "GPU memory used that no visible process accounts for",
        ),
    ]
    .map(|(name, help)| gauge_family(r, name, help));
    let holders = gauge_family(
        r,
        "gpu_holders",
        "Processes holding the GPU's memory (kind=memory) or only its device node (kind=node)",
    );
    let verdict = gauge_family(
        r,
        "gpu_verdict",
        "1 for the GPU's verdict (state=free|busy|unknown), 0 for the other two: unknown is never free",
    );
    // A GPU narrowed to MIG devices (`--gpu 0:1`) has their numbers, not
    // its own: the gpufree_mig_* series carry them, never a GPU's series.
    for g in s.gpus.iter().filter(|g| !g.mig_only) {
        set_verdict(&verdict, g);
        if g.memory.known {
            let m = &g.memory;
            let labels = l(&[
                ("gpu", g.index.to_string()),
                ("uuid", label_value(&g.uuid)),
                ("name", label_value(&g.name)),
            ]);
            let bytes = [
                m.total_bytes,
                m.used_bytes,
                m.accounted_bytes,
                m.unaccounted_bytes,
            ];
            for (family, v) in memory.iter().zip(bytes) {
                family.get_or_create(&labels).set(gauge(v));
            }
        }
        set_holders(&holders, s, g);
    }
}

/// One series per verdict state: 1 for the GPU's, 0 for the others.
fn set_verdict(family: &Family<Labels, Gauge>, g: &Gpu) {
    for state in [
        VerdictState::Free,
        VerdictState::Busy,
        VerdictState::Unknown,
    ] {
        family
            .get_or_create(&l(&[
                ("gpu", g.index.to_string()),
                ("uuid", label_value(&g.uuid)),
                ("state", state.as_str().into()),
            ]))
            .set(i64::from(g.verdict.state == state));
    }
}

/// The GPU's holders: those with its memory, those with only its node.
fn set_holders(family: &Family<Labels, Gauge>, s: &Snapshot, g: &Gpu) {
    let on: Vec<_> = s
        .processes
        .iter()
        .filter(|p| p.touches_gpu(g.index))
        .collect();
    let with_memory = on
        .iter()
        .filter(|p| p.gpu_memory.iter().any(|m| m.gpu == g.index))
        .count();
    for (kind, n) in [
        ("memory", with_memory),
        ("node", on.len().saturating_sub(with_memory)),
    ] {
        family
            .get_or_create(&l(&[
                ("gpu", g.index.to_string()),
                ("uuid", label_value(&g.uuid)),
                ("kind", kind.into()),
            ]))
            .set(gauge(n));
    }
}

/// Per holder and GPU: the memory it holds, labelled with who it is.
fn add_processes(r: &mut Registry, s: &Snapshot, extra: &Extra) {
    let per_process = gauge_family(
        r,
        "process_gpu_memory_bytes",
        "GPU memory held by one process",
    );
    for p in &s.processes {
        for m in &p.gpu_memory {
            let uuid = s
                .gpus
                .iter()
                .find(|g| g.index == m.gpu)
                .map(|g| g.uuid.clone())
                .unwrap_or_default();
            let mut labels = l(&[
                ("gpu", m.gpu.to_string()),
                ("uuid", label_value(&uuid)),
                ("pid", p.pid.to_string()),
                ("comm", label_value(&p.comm)),
                ("user", label_value(&p.user)),
                ("owner_kind", p.owner.kind.as_str().to_string()),
                ("owner", label_value(&p.owner.id)),
                ("orphaned", p.orphaned.to_string()),
                ("renamed", p.renamed.to_string()),
            ]);
            if extra.label_cmdline {
                labels.push(("cmdline".into(), label_value(&p.cmdline_joined())));
            }
            // On a Kubernetes node: the pods the GPU is allocated to.
            if let Some(k) = s.kubelet.as_ref().filter(|k| k.error.is_none()) {
                let pods: Vec<String> = s
                    .gpus
                    .iter()
                    .filter(|g| g.index == m.gpu)
                    .flat_map(|g| k.allocated_to(g))
                    .map(|p| format!("{}/{}", p.namespace, p.name))
                    .collect();
                labels.push(("allocated_pod".into(), label_value(&pods.join(","))));
            }
            per_process
                .get_or_create(&labels)
                .set(gauge(m.used_bytes.unwrap_or(0)));
        }
    }
}

/// Per finding kind and GPU: how many processes (at least one) it names.
fn add_findings(r: &mut Registry, s: &Snapshot) {
    let findings = gauge_family(
        r,
        "findings",
        "Processes (or GPUs) named by each kind of finding of `gpufree why`, per GPU",
    );
    for f in &s.findings {
        let gpus: Vec<String> = if f.gpus.is_empty() {
            vec![String::new()]
        } else {
            f.gpus.iter().map(u32::to_string).collect()
        };
        for gpu in gpus {
            let n = f.pids.len().max(1) as i64;
            findings
                .get_or_create(&l(&[("kind", f.kind().as_str().to_string()), ("gpu", gpu)]))
                .inc_by(n);
        }
    }
}

/// Whether NVML answered, and the processes read and not read.
fn add_visibility(r: &mut Registry, s: &Snapshot) {
    let v = &s.visibility;
    for (name, help, value) in [
        (
            "nvml_up",
            "1 when NVML answered",
            i64::from(s.nvml.available),
        ),
        (
            "processes_unreadable",
            "Processes whose fds or maps could not be read",
            i64::from(v.processes_unreadable),
        ),
        (
            "processes_scanned",
            "Processes whose fds and maps were read",
            i64::from(v.processes_scanned),
        ),
    ] {
        gauge_family(r, name, help)
            .get_or_create(&Vec::new())
            .set(value);
    }
}

/// Removes the end-of-text line that ends every encoding (and only that
/// one: label values cannot hold a line of their own, the encoder escapes
/// their newlines).
fn without_eof(mut text: String) -> String {
    if text.ends_with(EOF) {
        text.truncate(text.len() - EOF.len());
    }
    text
}

const EOF: &str = "# EOF\n";

/// The same text for node_exporter's textfile collector (Prometheus text
/// format: no `# EOF`).
pub fn render_textfile(s: &Snapshot, extra: &Extra) -> String {
    without_eof(render(s, extra))
}

/// `serve`'s two parts of one scrape: the snapshot's metrics without the
/// end-of-text line (rendered once per snapshot and shared by every
/// scrape of it) ...
pub fn render_snapshot_part(s: &Snapshot, extra: &Extra) -> String {
    let only_snapshot = Extra {
        snapshot_age_seconds: None,
        collection_errors: None,
        ..extra.clone()
    };
    without_eof(render(s, &only_snapshot))
}

/// ... and what changes from scrape to scrape (the snapshot's age, the
/// failed collections), with the end-of-text line.
pub fn render_live_part(extra: &Extra) -> String {
    let mut r = Registry::with_prefix("gpufree");
    add_live(&mut r, extra);
    encode_text(&r)
}

#[cfg(test)]
mod tests;
